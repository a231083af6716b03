//! SIGKILL of a process running the pipeline, at several moments while the
//! upstream keeps writing: after restarts, the sink equals the upstream, and
//! it received every change exactly once (counted with a trigger).

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use evolve_pipeline::Pipeline;

/// The child process; killed with SIGKILL when dropped (a failing test
/// must not leave it running).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn start_child(config: &std::path::Path) -> Guard {
    Guard(
        Command::new(env!("CARGO_BIN_EXE_evolve-pipeline-run"))
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start evolve-pipeline-run"),
    )
}

/// Sends `signal` to the child with kill(1) (this crate has no unsafe
/// code) and reaps it.
fn kill(child: &mut Guard, signal: i32) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.0.id().to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {}", child.0.id());
    child.0.wait().expect("reap the child");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_several_moments_loses_and_duplicates_nothing() {
    let env = env("crash").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute("CREATE TABLE k (id int PRIMARY KEY, n int NOT NULL, pad text);")
        .await
        .unwrap();
    {
        let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
        create_all(&pipeline, &env.source, &["k"]).await;
    }
    sink.batch_execute(
        "CREATE TABLE public.k_json_audit (op text, key jsonb, same bool);
         CREATE FUNCTION public.k_json_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF TG_OP = 'DELETE' THEN
             INSERT INTO public.k_json_audit VALUES (TG_OP, OLD.key, false);
           ELSIF TG_OP = 'UPDATE' THEN
             INSERT INTO public.k_json_audit VALUES (TG_OP, NEW.key, OLD.data = NEW.data);
           ELSE
             INSERT INTO public.k_json_audit VALUES (TG_OP, NEW.key, false);
           END IF;
           RETURN NULL;
         END $$;
         CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON public.k_json
           FOR EACH ROW EXECUTE FUNCTION public.k_json_audit_fn();",
    )
    .await
    .unwrap();
    let config_path = env.state.with_extension("toml");
    std::fs::write(
        &config_path,
        format!(
            "state_dir = {:?}\n[connections.up]\nurl = {:?}\n[connections.sink]\nurl = {:?}\n",
            env.state.display().to_string(),
            env.up.url,
            env.sink.url
        ),
    )
    .unwrap();

    // The initial load (of an empty table) is done before writing starts.
    let mut child = start_child(&config_path);
    wait_until(
        "the initial load (k_sink's progress row)",
        Duration::from_secs(30),
        async || {
            sink.query_one(
                "SELECT to_regclass('public.evolve_sink_progress') IS NOT NULL \
                 AND EXISTS (SELECT 1 FROM public.evolve_sink_progress WHERE sink = 'k_sink')",
                &[],
            )
            .await
            .unwrap()
            .get(0)
        },
    )
    .await;

    // Transaction i inserts i, updates i - 1, and every tenth deletes i - 2.
    let writer_url = env.up.url.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let writer = tokio::spawn(async move {
        let w = connect(&writer_url).await;
        let mut i: i32 = 0;
        loop {
            if stop_rx.try_recv().is_ok() {
                return i;
            }
            i += 1;
            let delete = if i % 10 == 0 {
                format!("DELETE FROM k WHERE id = {};", i - 2)
            } else {
                String::new()
            };
            w.batch_execute(&format!(
                "BEGIN; INSERT INTO k VALUES ({i}, 0, repeat('p', 50));
                 UPDATE k SET n = n + 1 WHERE id = {prev}; {delete} COMMIT;",
                prev = i - 1
            ))
            .await
            .unwrap();
            // A fixed pace for the load, not a wait for anything.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });

    // Fixed waits: SIGKILL after each delay of writes, and the next process
    // starts 100 ms after the last one died.
    for delay in [300, 700, 1200, 500] {
        tokio::time::sleep(Duration::from_millis(delay)).await;
        kill(&mut child, 9);
        tokio::time::sleep(Duration::from_millis(100)).await;
        child = start_child(&config_path);
    }
    // A fixed 500 ms more of writes for the last process.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop_tx.send(());
    let n = writer.await.unwrap();
    assert!(n > 50, "the writer ran only {n} transactions");
    wait_equal(&up, &sink, "k", "k_json", Duration::from_secs(40)).await;
    kill(&mut child, 15);

    let expected_deletes = (1..=n).filter(|i| i % 10 == 0 && *i >= 3).count() as i64;
    let counts = sink
        .query_one(
            "SELECT count(*) FILTER (WHERE op = 'INSERT'), count(*) FILTER (WHERE op = 'UPDATE'), \
                    count(*) FILTER (WHERE op = 'DELETE'), count(*) FILTER (WHERE same) \
             FROM public.k_json_audit",
            &[],
        )
        .await
        .unwrap();
    let (inserts, updates, deletes, same): (i64, i64, i64, i64) =
        (counts.get(0), counts.get(1), counts.get(2), counts.get(3));
    assert_eq!(
        same, 0,
        "a write left a document as it was (a replayed transaction)"
    );
    assert_eq!(inserts, i64::from(n), "inserts");
    assert_eq!(updates, i64::from(n) - 1, "updates");
    assert_eq!(deletes, expected_deletes, "deletes");
    let _ = std::fs::remove_file(&config_path);
}

/// SIGKILL while the sink's initial load is copying (seen in the sink's
/// `pg_stat_progress_copy`): the sink has none of the rows and no
/// position, and the restarted process loads every row exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_the_initial_load_leaves_nothing_and_the_restart_loads_once() {
    const ROWS: i64 = 200_000;
    let env = env("crash_load").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(&format!(
        "CREATE TABLE l (id int PRIMARY KEY, n int NOT NULL, pad text);
         INSERT INTO l SELECT g, g % 1000, repeat('p', g % 60) FROM generate_series(1, {ROWS}) g;"
    ))
    .await
    .unwrap();
    {
        let pipeline = Arc::new(Pipeline::open(env.config.clone()).unwrap());
        create_all(&pipeline, &env.source, &["l"]).await;
    }
    audit_sink(&sink, "l_json").await;
    let config_path = env.state.with_extension("toml");
    std::fs::write(
        &config_path,
        format!(
            "state_dir = {:?}\n[connections.up]\nurl = {:?}\n[connections.sink]\nurl = {:?}\n",
            env.state.display().to_string(),
            env.up.url,
            env.sink.url
        ),
    )
    .unwrap();
    let progress = async || -> i64 {
        sink.query_one(
            "SELECT count(*) FROM public.evolve_sink_progress WHERE sink = 'l_sink'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
    };

    let mut child = start_child(&config_path);
    let mut copied = 0;
    wait_until(
        "the initial load to be copying into public.l_json",
        Duration::from_secs(120),
        async || {
            copied = sink
                .query_one(
                    "SELECT coalesce(max(tuples_processed), 0) FROM pg_stat_progress_copy \
                     WHERE relid = 'public.l_json'::regclass",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            copied > 0
        },
    )
    .await;
    kill(&mut child, 9);
    assert!(
        copied < ROWS,
        "the load had copied {copied} rows when it was seen"
    );
    assert_eq!(progress().await, 0, "a killed load recorded its position");
    assert_eq!(
        compare(&up, &sink, "l", "l_json").await.1,
        0,
        "rows of a killed load are visible"
    );
    assert_eq!(audit_count(&sink, "l_json").await, 0);

    let mut child = start_child(&config_path);
    wait_until(
        "the restarted initial load (l_sink's progress row)",
        Duration::from_secs(120),
        async || progress().await == 1,
    )
    .await;
    assert_eq!(
        compare(&up, &sink, "l", "l_json").await,
        (ROWS, ROWS, ROWS),
        "(upstream rows, sink rows, equal rows) after the restarted load"
    );
    assert_eq!(audit_count(&sink, "l_json").await, ROWS, "rows written");
    // The stream goes on from the load's position.
    up.batch_execute("UPDATE l SET n = -1 WHERE id <= 10; DELETE FROM l WHERE id = 11;")
        .await
        .unwrap();
    wait_equal(&up, &sink, "l", "l_json", Duration::from_secs(40)).await;
    assert_eq!(audit_count(&sink, "l_json").await, ROWS + 11);
    kill(&mut child, 15);
    let _ = std::fs::remove_file(&config_path);
}

/// SIGKILL at several moments while a replacement's differing keys are
/// kept and the upstream keeps writing: `s_v1` leaves `tag` out and
/// `s_v2` has it, and each transaction gives a row a tag or takes it
/// away, changes a column both versions have, and now and then inserts
/// or deletes a row. After the restarts the store keeps exactly the rows
/// with a tag as differing, and the swap writes exactly those rows to the
/// sink, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_differing_keys_are_kept_loses_none() {
    const ROWS: i32 = 2000;
    let env = env("crash_kept").await;
    let up = connect(&env.up.url).await;
    let sink = connect(&env.sink.url).await;
    up.batch_execute(&format!(
        "CREATE TABLE s (id int PRIMARY KEY, n int NOT NULL, tag text);
         INSERT INTO s SELECT g, 0, CASE WHEN g % 50 = 0 THEN 't' END
         FROM generate_series(1, {ROWS}) g;"
    ))
    .await
    .unwrap();
    let spec = |name: &str, exclude: &[&str]| evolve_pipeline::TableSpec {
        name: name.into(),
        source: env.source.clone(),
        schema: "public".into(),
        table: "s".into(),
        exclude: exclude.iter().map(|c| c.to_string()).collect(),
        ..Default::default()
    };
    {
        let pipeline = Pipeline::open(env.config.clone()).unwrap();
        pipeline
            .create_source(&env.source, "up", "evolve_pub")
            .await
            .unwrap();
        pipeline
            .create_table(&spec("s_v1", &["tag"]))
            .await
            .unwrap();
        pipeline.create_interface("s_json", "s_v1").unwrap();
        pipeline
            .create_sink("s_sink", "s_json", "sink", "public", "s_json")
            .await
            .unwrap();
        pipeline.create_table(&spec("s_v2", &[])).await.unwrap();
        pipeline
            .create_replacement("s_json_v2", "s_json", "s_v2")
            .unwrap();
    }
    audit_sink(&sink, "s_json").await;
    let config_path = env.state.with_extension("toml");
    std::fs::write(
        &config_path,
        format!(
            "state_dir = {:?}\n[connections.up]\nurl = {:?}\n[connections.sink]\nurl = {:?}\n",
            env.state.display().to_string(),
            env.up.url,
            env.sink.url
        ),
    )
    .unwrap();

    let mut child = start_child(&config_path);
    wait_until(
        "both versions hydrated and compared",
        Duration::from_secs(60),
        async || kept_differing_ids(&env.state, "s_json_v2").is_some(),
    )
    .await;

    // Transaction i flips the tag of one row, changes n on another, every
    // fifth inserts a row (with a tag every other time) and every seventh
    // deletes one.
    let writer_url = env.up.url.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let writer = tokio::spawn(async move {
        let w = connect(&writer_url).await;
        let mut i: i32 = 0;
        loop {
            if stop_rx.try_recv().is_ok() {
                return i;
            }
            i += 1;
            let mut sql = format!(
                "BEGIN; UPDATE s SET tag = CASE WHEN tag IS NULL THEN 't{i}' END WHERE id = {flip};
                 UPDATE s SET n = n + 1 WHERE id = {bump};",
                flip = (i * 37) % ROWS + 1,
                bump = (i * 11) % ROWS + 1,
            );
            if i % 5 == 0 {
                let tag = if i % 10 == 0 { "'new'" } else { "NULL" };
                sql.push_str(&format!("INSERT INTO s VALUES ({}, 0, {tag});", 10_000 + i));
            }
            if i % 7 == 0 {
                sql.push_str(&format!(
                    "DELETE FROM s WHERE id = {};",
                    (i * 13) % ROWS + 1
                ));
            }
            sql.push_str("COMMIT;");
            w.batch_execute(&sql).await.unwrap();
            // A fixed pace for the load, not a wait for anything.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });

    // Fixed waits: SIGKILL after each delay of writes, and the next process
    // starts 100 ms after the last one died.
    for delay in [300, 700, 1200, 500] {
        tokio::time::sleep(Duration::from_millis(delay)).await;
        kill(&mut child, 9);
        tokio::time::sleep(Duration::from_millis(100)).await;
        child = start_child(&config_path);
    }
    // A fixed 500 ms more of writes for the last process.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop_tx.send(());
    let n = writer.await.unwrap();
    assert!(n > 50, "the writer ran only {n} transactions");
    wait_equal_without(&up, &sink, "s", "s_json", "tag", Duration::from_secs(40)).await;

    let tagged = upstream_ids(&up, "s", "tag IS NOT NULL").await;
    assert_eq!(
        kept_differing_ids(&env.state, "s_json_v2").as_ref(),
        Some(&tagged),
        "the keys kept as differing after the restarts"
    );
    sink.batch_execute("DELETE FROM public.s_json_audit")
        .await
        .unwrap();
    // The running child applies it; this process only asks and waits.
    Pipeline::open(env.config.clone())
        .unwrap()
        .apply_replacement("s_json", "s_json_v2", Duration::from_secs(30))
        .await
        .unwrap();
    wait_equal(&up, &sink, "s", "s_json", Duration::from_secs(40)).await;
    kill(&mut child, 15);
    let written = audited_ids(&sink, "s_json").await;
    assert!(written.iter().all(|(op, _)| op == "UPDATE"), "{written:?}");
    let ids: std::collections::BTreeSet<i64> = written.iter().map(|(_, id)| *id).collect();
    assert_eq!(ids.len(), written.len(), "a row written twice: {written:?}");
    assert_eq!(ids, tagged);
    let _ = std::fs::remove_file(&config_path);
}
