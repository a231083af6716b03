//! The Debezium baseline: `debezium/` of this crate, a Java program that
//! runs Debezium's PostgreSQL connector in the embedded engine on a slot
//! and publication the benchmark made before the load, and counts and
//! discards its JSON change events until the marker row (run by
//! [`evolve_bench::debezium`]).

use std::path::Path;

pub use evolve_bench::debezium::{Baseline, Drained};
use evolve_bench::debezium::{Program, run};

use super::Result;

/// The program.
pub const PROGRAM: Program = Program {
    name: "debezium",
    main: "evolve.bench.DebeziumDrain",
    bench: "pipeline",
};

/// Where the engine reads from.
pub struct Target<'a> {
    pub port: u16,
    pub database: &'a str,
    pub slot: &'a str,
    pub publication: &'a str,
    pub table: &'a str,
}

/// Runs the program on `target` until it has consumed the marker.
pub async fn drain(dir: &Path, target: &Target<'_>) -> Result<Drained> {
    let args = [
        "--host",
        "127.0.0.1",
        "--user",
        "postgres",
        "--port",
        &target.port.to_string(),
        "--dbname",
        target.database,
        "--slot",
        target.slot,
        "--publication",
        target.publication,
        "--table",
        target.table,
    ];
    run(&PROGRAM, dir, args.iter().map(|a| a.to_string()).collect()).await
}
