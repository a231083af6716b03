//! `apply` next to another backend's `CREATE INDEX CONCURRENTLY` of the
//! same index (the build of a run that was killed keeps running on its
//! backend): the INVALID index it is building is never dropped under it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use evolve_migrate::{ApplyOptions, Event, MigrateError, Options};
use tokio_postgres::Client;

static DIRS: AtomicUsize = AtomicUsize::new(0);

async fn connect(url: &str, app: &str) -> Client {
    evolve_pg::connect(url, app).await.expect("connect")
}

async fn index_oid(client: &Client, name: &str) -> Option<(u32, bool)> {
    client
        .query_opt(
            "SELECT c.oid, i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
             WHERE c.relname = $1",
            &[&name],
        )
        .await
        .expect("index")
        .map(|r| (r.get(0), r.get(1)))
}

#[tokio::test]
async fn an_index_another_backend_is_still_building_is_not_dropped() {
    let db = evolve_test::fresh_db("cic_building").await;
    let dir = std::env::temp_dir().join(format!(
        "evolve-migrate-hardening-{}-{}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("V1__index_t.sql"),
        "-- evolve:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS t_x_idx ON t (x);\n",
    )
    .expect("write");
    let setup = connect(&db.url, "evolve test").await;
    setup
        .batch_execute("CREATE TABLE t (x int); INSERT INTO t SELECT generate_series(1, 1000)")
        .await
        .expect("table");

    // A writer keeps the other backend's build waiting ("waiting for
    // writers before build"), its index INVALID meanwhile.
    let writer = connect(&db.url, "writer").await;
    writer
        .batch_execute("BEGIN; LOCK TABLE t IN ROW EXCLUSIVE MODE")
        .await
        .expect("writer lock");
    let builder = connect(&db.url, "killed run").await;
    let builder_pid: i32 = builder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    let build = tokio::spawn(async move {
        builder
            .batch_execute("CREATE INDEX CONCURRENTLY t_x_idx ON t (x)")
            .await
    });
    let mut building = None;
    for _ in 0..100 {
        building = index_oid(&setup, "t_x_idx").await;
        if building.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (oid, valid) = building.expect("the other backend's build created the index");
    assert!(!valid, "the index is INVALID while it is built");

    let mut opts = Options::new(db.url.clone(), &dir);
    opts.index_build_wait = Duration::from_millis(1500);
    let mut events = Vec::new();
    let err = evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |e| events.push(e))
        .await
        .expect_err("apply refuses while the index is being built");
    assert!(
        matches!(&err, MigrateError::IndexBuilding { index, builders, .. }
            if index == "public.t_x_idx" && builders.iter().any(|b| b.pid == builder_pid)),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&format!("pid {builder_pid}"))
            && message.contains("run 'evolve migrate apply' again"),
        "{message}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::IndexBuildWait { index, .. } if index == "public.t_x_idx")),
        "{events:?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::InvalidIndexDropped { .. })),
        "{events:?}"
    );
    assert_eq!(
        index_oid(&setup, "t_x_idx").await,
        Some((oid, false)),
        "the index being built is still there, untouched"
    );

    // Once the writer is gone the other build finishes, and apply keeps
    // the index it built.
    writer.batch_execute("COMMIT").await.expect("commit");
    build
        .await
        .expect("join")
        .expect("the other build finishes");
    evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |_| {})
        .await
        .expect("apply resumes");
    assert_eq!(index_oid(&setup, "t_x_idx").await, Some((oid, true)));
    let _ = std::fs::remove_dir_all(dir);
}
