//! Test helper: runs one replica with the default resolvers until it
//! halts or is killed. The crash tests start it as a child process and
//! kill it with SIGKILL.
//!
//! Usage: `evolve-replicate-run [--copy] [--part-rows N] NAME UPSTREAM_URL NODE_URL SCHEMA.TABLE...`
//! (`--copy`: the tables are copied first, as for `COPY DATA = true`;
//! `--part-rows`: a transaction of that many rows goes in parts,
//! `Replica::part_rows`).

use std::process::ExitCode;

use evolve_core::conflict::Resolvers;
use evolve_replicate::{Replica, ReplicaSpec};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let copy = args.first().is_some_and(|a| a == "--copy");
    if copy {
        args.remove(0);
    }
    let mut part_rows = None;
    if args.first().is_some_and(|a| a == "--part-rows") {
        part_rows = args.get(1).and_then(|n| n.parse::<usize>().ok());
        if part_rows.is_none() {
            eprintln!("--part-rows takes a number of rows");
            return ExitCode::from(2);
        }
        args.drain(..2);
    }
    let [name, upstream, node, tables @ ..] = args.as_slice() else {
        eprintln!(
            "usage: evolve-replicate-run [--copy] [--part-rows N] NAME UPSTREAM_URL NODE_URL SCHEMA.TABLE..."
        );
        return ExitCode::from(2);
    };
    let tables = tables
        .iter()
        .map(|t| match t.split_once('.') {
            Some((s, t)) => (s.to_string(), t.to_string()),
            None => ("public".to_string(), t.clone()),
        })
        .collect();
    let mut replica = Replica::new(ReplicaSpec {
        name: name.clone(),
        upstream: upstream.clone(),
        upstream_connection: "upstream".into(),
        node: node.clone(),
        tables,
        resolvers: Resolvers::default(),
        transforms: Vec::new(),
    })
    .copying(copy);
    if let Some(rows) = part_rows {
        replica = replica.part_rows(rows);
    }
    // Never told to stop: it runs until it halts or is killed.
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    match replica.run(stop_rx).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
