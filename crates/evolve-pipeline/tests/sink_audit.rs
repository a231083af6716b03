//! The PostgreSQL sink when its tables are changed behind its back or its
//! role lacks what it needs: a target table dropped by hand, privileges
//! missing or partial, names that need quoting. Each ends with the sink's
//! table equal to the upstream table, or with an error naming the way
//! out, never with rows silently missing.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use evolve_pipeline::Pipeline;
use tokio_postgres::Client;

const WAIT: Duration = Duration::from_secs(60);

async fn orders(env: &Env, rows: i32) -> Client {
    let up = connect(&env.up.url).await;
    up.batch_execute(&format!(
        "CREATE TABLE orders (id int PRIMARY KEY, v text);
         INSERT INTO orders SELECT g, 'v' || g FROM generate_series(1, {rows}) g;"
    ))
    .await
    .unwrap();
    up
}

async fn progress_rows(sink: &Client) -> i64 {
    sink.query_one(
        "SELECT count(*) FROM public.evolve_sink_progress WHERE sink = 'orders_sink'",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// A target table dropped by hand is created again by the sink's next
/// session; its progress record then described rows that are gone, and
/// the sink went on from it, writing only the keys changed since: every
/// other document was missing for good. The sink loads the table again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_table_dropped_by_hand_is_loaded_again() {
    let env = env("audit_dropped").await;
    let up = orders(&env, 20).await;
    let sink = connect(&env.sink.url).await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["orders"]).await;
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;
    up.batch_execute("UPDATE orders SET v = 'w' WHERE id = 1")
        .await
        .unwrap();
    wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;
    assert_eq!(progress_rows(&sink).await, 1);

    sink.batch_execute("DROP TABLE public.orders_json")
        .await
        .unwrap();
    up.batch_execute(
        "UPDATE orders SET v = 'x' WHERE id = 2;
         INSERT INTO orders VALUES (21, 'v21');",
    )
    .await
    .unwrap();
    wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;
    running.stop().await;
}

/// A pipeline stopped with its sink's table dropped: the sink's first
/// session after the restart creates the table again and loads it, rather
/// than following on from the old progress record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_table_dropped_while_stopped_is_loaded_again() {
    let env = env("audit_dropped_stopped").await;
    let up = orders(&env, 20).await;
    let sink = connect(&env.sink.url).await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["orders"]).await;
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;
    running.stop().await;

    sink.batch_execute("DROP TABLE public.orders_json")
        .await
        .unwrap();
    up.batch_execute("DELETE FROM orders WHERE id = 3")
        .await
        .unwrap();
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;
    running.stop().await;
}

/// A sink connection whose role may insert into the sink's table but not
/// update or delete: CREATE SINK passed (the preflight asked
/// `has_table_privilege` for the four privileges at once, which is true
/// when any one is held; `evolve pipeline check` too), the load went in,
/// and the first update failed at every retry with only the server's
/// `permission denied`. CREATE SINK is refused, naming the GRANT; a
/// privilege revoked while the sink runs makes its next session say
/// which one is missing and the GRANT that gives it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_without_update_or_delete_is_refused_naming_the_grant() {
    let env = env("audit_grants").await;
    let up = orders(&env, 5).await;
    let sink = connect(&env.sink.url).await;
    let role = format!("sinker_{}", env.sink.name);
    sink.batch_execute(&format!(
        "CREATE ROLE {role} LOGIN;
         GRANT USAGE, CREATE ON SCHEMA public TO {role};
         CREATE TABLE public.orders_json (key jsonb PRIMARY KEY, data jsonb NOT NULL);
         CREATE TABLE public.evolve_sink_progress (sink text PRIMARY KEY, lsn pg_lsn NOT NULL);
         GRANT SELECT, INSERT ON public.orders_json TO {role};
         GRANT SELECT, INSERT, UPDATE, DELETE ON public.evolve_sink_progress TO {role};"
    ))
    .await
    .unwrap();
    let url = format!(
        "postgres://{role}@127.0.0.1:{}/{}",
        sink_cluster().port(),
        env.sink.name
    );
    // `evolve pipeline check` says so too.
    let checks = evolve_pipeline::preflight::sink(&connect(&url).await, "public", "orders_json")
        .await
        .unwrap();
    let table = checks
        .iter()
        .find(|c| c.subject == "sink table public.orders_json")
        .unwrap();
    assert!(!table.ok, "{checks:?}");
    assert!(
        checks
            .iter()
            .any(|c| c.subject == "sink table public.evolve_sink_progress" && c.ok),
        "{checks:?}"
    );
    let config = env.config.clone().with_connection("sink", url);
    let pipeline = Arc::new(Pipeline::open(config).unwrap());
    pipeline
        .create_source(&env.source, "up", "evolve_pub")
        .await
        .unwrap();
    pipeline
        .create_table(&evolve_pipeline::TableSpec {
            name: "orders_v1".into(),
            source: env.source.clone(),
            schema: "public".into(),
            table: "orders".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    pipeline
        .create_interface("orders_json", "orders_v1")
        .unwrap();
    let create = async || {
        pipeline
            .create_sink(
                "orders_sink",
                "orders_json",
                "sink",
                "public",
                "orders_json",
            )
            .await
    };
    let e = create()
        .await
        .expect_err("a role that may not update is refused");
    let text = e.to_string();
    assert!(
        text.contains(&format!("role {role} may not write public.orders_json")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON public.orders_json TO {role};"
        )),
        "{text}"
    );
    assert!(pipeline.sinks().unwrap().is_empty());

    // Granted, the sink runs; revoked while it runs, its next session says
    // which privilege is missing.
    sink.batch_execute(&format!(
        "GRANT UPDATE, DELETE ON public.orders_json TO {role}"
    ))
    .await
    .unwrap();
    create().await.unwrap();
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;
    sink.batch_execute(&format!("REVOKE DELETE ON public.orders_json FROM {role}"))
        .await
        .unwrap();
    up.batch_execute("DELETE FROM orders WHERE id = 1")
        .await
        .unwrap();
    wait_until(
        "the sink to say which privilege it lacks",
        WAIT,
        async || {
            pipeline.status().iter().any(|s| {
                s.name == "orders_sink"
                    && s.error.as_deref().is_some_and(|e| {
                        e.contains(&format!(
                            "role \"{role}\" may not DELETE sink table \"public.orders_json\""
                        )) && e.contains(&format!(
                            "GRANT SELECT, INSERT, UPDATE, DELETE ON \"public\".\"orders_json\" TO \"{role}\";"
                        ))
                    })
            })
        },
    )
    .await;
    sink.batch_execute(&format!("GRANT DELETE ON public.orders_json TO {role}"))
        .await
        .unwrap();
    wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;
    running.stop().await;
    sink.batch_execute(&format!(
        "REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}; \
         REVOKE USAGE, CREATE ON SCHEMA public FROM {role}"
    ))
    .await
    .unwrap();
}

/// A role given the four privileges on sink tables made for it, and no
/// CREATE on their schema (PostgreSQL 15's default for `public`): every
/// session ran `CREATE TABLE IF NOT EXISTS` on the progress table, which
/// PostgreSQL refuses without CREATE on the schema even when the table
/// exists, so no such sink could be created or run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_may_only_write_its_tables_runs_the_sink() {
    let env = env("audit_nocreate").await;
    let up = orders(&env, 5).await;
    let sink = connect(&env.sink.url).await;
    let role = format!("writer_{}", env.sink.name);
    sink.batch_execute(&format!(
        "CREATE ROLE {role} LOGIN;
         REVOKE CREATE ON SCHEMA public FROM PUBLIC;
         GRANT USAGE ON SCHEMA public TO {role};
         CREATE TABLE public.orders_json (key jsonb PRIMARY KEY, data jsonb NOT NULL);
         CREATE TABLE public.evolve_sink_progress (sink text PRIMARY KEY, lsn pg_lsn NOT NULL);
         GRANT SELECT, INSERT, UPDATE, DELETE ON public.orders_json, public.evolve_sink_progress TO {role};"
    ))
    .await
    .unwrap();
    let url = format!(
        "postgres://{role}@127.0.0.1:{}/{}",
        sink_cluster().port(),
        env.sink.name
    );
    let config = env.config.clone().with_connection("sink", url);
    let pipeline = Arc::new(Pipeline::open(config).unwrap());
    create_all(&pipeline, &env.source, &["orders"]).await;
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;
    up.batch_execute("UPDATE orders SET v = 'w' WHERE id = 2; DELETE FROM orders WHERE id = 3")
        .await
        .unwrap();
    wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;
    running.stop().await;
    sink.batch_execute(&format!(
        "REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}; \
         REVOKE USAGE ON SCHEMA public FROM {role}"
    ))
    .await
    .unwrap();
}

/// Target tables whose schema and name need quoting (upper case, a dot,
/// a double quote, a space) are created, loaded and followed like any
/// other, with their progress table in that schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_need_quoting_are_followed() {
    let env = env("audit_names").await;
    let up = orders(&env, 5).await;
    let sink = connect(&env.sink.url).await;
    sink.batch_execute(r#"CREATE SCHEMA "Sink ""Schema"".x""#)
        .await
        .unwrap();
    let schema = r#"Sink "Schema".x"#;
    let table = r#"Orders.JSON "v1""#;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    pipeline
        .create_source(&env.source, "up", "evolve_pub")
        .await
        .unwrap();
    pipeline
        .create_table(&evolve_pipeline::TableSpec {
            name: "orders_v1".into(),
            source: env.source.clone(),
            schema: "public".into(),
            table: "orders".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    pipeline
        .create_interface("orders_json", "orders_v1")
        .unwrap();
    pipeline
        .create_sink("orders_sink", "orders_json", "sink", schema, table)
        .await
        .unwrap();
    let running = Running::start(pipeline.clone());
    let count = async || -> (i64, i64) {
        let row = sink
            .query_one(
                r#"SELECT (SELECT count(*) FROM "Sink ""Schema"".x"."Orders.JSON ""v1"""),
                          (SELECT count(*) FROM "Sink ""Schema"".x".evolve_sink_progress
                           WHERE sink = 'orders_sink')"#,
                &[],
            )
            .await;
        row.map_or((-1, -1), |r| (r.get(0), r.get(1)))
    };
    wait_until("the quoted table to be loaded", WAIT, async || {
        count().await == (5, 1)
    })
    .await;
    up.batch_execute("DELETE FROM orders WHERE id = 1; INSERT INTO orders VALUES (9, 'nine')")
        .await
        .unwrap();
    wait_until("the quoted table to follow", WAIT, async || {
        let keys: Vec<String> = sink
            .query(
                r#"SELECT key::text FROM "Sink ""Schema"".x"."Orders.JSON ""v1""" ORDER BY key"#,
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        keys == [
            r#"{"id": 2}"#,
            r#"{"id": 3}"#,
            r#"{"id": 4}"#,
            r#"{"id": 5}"#,
            r#"{"id": 9}"#,
        ]
    })
    .await;
    running.stop().await;
}

/// A progress record of the sink's name that this pipeline did not write
/// (left by a pipeline whose state was lost, or by a DROP SINK that could
/// not reach the database): CREATE SINK accepted the table, whatever rows
/// it held, and the new sink followed on from that record through a change
/// feed that starts later, so what changed in between stayed out of date
/// for good. CREATE SINK refuses it, naming the way out; dropping the
/// table is one, and the sink then loads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_record_left_by_an_earlier_sink_is_refused() {
    let env = env("audit_left").await;
    let up = orders(&env, 10).await;
    let sink = connect(&env.sink.url).await;
    {
        let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
        create_all(&pipeline, &env.source, &["orders"]).await;
        let running = Running::start(pipeline.clone());
        wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;
        running.stop().await;
    }
    // The pipeline's state is lost; upstream goes on.
    up.batch_execute(
        "UPDATE orders SET v = 'late' WHERE id = 1;
         DELETE FROM orders WHERE id = 2;",
    )
    .await
    .unwrap();
    let state = env.state.with_extension("again");
    let _ = std::fs::remove_dir_all(&state);
    let config = evolve_pipeline::Config::new(&state)
        .with_connection("up", env.up.url.clone())
        .with_connection("sink", env.sink.url.clone());
    let pipeline = Arc::new(Pipeline::open(config).unwrap());
    let source = format!("{}_again", env.source);
    pipeline
        .create_source(&source, "up", "evolve_pub_again")
        .await
        .unwrap();
    pipeline
        .create_table(&evolve_pipeline::TableSpec {
            name: "orders_v1".into(),
            source: source.clone(),
            schema: "public".into(),
            table: "orders".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    pipeline
        .create_interface("orders_json", "orders_v1")
        .unwrap();
    let create = async || {
        pipeline
            .create_sink(
                "orders_sink",
                "orders_json",
                "sink",
                "public",
                "orders_json",
            )
            .await
    };
    let e = create()
        .await
        .expect_err("a progress record this pipeline did not write is refused");
    let text = e.to_string();
    assert!(
        text.starts_with(
            "ERROR: sink table \"public.orders_json\" has a progress record of sink \"orders_sink\" (at "
        ),
        "{text}"
    );
    assert!(text.contains("HINT: Drop the table"), "{text}");
    assert!(pipeline.sinks().unwrap().is_empty());

    sink.batch_execute("DROP TABLE public.orders_json")
        .await
        .unwrap();
    create().await.unwrap();
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;
    running.stop().await;
    // The lost pipeline's slot, which nothing reads any more.
    let _ = up
        .execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
             WHERE slot_name = $1 AND NOT active",
            &[&format!("evolve_{}", env.source)],
        )
        .await;
    let _ = std::fs::remove_dir_all(&state);
}

/// A sink database restored from a backup: its table and progress record
/// go back to an earlier position, while the store has pruned the feed
/// past it (`retain_history = 0s`, every sink committed). The sink used
/// to follow on from the restored record through a feed that no longer
/// held what changed since, and the rows of those changes stayed old for
/// good. It is refused, naming the way out, and dropping the table
/// brings it back equal to upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_restored_behind_the_pruned_feed_is_refused() {
    let env = env("audit_restored").await;
    let up = orders(&env, 20).await;
    let sink = connect(&env.sink.url).await;
    let pipeline =
        Arc::new(Pipeline::open(env.config.clone().with_retain_history(Duration::ZERO)).unwrap());
    create_all(&pipeline, &env.source, &["orders"]).await;
    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;
    // The backup.
    sink.batch_execute(
        "CREATE TABLE backup_rows AS SELECT * FROM public.orders_json;
         CREATE TABLE backup_progress AS SELECT * FROM public.evolve_sink_progress;",
    )
    .await
    .unwrap();
    let backed_up: String = sink
        .query_one("SELECT lsn::text FROM backup_progress", &[])
        .await
        .unwrap()
        .get(0);
    up.batch_execute(
        "UPDATE orders SET v = 'changed' WHERE id <= 5;
         DELETE FROM orders WHERE id = 20;",
    )
    .await
    .unwrap();
    wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;
    let id = pipeline.interfaces().unwrap()[0].id;
    wait_until("the feed to be pruned past the backup", WAIT, async || {
        let store = evolve_pipeline::store::Store::open(&env.state).unwrap();
        store
            .feed_pruned(id)
            .unwrap()
            .is_some_and(|p| p.to_string() != backed_up && p > backed_up.parse().unwrap())
    })
    .await;
    running.stop().await;

    // The restore.
    sink.batch_execute(
        "TRUNCATE public.orders_json;
         INSERT INTO public.orders_json SELECT * FROM backup_rows;
         UPDATE public.evolve_sink_progress p SET lsn = b.lsn FROM backup_progress b
           WHERE p.sink = b.sink;",
    )
    .await
    .unwrap();
    let running = Running::start(pipeline.clone());
    wait_until("the sink to refuse its restored position", WAIT, async || {
        pipeline.status().iter().any(|s| {
            s.name == "orders_sink"
                && s.error.as_deref().is_some_and(|e| {
                    e.contains(&format!(
                        "sink \"orders_sink\" is at position {backed_up}, but the changes of its materialized view up to"
                    )) && e.contains("drop the sink's table public.orders_json")
                })
        })
    })
    .await;
    // The way out: the table is created again and loaded.
    sink.batch_execute("DROP TABLE public.orders_json")
        .await
        .unwrap();
    wait_equal(&up, &sink, "orders", "orders_json", WAIT).await;
    running.stop().await;
}

/// A second sink into a table another sink writes: both were accepted
/// while the table was still empty, and each then kept its own progress
/// record and wrote over the other's rows. The second is refused, naming
/// the first; a table of its own is fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sink_into_the_same_table_is_refused() {
    let env = env("audit_shared").await;
    let _up = orders(&env, 3).await;
    let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
    create_all(&pipeline, &env.source, &["orders"]).await;
    let e = pipeline
        .create_sink(
            "orders_again",
            "orders_json",
            "sink",
            "public",
            "orders_json",
        )
        .await
        .expect_err("a second sink into the same table");
    let text = e.to_string();
    assert!(
        text.contains(
            "sink \"orders_sink\" writes table public.orders_json of connection \"sink\" already"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "Give sink \"orders_again\" a destination of its own, or DROP SINK orders_sink first."
        ),
        "{text}"
    );
    assert_eq!(pipeline.sinks().unwrap().len(), 1);
    pipeline
        .create_sink(
            "orders_again",
            "orders_json",
            "sink",
            "public",
            "orders_copy",
        )
        .await
        .expect("a table of its own");
    assert_eq!(pipeline.sinks().unwrap().len(), 2);
}
