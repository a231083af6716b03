//! Subscriptions against real clusters: snapshots that meet the stream
//! exactly, many subscribers, `as_of` with and without a snapshot, the
//! feed horizon, and readers that fall behind.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use evolve_pipeline::Position;
use evolve_pipeline::subscribe::{self, SubscribeError, SubscribeOptions, Subscription};
use evolve_pipeline::{Pipeline, TableSpec, TableState};
use serde_json::Value;
use tokio_postgres::Client;

const CONVERGE: Duration = Duration::from_secs(60);

/// One line of a subscription, parsed.
#[derive(Clone, Debug, PartialEq)]
enum Line {
    Change {
        ts: Position,
        diff: i64,
        key: Value,
        data: Value,
    },
    Progress(Position),
    Error {
        code: String,
        message: String,
        hint: String,
    },
}

impl Line {
    fn ts(&self) -> Option<Position> {
        match self {
            Line::Change { ts, .. } | Line::Progress(ts) => Some(*ts),
            Line::Error { .. } => None,
        }
    }
}

fn parse(raw: &[u8]) -> Line {
    assert!(raw.ends_with(b"\n"), "a line ends in a newline: {raw:?}");
    let v: Value = serde_json::from_slice(raw)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(raw)));
    let ts = || -> Position { v["ts"].as_str().unwrap().parse().unwrap() };
    match v["type"].as_str() {
        Some("change") => {
            // Members in the documented order.
            let text = std::str::from_utf8(raw).unwrap();
            let at = |m: &str| text.find(m).unwrap_or_else(|| panic!("{m} in {text}"));
            assert!(
                at("\"type\"") < at("\"ts\"")
                    && at("\"ts\"") < at("\"diff\"")
                    && at("\"diff\"") < at("\"key\"")
                    && at("\"key\"") < at("\"data\""),
                "{text}"
            );
            Line::Change {
                ts: ts(),
                diff: v["diff"].as_i64().unwrap(),
                key: v["key"].clone(),
                data: v["data"].clone(),
            }
        }
        Some("progress") => Line::Progress(ts()),
        Some("error") => Line::Error {
            code: v["code"].as_str().unwrap().to_string(),
            message: v["message"].as_str().unwrap().to_string(),
            hint: v["hint"].as_str().unwrap_or_default().to_string(),
        },
        other => panic!("unknown line type {other:?}"),
    }
}

/// The next line, within 30 s.
async fn next(sub: &mut Subscription) -> Option<Line> {
    tokio::time::timeout(Duration::from_secs(30), sub.next_line())
        .await
        .expect("a line within 30 s")
        .map(|raw| parse(&raw))
}

/// Lines up to and including the first progress line at or after
/// `target`.
async fn read_until(sub: &mut Subscription, target: Position) -> Vec<Line> {
    let mut lines = Vec::new();
    loop {
        let line = next(sub).await.expect("the subscription goes on");
        if let Line::Error { .. } = line {
            panic!("an error line: {line:?} after {} lines", lines.len());
        }
        let done = matches!(line, Line::Progress(ts) if ts >= target);
        lines.push(line);
        if done {
            return lines;
        }
    }
}

/// Applies change lines to `map` (key text → document), checking that
/// an insertion finds no document and a retraction finds the one it
/// retracts.
fn apply(map: &mut BTreeMap<String, Value>, lines: &[Line]) {
    for line in lines {
        if let Line::Change {
            diff, key, data, ..
        } = line
        {
            let k = key.to_string();
            if *diff == 1 {
                assert!(
                    map.insert(k.clone(), data.clone()).is_none(),
                    "+1 of {k}, which is there"
                );
            } else {
                assert_eq!(map.remove(&k).as_ref(), Some(data), "-1 of {k}");
            }
        }
    }
}

/// The pipeline's documents of `interface` as the same map.
fn documents(pipeline: &Pipeline, interface: &str) -> BTreeMap<String, Value> {
    pipeline
        .documents(interface)
        .unwrap()
        .into_iter()
        .map(|(k, d)| {
            (
                serde_json::from_slice::<Value>(&k).unwrap().to_string(),
                serde_json::from_slice(&d).unwrap(),
            )
        })
        .collect()
}

/// How many of `docs` (key, document) equal the upstream server's own
/// document of `table`'s row, compared as jsonb; and the upstream count.
async fn equal_upstream(up: &Client, table: &str, docs: &[(Value, Value)]) -> (i64, i64) {
    let keys: Vec<String> = docs.iter().map(|d| d.0.to_string()).collect();
    let data: Vec<String> = docs.iter().map(|d| d.1.to_string()).collect();
    let row = up
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM public.{table}), \
                        (SELECT count(*) FROM public.{table} t \
                         JOIN unnest($1::text[], $2::text[]) AS s(k, d) \
                           ON jsonb_build_object('id', t.id) = s.k::jsonb \
                         WHERE coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) = s.d::jsonb)"
            ),
            &[&keys, &data],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// Waits until the pipeline's documents of `<table>_json` equal the
/// upstream table, then returns the source's applied position.
async fn converged(up: &Client, pipeline: &Pipeline, table: &str) -> Position {
    wait_until(
        &format!("the documents of {table} to equal the upstream rows"),
        CONVERGE,
        async || {
            let docs: Vec<(Value, Value)> = documents(pipeline, &format!("{table}_json"))
                .into_iter()
                .map(|(k, d)| (serde_json::from_str(&k).unwrap(), d))
                .collect();
            let (count, equal) = equal_upstream(up, table, &docs).await;
            count == docs.len() as i64 && equal == count
        },
    )
    .await;
    // The position of every transaction applied so far (recorded within a
    // tick, hence a fixed wait of a few ticks).
    tokio::time::sleep(Duration::from_millis(300)).await;
    pipeline.sources().unwrap()[0].applied_lsn
}

async fn setup(hint: &str, rows: i32, retain: Option<Duration>) -> (Env, Client, Arc<Pipeline>) {
    let env = env(hint).await;
    let up = connect(&env.up.url).await;
    up.batch_execute(&format!(
        "CREATE TABLE t (id int PRIMARY KEY, name text, n int NOT NULL DEFAULT 0, note text);
         INSERT INTO t SELECT i, 'row ' || i, 0, CASE WHEN i % 3 = 0 THEN NULL ELSE 'x' END
         FROM generate_series(1, {rows}) i;"
    ))
    .await
    .unwrap();
    let mut config = env.config.clone();
    if let Some(retain) = retain {
        config = config.with_retain_history(retain);
    }
    let pipeline = Arc::new(Pipeline::open(config).unwrap());
    create_all(&pipeline, &env.source, &["t"]).await;
    (env, up, pipeline)
}

fn changes(lines: &[Line]) -> Vec<Line> {
    lines
        .iter()
        .filter(|l| matches!(l, Line::Change { .. }))
        .cloned()
        .collect()
}

fn opts(snapshot: bool, as_of: Option<Position>) -> SubscribeOptions {
    SubscribeOptions { snapshot, as_of }
}

/// A snapshot equals the upstream rows, byte for byte what the pipeline
/// holds and in key order; one taken while writes go on meets the live
/// stream exactly; inserts, updates (no-op ones emit nothing) and deletes
/// come as +1, -1 then +1 at one ts, and -1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_with_snapshot() {
    let (_env, up, pipeline) = setup("sub_snapshot", 200, None).await;
    let running = Running::start(pipeline.clone());
    wait_all_running(&pipeline, CONVERGE).await;

    // Quiet: the snapshot is exactly the documents, in key order.
    let mut quiet = subscribe::subscribe(&pipeline, "t_json", opts(true, None))
        .await
        .unwrap();
    let mut raw = Vec::new();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(30), quiet.next_line())
            .await
            .unwrap()
            .unwrap();
        let done = line.starts_with(b"{\"type\":\"progress\"");
        raw.push(line);
        if done {
            break;
        }
    }
    let Line::Progress(p) = parse(raw.last().unwrap()) else {
        unreachable!()
    };
    let docs = pipeline.documents("t_json").unwrap();
    assert_eq!(docs.len(), 200);
    assert_eq!(raw.len(), 201, "200 documents and a progress line");
    for ((key, doc), line) in docs.iter().zip(&raw) {
        let mut want =
            format!("{{\"type\":\"change\",\"ts\":\"{p}\",\"diff\":1,\"key\":").into_bytes();
        want.extend_from_slice(key);
        want.extend_from_slice(b",\"data\":");
        want.extend_from_slice(doc);
        want.extend_from_slice(b"}\n");
        assert_eq!(
            line.as_ref(),
            want.as_slice(),
            "{}",
            String::from_utf8_lossy(line)
        );
    }
    let snapshot: Vec<(Value, Value)> = raw[..200]
        .iter()
        .map(|l| match parse(l) {
            Line::Change { key, data, .. } => (key, data),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        equal_upstream(&up, "t", &snapshot).await,
        (200, 200),
        "every snapshot document equals the server's"
    );
    let mut quiet_map = BTreeMap::new();
    apply(
        &mut quiet_map,
        &raw.iter().map(|l| parse(l)).collect::<Vec<_>>(),
    );

    // While writes go on: a snapshot, then the stream, equal the documents.
    let writer_url = _env.up.url.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let writer = tokio::spawn(async move {
        let w = connect(&writer_url).await;
        let mut i: i32 = 0;
        loop {
            if stop_rx.try_recv().is_ok() {
                return i;
            }
            i += 1;
            w.batch_execute(&format!(
                "BEGIN;
                 UPDATE t SET n = n + 1 WHERE id % 37 = {m};
                 INSERT INTO t (id, name) VALUES ({new}, 'new {i}');
                 DELETE FROM t WHERE id = {del};
                 COMMIT;",
                m = i % 37,
                new = 10_000 + i,
                del = 101 + i % 100,
            ))
            .await
            .unwrap();
        }
    });
    // A fixed wait: the writer is under way before the busy snapshot.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut busy = subscribe::subscribe(&pipeline, "t_json", opts(true, None))
        .await
        .unwrap();
    let mut busy_lines = Vec::new();
    // Read for a fixed 700 ms while the writer runs.
    let until = Instant::now() + Duration::from_millis(700);
    while Instant::now() < until {
        busy_lines.push(next(&mut busy).await.unwrap());
    }
    let _ = stop_tx.send(());
    let transactions = writer.await.unwrap();
    assert!(
        transactions > 5,
        "the writer ran {transactions} transactions"
    );
    let applied = converged(&up, &pipeline, "t").await;
    busy_lines.extend(read_until(&mut busy, applied).await);
    let Some(Line::Change { ts: start, .. }) = busy_lines.first().cloned() else {
        panic!("the snapshot first: {:?}", busy_lines.first());
    };
    let first_progress = busy_lines
        .iter()
        .position(|l| matches!(l, Line::Progress(_)))
        .unwrap();
    assert!(
        busy_lines[..first_progress]
            .iter()
            .all(|l| matches!(l, Line::Change { ts, diff: 1, .. } if *ts == start)),
        "the snapshot is +1 changes at its position"
    );
    assert_eq!(busy_lines[first_progress], Line::Progress(start));
    assert!(
        busy_lines[first_progress + 1..]
            .iter()
            .all(|l| l.ts().is_some_and(|ts| ts > start)),
        "live lines come after the snapshot's position"
    );
    let mut busy_map = BTreeMap::new();
    apply(&mut busy_map, &busy_lines);
    assert_eq!(busy_map, documents(&pipeline, "t_json"));
    let quiet_lines = read_until(&mut quiet, applied).await;
    apply(&mut quiet_map, &quiet_lines);
    assert_eq!(quiet_map, documents(&pipeline, "t_json"));

    // Counted: N inserts, M updates of which K change nothing, D deletes.
    let mut counted = subscribe::subscribe(&pipeline, "t_json", opts(false, None))
        .await
        .unwrap();
    let Some(Line::Progress(from)) = next(&mut counted).await else {
        panic!("a plain subscription starts with a progress line");
    };
    let (n, m, k, d) = (4, 8, 3, 2);
    up.batch_execute(
        "INSERT INTO t (id, name) VALUES (50001, 'a'), (50002, 'b');
         INSERT INTO t (id, name, note) VALUES (50003, 'c', 'z');
         INSERT INTO t (id) VALUES (50004);
         UPDATE t SET name = 'renamed' WHERE id IN (1, 2);
         UPDATE t SET note = NULL, n = 99 WHERE id IN (4, 5);
         BEGIN; UPDATE t SET name = 'twice' WHERE id = 7; UPDATE t SET n = 7 WHERE id = 7; COMMIT;
         UPDATE t SET name = name WHERE id IN (8, 10);   -- changes nothing
         UPDATE t SET note = note WHERE id = 11;         -- changes nothing
         DELETE FROM t WHERE id IN (13, 14);",
    )
    .await
    .unwrap();
    let applied = converged(&up, &pipeline, "t").await;
    let lines = read_until(&mut counted, applied).await;
    assert!(lines.iter().all(|l| l.ts().unwrap() > from));
    let mut by_key: BTreeMap<(Position, String), Vec<i64>> = BTreeMap::new();
    for line in &lines {
        if let Line::Change { ts, diff, key, .. } = line {
            by_key
                .entry((*ts, key.to_string()))
                .or_default()
                .push(*diff);
        }
    }
    let count = |pattern: &[i64]| by_key.values().filter(|v| v.as_slice() == pattern).count();
    assert_eq!(count(&[1]), n, "inserts: {by_key:?}");
    assert_eq!(count(&[-1, 1]), m - k, "updates: {by_key:?}");
    assert_eq!(count(&[-1]), d, "deletes: {by_key:?}");
    assert_eq!(by_key.len(), n + (m - k) + d, "{by_key:?}");
    let plus = changes(&lines)
        .iter()
        .filter(|l| matches!(l, Line::Change { diff: 1, .. }))
        .count();
    assert_eq!(plus, n + (m - k));
    assert_eq!(changes(&lines).len() - plus, (m - k) + d);
    // Each transaction's changes are followed by its progress line.
    for (i, line) in lines.iter().enumerate() {
        if let Line::Change { ts, .. } = line {
            let after = lines[i + 1..]
                .iter()
                .find(|l| l.ts() != Some(*ts) || matches!(l, Line::Progress(_)));
            assert_eq!(after, Some(&Line::Progress(*ts)), "{lines:?}");
        }
    }
    apply(&mut quiet_map, &read_until(&mut quiet, applied).await);
    assert_eq!(quiet_map, documents(&pipeline, "t_json"));
    running.stop().await;
}

/// Three subscribers at once receive the same lines after their common
/// start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_subscribers_receive_the_same_lines() {
    let (env, up, pipeline) = setup("sub_many", 50, None).await;
    let running = Running::start(pipeline.clone());
    wait_all_running(&pipeline, CONVERGE).await;
    let writer_url = env.up.url.clone();
    // Writes go on until all three subscribers have started, then 40
    // transactions more: each subscriber sees changes after their common
    // start however long subscribing takes.
    let subscribed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let all_subscribed = subscribed.clone();
    let writer = tokio::spawn(async move {
        let w = connect(&writer_url).await;
        let mut after = 0;
        for i in 1..=20_000 {
            if all_subscribed.load(std::sync::atomic::Ordering::SeqCst) {
                after += 1;
                if after > 40 {
                    break;
                }
            }
            // Every transaction changes documents.
            w.batch_execute(&format!(
                "BEGIN;
                 UPDATE t SET n = n + 1 WHERE id = {u};
                 INSERT INTO t (id, name) VALUES ({new}, 'new');
                 COMMIT;",
                u = i % 50 + 1,
                new = 1000 + i,
            ))
            .await
            .unwrap();
            if i % 20 == 0 {
                w.batch_execute(&format!("DELETE FROM t WHERE id = {}", 1000 + i - 5))
                    .await
                    .unwrap();
            }
        }
    });
    let (a, b) = tokio::join!(
        subscribe::subscribe(&pipeline, "t_json", opts(false, None)),
        subscribe::subscribe(&pipeline, "t_json", opts(true, None)),
    );
    // A fixed wait: the third subscriber starts later than the first two.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let c = subscribe::subscribe(&pipeline, "t_json", opts(false, None)).await;
    subscribed.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut subs = [a.unwrap(), b.unwrap(), c.unwrap()];
    writer.await.unwrap();
    let applied = converged(&up, &pipeline, "t").await;
    let mut all = Vec::new();
    for sub in subs.iter_mut() {
        all.push(read_until(sub, applied).await);
    }
    // Where each started: the first progress line.
    let starts: Vec<Position> = all
        .iter()
        .map(|lines| {
            lines
                .iter()
                .find_map(|l| match l {
                    Line::Progress(ts) => Some(*ts),
                    _ => None,
                })
                .unwrap()
        })
        .collect();
    let common = *starts.iter().max().unwrap();
    let after: Vec<Vec<Line>> = all
        .iter()
        .map(|lines| {
            lines
                .iter()
                .filter(|l| l.ts().is_some_and(|ts| ts > common))
                .cloned()
                .collect()
        })
        .collect();
    assert!(
        changes(&after[0]).len() > 20,
        "enough changes after the common start {common}: {}",
        changes(&after[0]).len()
    );
    assert_eq!(after[0], after[1]);
    assert_eq!(after[0], after[2]);
    // The one with a snapshot holds the documents.
    let mut map = BTreeMap::new();
    apply(&mut map, &all[1]);
    assert_eq!(map, documents(&pipeline, "t_json"));
    running.stop().await;
}

/// `as_of` a progress position: exactly the later changes; with a
/// snapshot, the documents as they were then, and the later changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_of_a_past_position() {
    let (_env, up, pipeline) = setup("sub_as_of", 60, None).await;
    let running = Running::start(pipeline.clone());
    wait_all_running(&pipeline, CONVERGE).await;
    let mut live = subscribe::subscribe(&pipeline, "t_json", opts(false, None))
        .await
        .unwrap();
    up.batch_execute(
        "INSERT INTO t (id, name) VALUES (100, 'first batch');
         UPDATE t SET n = 1 WHERE id <= 5;
         DELETE FROM t WHERE id = 6;",
    )
    .await
    .unwrap();
    let applied = converged(&up, &pipeline, "t").await;
    let Some(Line::Progress(t)) = read_until(&mut live, applied).await.pop() else {
        unreachable!()
    };
    let docs_at_t = documents(&pipeline, "t_json");

    up.batch_execute(
        "INSERT INTO t (id, name) VALUES (101, 'second'), (102, 'batch');
         UPDATE t SET name = 'later' WHERE id IN (1, 7, 100);
         DELETE FROM t WHERE id IN (2, 8);
         BEGIN; DELETE FROM t WHERE id = 9; INSERT INTO t (id, name) VALUES (9, 'back'); COMMIT;
         BEGIN; INSERT INTO t (id) VALUES (103); DELETE FROM t WHERE id = 103; COMMIT;",
    )
    .await
    .unwrap();
    let applied = converged(&up, &pipeline, "t").await;
    let later = read_until(&mut live, applied).await;
    assert!(changes(&later).len() >= 10, "{later:?}");

    // as_of T: exactly the later changes.
    let mut replay = subscribe::subscribe(&pipeline, "t_json", opts(false, Some(t)))
        .await
        .unwrap();
    let replayed = read_until(&mut replay, applied).await;
    assert_eq!(changes(&replayed), changes(&later));
    assert!(replayed.iter().all(|l| l.ts().unwrap() > t));

    // as_of T with a snapshot: the documents at T, then the same changes.
    let mut past = subscribe::subscribe(&pipeline, "t_json", opts(true, Some(t)))
        .await
        .unwrap();
    let snapshot = read_until(&mut past, t).await;
    assert_eq!(snapshot.last(), Some(&Line::Progress(t)));
    assert!(
        snapshot[..snapshot.len() - 1]
            .iter()
            .all(|l| matches!(l, Line::Change { ts, diff: 1, .. } if *ts == t))
    );
    let keys: Vec<String> = snapshot
        .iter()
        .filter_map(|l| match l {
            Line::Change { key, .. } => Some(key.to_string()),
            _ => None,
        })
        .collect();
    let distinct: BTreeSet<&String> = keys.iter().collect();
    assert_eq!(distinct.len(), keys.len(), "each key once");
    let mut map = BTreeMap::new();
    apply(&mut map, &snapshot);
    assert_eq!(map, docs_at_t, "the documents as they were at {t}");
    let rest = read_until(&mut past, applied).await;
    assert_eq!(changes(&rest), changes(&later));
    apply(&mut map, &rest);
    assert_eq!(map, documents(&pipeline, "t_json"));

    // as_of the current position: nothing to replay.
    let mut now = subscribe::subscribe(&pipeline, "t_json", opts(false, Some(applied)))
        .await
        .unwrap();
    assert_eq!(next(&mut now).await, Some(Line::Progress(applied)));
    running.stop().await;
}

/// `as_of` a position before APPLY REPLACEMENT: the interface's feed goes
/// on through the swap, so the changes after it are the old table's, the
/// swap's (exactly the keys whose documents differ), and the new table's,
/// as a live subscriber received them; with a snapshot, the documents as
/// they were before the swap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_of_before_a_swap() {
    let (env, up, pipeline) = setup("sub_as_of_swap", 30, None).await;
    let running = Running::start(pipeline.clone());
    wait_all_running(&pipeline, CONVERGE).await;
    let mut live = subscribe::subscribe(&pipeline, "t_json", opts(false, None))
        .await
        .unwrap();
    up.batch_execute("UPDATE t SET n = 1 WHERE id <= 3")
        .await
        .unwrap();
    let applied = converged(&up, &pipeline, "t").await;
    let Some(Line::Progress(t)) = read_until(&mut live, applied).await.pop() else {
        unreachable!()
    };
    let docs_at_t = documents(&pipeline, "t_json");

    up.batch_execute("UPDATE t SET n = 2 WHERE id = 4")
        .await
        .unwrap();
    converged(&up, &pipeline, "t").await;
    // A version without `note`: 20 of the 30 rows have one.
    pipeline
        .create_table(&TableSpec {
            name: "t_v2".into(),
            source: env.source.clone(),
            schema: "public".into(),
            table: "t".into(),
            exclude: vec!["note".into()],
            ..TableSpec::default()
        })
        .await
        .unwrap();
    pipeline
        .create_replacement("t_json_v2", "t_json", "t_v2")
        .unwrap();
    wait_state(&pipeline, "t_v2", TableState::Running, CONVERGE).await;
    pipeline
        .apply_replacement("t_json", "t_json_v2", Duration::from_secs(30))
        .await
        .unwrap();
    up.batch_execute("UPDATE t SET n = 3 WHERE id = 5")
        .await
        .unwrap();
    wait_until("the change after the swap", CONVERGE, async || {
        documents(&pipeline, "t_json")
            .get(r#"{"id":5}"#)
            .is_some_and(|d| d["n"] == 3)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let applied = pipeline.sources().unwrap()[0].applied_lsn;
    let later = read_until(&mut live, applied).await;
    // 1 + 1 changes of one row each (-1 and +1), the swap's 20 keys, and
    // the change after it.
    assert_eq!(changes(&later).len(), 2 + 2 * 20 + 2, "{later:?}");

    let mut replay = subscribe::subscribe(&pipeline, "t_json", opts(false, Some(t)))
        .await
        .unwrap();
    let replayed = read_until(&mut replay, applied).await;
    assert_eq!(changes(&replayed), changes(&later));

    let mut past = subscribe::subscribe(&pipeline, "t_json", opts(true, Some(t)))
        .await
        .unwrap();
    let snapshot = read_until(&mut past, t).await;
    let mut map = BTreeMap::new();
    apply(&mut map, &snapshot);
    assert_eq!(map, docs_at_t, "the documents as they were at {t}");
    apply(&mut map, &read_until(&mut past, applied).await);
    assert_eq!(map, documents(&pipeline, "t_json"));
    running.stop().await;
}

/// With `retain_history = 0s` and a sink that has committed everything,
/// the feed is pruned: an older `as_of` is refused naming the horizon,
/// the horizon itself works, and an `as_of` ahead of the pipeline is
/// refused. The admin API answers the same with 404 and 400, and streams
/// lines; a dropped interface ends its subscriptions with an error line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_of_out_of_range_is_refused() {
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    let (env, up, pipeline) = setup("sub_horizon", 20, Some(Duration::ZERO)).await;
    let sink = connect(&env.sink.url).await;
    let running = Running::start(pipeline.clone());
    wait_all_running(&pipeline, CONVERGE).await;
    // A tick records where the feed starts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut live = subscribe::subscribe(&pipeline, "t_json", opts(false, None))
        .await
        .unwrap();
    let Some(Line::Progress(before)) = next(&mut live).await else {
        panic!("a progress line first");
    };
    up.batch_execute("UPDATE t SET n = n + 1; INSERT INTO t (id) VALUES (500);")
        .await
        .unwrap();
    wait_equal(&up, &sink, "t", "t_json", CONVERGE).await;
    let applied = converged(&up, &pipeline, "t").await;
    read_until(&mut live, applied).await;

    // The feed is pruned within a few ticks.
    let mut horizon = None;
    wait_until(
        &format!("the feed to be pruned past {before}"),
        CONVERGE,
        async || match subscribe::subscribe(&pipeline, "t_json", opts(false, Some(before))).await {
            Err(SubscribeError::TooOld {
                as_of, horizon: h, ..
            }) => {
                assert_eq!(as_of, before);
                horizon = Some(h);
                true
            }
            Err(e) => panic!("{e}"),
            Ok(_) => false,
        },
    )
    .await;
    let horizon = horizon.unwrap();
    assert!(
        horizon > before && horizon <= applied,
        "{before} < {horizon} <= {applied}"
    );
    let store = evolve_pipeline::store::Store::open(&env.state).unwrap();
    let id = pipeline.interfaces().unwrap()[0].id;
    assert_eq!(store.feed_horizon(id).unwrap(), Some(horizon));
    assert!(
        store
            .feed(id, Position::ZERO, applied, 1000)
            .unwrap()
            .is_empty(),
        "everything the sink has is pruned"
    );
    drop(store);
    let e = subscribe::subscribe(&pipeline, "t_json", opts(true, Some(before)))
        .await
        .unwrap_err();
    assert!(e.primary().contains(&horizon.to_string()), "{e}");
    let hint = e.hint().unwrap();
    assert!(
        hint.contains("--snapshot") && hint.contains("retain_history"),
        "{hint}"
    );
    assert_eq!(e.code(), "22023");
    // From the horizon on, it works.
    let mut at_horizon = subscribe::subscribe(&pipeline, "t_json", opts(true, Some(horizon)))
        .await
        .unwrap();
    let mut map = BTreeMap::new();
    apply(&mut map, &read_until(&mut at_horizon, applied).await);
    assert_eq!(map, documents(&pipeline, "t_json"));

    // Ahead of the pipeline.
    let ahead = Position::from_u64(applied.as_u64() + (1 << 32));
    match subscribe::subscribe(&pipeline, "t_json", opts(false, Some(ahead))).await {
        Err(e @ SubscribeError::Ahead { .. }) => {
            assert!(e.primary().contains(&ahead.to_string()), "{e}");
            assert_eq!(e.code(), "22023");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("as_of {ahead} ahead of {applied} was accepted"),
    }
    // No such interface.
    match subscribe::subscribe(&pipeline, "nope", opts(false, None)).await {
        Err(e) => assert_eq!(e.primary(), "materialized view \"nope\" does not exist"),
        Ok(_) => panic!("subscribed to nothing"),
    }

    // The admin API.
    let app = evolve_pipeline::admin::router(pipeline.clone());
    let get = |uri: String| {
        let app = app.clone();
        async move {
            let response = app
                .oneshot(
                    axum::http::Request::get(uri)
                        .body(axum::body::Body::empty())
                        .unwrap(),
                )
                .await
                .unwrap();
            let status = response.status();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (status, serde_json::from_slice::<Value>(&body).unwrap())
        }
    };
    let (status, body) = get("/subscribe/nope".into()).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "42704", "{body}");
    let (status, body) = get(format!("/subscribe/t_json?as_of={before}")).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "22023", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&horizon.to_string())
    );
    assert!(
        body["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("retain_history")
    );
    let (status, body) = get(format!("/subscribe/t_json?as_of={ahead}&snapshot=true")).await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("ahead"),
        "{body}"
    );
    let (status, body) = get("/subscribe/t_json?as_of=yesterday".into()).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "22P02", "{body}");
    let (status, body) = get("/subscribe/t_json?snapshot=maybe".into()).await;
    assert_eq!(
        (status.as_u16(), body["error"]["code"].as_str()),
        (400, Some("22023"))
    );
    let (status, body) = get("/subscribe/t_json?asof=0/0".into()).await;
    assert_eq!(status, 400, "{body}");

    let response = app
        .clone()
        .oneshot(
            axum::http::Request::get("/subscribe/t_json?snapshot=true")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let mut body = response.into_body();
    let mut text = Vec::new();
    while !text.ends_with(b"\n") || !text.windows(10).any(|w| w == b"\"progress\"") {
        let frame = tokio::time::timeout(Duration::from_secs(30), body.frame())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.extend_from_slice(frame.data_ref().unwrap());
    }
    let lines: Vec<Line> = text.split_inclusive(|b| *b == b'\n').map(parse).collect();
    assert_eq!(changes(&lines).len(), 21, "{lines:?}");
    assert!(matches!(lines.last(), Some(Line::Progress(ts)) if *ts >= applied));
    drop(body);

    // Dropping the interface ends its subscriptions.
    pipeline.drop_sink("t_sink").await.unwrap();
    pipeline.drop_interface("t_json").unwrap();
    match next(&mut live).await {
        Some(Line::Error { code, message, .. }) => {
            assert_eq!(code, "42704");
            assert_eq!(message, "materialized view \"t_json\" was dropped");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(next(&mut live).await, None);
    running.stop().await;
}

/// A subscriber that never reads is cut off once it is more than the
/// bus's capacity behind and has taken nothing for `READER_STUCK`, while
/// the sink keeps committing and a reading subscriber keeps receiving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_does_not_read_is_cut_off() {
    let (env, up, pipeline) = setup("sub_slow", 10, None).await;
    let sink = connect(&env.sink.url).await;
    let running = Running::start(pipeline.clone());
    wait_all_running(&pipeline, CONVERGE).await;
    let mut slow = subscribe::subscribe(&pipeline, "t_json", opts(false, None))
        .await
        .unwrap();
    let mut fast = subscribe::subscribe(&pipeline, "t_json", opts(true, None))
        .await
        .unwrap();
    let reader = tokio::spawn(async move {
        let mut lines = Vec::new();
        loop {
            let line = next(&mut fast).await.expect("the fast one goes on");
            let end = matches!(
                &line,
                Line::Change { key, diff: 1, .. } if key["id"] == 999_999
            );
            lines.push(line);
            if end {
                // And its transaction's progress line.
                lines.push(next(&mut fast).await.unwrap());
                return (fast, lines);
            }
        }
    });
    let transactions = subscribe_capacity() + 300;
    let mut script = String::new();
    for i in 0..transactions {
        script.push_str(&format!(
            "BEGIN; UPDATE t SET n = n + 1 WHERE id = {}; COMMIT;\n",
            i % 10 + 1
        ));
    }
    script.push_str("INSERT INTO t (id) VALUES (999999);");
    up.batch_execute(&script).await.unwrap();

    // The sink keeps up, and so does the reading subscriber.
    wait_equal(&up, &sink, "t", "t_json", CONVERGE).await;
    let (_fast, lines) = tokio::time::timeout(CONVERGE, reader)
        .await
        .expect("the reading subscriber received everything")
        .unwrap();
    assert_eq!(
        changes(&lines).len(),
        10 + 2 * transactions + 1,
        "the snapshot, -1 and +1 per update, the insert"
    );
    let mut map = BTreeMap::new();
    apply(&mut map, &lines);
    assert_eq!(map, documents(&pipeline, "t_json"));

    // The one that never read, left behind for longer than a reader may
    // take nothing: what was buffered, then the error, then the end.
    tokio::time::sleep(subscribe::READER_STUCK + Duration::from_secs(2)).await;
    let mut received = Vec::new();
    let error = loop {
        match next(&mut slow).await {
            Some(Line::Error {
                code,
                message,
                hint,
            }) => break (code, message, hint),
            Some(line) => received.push(line),
            None => panic!("ended without an error line"),
        }
    };
    assert_eq!(next(&mut slow).await, None, "the error line is the last");
    assert_eq!(error.0, subscribe::FELL_BEHIND);
    let behind: usize = error
        .1
        .strip_prefix("subscriber fell behind by ")
        .and_then(|m| m.strip_suffix(" transactions and was cut off"))
        .unwrap_or_else(|| panic!("{}", error.1))
        .parse()
        .unwrap();
    assert!(behind > subscribe_capacity(), "{behind}");
    assert!(
        received.len() <= subscribe::LINES_BUFFERED + 3,
        "{}",
        received.len()
    );
    let last_progress = received
        .iter()
        .rev()
        .find_map(|l| match l {
            Line::Progress(ts) => Some(*ts),
            _ => None,
        })
        .unwrap();
    assert!(
        error.2.contains(&format!("--as-of {last_progress}")),
        "the hint names the last progress position: {}",
        error.2
    );
    running.stop().await;
}

/// A subscriber more than the bus's capacity behind while it still reads
/// (a snapshot of a busy view taken slowly, a reader that paused for a
/// moment) is not cut off: once it took what it was sending it reads what
/// it missed from the change feed and follows on, each change exactly
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_pauses_catches_up_from_the_feed() {
    let (_env, up, pipeline) = setup("sub_pause", 2000, None).await;
    let running = Running::start(pipeline.clone());
    wait_all_running(&pipeline, CONVERGE).await;
    let mut snap = subscribe::subscribe(&pipeline, "t_json", opts(true, None))
        .await
        .unwrap();
    let mut plain = subscribe::subscribe(&pipeline, "t_json", opts(false, None))
        .await
        .unwrap();
    // Both read slowly (a line each 10 ms) while the bus runs past them.
    let transactions = subscribe_capacity() + 300;
    let mut script = String::new();
    for i in 0..transactions {
        script.push_str(&format!(
            "BEGIN; UPDATE t SET n = n + 1 WHERE id = {}; COMMIT;\n",
            i % 2000 + 1
        ));
    }
    let writer = tokio::spawn(async move {
        up.batch_execute(&script).await.unwrap();
        up
    });
    let (mut snap_lines, mut plain_lines) = (Vec::new(), Vec::new());
    while !writer.is_finished() {
        snap_lines.push(next(&mut snap).await.unwrap());
        plain_lines.push(next(&mut plain).await.unwrap());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let up = writer.await.unwrap();
    let applied = converged(&up, &pipeline, "t").await;
    assert!(
        snap_lines.len() < 2000,
        "the bus ran past the snapshot while it was read ({} lines read)",
        snap_lines.len()
    );
    snap_lines.extend(read_until(&mut snap, applied).await);
    plain_lines.extend(read_until(&mut plain, applied).await);

    // The snapshot: every document once, then -1 and +1 per update.
    assert_eq!(changes(&snap_lines).len(), 2000 + 2 * transactions);
    let mut map = BTreeMap::new();
    apply(&mut map, &snap_lines);
    assert_eq!(map, documents(&pipeline, "t_json"));
    // The plain one: the updates, each once and in order.
    assert_eq!(changes(&plain_lines).len(), 2 * transactions);
    let ts: Vec<Position> = plain_lines.iter().filter_map(Line::ts).collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "in order");
    running.stop().await;
}

fn subscribe_capacity() -> usize {
    evolve_pipeline::bus::CAPACITY
}
