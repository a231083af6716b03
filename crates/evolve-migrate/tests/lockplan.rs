//! `evolve plan` on a real cluster: every row of the lock table in the
//! reference notes, predicted from the live catalog and probed on a
//! scratch copy of the schema, plus the plan following its own earlier
//! statements.

use std::sync::atomic::{AtomicUsize, Ordering};

use evolve_core::migration::effects::LockMode::{self, *};
use evolve_migrate::{Held, LockPlan, Options, PlannedStatement, ProbeResult};

static N: AtomicUsize = AtomicUsize::new(0);
/// Plans run one at a time, so "no scratch database left" is about this one.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const SETUP: &str = r#"
    CREATE TABLE p (id int PRIMARY KEY);
    INSERT INTO p SELECT generate_series(1, 100);
    CREATE TABLE t (id int PRIMARY KEY, v varchar(10), n numeric(10, 2), ts timestamp,
                    txt text, c int, p_id int, s text);
    INSERT INTO t SELECT i, 'v' || i, i, now(), 'x', i, 1 + i % 100, 's'
      FROM generate_series(1, 2000) i;
    CREATE INDEX t_c ON t (c);
    CREATE UNIQUE INDEX t_id_key ON t (id);
    ALTER TABLE t ADD CONSTRAINT t_c_pos CHECK (c > 0) NOT VALID;
    ALTER TABLE t ADD CONSTRAINT t_txt_nn CHECK (txt IS NOT NULL);
    CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
    CREATE TRIGGER t_tr BEFORE INSERT ON t FOR EACH ROW EXECUTE FUNCTION noop();
    ANALYZE;
"#;

struct Case {
    sql: &'static str,
    no_tx: bool,
    locks: &'static [(&'static str, LockMode)],
    rewrites: bool,
    scans: bool,
}

const fn case(
    sql: &'static str,
    locks: &'static [(&'static str, LockMode)],
    rewrites: bool,
    scans: bool,
) -> Case {
    Case {
        sql,
        no_tx: false,
        locks,
        rewrites,
        scans,
    }
}

const fn outside(
    sql: &'static str,
    locks: &'static [(&'static str, LockMode)],
    rewrites: bool,
) -> Case {
    Case {
        sql,
        no_tx: true,
        locks,
        rewrites,
        scans: true,
    }
}

const T_AE: &[(&str, LockMode)] = &[("public.t", AccessExclusive)];
const T_SUE: &[(&str, LockMode)] = &[("public.t", ShareUpdateExclusive)];
const T_SRE: &[(&str, LockMode)] = &[("public.t", ShareRowExclusive)];

/// Plans `file` (the last statement is the one checked) against a fresh
/// database with [`SETUP`], with the probe.
async fn plan(setup: &str, file: &str, no_tx: bool) -> LockPlan {
    let _one = ONE_AT_A_TIME.lock().await;
    let db = evolve_test::fresh_db("lockplan").await;
    let client = evolve_pg::connect(&db.url, "evolve test")
        .await
        .expect("connect");
    client.batch_execute(setup).await.expect("setup");
    let dir = std::env::temp_dir().join(format!(
        "evolve-lockplan-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let text = if no_tx {
        format!("-- evolve:no-transaction\n{file}\n")
    } else {
        format!("{file}\n")
    };
    std::fs::write(dir.join("V1__change.sql"), text).expect("write");
    let opts = Options::new(db.url.clone(), &dir);
    let plan = evolve_migrate::lock_plan(&opts, &[], true)
        .await
        .unwrap_or_else(|e| panic!("plan of {file}: {e}"));
    // Nothing was applied to the real database and the scratch copy is gone.
    let history: bool = client
        .query_one(
            "SELECT to_regclass('evolve_schema_history') IS NOT NULL",
            &[],
        )
        .await
        .expect("query")
        .get(0);
    assert!(!history, "plan created the history table");
    let scratch: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_database WHERE datname LIKE 'evolve_probe_%'",
            &[],
        )
        .await
        .expect("query")
        .get(0);
    assert_eq!(scratch, 0, "scratch database left behind");
    let _ = std::fs::remove_dir_all(&dir);
    plan
}

#[track_caller]
/// The statement was probed, ran on the scratch copy, and the probe saw
/// what the plan predicted; its result.
fn probe_agrees<'a>(st: &'a PlannedStatement, sql: &str) -> &'a ProbeResult {
    let probe = st.probe.as_ref().expect("probed");
    assert_eq!(probe.error, None, "probe of {sql}");
    assert!(
        probe.disagreements.is_empty(),
        "probe disagrees on {sql}: {:?}",
        probe.disagreements
    );
    probe
}

fn check_statement(plan: &LockPlan, c: &Case) {
    let st = plan.statements.last().expect("a statement");
    let mut got: Vec<(String, LockMode)> = st
        .locks
        .iter()
        .map(|l| (l.relation.clone(), l.mode))
        .collect();
    got.sort();
    let mut want: Vec<(String, LockMode)> =
        c.locks.iter().map(|(r, m)| (r.to_string(), *m)).collect();
    want.sort();
    assert_eq!(got, want, "predicted locks of {}", c.sql);
    let held = if c.no_tx {
        Held::Statement
    } else {
        Held::Transaction
    };
    assert!(
        st.locks.iter().all(|l| l.held == held),
        "held of {}: {:?}",
        c.sql,
        st.locks
    );
    assert_eq!(
        st.rewrites, c.rewrites,
        "rewrites of {}: {:?}",
        c.sql, st.notes
    );
    assert_eq!(st.scans, c.scans, "scans of {}: {:?}", c.sql, st.notes);
    let probe = probe_agrees(st, c.sql);
    let mut seen: Vec<(String, LockMode)> = probe
        .locks
        .iter()
        .filter(|l| l.mode > AccessShare)
        .map(|l| (l.relation.clone(), l.mode))
        .collect();
    seen.sort();
    assert_eq!(seen, want, "probed locks of {}", c.sql);
    assert_eq!(probe.rewrites, c.rewrites, "probed rewrite of {}", c.sql);
}

async fn run_cases(cases: &[Case]) {
    for c in cases {
        let plan = plan(SETUP, c.sql, c.no_tx).await;
        check_statement(&plan, c);
    }
}

#[tokio::test]
async fn metadata_only_changes_take_access_exclusive_without_rewrite() {
    run_cases(&[
        case("ALTER TABLE t ADD COLUMN a int", T_AE, false, false),
        case(
            "ALTER TABLE t ADD COLUMN a int NOT NULL DEFAULT 7",
            T_AE,
            false,
            false,
        ),
        case(
            "ALTER TABLE t ADD COLUMN a timestamptz DEFAULT now()",
            T_AE,
            false,
            false,
        ),
        case("ALTER TABLE t DROP COLUMN s", T_AE, false, false),
        case(
            "ALTER TABLE t ALTER COLUMN s SET DEFAULT 'z'",
            T_AE,
            false,
            false,
        ),
        case(
            "ALTER TABLE t ALTER COLUMN s DROP DEFAULT",
            T_AE,
            false,
            false,
        ),
        case(
            "ALTER TABLE t ALTER COLUMN c DROP NOT NULL",
            T_AE,
            false,
            false,
        ),
        case("ALTER TABLE t RENAME COLUMN s TO s2", T_AE, false, false),
        case("ALTER TABLE t RENAME TO t2", T_AE, false, false),
        case("ALTER TABLE t OWNER TO CURRENT_USER", T_AE, false, false),
        case(
            "ALTER TABLE t ALTER COLUMN s SET STORAGE EXTERNAL",
            T_AE,
            false,
            false,
        ),
    ])
    .await;
}

#[tokio::test]
async fn volatile_defaults_generated_identity_and_serial_rewrite() {
    run_cases(&[
        case(
            "ALTER TABLE t ADD COLUMN r float8 DEFAULT random()",
            T_AE,
            true,
            true,
        ),
        case(
            "ALTER TABLE t ADD COLUMN u uuid DEFAULT gen_random_uuid()",
            T_AE,
            true,
            true,
        ),
        case(
            "ALTER TABLE t ADD COLUMN g int GENERATED ALWAYS AS (c * 2) STORED",
            T_AE,
            true,
            true,
        ),
        case(
            "ALTER TABLE t ADD COLUMN i int GENERATED ALWAYS AS IDENTITY",
            T_AE,
            true,
            true,
        ),
        case("ALTER TABLE t ADD COLUMN b bigserial", T_AE, true, true),
    ])
    .await;
}

#[tokio::test]
async fn type_changes_decided_from_the_catalog() {
    run_cases(&[
        case(
            "ALTER TABLE t ALTER COLUMN v TYPE varchar(40)",
            T_AE,
            false,
            false,
        ),
        case("ALTER TABLE t ALTER COLUMN v TYPE text", T_AE, false, false),
        case(
            "ALTER TABLE t ALTER COLUMN n TYPE numeric(14, 2)",
            T_AE,
            false,
            false,
        ),
        case(
            "SET TimeZone = 'UTC';\nALTER TABLE t ALTER COLUMN ts TYPE timestamptz",
            T_AE,
            false,
            false,
        ),
        case("ALTER TABLE t ALTER COLUMN c TYPE bigint", T_AE, true, true),
        case(
            "ALTER TABLE t ALTER COLUMN v TYPE varchar(5)",
            T_AE,
            true,
            true,
        ),
        case(
            "ALTER TABLE t ALTER COLUMN n TYPE numeric(10, 3)",
            T_AE,
            true,
            true,
        ),
        case(
            "ALTER TABLE t ALTER COLUMN txt TYPE varchar(20)",
            T_AE,
            true,
            true,
        ),
        case(
            "SET TimeZone = 'Europe/Berlin';\nALTER TABLE t ALTER COLUMN ts TYPE timestamptz",
            T_AE,
            true,
            true,
        ),
        case("ALTER TABLE t SET UNLOGGED", T_AE, true, true),
        outside("VACUUM FULL t", T_AE, true),
    ])
    .await;
}

#[tokio::test]
async fn not_null_and_constraints() {
    run_cases(&[
        case(
            "ALTER TABLE t ALTER COLUMN c SET NOT NULL",
            T_AE,
            false,
            true,
        ),
        // t_txt_nn is a valid CHECK (txt IS NOT NULL): no scan.
        case(
            "ALTER TABLE t ALTER COLUMN txt SET NOT NULL",
            T_AE,
            false,
            false,
        ),
        case(
            "ALTER TABLE t ADD CONSTRAINT k CHECK (c < 100000)",
            T_AE,
            false,
            true,
        ),
        case(
            "ALTER TABLE t ADD CONSTRAINT k CHECK (c < 100000) NOT VALID",
            T_AE,
            false,
            false,
        ),
        case(
            "ALTER TABLE t ADD CONSTRAINT k UNIQUE USING INDEX t_id_key",
            T_AE,
            false,
            false,
        ),
        case("ALTER TABLE t DROP CONSTRAINT t_c_pos", T_AE, false, false),
        case(
            "ALTER TABLE t ADD CONSTRAINT k UNIQUE (c)",
            T_AE,
            false,
            true,
        ),
        case(
            "ALTER TABLE t ADD CONSTRAINT t_p FOREIGN KEY (p_id) REFERENCES p (id)",
            &[
                ("public.t", ShareRowExclusive),
                ("public.p", ShareRowExclusive),
            ],
            false,
            true,
        ),
        case(
            "ALTER TABLE t ADD CONSTRAINT t_p FOREIGN KEY (p_id) REFERENCES p (id) NOT VALID",
            &[
                ("public.t", ShareRowExclusive),
                ("public.p", ShareRowExclusive),
            ],
            false,
            false,
        ),
    ])
    .await;
}

#[tokio::test]
async fn share_update_exclusive_and_share_row_exclusive() {
    run_cases(&[
        case(
            "ALTER TABLE t VALIDATE CONSTRAINT t_c_pos",
            T_SUE,
            false,
            true,
        ),
        case(
            "ALTER TABLE t ALTER COLUMN c SET STATISTICS 500",
            T_SUE,
            false,
            false,
        ),
        case(
            "ALTER TABLE t ALTER COLUMN c SET (n_distinct = 100)",
            T_SUE,
            false,
            false,
        ),
        case("ALTER TABLE t SET (fillfactor = 70)", T_SUE, false, false),
        case(
            "ALTER TABLE t SET (autovacuum_vacuum_scale_factor = 0.01)",
            T_SUE,
            false,
            false,
        ),
        case("ALTER TABLE t CLUSTER ON t_c", T_SUE, false, false),
        case(
            "CREATE TRIGGER t_tr2 BEFORE UPDATE ON t FOR EACH ROW EXECUTE FUNCTION noop()",
            T_SRE,
            false,
            false,
        ),
        case("ALTER TABLE t DISABLE TRIGGER t_tr", T_SRE, false, false),
    ])
    .await;
}

#[tokio::test]
async fn indexes_plain_and_concurrent() {
    run_cases(&[
        case(
            "CREATE INDEX t_s ON t (s)",
            &[("public.t", Share)],
            false,
            true,
        ),
        case("DROP INDEX t_c", T_AE, false, false),
        outside("CREATE INDEX CONCURRENTLY t_s ON t (s)", T_SUE, false),
        Case {
            scans: false,
            ..outside("DROP INDEX CONCURRENTLY t_c", T_SUE, false)
        },
    ])
    .await;
}

#[tokio::test]
async fn earlier_statements_of_the_plan_count() {
    // A table created earlier is new and empty; a check added NOT VALID and
    // validated earlier lets SET NOT NULL skip its scan.
    let plan = plan(
        SETUP,
        "CREATE TABLE fresh (id int, note text);
         ALTER TABLE fresh ADD COLUMN r float8 DEFAULT random();
         ALTER TABLE t ADD COLUMN z int;
         ALTER TABLE t ADD CONSTRAINT t_z_nn CHECK (z IS NOT NULL) NOT VALID;
         ALTER TABLE t VALIDATE CONSTRAINT t_z_nn;
         ALTER TABLE t ALTER COLUMN z SET NOT NULL",
        false,
    )
    .await;
    let fresh = &plan.statements[1];
    assert!(fresh.rewrites);
    assert_eq!((fresh.table_rows, fresh.table_bytes), (Some(0), Some(0)));
    assert!(
        fresh.notes.iter().any(|n| n.contains("new and empty")),
        "{:?}",
        fresh.notes
    );
    assert_eq!(fresh.locked_time, "instant");
    let not_null = plan.statements.last().expect("statement");
    assert!(!not_null.scans, "{:?}", not_null.notes);
    assert_eq!(not_null.table_rows, Some(2000));
    assert!(not_null.table_bytes.is_some_and(|b| b > 0));
    for st in &plan.statements {
        let p = st.probe.as_ref().expect("probed");
        assert!(
            p.disagreements.is_empty(),
            "{}: {:?}",
            st.sql,
            p.disagreements
        );
    }
}

#[tokio::test]
async fn dependents_are_rebuilt_and_locked() {
    let setup = format!(
        "{SETUP}
         CREATE VIEW t_v AS SELECT id, c FROM t;
         CREATE MATERIALIZED VIEW t_mv AS SELECT c, count(*) FROM t_v GROUP BY c;"
    );
    let plan = plan(&setup, "ALTER TABLE t ALTER COLUMN c TYPE bigint", false).await;
    let st = &plan.statements[0];
    let names: Vec<&str> = st.rebuilds.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["public.t_v", "public.t_mv"]);
    assert!(st.rewrites);
    assert!(
        st.advice
            .iter()
            .any(|a| a.contains("evolve rewrite public.t")),
        "{:?}",
        st.advice
    );
    let mut locked: Vec<&str> = st.locks.iter().map(|l| l.relation.as_str()).collect();
    locked.sort();
    assert_eq!(locked, ["public.t", "public.t_mv", "public.t_v"]);
    let p = st.probe.as_ref().expect("probed");
    assert!(p.disagreements.is_empty(), "{:?}", p.disagreements);
    assert!(p.rewrites);
}

/// The schema of the scratch copy's own test: tables with CHECK
/// constraints, expression and partial indexes, views, materialized views,
/// triggers (one with WHEN), policies (one with a subquery), sequences,
/// enums, domains, partitions, inheritance.
const RICH: &str = include_str!("../src/lockplan/scratch_rich.sql");

const RICH_CHANGES: &str = "ALTER TABLE app.orders ADD COLUMN gift boolean DEFAULT false;
ALTER TABLE app.orders ALTER COLUMN status TYPE varchar(20);
CREATE INDEX orders_placed ON app.orders (placed);
ALTER TABLE app.orders VALIDATE CONSTRAINT orders_status_known;
ALTER TABLE app.customers ALTER COLUMN tier SET NOT NULL;
ALTER TABLE app.events ADD COLUMN source text;
ALTER TABLE app.bookings ADD COLUMN note text;
DROP TRIGGER orders_paid ON app.orders;
ALTER TABLE app.child ALTER COLUMN extra TYPE bigint;
ALTER TYPE app.mood ADD VALUE 'ecstatic';
REFRESH MATERIALIZED VIEW app.order_totals;
";

/// Locks of the probe's sessions in the real database on its relations
/// (catalogs and the probe's own temporary tables aside), granted or
/// awaited, and whether one of them waits for a lock.
const PROBE_LOCKS: &str = "SELECT format('%s %s %s', c.oid::regclass, l.mode,
                                  CASE WHEN l.granted THEN 'held' ELSE 'awaited' END)
     FROM pg_locks l
     JOIN pg_stat_activity a ON a.pid = l.pid
     JOIN pg_class c ON c.oid = l.relation
     JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE a.application_name = 'evolve plan probe' AND a.datname = current_database()
       AND l.locktype = 'relation'
       AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND n.nspname <> 'pg_catalog' AND n.nspname NOT LIKE 'pg\\_temp\\_%'
       AND n.nspname NOT LIKE 'pg\\_toast\\_temp\\_%'
       -- the TOAST tables of system catalogs (pg_statistic's, which the
       -- planner reads) and their indexes have system OIDs
       AND NOT (n.nspname = 'pg_toast' AND c.oid < 16384)
       -- a composite type's relation holds no rows, and reading the type
       -- (its attributes, for the scratch copy) locks it for a moment
       AND c.relkind <> 'c'
     UNION ALL
     SELECT format('backend %s waits for a lock (%s)', a.pid, a.wait_event)
     FROM pg_stat_activity a
     WHERE a.application_name = 'evolve plan probe' AND a.datname = current_database()
       AND a.wait_event_type = 'Lock'";

/// The scratch copy is read from the catalog without a lock on any real
/// relation: while another session holds ACCESS EXCLUSIVE on every table,
/// view and materialized view of the target, the probe of a plan finishes
/// in seconds with the same results as without that session, and none of
/// its sessions in the target database ever holds or awaits a lock on a
/// relation there (pg_locks sampled all along). pg_dump --schema-only,
/// which the probe used before, cannot even start.
#[tokio::test]
async fn the_probe_copies_the_schema_without_locking_the_real_tables() {
    let _one = ONE_AT_A_TIME.lock().await;
    let db = evolve_test::fresh_db("lockplan_nolock").await;
    let client = evolve_pg::connect(&db.url, "evolve test")
        .await
        .expect("connect");
    client.batch_execute(RICH).await.expect("setup");
    let dir = std::env::temp_dir().join(format!(
        "evolve-lockplan-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("V1__changes.sql"), RICH_CHANGES).expect("write");
    std::fs::write(
        dir.join("V2__concurrent.sql"),
        "-- evolve:no-transaction\nCREATE INDEX CONCURRENTLY orders_updated ON app.orders (updated);\n",
    )
    .expect("write");
    let opts = Options::new(db.url.clone(), &dir);
    // The prediction reads the real definitions (ACCESS SHARE for a
    // moment): made before the other session takes its locks.
    let plan = evolve_migrate::lock_plan(&opts, &[], false)
        .await
        .expect("plan");
    let statements = plan.statements.len();
    assert_eq!(statements, 12);

    let mut free = plan.clone();
    let started = std::time::Instant::now();
    evolve_migrate::probe_lock_plan(&opts, &mut free)
        .await
        .expect("probe without the lock");
    let free_time = started.elapsed();

    // Another session holds ACCESS EXCLUSIVE on every relation.
    let holder = evolve_pg::connect(&db.url, "holder")
        .await
        .expect("connect");
    let tables: Vec<String> = holder
        .query(
            "SELECT c.oid::regclass::text FROM pg_class c
             WHERE c.relnamespace = 'app'::regnamespace AND c.relkind IN ('r', 'p', 'v')",
            &[],
        )
        .await
        .expect("tables")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let matviews: Vec<String> = holder
        .query(
            "SELECT c.oid::regclass::text FROM pg_class c
             WHERE c.relnamespace = 'app'::regnamespace AND c.relkind = 'm'",
            &[],
        )
        .await
        .expect("matviews")
        .iter()
        .map(|r| r.get(0))
        .collect();
    // LOCK TABLE refuses materialized views; REFRESH takes ACCESS EXCLUSIVE.
    let refresh: Vec<String> = matviews
        .iter()
        .map(|m| format!("REFRESH MATERIALIZED VIEW {m};"))
        .collect();
    holder
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE {} IN ACCESS EXCLUSIVE MODE; {}",
            tables.join(", "),
            refresh.join(" ")
        ))
        .await
        .expect("lock");
    let locked: i64 = client
        .query_one(
            "SELECT count(DISTINCT l.relation) FROM pg_locks l
             JOIN pg_stat_activity a ON a.pid = l.pid AND a.application_name = 'holder'
             JOIN pg_class c ON c.oid = l.relation
             WHERE l.mode = 'AccessExclusiveLock' AND l.granted
               AND c.relnamespace = 'app'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')",
            &[],
        )
        .await
        .expect("locks")
        .get(0);
    let relations = tables.len() + matviews.len();
    assert_eq!(locked as usize, relations, "{tables:?} {matviews:?}");

    // What the probe used before waits for those locks.
    let url = db.url.clone();
    let dump = tokio::task::spawn_blocking(move || {
        std::process::Command::new(evolve_test::shared().bin("pg_dump"))
            .args(["--schema-only", "--lock-wait-timeout=1s", "-d", &url])
            .output()
            .expect("pg_dump")
    })
    .await
    .expect("pg_dump");
    assert!(!dump.status.success(), "pg_dump did not wait for the locks");

    // pg_locks sampled while the probe runs.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        let url = db.url.clone();
        tokio::spawn(async move {
            let c = evolve_pg::connect(&url, "sampler").await.expect("connect");
            let (mut samples, mut seen_probe, mut offending) =
                (0usize, 0usize, Vec::<String>::new());
            while !stop.load(Ordering::SeqCst) {
                let present: i64 = c
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity
                         WHERE application_name = 'evolve plan probe' AND datname = current_database()",
                        &[],
                    )
                    .await
                    .expect("sample")
                    .get(0);
                for r in c.query(PROBE_LOCKS, &[]).await.expect("sample") {
                    offending.push(r.get(0));
                }
                samples += 1;
                seen_probe += usize::from(present > 0);
            }
            (samples, seen_probe, offending)
        })
    };
    let mut held = plan.clone();
    let started = std::time::Instant::now();
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        evolve_migrate::probe_lock_plan(&opts, &mut held),
    )
    .await
    .expect("the probe waits for the locks")
    .expect("probe under the lock");
    let held_time = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let (samples, seen_probe, offending) = sampler.await.expect("sampler");
    holder.batch_execute("ROLLBACK").await.expect("unlock");
    let _ = std::fs::remove_dir_all(&dir);

    eprintln!(
        "probe of {statements} statements: {:.2} s without the lock, {:.2} s while {} relations are held ACCESS EXCLUSIVE; \
         pg_locks sampled {samples} times, {seen_probe} of them with a probe session in the target database",
        free_time.as_secs_f64(),
        held_time.as_secs_f64(),
        relations
    );
    assert!(
        offending.is_empty(),
        "the probe locked real relations: {offending:?}"
    );
    assert!(samples >= 20, "only {samples} samples");
    assert!(seen_probe > 0, "the sampler never saw the probe's session");
    assert!(
        held_time < std::time::Duration::from_secs(10),
        "{held_time:?}"
    );
    assert!(held.probed);
    for (a, b) in free.statements.iter().zip(&held.statements) {
        let (pa, pb) = (
            a.probe.as_ref().expect("probed"),
            b.probe.as_ref().expect("probed"),
        );
        assert_eq!(pa.error, None, "{}", a.sql);
        assert_eq!(pa, pb, "{}", a.sql);
        eprintln!(
            "{}: {:?} rewrites={} disagreements={:?}",
            a.sql.lines().next().unwrap_or(""),
            pb.locks
                .iter()
                .map(|l| format!("{} {}", l.relation, l.mode))
                .collect::<Vec<_>>(),
            pb.rewrites,
            pb.disagreements
        );
    }
    let with_locks = held
        .statements
        .iter()
        .filter(|s| s.probe.as_ref().is_some_and(|p| !p.locks.is_empty()))
        .count();
    // All but ALTER TYPE ... ADD VALUE lock relations.
    assert_eq!(with_locks, statements - 1);
    assert_eq!(free.disagreements, held.disagreements);
    // The retype rebuilt views, the policy and the WHEN trigger on the copy
    // and saw the rewrite.
    let retype = &held.statements[1];
    let rebuilt: Vec<&str> = retype.rebuilds.iter().map(|r| r.name.as_str()).collect();
    assert!(rebuilt.contains(&"app.open_orders"), "{rebuilt:?}");
    assert!(retype.probe.as_ref().is_some_and(|p| p.rewrites));
}

/// The commands the advice prints name tables and columns as PostgreSQL
/// reads them back (`public."Orders"`, not `public.orders`) and are quoted
/// for the shell, so a pasted line neither names another table nor runs
/// what a name holds.
#[tokio::test]
async fn advice_commands_quote_names_for_postgresql_and_the_shell() {
    let setup = r#"
        CREATE TABLE "Orders" (id int, "Status" text);
        CREATE TABLE "o$(touch /tmp/x)" (id int, s text);
        ANALYZE;
    "#;
    let file = r#"ALTER TABLE "Orders" ALTER COLUMN id TYPE bigint;
ALTER TABLE "Orders" ALTER COLUMN "Status" SET NOT NULL;
ALTER TABLE "o$(touch /tmp/x)" ALTER COLUMN id TYPE bigint;
ALTER TABLE "o$(touch /tmp/x)" ALTER COLUMN s TYPE int USING length(s);"#;
    let plan = plan(setup, file, false).await;
    let advice: Vec<&str> = plan
        .statements
        .iter()
        .flat_map(|s| s.advice.iter().map(String::as_str))
        .collect();
    let find = |start: &str| {
        advice
            .iter()
            .copied()
            .find(|a| a.contains(start))
            .unwrap_or_else(|| panic!("no advice with {start}: {advice:?}"))
    };
    assert!(
        find(r#"evolve rewrite 'public."Orders"' --alter 'ALTER COLUMN "id" TYPE bigint' copies"#)
            .starts_with("evolve rewrite")
    );
    find(r#"evolve change set-not-null 'public."Orders"' '"Status"' writes these files"#);
    find(r#"evolve rewrite 'public."o$(touch /tmp/x)"' --alter 'ALTER COLUMN "id" TYPE bigint'"#);
    find(r#"evolve change change-type 'public."o$(touch /tmp/x)"' s int adds"#);
}

/// COPY ... FROM STDIN is planned and probed with its rows.
#[tokio::test]
async fn copy_from_stdin_is_planned_and_probed() {
    let plan = plan(
        SETUP,
        "COPY t (id, c, txt) FROM STDIN;\n5001\t7\tx\n\\.",
        false,
    )
    .await;
    let st = plan.statements.last().expect("a statement");
    assert_eq!(st.sql, "COPY t (id, c, txt) FROM STDIN");
    let probe = st.probe.as_ref().expect("probed");
    assert_eq!(probe.error, None);
    assert!(
        probe
            .locks
            .iter()
            .any(|l| l.relation == "public.t" && l.mode == RowExclusive),
        "{probe:?}"
    );
}

/// Found in the pre-release audit, each observed on PostgreSQL 15 with
/// `pg_locks` and `pg_class.relfilenode` before and after.
const AUDIT_SETUP: &str = r#"
    CREATE DOMAIN pos AS int CHECK (VALUE > 0);
    CREATE INDEX t_lower_v ON t (lower(v));
    CREATE INDEX t_ts ON t (ts);
    CREATE TABLE pt (id int, k int) PARTITION BY RANGE (k);
    CREATE TABLE pt1 PARTITION OF pt FOR VALUES FROM (0) TO (10);
    CREATE TABLE ptd PARTITION OF pt DEFAULT;
    INSERT INTO pt SELECT i, 50 FROM generate_series(1, 500) i;
    CREATE TABLE pt2 (id int, k int);
    INSERT INTO pt2 SELECT i, 15 FROM generate_series(1, 500) i;
    CREATE TABLE q (a int, b int);
    INSERT INTO q SELECT i, i FROM generate_series(1, 500) i;
    CREATE UNIQUE INDEX q_a ON q (a);
    CREATE UNIQUE INDEX q_b ON q (b);
    ALTER TABLE q ADD CONSTRAINT q_b_nn CHECK (b IS NOT NULL);
    CREATE TABLE p2 (code varchar(10) PRIMARY KEY);
    INSERT INTO p2 VALUES ('a');
    CREATE TABLE t2 (id int, code varchar(10) REFERENCES p2);
    INSERT INTO t2 SELECT i, 'a' FROM generate_series(1, 100) i;
    CREATE TABLE r (p_id int REFERENCES p (id));
    INSERT INTO r SELECT 1 + i % 100 FROM generate_series(1, 100) i;
    ANALYZE;
"#;

async fn run_audit_cases(cases: &[Case]) {
    for c in cases {
        let plan = plan(&format!("{SETUP}{AUDIT_SETUP}"), c.sql, c.no_tx).await;
        check_statement(&plan, c);
    }
}

#[tokio::test]
async fn audit_statements_that_scan_or_rewrite_more_than_their_text_says() {
    run_audit_cases(&[
        // A domain with a CHECK is checked by a rewrite, also with a
        // constant default (relfilenode changes).
        case("ALTER TABLE t ADD COLUMN d pos DEFAULT 5", T_AE, true, true),
        // No table rewrite, but the expression index on v is built anew.
        case(
            "ALTER TABLE t ALTER COLUMN v TYPE varchar(40)",
            T_AE,
            false,
            true,
        ),
        // USING v::text is the plain conversion: no rewrite (relfilenode
        // kept); the expression index is still rebuilt.
        case(
            "ALTER TABLE t ALTER COLUMN v TYPE text USING v::text",
            T_AE,
            false,
            true,
        ),
        // timestamp_ops does not carry over to timestamptz: t_ts is rebuilt.
        case(
            "SET TimeZone = 'UTC';\nALTER TABLE t ALTER COLUMN ts TYPE timestamptz",
            T_AE,
            false,
            true,
        ),
        // ACCESS EXCLUSIVE on the partition attached while its rows are read.
        case(
            "ALTER TABLE pt ATTACH PARTITION pt2 FOR VALUES FROM (10) TO (20)",
            &[
                ("public.pt", ShareUpdateExclusive),
                ("public.pt2", AccessExclusive),
                ("public.ptd", AccessExclusive),
            ],
            false,
            true,
        ),
        // The default partition is locked (and read when a partition is
        // added: pg_stat_user_tables.seq_scan of ptd goes up by one).
        case(
            "ALTER TABLE pt DETACH PARTITION pt1",
            &[
                ("public.pt", AccessExclusive),
                ("public.pt1", AccessExclusive),
                ("public.ptd", AccessExclusive),
            ],
            false,
            false,
        ),
        case(
            "CREATE TABLE pt3 PARTITION OF pt FOR VALUES FROM (20) TO (30)",
            &[
                ("public.pt", AccessExclusive),
                ("public.ptd", AccessExclusive),
            ],
            false,
            true,
        ),
        // REINDEX INDEX rebuilds the index from every row.
        case("REINDEX INDEX t_c", &[("public.t", Share)], false, true),
        // A type change of a referenced column adds the foreign keys that
        // reference it again: ACCESS EXCLUSIVE on the referencing table,
        // whose rows are checked again (seq_scan of r goes up) when the
        // values change, not when varchar widens (seq_scan of t2 stays).
        case(
            "ALTER TABLE p2 ALTER COLUMN code TYPE varchar(20)",
            &[
                ("public.p2", AccessExclusive),
                ("public.t2", AccessExclusive),
            ],
            false,
            false,
        ),
        case(
            "ALTER TABLE p ALTER COLUMN id TYPE bigint",
            &[("public.p", AccessExclusive), ("public.r", AccessExclusive)],
            true,
            true,
        ),
        // PRIMARY KEY USING INDEX sets a nullable column NOT NULL: a scan
        // (pg_stat_user_tables.seq_scan goes up by one); none when a valid
        // CHECK (b IS NOT NULL) proves it.
        case(
            "ALTER TABLE q ADD CONSTRAINT q_pk PRIMARY KEY USING INDEX q_a",
            &[("public.q", AccessExclusive)],
            false,
            true,
        ),
        case(
            "ALTER TABLE q ADD CONSTRAINT q_pk PRIMARY KEY USING INDEX q_b",
            &[("public.q", AccessExclusive)],
            false,
            false,
        ),
    ])
    .await;
}

/// A DO block can run anything (here a rewrite under ACCESS EXCLUSIVE):
/// the plan must say it does not know, never "no locks".
#[tokio::test]
async fn audit_do_blocks_are_not_claimed_safe() {
    let plan = plan(
        SETUP,
        "DO $$ BEGIN EXECUTE 'ALTER TABLE t ALTER COLUMN c TYPE bigint'; END $$",
        false,
    )
    .await;
    let st = plan.statements.last().expect("a statement");
    assert!(!st.analysed, "DO block claimed analysed: {st:?}");
    let probe = st.probe.as_ref().expect("probed");
    assert!(
        probe
            .locks
            .iter()
            .any(|l| l.relation == "public.t" && l.mode == AccessExclusive),
        "{probe:?}"
    );
}

/// A statement on a partitioned table reads or rewrites every partition
/// (observed on 15: ACCESS EXCLUSIVE on pt, pt1 and ptd for SET NOT NULL),
/// but the parent's own size is 0: the plan said "instant".
#[tokio::test]
async fn audit_partitioned_table_size_counts_its_partitions() {
    let plan = plan(
        &format!("{SETUP}{AUDIT_SETUP}"),
        "ALTER TABLE pt ALTER COLUMN k SET NOT NULL",
        false,
    )
    .await;
    let st = plan.statements.last().expect("a statement");
    assert!(st.scans, "{:?}", st.notes);
    assert!(st.table_bytes.is_some_and(|b| b > 0), "{st:?}");
    assert_eq!(st.table_rows, Some(500), "{st:?}");
    assert_ne!(st.locked_time, "instant", "{st:?}");
}

/// A statement on a partitioned table that reaches its partitions locks
/// each of them, at every level, as PostgreSQL 15 does (observed in
/// `pg_locks` by the probe, which must agree): the changes of columns and
/// constraints, DROP, TRUNCATE, LOCK, row triggers and index builds do;
/// `ONLY` and changes of the parent alone (its name, owner, replica
/// identity) do not; DML locks the partitions its rows reach. Before,
/// every such plan listed the parent alone and its probe disagreed.
#[tokio::test]
async fn audit_partitioned_statements_lock_their_partitions() {
    use LockMode::RowExclusive;
    let setup = format!(
        "{SETUP}{AUDIT_SETUP}
         CREATE TABLE ptsub PARTITION OF pt FOR VALUES FROM (20) TO (40) PARTITION BY RANGE (k);
         CREATE TABLE ptsub_a PARTITION OF ptsub FOR VALUES FROM (20) TO (30);
         ALTER TABLE pt ADD CONSTRAINT pt_pos CHECK (id > 0) NOT VALID;
         CREATE FUNCTION trg() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';"
    );
    // (relation, mode, locked only if its rows reach it)
    type Locks = Vec<(&'static str, LockMode, bool)>;
    let every = |parent: LockMode, each: LockMode| -> Locks {
        vec![
            ("public.pt", parent, false),
            ("public.pt1", each, false),
            ("public.ptd", each, false),
            ("public.ptsub", each, false),
            ("public.ptsub_a", each, false),
        ]
    };
    let cases: Vec<(&str, Locks)> = vec![
        (
            "ALTER TABLE pt ALTER COLUMN k SET NOT NULL",
            every(AccessExclusive, AccessExclusive),
        ),
        (
            "ALTER TABLE pt ADD COLUMN z int",
            every(AccessExclusive, AccessExclusive),
        ),
        (
            "ALTER TABLE pt ALTER COLUMN id TYPE bigint",
            every(AccessExclusive, AccessExclusive),
        ),
        (
            "ALTER TABLE pt ADD CONSTRAINT c CHECK (id > 0)",
            every(AccessExclusive, AccessExclusive),
        ),
        (
            "ALTER TABLE pt ADD CONSTRAINT u UNIQUE (id, k)",
            every(AccessExclusive, Share),
        ),
        (
            "ALTER TABLE pt ALTER COLUMN id SET STATISTICS 100",
            every(ShareUpdateExclusive, ShareUpdateExclusive),
        ),
        (
            "ALTER TABLE pt VALIDATE CONSTRAINT pt_pos",
            every(ShareUpdateExclusive, ShareUpdateExclusive),
        ),
        ("CREATE INDEX pt_id ON pt (id)", every(Share, Share)),
        ("DROP TABLE pt", every(AccessExclusive, AccessExclusive)),
        ("TRUNCATE pt", every(AccessExclusive, AccessExclusive)),
        ("LOCK TABLE pt IN SHARE MODE", every(Share, Share)),
        (
            "CREATE TRIGGER tr BEFORE UPDATE ON pt FOR EACH ROW EXECUTE FUNCTION trg()",
            every(ShareRowExclusive, ShareRowExclusive),
        ),
        (
            "CREATE TRIGGER tr AFTER UPDATE ON pt FOR EACH STATEMENT EXECUTE FUNCTION trg()",
            vec![("public.pt", ShareRowExclusive, false)],
        ),
        (
            "CREATE INDEX pt_id ON ONLY pt (id)",
            vec![("public.pt", Share, false)],
        ),
        (
            "LOCK TABLE ONLY pt IN SHARE MODE",
            vec![("public.pt", Share, false)],
        ),
        (
            "ALTER TABLE pt RENAME TO pt_new",
            vec![("public.pt", AccessExclusive, false)],
        ),
        (
            "ALTER TABLE pt REPLICA IDENTITY FULL",
            vec![("public.pt", AccessExclusive, false)],
        ),
        // The rows decide: pruning and routing.
        (
            "DELETE FROM pt WHERE k = 50",
            vec![
                ("public.pt", RowExclusive, false),
                ("public.pt1", RowExclusive, true),
                ("public.ptd", RowExclusive, true),
                ("public.ptsub", RowExclusive, true),
                ("public.ptsub_a", RowExclusive, true),
            ],
        ),
        // A partition created earlier in the plan is reached as well.
        (
            "CREATE TABLE pt_new PARTITION OF pt FOR VALUES FROM (40) TO (50);\nALTER TABLE pt ADD COLUMN z int",
            vec![
                ("public.pt", AccessExclusive, false),
                ("public.pt1", AccessExclusive, false),
                ("public.ptd", AccessExclusive, false),
                ("public.ptsub", AccessExclusive, false),
                ("public.ptsub_a", AccessExclusive, false),
                ("public.pt_new", AccessExclusive, false),
            ],
        ),
    ];
    for (sql, want) in cases {
        let plan = plan(&setup, sql, false).await;
        let st = plan.statements.last().expect("a statement");
        let mut got: Vec<(&str, LockMode, bool)> = st
            .locks
            .iter()
            .map(|l| (l.relation.as_str(), l.mode, l.if_reached))
            .collect();
        got.sort();
        let mut want = want;
        want.sort();
        assert_eq!(got, want, "predicted locks of {sql}");
        assert!(
            st.locks
                .iter()
                .all(|l| (l.relation == "public.pt") == l.partition_of.is_none()),
            "{sql}: {:?}",
            st.locks
        );
        probe_agrees(st, sql);
        // CONCURRENTLY is no way out for a partitioned table.
        if sql.starts_with("CREATE INDEX") {
            assert!(
                st.advice
                    .iter()
                    .all(|a| !a.starts_with("build it with CREATE INDEX CONCURRENTLY")),
                "{sql}: {:?}",
                st.advice
            );
            assert_eq!(
                st.advice.iter().any(|a| a.contains("ON ONLY public.pt")),
                !sql.contains("ONLY"),
                "{sql}: {:?}",
                st.advice
            );
        }
    }
    // PostgreSQL refuses a concurrent build on a partitioned table; the
    // plan says so with the way that works.
    let plan = plan(&setup, "CREATE INDEX CONCURRENTLY pt_id ON pt (id)", true).await;
    let st = plan.statements.last().expect("a statement");
    assert!(
        st.advice.iter().any(|a| a
            .starts_with("PostgreSQL refuses CREATE INDEX CONCURRENTLY on a partitioned table")),
        "{:?}",
        st.advice
    );
    let probe = st.probe.as_ref().expect("probed");
    assert!(
        probe
            .error
            .as_deref()
            .is_some_and(|e| e.contains("cannot create index on partitioned table")),
        "{probe:?}"
    );
}

/// A temporal column without a precision holds six fractional digits, the
/// most there are: a change to precision 6 is no rewrite (PostgreSQL's
/// `TemporalSimplify`), also from timestamp to timestamptz under UTC;
/// fewer digits round every value. The plan said "rewrite" for the first
/// ones, and its probe disagreed.
#[tokio::test]
async fn audit_temporal_precision_six_keeps_the_storage() {
    let setup = format!(
        "{SETUP}CREATE TABLE clocks (id int, t time, ttz timetz(2), at timestamp);
         INSERT INTO clocks SELECT i, now()::time, now()::timetz, now() FROM generate_series(1, 100) i;"
    );
    for (sql, rewrites) in [
        (
            "SET TimeZone = 'UTC';\nALTER TABLE t ALTER COLUMN ts TYPE timestamptz(6)",
            false,
        ),
        (
            "SET TimeZone = 'UTC';\nALTER TABLE t ALTER COLUMN ts TYPE timestamptz(3)",
            true,
        ),
        ("ALTER TABLE t ALTER COLUMN ts TYPE timestamp(6)", false),
        ("ALTER TABLE t ALTER COLUMN ts TYPE timestamp(3)", true),
        ("ALTER TABLE clocks ALTER COLUMN t TYPE time(6)", false),
        ("ALTER TABLE clocks ALTER COLUMN t TYPE time(5)", true),
        ("ALTER TABLE clocks ALTER COLUMN ttz TYPE timetz(6)", false),
        ("ALTER TABLE clocks ALTER COLUMN ttz TYPE timetz(4)", false),
        ("ALTER TABLE clocks ALTER COLUMN ttz TYPE timetz(1)", true),
    ] {
        let plan = plan(&setup, sql, false).await;
        let st = plan.statements.last().expect("a statement");
        assert_eq!(st.rewrites, rewrites, "{sql}: {:?}", st.notes);
        probe_agrees(st, sql);
    }
}

/// A key column's index is built anew when the column's collation changes
/// and the index follows it (one that names its own collation is kept);
/// without COLLATE the column takes the new type's default collation, not
/// its own (observed on PostgreSQL 15: the index's relfilenode changes).
#[tokio::test]
async fn audit_a_collation_change_rebuilds_the_indexes_that_follow_it() {
    let setup = format!(
        "{SETUP}CREATE TABLE words (s text, c text COLLATE \"C\", x text);
         INSERT INTO words SELECT g::text, g::text, g::text FROM generate_series(1, 1000) g;
         CREATE INDEX words_s ON words (s);
         CREATE INDEX words_c ON words (c);
         CREATE INDEX words_x_c ON words (x COLLATE \"C\");"
    );
    for (sql, rebuilt, note) in [
        (
            "ALTER TABLE words ALTER COLUMN s TYPE text COLLATE \"C\"",
            Some("words_s"),
            None,
        ),
        (
            "ALTER TABLE words ALTER COLUMN c TYPE text",
            Some("words_c"),
            Some(
                "without COLLATE, c takes text's default collation \"default\", not its own \"C\"",
            ),
        ),
        (
            "ALTER TABLE words ALTER COLUMN c TYPE text COLLATE \"C\"",
            None,
            None,
        ),
        (
            "ALTER TABLE words ALTER COLUMN x TYPE text COLLATE \"C\"",
            None,
            None,
        ),
    ] {
        let plan = plan(&setup, sql, false).await;
        let st = plan.statements.last().expect("a statement");
        assert!(!st.rewrites, "{sql}: {:?}", st.notes);
        assert_eq!(st.scans, rebuilt.is_some(), "{sql}: {:?}", st.notes);
        if let Some(index) = rebuilt {
            assert!(
                st.notes
                    .iter()
                    .any(|n| n.contains(&format!("builds index {index} anew"))),
                "{sql}: {:?}",
                st.notes
            );
        }
        assert_eq!(
            st.notes.iter().any(|n| n.starts_with("without COLLATE")),
            note.is_some(),
            "{sql}: {:?}",
            st.notes
        );
        if let Some(note) = note {
            assert!(
                st.notes.iter().any(|n| n.starts_with(note)),
                "{:?}",
                st.notes
            );
        }
        probe_agrees(st, sql);
    }
    // A collation that does not exist is the plan's error, as it would be
    // the migration's.
    let db = evolve_test::fresh_db("lockplan_collation").await;
    let client = evolve_pg::connect(&db.url, "evolve test")
        .await
        .expect("connect");
    client
        .batch_execute("CREATE TABLE w (s text)")
        .await
        .expect("setup");
    let dir =
        std::env::temp_dir().join(format!("evolve-lockplan-collation-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(
        dir.join("V1__c.sql"),
        "ALTER TABLE w ALTER COLUMN s TYPE text COLLATE \"no_such\";\n",
    )
    .expect("write");
    let e = evolve_migrate::lock_plan(&Options::new(db.url.clone(), &dir), &[], false)
        .await
        .expect_err("an unknown collation");
    assert!(
        e.to_string()
            .contains("collation \"no_such\" does not exist; create it first or fix its name"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
