//! `evolve plan` on a real cluster: every row of the lock table in the
//! reference notes, predicted from the live catalog and probed on a
//! scratch copy of the schema, plus the plan following its own earlier
//! statements.

use std::sync::atomic::{AtomicUsize, Ordering};

use evolve_core::migration::effects::LockMode::{self, *};
use evolve_migrate::{Held, LockPlan, Options};

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
    let probe = st.probe.as_ref().expect("probed");
    assert_eq!(probe.error, None, "probe of {}", c.sql);
    assert!(
        probe.disagreements.is_empty(),
        "probe disagrees on {}: {:?}",
        c.sql,
        probe.disagreements
    );
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
