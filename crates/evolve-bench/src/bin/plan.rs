//! `cargo xtask bench plan [STATEMENTS] [TABLES]`: `evolve plan` over
//! STATEMENTS (default 1,000) pending statements in 100 files against a
//! catalog of TABLES (default 10,000) tables, on a throwaway cluster. The
//! statements mix every kind the plan decides from the catalog (type
//! changes, defaults, SET NOT NULL, checks, foreign keys, indexes), and
//! one in ten type changes hits a column a view reads, so the rebuild
//! capture runs too. Prints the median of 3 runs of the library call and
//! the median of 3 runs of the `evolve plan` binary as a user types it (the
//! same input; process start, connection and JSON output included), both
//! against the goal (under 2 s). The binary is `$EVOLVE_BIN`, else the
//! `evolve` of this benchmark's target directory, built first (`cargo build
//! -p evolve`, same profile) when the benchmark runs under cargo so that it
//! is never stale.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use evolve_bench::fmt;
use evolve_migrate::Options;

const GOAL: Duration = Duration::from_secs(2);

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn statement(i: usize, tables: usize) -> String {
    let t = (i * 7919) % tables;
    match i % 10 {
        0 => format!("ALTER TABLE t{t} ALTER COLUMN v TYPE varchar(40)"),
        1 => format!("ALTER TABLE t{t} ALTER COLUMN c TYPE bigint"),
        2 => format!("ALTER TABLE t{t} ADD COLUMN r{i} float8 DEFAULT random()"),
        3 => format!("ALTER TABLE t{t} ADD COLUMN k{i} int NOT NULL DEFAULT 0"),
        4 => format!("ALTER TABLE t{t} ALTER COLUMN c SET NOT NULL"),
        5 => format!("ALTER TABLE t{t} ADD CONSTRAINT t{t}_chk{i} CHECK (c > 0) NOT VALID"),
        6 => format!("CREATE INDEX t{t}_c{i} ON t{t} (c)"),
        7 => format!("ALTER TABLE t{t} ALTER COLUMN n TYPE numeric(14, 2)"),
        8 => format!(
            "ALTER TABLE t{t} ADD CONSTRAINT t{t}_fk{i} FOREIGN KEY (c) REFERENCES t0 (id) NOT VALID"
        ),
        _ => format!("ALTER TABLE t{t} ALTER COLUMN v SET DEFAULT 'x'"),
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1000);
    let tables: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(10_000);
    let cluster = evolve_test::Cluster::start()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let db = rt.block_on(cluster.create_database("bench_plan"))?;
    let started = Instant::now();
    rt.block_on(async {
        let client = evolve_pg::connect(&db.url, "evolve bench").await?;
        client
            .batch_execute(&format!(
                "DO $$ BEGIN
                   FOR i IN 0..{} LOOP
                     EXECUTE format('CREATE TABLE t%s (id int PRIMARY KEY, v varchar(20), c int, n numeric(10, 2))', i);
                   END LOOP;
                 END $$;
                 INSERT INTO t0 SELECT g, 'v', g, g FROM generate_series(1, 1000) g;",
                tables - 1
            ))
            .await?;
        // Views on the columns one in ten type changes alter.
        for i in (1..n).step_by(100) {
            let t = (i * 7919) % tables;
            client
                .batch_execute(&format!(
                    "CREATE OR REPLACE VIEW v{t} AS SELECT id, c FROM t{t}"
                ))
                .await?;
        }
        client.batch_execute("ANALYZE").await?;
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    eprintln!(
        "catalog of {tables} tables built in {}",
        fmt(started.elapsed())
    );
    let dir = std::env::temp_dir().join(format!("evolve-bench-plan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let per_file = n.div_ceil(100);
    let mut written = 0;
    for f in 0..100 {
        let mut text = String::new();
        for _ in 0..per_file {
            if written == n {
                break;
            }
            text.push_str(&statement(written, tables));
            text.push_str(";\n");
            written += 1;
        }
        if !text.is_empty() {
            std::fs::write(dir.join(format!("V{}__step.sql", f + 1)), text)?;
        }
    }
    let opts = Options::new(db.url.clone(), &dir);
    let mut times = Vec::new();
    let mut planned = 0;
    for _ in 0..3 {
        let t = Instant::now();
        let plan = rt.block_on(evolve_migrate::lock_plan(&opts, &[], false))?;
        times.push(t.elapsed());
        planned = plan.statements.len();
        let rebuilds: usize = plan.statements.iter().map(|s| s.rebuilds.len()).sum();
        let rewrites = plan.statements.iter().filter(|s| s.rewrites).count();
        eprintln!(
            "  run: {} ({planned} statements, {rewrites} rewrites, {rebuilds} dependents to rebuild)",
            fmt(*times.last().unwrap_or(&Duration::ZERO))
        );
    }
    times.sort();
    let median = times[1];
    // The binary, as a user types it, on the same files.
    let bin = evolve_binary()?;
    let mut cli_times = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let out = Command::new(&bin)
            .args([
                "plan",
                "--format",
                "json",
                "--database-url",
                &db.url,
                "--dir",
            ])
            .arg(&dir)
            .env_remove("DATABASE_URL")
            .output()?;
        cli_times.push(t.elapsed());
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
        }
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let got = doc["statements"].as_array().map_or(0, Vec::len);
        if got != planned {
            return Err(
                format!("the binary planned {got} statements, the library {planned}").into(),
            );
        }
        eprintln!(
            "  binary run: {}",
            fmt(*cli_times.last().unwrap_or(&Duration::ZERO))
        );
    }
    cli_times.sort();
    let cli = cli_times[1];
    let verdict = |t: Duration| if t < GOAL { "met" } else { "MISSED" };
    println!("evolve plan: {planned} pending statements in 100 files, catalog of {tables} tables");
    println!(
        "  {:<48} {}   goal: under {}   {}",
        "library call, median of 3:",
        fmt(median),
        fmt(GOAL),
        verdict(median)
    );
    println!(
        "  {:<48} {}   goal: under {}   {}",
        "evolve plan --format json (binary), median of 3:",
        fmt(cli),
        fmt(GOAL),
        verdict(cli)
    );
    println!(
        "  binary over library: {} ({})",
        fmt(cli.saturating_sub(median)),
        bin.display()
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The `evolve` binary to time: `$EVOLVE_BIN`, else the one of this
/// benchmark's target directory and profile, (re)built first when the
/// benchmark runs under cargo.
fn evolve_binary() -> Result<PathBuf, Box<dyn std::error::Error>> {
    if let Some(b) = std::env::var_os("EVOLVE_BIN") {
        return Ok(PathBuf::from(b));
    }
    let exe = std::env::current_exe()?;
    let dir = exe.parent().ok_or("the benchmark has no directory")?;
    let bin = dir.join(format!("evolve{}", std::env::consts::EXE_SUFFIX));
    if let Some(cargo) = std::env::var_os("CARGO") {
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "evolve", "--bin", "evolve"]);
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        eprintln!("building the evolve binary to time it ...");
        let status = cmd.stdout(Stdio::null()).status()?;
        if !status.success() {
            return Err("cargo build -p evolve failed".into());
        }
    }
    if !bin.is_file() {
        return Err(format!(
            "no evolve binary at {}: build it (cargo build --release -p evolve) or set EVOLVE_BIN",
            bin.display()
        )
        .into());
    }
    Ok(bin)
}
