//! Dependent views and materialized views rebuilt around an ALTER, on a
//! real cluster.

use std::sync::atomic::{AtomicUsize, Ordering};

use evolve_migrate::{ApplyOptions, Event, Options};
use tokio_postgres::Client;

static N: AtomicUsize = AtomicUsize::new(0);

struct Scenario {
    client: Client,
    opts: Options,
    dir: std::path::PathBuf,
    role: String,
}

impl Drop for Scenario {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// orders -> daily (matview, unique index) -> monthly (matview) ->
/// reporting.dashboard (view), plus a view with an INSTEAD OF trigger, with
/// grants, column grants and comments on them.
async fn scenario(hint: &str) -> Scenario {
    let db = evolve_test::fresh_db(hint).await;
    let client = evolve_pg::connect(&db.url, "evolve test")
        .await
        .expect("connect");
    let role = format!(
        "evolve_reader_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    client
        .batch_execute(&format!(
            r#"
            CREATE ROLE {role};
            CREATE SCHEMA reporting;
            CREATE TABLE orders (id bigint PRIMARY KEY, status varchar(20) NOT NULL,
                                 amount numeric NOT NULL, created date NOT NULL);
            INSERT INTO orders SELECT i, CASE WHEN i % 3 = 0 THEN 'open' ELSE 'done' END,
                                      i % 97, date '2026-01-01' + (i % 120)
                               FROM generate_series(1, 5000) i;
            CREATE MATERIALIZED VIEW daily AS
                SELECT created, status, sum(amount) AS total, count(*) AS n
                FROM orders GROUP BY created, status;
            CREATE UNIQUE INDEX daily_key ON daily (created, status);
            COMMENT ON MATERIALIZED VIEW daily IS 'one row per day and status';
            COMMENT ON COLUMN daily.total IS 'sum of amounts';
            GRANT SELECT ON daily TO {role};
            CREATE MATERIALIZED VIEW monthly AS
                SELECT date_trunc('month', created)::date AS month, sum(total) AS total
                FROM daily GROUP BY 1;
            CREATE INDEX monthly_month ON monthly (month);
            CREATE VIEW reporting.dashboard WITH (security_barrier = true) AS
                SELECT month, total FROM monthly WHERE total > 0;
            GRANT SELECT (month) ON reporting.dashboard TO {role};
            COMMENT ON VIEW reporting.dashboard IS 'what the board sees';
            CREATE VIEW open_orders AS SELECT id, status, amount, created FROM orders WHERE status = 'open';
            CREATE FUNCTION open_orders_insert() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO orders VALUES (NEW.id, 'open', NEW.amount, NEW.created);
                RETURN NEW;
            END $$;
            CREATE TRIGGER open_orders_insert INSTEAD OF INSERT ON open_orders
                FOR EACH ROW EXECUTE FUNCTION open_orders_insert();
            "#
        ))
        .await
        .expect("scenario");
    let dir = std::env::temp_dir().join(format!("evolve-rebuild-{}-{hint}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("V1__baseline.sql"), "SELECT 1;").expect("write");
    let opts = Options::new(db.url.clone(), &dir);
    evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect("V1");
    Scenario {
        client,
        opts,
        dir,
        role,
    }
}

/// Everything that must survive a rebuild, as one comparable value.
async fn fingerprint(c: &Client) -> Vec<String> {
    let rows = c
        .query(
            "SELECT format('%s.%s %s populated=%s def=%s acl=%s comment=%s opts=%s',
                    n.nspname, c.relname, c.relkind, c.relispopulated,
                    regexp_replace(pg_get_viewdef(c.oid), '\\s+', ' ', 'g'),
                    c.relacl, obj_description(c.oid, 'pg_class'), c.reloptions)
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.relkind IN ('v', 'm') AND n.nspname IN ('public', 'reporting')
             UNION ALL
             SELECT format('index %s', pg_get_indexdef(i.indexrelid))
             FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid WHERE c.relkind = 'm'
             UNION ALL
             SELECT format('column %s.%s acl=%s comment=%s', a.attrelid::regclass, a.attname, a.attacl,
                           col_description(a.attrelid, a.attnum))
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
             WHERE c.relkind IN ('v', 'm') AND a.attnum > 0
               AND (a.attacl IS NOT NULL OR col_description(a.attrelid, a.attnum) IS NOT NULL)
             UNION ALL
             SELECT format('trigger %s', pg_get_triggerdef(t.oid)) FROM pg_trigger t WHERE NOT t.tgisinternal
             ORDER BY 1",
            &[],
        )
        .await
        .expect("fingerprint");
    rows.iter().map(|r| r.get(0)).collect()
}

async fn scalar_i64(c: &Client, sql: &str) -> i64 {
    c.query_one(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

#[tokio::test]
async fn a_type_change_under_three_layers_rebuilds_them_all() {
    let s = scenario("rebuild_ok").await;
    let before = fingerprint(&s.client).await;
    assert!(
        before.iter().any(|l| l.contains(&s.role)),
        "grants are part of the fingerprint: {before:?}"
    );
    std::fs::write(
        s.dir.join("V2__widen_status.sql"),
        "ALTER TABLE orders ALTER COLUMN status TYPE text;\n",
    )
    .expect("write");
    let mut events = Vec::new();
    let dry = ApplyOptions {
        dry_run: true,
        ..Default::default()
    };
    evolve_migrate::apply(&s.opts, &dry, &mut |e| events.push(e))
        .await
        .expect("dry run");
    let plan = events.iter().find_map(|e| match e {
        Event::WouldRebuild {
            drop,
            create,
            refresh_after_commit,
            refresh_estimates,
            ..
        } => Some((
            drop.clone(),
            create.clone(),
            refresh_after_commit.clone(),
            refresh_estimates.clone(),
        )),
        _ => None,
    });
    let (drop, create, refresh, estimates) = plan.expect("the dry run shows the rebuild");
    // daily: 120 days, one status each (i % 3 follows i % 120); sizes are real.
    assert_eq!(estimates.len(), 2);
    assert_eq!(estimates[0].name, "public.daily");
    assert_eq!(estimates[0].rows, Some(120));
    assert!(estimates[0].rows_counted);
    assert!(estimates[0].bytes > 8192, "{estimates:?}");
    assert_eq!(
        estimates[0].last_refresh_ms, None,
        "never refreshed through evolve"
    );
    assert_eq!(
        drop,
        [
            "DROP VIEW \"reporting\".\"dashboard\"",
            "DROP MATERIALIZED VIEW \"public\".\"monthly\"",
            "DROP VIEW \"public\".\"open_orders\"",
            "DROP MATERIALIZED VIEW \"public\".\"daily\""
        ]
    );
    assert!(
        create[0].starts_with("CREATE MATERIALIZED VIEW \"public\".\"daily\" AS SELECT"),
        "{create:?}"
    );
    assert!(
        create
            .iter()
            .any(|c| c.starts_with("GRANT SELECT (month) ON \"reporting\".\"dashboard\" TO ")),
        "{create:?}"
    );
    assert_eq!(
        refresh,
        [
            "REFRESH MATERIALIZED VIEW \"public\".\"daily\"",
            "REFRESH MATERIALIZED VIEW \"public\".\"monthly\""
        ]
    );
    assert_eq!(
        fingerprint(&s.client).await,
        before,
        "a dry run changes nothing"
    );
    let mut events = Vec::new();
    let report = evolve_migrate::apply(&s.opts, &ApplyOptions::default(), &mut |e| events.push(e))
        .await
        .expect("apply with rebuild");
    assert_eq!(report.applied, 1);

    let rebuilt = events.iter().find_map(|e| match e {
        Event::Rebuilt { dependents, .. } => Some(dependents.clone()),
        _ => None,
    });
    assert_eq!(
        rebuilt,
        Some(vec![
            "public.daily".to_string(),
            "public.open_orders".to_string(),
            "public.monthly".to_string(),
            "reporting.dashboard".to_string()
        ])
    );
    let refreshed: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Refreshed { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        refreshed,
        ["public.daily", "public.monthly"],
        "bottom-up, matviews only"
    );
    // Recorded like `evolve refresh`'s own, so `--status` knows them.
    let logged: Vec<String> = s
        .client
        .query(
            "SELECT matview FROM evolve_refresh_log ORDER BY started_at",
            &[],
        )
        .await
        .expect("refresh log")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(logged, ["public.daily", "public.monthly"]);

    let after = fingerprint(&s.client).await;
    // The one expected difference: with status now text, PostgreSQL no
    // longer shows the cast it needed for varchar in open_orders' filter.
    let before: Vec<String> = before
        .into_iter()
        .map(|l| {
            l.replace(
                "(orders.status)::text = 'open'::text",
                "orders.status = 'open'::text",
            )
        })
        .collect();
    assert_eq!(
        before, after,
        "definitions, indexes, grants, comments, options and triggers survive"
    );
    let status_type: String = s
        .client
        .query_one("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'orders'::regclass AND attname = 'status'", &[])
        .await
        .expect("type")
        .get(0);
    assert_eq!(status_type, "text");
    // Populated, fresh, and consistent layer to layer.
    assert_eq!(
        scalar_i64(&s.client, "SELECT sum(n)::int8 FROM daily").await,
        5000
    );
    assert_eq!(
        scalar_i64(
            &s.client,
            "SELECT (SELECT sum(total) FROM monthly)::int8 - (SELECT sum(total) FROM daily)::int8"
        )
        .await,
        0
    );
    assert_eq!(
        scalar_i64(&s.client, "SELECT count(*) FROM reporting.dashboard").await,
        4
    );
    // The INSTEAD OF trigger still works.
    s.client
        .batch_execute(
            "INSERT INTO open_orders (id, amount, created) VALUES (9999, 5, '2026-01-01')",
        )
        .await
        .expect("insert through the view");
    assert_eq!(
        scalar_i64(&s.client, "SELECT count(*) FROM orders WHERE id = 9999").await,
        1
    );
    // What was rebuilt is recorded with the migration.
    let recorded: Vec<(String, String, i32)> = s
        .client
        .query(
            "SELECT r.dependent, r.kind, r.depth FROM evolve_schema_history_rebuilt r
             JOIN evolve_schema_history h USING (installed_rank)
             WHERE h.version = '2' ORDER BY r.depth, r.dependent",
            &[],
        )
        .await
        .expect("rebuilt record")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        recorded,
        [
            (
                "public.daily".to_string(),
                "materialized view".to_string(),
                1
            ),
            ("public.open_orders".to_string(), "view".to_string(), 1),
            (
                "public.monthly".to_string(),
                "materialized view".to_string(),
                2
            ),
            ("reporting.dashboard".to_string(), "view".to_string(), 3),
        ]
    );
    // ANALYZE ran on the recreated matviews.
    assert_eq!(
        scalar_i64(&s.client, "SELECT count(*) FROM pg_stat_user_tables WHERE relname IN ('daily', 'monthly') AND last_analyze IS NOT NULL").await,
        2
    );
}

#[tokio::test]
async fn dropping_a_column_a_view_needs_rolls_back_and_names_the_view() {
    let s = scenario("rebuild_fail").await;
    let before = fingerprint(&s.client).await;
    std::fs::write(
        s.dir.join("V2__drop_amount.sql"),
        "ALTER TABLE orders ADD COLUMN note text;\nALTER TABLE orders DROP COLUMN amount;\n",
    )
    .expect("write");
    let (r, events) = {
        let mut events = Vec::new();
        let r =
            evolve_migrate::apply(&s.opts, &ApplyOptions::default(), &mut |e| events.push(e)).await;
        (r, events)
    };
    let err = r.expect_err("the rebuild must fail").to_string();
    assert!(err.starts_with("migration V2__drop_amount.sql failed at line 2, column 1: ERROR 42703: column orders.amount does not exist"), "{err}");
    assert!(
        err.contains("while recreating materialized view public.daily after the file's statements"),
        "{err}"
    );
    assert!(err.contains("nothing of this file was applied"), "{err}");
    assert!(!events.iter().any(|e| matches!(e, Event::Rebuilt { .. })));
    assert_eq!(
        fingerprint(&s.client).await,
        before,
        "everything is as it was"
    );
    assert_eq!(scalar_i64(&s.client, "SELECT count(*) FROM information_schema.columns WHERE table_name = 'orders' AND column_name IN ('amount', 'note')").await, 1);
    assert_eq!(
        scalar_i64(&s.client, "SELECT count(*) FROM evolve_schema_history").await,
        1
    );
}

#[tokio::test]
async fn populate_in_transaction_never_leaves_a_matview_unpopulated() {
    let s = scenario("rebuild_populate").await;
    std::fs::write(
        s.dir.join("V2__widen_status.sql"),
        "-- evolve:populate-in-transaction\nALTER TABLE orders ALTER COLUMN status TYPE varchar(40);\n",
    )
    .expect("write");
    let mut events = Vec::new();
    evolve_migrate::apply(&s.opts, &ApplyOptions::default(), &mut |e| events.push(e))
        .await
        .expect("apply");
    assert!(events.iter().any(|e| matches!(e, Event::Rebuilt { .. })));
    assert!(
        !events.iter().any(|e| matches!(e, Event::Refreshed { .. })),
        "populated in the transaction, nothing to refresh"
    );
    assert_eq!(
        scalar_i64(
            &s.client,
            "SELECT count(*) FROM pg_matviews WHERE ispopulated"
        )
        .await,
        2
    );
    assert_eq!(
        scalar_i64(&s.client, "SELECT sum(n)::int8 FROM daily").await,
        5000
    );
}

#[tokio::test]
async fn dependents_evolve_cannot_rebuild_are_refused_before_anything_runs() {
    let s = scenario("rebuild_generated").await;
    s.client
        .batch_execute(
            "ALTER TABLE orders ADD COLUMN status_len int GENERATED ALWAYS AS (length(status)) STORED",
        )
        .await
        .expect("generated column");
    std::fs::write(
        s.dir.join("V2__widen.sql"),
        "ALTER TABLE orders ALTER COLUMN status TYPE text;",
    )
    .expect("write");
    let mut events = Vec::new();
    let err = evolve_migrate::apply(&s.opts, &ApplyOptions::default(), &mut |e| events.push(e))
        .await
        .expect_err("refused")
        .to_string();
    assert_eq!(
        err,
        "migration V2__widen.sql: public.orders.status is used by generated column public.orders.status_len, which evolve cannot rebuild yet; drop and recreate it in the migration around the change"
    );
    assert_eq!(
        scalar_i64(
            &s.client,
            "SELECT count(*) FROM pg_matviews WHERE ispopulated"
        )
        .await,
        2
    );
}

/// `evolve rewrite`'s swap puts a new table, which has the table's own
/// generated columns already, in the place of the table: its entry point
/// leaves those out of the plan (and captures the rest), where
/// `plan_targets`, which `evolve migrate apply`'s rebuild uses, still
/// refuses them.
#[tokio::test]
async fn a_table_swap_leaves_out_only_the_tables_own_generated_columns() {
    let s = scenario("rebuild_swap_generated").await;
    s.client
        .batch_execute(
            "ALTER TABLE orders ADD COLUMN status_len int GENERATED ALWAYS AS (length(status)) STORED;
             CREATE VIEW status_lengths AS SELECT id, status_len FROM orders;",
        )
        .await
        .expect("generated column");
    let plan = async |swap: bool| {
        s.client.batch_execute("BEGIN").await.expect("begin");
        let targets = vec!["public.orders".to_string()];
        let plan = if swap {
            evolve_migrate::RebuildPlan::for_table_swap(&s.client, "swap", targets, false).await
        } else {
            evolve_migrate::plan_targets(&s.client, "swap", targets, false).await
        };
        s.client.batch_execute("ROLLBACK").await.expect("rollback");
        plan.map(|p| {
            let mut names: Vec<String> = p.dependents.iter().map(|d| d.name.clone()).collect();
            names.sort();
            names
        })
        .map_err(|e| e.to_string())
    };
    assert_eq!(
        plan(false).await.expect_err("refused"),
        "migration swap: public.orders is used by generated column public.orders.status_len, which evolve cannot rebuild yet; drop and recreate it in the migration around the change"
    );
    assert_eq!(
        plan(true).await.expect("planned"),
        [
            "public.daily",
            "public.monthly",
            "public.open_orders",
            "public.status_lengths",
            "reporting.dashboard"
        ]
    );
}

#[tokio::test]
async fn the_rebuild_can_be_turned_off_per_file() {
    let s = scenario("rebuild_off").await;
    std::fs::write(
        s.dir.join("V2__widen.sql"),
        "-- evolve:rebuild-dependents off\nALTER TABLE orders ALTER COLUMN status TYPE text;",
    )
    .expect("write");
    let mut events = Vec::new();
    let err = evolve_migrate::apply(&s.opts, &ApplyOptions::default(), &mut |e| events.push(e))
        .await
        .expect_err("PostgreSQL refuses")
        .to_string();
    assert!(err.starts_with("migration V2__widen.sql failed at line 2, column 1: ERROR 0A000: cannot alter type of a column used by a view or rule"), "{err}");
    assert!(!events.iter().any(|e| matches!(e, Event::Rebuilt { .. })));
}

#[tokio::test]
async fn a_dependent_the_migrating_role_cannot_drop_is_a_clear_error_and_changes_nothing() {
    let db = evolve_test::fresh_db("rebuild_owner").await;
    let admin = evolve_pg::connect(&db.url, "evolve test")
        .await
        .expect("connect");
    let n = N.fetch_add(1, Ordering::SeqCst);
    let (owner, migrator) = (
        format!("evolve_owner_{}_{n}", std::process::id()),
        format!("evolve_migrator_{}_{n}", std::process::id()),
    );
    admin
        .batch_execute(&format!(
            "CREATE ROLE {owner};
             CREATE ROLE {migrator} LOGIN;
             GRANT CREATE ON SCHEMA public TO {migrator};
             CREATE TABLE orders (id int PRIMARY KEY, status varchar(20));
             INSERT INTO orders VALUES (1, 'open');
             ALTER TABLE orders OWNER TO {migrator};
             GRANT SELECT ON orders TO {owner};
             CREATE MATERIALIZED VIEW daily AS SELECT status, count(*) FROM orders GROUP BY status;
             ALTER MATERIALIZED VIEW daily OWNER TO {owner};"
        ))
        .await
        .expect("setup");
    let dir = std::env::temp_dir().join(format!("evolve-rebuild-owner-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("V1__widen.sql"),
        "ALTER TABLE orders ALTER COLUMN status TYPE text;",
    )
    .expect("write");
    let url = db.url.replacen("postgres@", &format!("{migrator}@"), 1);
    let opts = Options::new(url, &dir);
    let err = evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect_err("cannot drop another role's matview")
        .to_string();
    assert!(
        err.contains("ERROR 42501: must be owner of materialized view daily"),
        "{err}"
    );
    assert!(
        err.contains("while dropping dependent public.daily"),
        "{err}"
    );
    assert!(err.contains("nothing of this file was applied"), "{err}");
    let populated: bool = admin
        .query_one(
            "SELECT ispopulated FROM pg_matviews WHERE matviewname = 'daily'",
            &[],
        )
        .await
        .expect("daily still there")
        .get(0);
    assert!(populated);
    let ty: String = admin
        .query_one("SELECT data_type FROM information_schema.columns WHERE table_name = 'orders' AND column_name = 'status'", &[])
        .await
        .expect("type")
        .get(0);
    assert_eq!(ty, "character varying");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_refusal_the_parser_could_not_foresee_is_retried_once_with_the_rebuild() {
    let s = scenario("rebuild_runtime").await;
    let before = fingerprint(&s.client).await;
    // Inside a DO block the ALTER is a string: only PostgreSQL sees it.
    std::fs::write(
        s.dir.join("V2__dynamic.sql"),
        "DO $$ BEGIN EXECUTE 'ALTER TABLE orders ALTER COLUMN status TYPE text'; END $$;",
    )
    .expect("write");
    let mut events = Vec::new();
    let report = evolve_migrate::apply(&s.opts, &ApplyOptions::default(), &mut |e| events.push(e))
        .await
        .expect("applied after the retry with the rebuild");
    assert_eq!(report.applied, 1);
    let rebuilt = events.iter().find_map(|e| match e {
        Event::Rebuilt { dependents, .. } => Some(dependents.len()),
        _ => None,
    });
    assert_eq!(rebuilt, Some(4));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Applied { attempts: 1, .. }))
    );
    let after = fingerprint(&s.client).await;
    let before: Vec<String> = before
        .into_iter()
        .map(|l| {
            l.replace(
                "(orders.status)::text = 'open'::text",
                "orders.status = 'open'::text",
            )
        })
        .collect();
    assert_eq!(before, after);
    assert_eq!(
        scalar_i64(&s.client, "SELECT sum(n)::int8 FROM daily").await,
        5000
    );
}

#[tokio::test]
async fn dependents_in_a_schema_whose_name_has_a_dot_are_rebuilt() {
    let s = scenario("dotted_schema").await;
    s.client
        .batch_execute(
            r#"CREATE SCHEMA "my.app";
               CREATE TABLE "my.app"."t.x" (id int PRIMARY KEY, code varchar(5));
               INSERT INTO "my.app"."t.x" VALUES (1, 'ab');
               CREATE VIEW "my.app"."v.y" AS SELECT id, code FROM "my.app"."t.x";
               CREATE MATERIALIZED VIEW "my.app".m AS SELECT code FROM "my.app"."v.y";"#,
        )
        .await
        .expect("setup");
    std::fs::write(
        s.dir.join("V2__widen.sql"),
        r#"ALTER TABLE "my.app"."t.x" ALTER COLUMN code TYPE text;"#,
    )
    .expect("write");
    let mut events = Vec::new();
    evolve_migrate::apply(&s.opts, &ApplyOptions::default(), &mut |e| events.push(e))
        .await
        .expect("apply");
    let rebuilt = events.iter().find_map(|e| match e {
        Event::Rebuilt { dependents, .. } => Some(dependents.clone()),
        _ => None,
    });
    assert_eq!(
        rebuilt,
        Some(vec!["my.app.v.y".to_string(), "my.app.m".to_string()])
    );
    let code: String = s
        .client
        .query_one(r#"SELECT code FROM "my.app".m"#, &[])
        .await
        .expect("matview readable")
        .get(0);
    assert_eq!(code, "ab");
    let typ: String = s
        .client
        .query_one(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute
             WHERE attrelid = '\"my.app\".\"v.y\"'::regclass AND attname = 'code'",
            &[],
        )
        .await
        .expect("view column")
        .get(0);
    assert_eq!(typ, "text");
}

#[tokio::test]
async fn policies_and_triggers_that_read_the_column_are_rebuilt() {
    let s = scenario("rebuild_policy_trigger").await;
    let role = &s.role;
    s.client
        .batch_execute(&format!(
            r#"ALTER TABLE orders ENABLE ROW LEVEL SECURITY;
               CREATE POLICY open_only ON orders USING (status = 'open');
               CREATE POLICY "no closing" ON orders AS RESTRICTIVE FOR UPDATE TO "{role}"
                   USING (true) WITH CHECK (status <> 'closed');
               COMMENT ON POLICY open_only ON orders IS 'readers see open orders';
               CREATE TABLE status_changes (id int, old text, new text);
               CREATE FUNCTION log_status() RETURNS trigger LANGUAGE plpgsql AS
                   $$BEGIN INSERT INTO status_changes VALUES (NEW.id, OLD.status, NEW.status); RETURN NEW; END$$;
               CREATE TRIGGER status_changed AFTER UPDATE OF status ON orders FOR EACH ROW
                   WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION log_status();
               CREATE TRIGGER sleeping AFTER UPDATE ON orders FOR EACH ROW
                   WHEN (NEW.status = 'x') EXECUTE FUNCTION log_status();
               ALTER TABLE orders DISABLE TRIGGER sleeping;
               COMMENT ON TRIGGER status_changed ON orders IS 'audit';"#
        ))
        .await
        .expect("policies and triggers");
    let policies =
        "SELECT policyname || ' ' || permissive || ' ' || cmd || ' ' || roles::text || ' '
                           || coalesce(qual, '-') || ' ' || coalesce(with_check, '-')
                    FROM pg_policies WHERE tablename = 'orders' ORDER BY policyname";
    let triggers = "SELECT tgname || ' ' || tgenabled::text || ' ' || coalesce(obj_description(oid, 'pg_trigger'), '-')
                    FROM pg_trigger WHERE tgrelid = 'orders'::regclass AND NOT tgisinternal ORDER BY tgname";
    let rows = |sql: &'static str| {
        let client = &s.client;
        async move {
            client
                .query(sql, &[])
                .await
                .expect("catalog")
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<String>>()
        }
    };
    let policies_before = rows(policies).await;
    let triggers_before = rows(triggers).await;
    assert_eq!(policies_before.len(), 2);
    assert_eq!(triggers_before.len(), 2);

    std::fs::write(
        s.dir.join("V2__widen.sql"),
        "ALTER TABLE orders ALTER COLUMN status TYPE text;",
    )
    .expect("write");
    let mut events = Vec::new();
    evolve_migrate::apply(&s.opts, &ApplyOptions::default(), &mut |e| events.push(e))
        .await
        .expect("apply");
    let rebuilt = events
        .iter()
        .find_map(|e| match e {
            Event::Rebuilt { dependents, .. } => Some(dependents.clone()),
            _ => None,
        })
        .expect("rebuilt");
    for name in [
        "open_only on public.orders",
        "no closing on public.orders",
        "status_changed on public.orders",
        "sleeping on public.orders",
    ] {
        assert!(
            rebuilt.iter().any(|d| d == name),
            "{name} not in {rebuilt:?}"
        );
    }
    // Same policies and triggers; only the casts PostgreSQL needed for
    // varchar are gone from the expressions.
    let normalise = |v: Vec<String>| -> Vec<String> {
        v.into_iter()
            .map(|l| l.replace("(status)::text", "status"))
            .collect()
    };
    assert_eq!(normalise(rows(policies).await), normalise(policies_before));
    assert_eq!(rows(triggers).await, triggers_before);
    assert_eq!(
        scalar_i64(
            &s.client,
            "SELECT count(*) FROM pg_policy p JOIN pg_description d ON d.objoid = p.oid
             WHERE p.polname = 'open_only' AND d.description = 'readers see open orders'"
        )
        .await,
        1
    );
    // The rebuilt trigger still fires, and only when the status changes.
    s.client
        .batch_execute(
            "UPDATE orders SET status = 'shipped' WHERE id = (SELECT min(id) FROM orders);
             UPDATE orders SET amount = amount WHERE id = (SELECT min(id) FROM orders);",
        )
        .await
        .expect("updates");
    assert_eq!(
        scalar_i64(&s.client, "SELECT count(*) FROM status_changes").await,
        1
    );
}

#[tokio::test]
async fn functions_with_a_sql_standard_body_are_rebuilt_with_owner_comment_and_grants() {
    let s = scenario("rebuild_function").await;
    let role = &s.role;
    s.client
        .batch_execute(&format!(
            r#"CREATE FUNCTION open_count(min_amount numeric) RETURNS bigint LANGUAGE sql STABLE
                   BEGIN ATOMIC SELECT count(*) FROM orders WHERE status = 'open' AND amount >= min_amount; END;
               COMMENT ON FUNCTION open_count(numeric) IS 'open orders';
               REVOKE EXECUTE ON FUNCTION open_count(numeric) FROM PUBLIC;
               GRANT EXECUTE ON FUNCTION open_count(numeric) TO "{role}";"#
        ))
        .await
        .expect("function");
    let describe =
        "SELECT coalesce(obj_description(p.oid, 'pg_proc'), '-') || ' ' || p.proacl::text
                           || ' ' || pg_get_userbyid(p.proowner)
                    FROM pg_proc p WHERE p.proname = 'open_count'";
    let before: String = s
        .client
        .query_one(describe, &[])
        .await
        .expect("describe")
        .get(0);
    let count_before = scalar_i64(&s.client, "SELECT open_count(0)").await;
    assert!(count_before > 0);

    std::fs::write(
        s.dir.join("V2__widen.sql"),
        "ALTER TABLE orders ALTER COLUMN status TYPE text;",
    )
    .expect("write");
    let mut events = Vec::new();
    evolve_migrate::apply(&s.opts, &ApplyOptions::default(), &mut |e| events.push(e))
        .await
        .expect("apply");
    let rebuilt = events
        .iter()
        .find_map(|e| match e {
            Event::Rebuilt { dependents, .. } => Some(dependents.clone()),
            _ => None,
        })
        .expect("rebuilt");
    assert!(
        rebuilt
            .iter()
            .any(|d| d == "public.open_count(min_amount numeric)"),
        "{rebuilt:?}"
    );
    let after: String = s
        .client
        .query_one(describe, &[])
        .await
        .expect("describe")
        .get(0);
    assert_eq!(after, before, "comment, privileges and owner survive");
    assert_eq!(
        scalar_i64(&s.client, "SELECT open_count(0)").await,
        count_before
    );
}

/// A column dropped where nothing depends on it: the file applies and no
/// rebuild is reported (there is nothing to rebuild).
#[tokio::test]
async fn a_drop_with_no_dependents_reports_no_rebuild() {
    let s = scenario("rebuild_none").await;
    s.client
        .batch_execute("CREATE TABLE lonely (id int PRIMARY KEY, x int)")
        .await
        .expect("create");
    std::fs::write(
        s.dir.join("V2__drop_x.sql"),
        "ALTER TABLE lonely DROP COLUMN x;\n",
    )
    .expect("write");
    let mut events = Vec::new();
    let report = evolve_migrate::apply(&s.opts, &ApplyOptions::default(), &mut |e| events.push(e))
        .await
        .expect("applied");
    assert_eq!(report.applied, 1);
    assert!(
        !events.iter().any(|e| matches!(e, Event::Rebuilt { .. })),
        "{events:?}"
    );
}
