//! What the replica tests share: connections, reads of the node, and
//! running a replica until it has everything the upstream wrote.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use evolve_replicate::{Replica, ReplicateError};
use tokio::sync::watch;
use tokio_postgres::Client;

pub async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// The rows of `sql`, each in its record text form.
pub async fn rows(client: &Client, sql: &str) -> Vec<String> {
    client
        .query(&format!("SELECT t::text FROM ({sql}) t"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A transaction of its own upstream; its position. The upstream's
/// current position may move on with other databases' WAL, which a
/// replica never sees, so tests wait for this one.
pub async fn tick(up: &Client) -> String {
    up.query_one(
        "SELECT pg_logical_emit_message(true, 'test', 'tick')::text",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// Whether replica `name`'s position on the node is past `lsn`.
pub async fn caught_up(node: &Client, name: &str, lsn: &str) -> bool {
    node.query_opt(
        "SELECT 1 FROM evolve_replica_progress WHERE replica = $1 AND lsn > $2::text::pg_lsn",
        &[&name, &lsn],
    )
    .await
    .ok()
    .flatten()
    .is_some()
}

/// A replica task running until the returned sender says stop.
pub fn start(
    replica: Arc<Replica>,
) -> (
    watch::Sender<bool>,
    tokio::task::JoinHandle<Result<(), ReplicateError>>,
) {
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(async move { replica.run(stop_rx).await });
    (stop, task)
}

/// Runs `replica` until the node has every upstream transaction so far
/// (then stops it), or until it halts: the halt.
pub async fn run(
    replica: Arc<Replica>,
    up: &Client,
    node: &Client,
    name: &str,
) -> Option<ReplicateError> {
    let target = tick(up).await;
    let (stop, task) = start(replica.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if task.is_finished() {
            return task.await.unwrap().err();
        }
        if caught_up(node, name, &target).await {
            stop.send(true).unwrap();
            task.await.unwrap().unwrap();
            return None;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "replica {name} did not reach {target}: {:?}",
            replica.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// [`run`], which must not halt.
pub async fn run_until_caught_up(replica: Arc<Replica>, up: &Client, node: &Client, name: &str) {
    if let Some(e) = run(replica.clone(), up, node, name).await {
        panic!("replica {name} halted: {e}");
    }
}

/// The conflict history on the node, counted by (type, resolution).
pub async fn history(node: &Client, name: &str) -> BTreeMap<(String, String), i64> {
    node.query(
        "SELECT conflict_type, resolution, count(*) FROM evolve_conflict_history
         WHERE replica = $1 GROUP BY 1, 2",
        &[&name],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| ((r.get(0), r.get(1)), r.get(2)))
    .collect()
}

pub fn key(conflict: &str, resolution: &str) -> (String, String) {
    (conflict.to_string(), resolution.to_string())
}
