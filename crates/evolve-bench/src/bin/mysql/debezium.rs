//! The Debezium baseline: `debezium-mysql/` of this crate, a Java program
//! that runs Debezium's MySQL connector in the embedded engine from the
//! binlog file and position every consumer starts at (taken before the
//! load; handed to the engine as a stored offset, the tables' schemas read
//! with `snapshot.mode=recovery`, the schema history in memory; MariaDB's
//! lack of `SHOW BINARY LOG STATUS` papered over as the crate's docs of
//! the `mysql` benchmark say), and counts
//! and discards its JSON change events until the marker row (run by
//! [`evolve_bench::debezium`]).

use std::path::Path;

pub use evolve_bench::debezium::{Baseline, Drained};
use evolve_bench::debezium::{Program, run};

use super::Result;

/// The program.
pub const PROGRAM: Program = Program {
    name: "debezium-mysql",
    main: "evolve.bench.DebeziumMysqlDrain",
    bench: "mysql",
};

/// Where the engine reads from.
pub struct Target<'a> {
    pub port: u16,
    pub database: &'a str,
    /// `database.table`.
    pub table: &'a str,
    /// The binlog file and position to start at.
    pub file: &'a str,
    pub pos: u64,
}

/// Runs the program on `target` until it has consumed the marker (from an
/// offset file it writes first, removed after).
pub async fn drain(dir: &Path, target: &Target<'_>) -> Result<Drained> {
    let offsets = std::env::temp_dir().join(format!(
        "evolve-bench-debezium-mysql-{}.offsets",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&offsets);
    let args = [
        "--host",
        "127.0.0.1",
        "--user",
        "evolve",
        "--password",
        "evolve",
        "--port",
        &target.port.to_string(),
        "--database",
        target.database,
        "--table",
        target.table,
        "--file",
        target.file,
        "--pos",
        &target.pos.to_string(),
        "--offsets",
        &offsets.display().to_string(),
    ];
    let drained = run(&PROGRAM, dir, args.iter().map(|a| a.to_string()).collect()).await;
    let _ = std::fs::remove_file(&offsets);
    drained
}
