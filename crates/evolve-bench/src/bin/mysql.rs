//! `cargo xtask bench mysql [CHANGES] [--no-debezium]`: evolve's MySQL
//! source (on MariaDB) into the PostgreSQL sink, against MariaDB's own
//! binlog reader and Debezium's MySQL connector, on one throwaway MariaDB
//! server (the `evolve-test` harness's row binlog settings, plus a 1 GB
//! buffer pool, a 512 MB redo log and the server's time zone at UTC) and
//! one PostgreSQL cluster (the sink).
//!
//! Debezium's MySQL connector stops on a MariaDB 10.x or later: it asks
//! for MySQL 8.4's `SHOW BINARY LOG STATUS`, which MariaDB does not have,
//! then reads `SELECT VERSION()` as a MySQL version, takes 10.11 for later
//! than 8.4 and gives up. (Debezium's own MariaDB connector,
//! `debezium-connector-mariadb`, is not on the Maven repository this
//! builds from.) The program gives the connector's JDBC sessions a
//! Connector/J query interceptor that answers that one statement with
//! `SHOW MASTER STATUS` (installed through `driver.propertiesTransform`:
//! the connector drops a `queryInterceptors` it is given); the binlog
//! stream, which does not go through JDBC, is untouched. `--no-debezium`
//! skips Debezium.
//!
//! Stream: CHANGES (default 1,000,000) row changes, inserts and updates in
//! transactions of 1, 10, 100 and 1000 rows (the pipeline benchmark's fixed
//! shuffled mix, [`MIX`](evolve_bench::stream::MIX), ~42% updates), are
//! loaded by a stored procedure into `bench_t` (BIGINT key, TEXT,
//! DECIMAL(12,2), TIMESTAMP, BOOL, a small JSON, nullable TEXT: the
//! pipeline benchmark's columns in MariaDB's types), then a marker row (id
//! 0) in a transaction of its own. Every consumer drains the same binlog,
//! from the position taken just before the load, one after the other:
//!
//! - evolve: source (its binlog position), table, interface and sink
//!   created and the (empty) snapshot done before the load, the pipeline
//!   stopped; then restarted and timed until the marker row is in the sink
//!   table, whose row count is then checked against MariaDB's;
//! - `mariadb-binlog` (`mysqlbinlog` on older installs), the server's own
//!   binlog reader, as a replica reads: `--read-from-remote-server
//!   --to-last-log --start-position=<the position> <its file>`, decoding
//!   the row events to pseudo-SQL (`--base64-output=DECODE-ROWS
//!   --verbose`), its output to /dev/null: the decoding ceiling. It stops at
//!   the end of the last binlog, the marker's transaction (nothing else
//!   writes);
//! - Debezium: its MySQL connector in the embedded engine (the Java program
//!   in `debezium-mysql/`, see [`debezium`]) from the same file and
//!   position, JSON change events counted and discarded, timed from
//!   `java`'s start until it has consumed the marker (and, as it reports,
//!   from the engine's construction, JVM start-up excluded). Without `java`
//!   or the built program it is skipped, said loudly, and the rest runs.
//!
//! Snapshot: `snap_full`, a table of CHANGES rows (loaded before the source
//! exists, so no consumer reads its binlog), snapshotted by evolve into the
//! sink (timed from the pipeline's start to the sink's progress row,
//! written with the initial load), against the `mariadb` client's
//! `--batch --raw --quick` output of `SELECT JSON_OBJECT('id', id),
//! JSON_OBJECT(<every column>) FROM snap_full` (the documents evolve's
//! sink holds: NULL columns left out, the TIMESTAMP in PostgreSQL's JSON
//! form, the JSON column as JSON) piped by `bash` (`pipefail`) into
//! `psql -c "COPY ... FROM STDIN"` on the sink, into a table of the same
//! (key jsonb, data jsonb) shape; the two tables' documents are compared
//! after, and must be equal. The process's peak resident memory during
//! evolve's snapshot (VmHWM, reset through `/proc/self/clear_refs`) is
//! printed.
//!
//! Any wrong count (the sink's rows against MariaDB's, Debezium's events
//! against CHANGES + 1, the baseline's rows) ends the run with an error
//! and a non-zero exit.
//!
//! To tell where evolve's time goes it also prints when its source had
//! applied everything to the store (the sink's share is the rest) and the
//! process's CPU time. With `TMPDIR=/dev/shm` the store and both servers
//! live on tmpfs.

#[path = "mysql/debezium.rs"]
mod debezium;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evolve_bench::stream::{TIMEOUT, connect, count, per_second};
use evolve_bench::{Running, cpu_since, cpu_time, fmt, mib, proc_status, ratio};
use evolve_pipeline::{Config, Pipeline, TableSpec};
use evolve_test::{MariaDb, MariaDbOptions};
use tokio_postgres::Client;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

/// The Debezium version `debezium-mysql/pom.xml` pins.
const DEBEZIUM_VERSION: &str = "3.6.1.Final";

/// `bench_t`'s columns: the pipeline benchmark's in MariaDB's types. The
/// TIMESTAMP's constant default keeps MariaDB from giving it `ON UPDATE
/// CURRENT_TIMESTAMP`.
const COLUMNS: &str = "id BIGINT PRIMARY KEY, name TEXT NOT NULL, amount DECIMAL(12,2) NOT NULL, \
     created_at TIMESTAMP NOT NULL DEFAULT '2026-01-01 00:00:00', active BOOL NOT NULL, \
     attrs JSON, note TEXT";

/// The row of id `g` (an SQL expression over `g`), as the pipeline
/// benchmark's.
const ROW: &str = "g, CONCAT('customer ', g), (g MOD 100000) / 100.0, \
     TIMESTAMP '2026-01-01 00:00:00' + INTERVAL g SECOND, g MOD 3 <> 0, \
     JSON_OBJECT('tier', g MOD 5, 'tags', JSON_ARRAY('a', 'b')), \
     CASE WHEN g MOD 4 = 0 THEN NULL ELSE CONCAT('note ', g) END";

/// `bench_load(sizes, total)`: the pipeline benchmark's load procedure in
/// MariaDB's SQL (`sizes` a JSON array), one transaction per size, rows
/// from `nums` (1 to 1000); `ROW_EXPR` is replaced by [`ROW`].
const LOAD_PROCEDURE: &str = "
CREATE PROCEDURE bench_load(sizes TEXT, total BIGINT)
BEGIN
    DECLARE done BIGINT DEFAULT 0;
    DECLARE next_id BIGINT DEFAULT 1;
    DECLARE i BIGINT DEFAULT 0;
    DECLARE len INT DEFAULT JSON_LENGTH(sizes);
    DECLARE planned INT;
    DECLARE s BIGINT;
    DECLARE a BIGINT;
    WHILE done < total DO
        SET planned = CAST(JSON_VALUE(sizes, CONCAT('$[', i MOD len, ']')) AS SIGNED);
        SET s = LEAST(ABS(planned), total - done);
        START TRANSACTION;
        IF planned < 0 AND next_id - 1 >= s THEN
            SET a = 1 + (i * 7919) MOD (next_id - s);
            UPDATE bench_t SET amount = amount + 1, active = NOT active,
                               attrs = JSON_SET(attrs, '$.v', i)
             WHERE id BETWEEN a AND a + s - 1;
        ELSE
            INSERT INTO bench_t
            SELECT ROW_EXPR FROM (SELECT next_id + n - 1 AS g FROM nums WHERE n <= s) x;
            SET next_id = next_id + s;
        END IF;
        COMMIT;
        SET done = done + s;
        SET i = i + 1;
    END WHILE;
END";

fn main() {
    if let Err(e) = run() {
        match e
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(|e| e.as_db_error())
        {
            Some(db) => eprintln!("error: {}", evolve_pg::describe_db_error(db, None)),
            None => eprintln!("error: {e}"),
        }
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let mut changes: i64 = 1_000_000;
    let mut debezium = true;
    for arg in std::env::args().skip(1) {
        match arg.parse() {
            _ if arg == "--no-debezium" => debezium = false,
            Ok(n) if !arg.starts_with('-') => changes = n,
            _ => {
                return Err(format!(
                    "unknown argument {arg}; usage: mysql [CHANGES] [--no-debezium]"
                )
                .into());
            }
        }
    }
    if changes < 10 {
        return Err("CHANGES must be at least 10".into());
    }
    let baseline = if debezium {
        debezium::Baseline::find(&debezium::PROGRAM)
    } else {
        debezium::Baseline::Skipped("--no-debezium".into())
    };
    let settings = [
        ("innodb_buffer_pool_size", "1G"),
        ("innodb_log_file_size", "512M"),
        ("default_time_zone", "+00:00"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let my = MariaDb::start_with(MariaDbOptions { settings })?;
    let sink = evolve_test::Cluster::start()?;
    // The runtime `evolve pipeline run` uses: multi-threaded, one worker
    // per core.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = rt.block_on(bench(&my, &sink, changes, baseline));
    if result.is_err() {
        eprintln!("MariaDB log:\n{}", my.log_tail(20));
        eprintln!("sink log:\n{}", sink.log_tail(20));
    }
    result
}

/// A binary of the MariaDB client tools: in `EVOLVE_MARIADB_BIN`, else
/// `/usr/bin`, `/usr/sbin` or on `PATH`; the first of `names` found.
fn tool(names: &[&str]) -> Result<PathBuf> {
    let dirs: Vec<PathBuf> = match std::env::var_os("EVOLVE_MARIADB_BIN") {
        Some(dir) => vec![PathBuf::from(dir)],
        None => {
            let mut dirs = vec![PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")];
            if let Some(path) = std::env::var_os("PATH") {
                dirs.extend(std::env::split_paths(&path));
            }
            dirs
        }
    };
    names
        .iter()
        .flat_map(|name| dirs.iter().map(move |d| d.join(name)))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("none of {names:?} found (install mariadb-client)").into())
}

/// The `mariadb` client on one database, over TCP as the harness's
/// `evolve` user.
#[derive(Clone)]
struct My {
    client: PathBuf,
    port: u16,
    database: String,
}

impl My {
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.client);
        cmd.arg("--no-defaults")
            .args(["--protocol=TCP", "--host=127.0.0.1"])
            .arg(format!("--port={}", self.port))
            .args(["--user=evolve", "--password=evolve"])
            .args(["--batch", "--skip-column-names"])
            .arg(&self.database);
        cmd
    }

    /// Runs `sql` (statements; `DELIMITER` works) fed on stdin; the output.
    fn sql(&self, sql: &str) -> Result<String> {
        let mut child = self
            .command()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .ok_or("no stdin")?
            .write_all(sql.as_bytes())?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(format!(
                "mariadb failed ({}) on `{}`: {}",
                out.status,
                sql.chars().take(200).collect::<String>(),
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// One number of a query's output.
    fn number(&self, sql: &str) -> Result<i64> {
        Ok(self.sql(sql)?.trim().parse()?)
    }

    /// The server's GTID state as evolve's MySQL source orders positions
    /// (`2^62` plus the sum of the sequence numbers of
    /// `@@gtid_binlog_pos`, one per replication domain).
    fn gtid_position(&self) -> Result<u64> {
        let state = self.sql("SELECT @@gtid_binlog_pos")?;
        let mut count = 0u64;
        for gtid in state.trim().split(',').filter(|g| !g.is_empty()) {
            let seq = gtid
                .rsplit('-')
                .next()
                .and_then(|n| n.trim().parse::<u64>().ok())
                .ok_or_else(|| format!("@@gtid_binlog_pos said {state:?}"))?;
            count += seq;
        }
        Ok((1 << 62) + count)
    }

    /// `SHOW MASTER STATUS`: the binlog's current file and position.
    fn binlog_end(&self) -> Result<Binlog> {
        let out = self.sql("SHOW MASTER STATUS")?;
        let mut fields = out.split('\t');
        let file = fields.next().unwrap_or("").trim().to_string();
        let pos = fields
            .next()
            .ok_or_else(|| format!("SHOW MASTER STATUS said {out:?}"))?
            .trim()
            .parse()?;
        Ok(Binlog { file, pos })
    }

    /// The binlog's bytes from `from` to `to`, over `SHOW BINARY LOGS`.
    fn binlog_bytes(&self, from: &Binlog, to: &Binlog) -> Result<u64> {
        let mut total = 0;
        for line in self.sql("SHOW BINARY LOGS")?.lines() {
            let mut fields = line.split('\t');
            let (Some(file), Some(size)) = (fields.next(), fields.next()) else {
                continue;
            };
            if file >= from.file.as_str() && file < to.file.as_str() {
                total += size.trim().parse::<u64>()?;
            }
        }
        Ok((total + to.pos).saturating_sub(from.pos))
    }
}

/// A binlog file and position.
#[derive(Clone, Debug)]
struct Binlog {
    file: String,
    pos: u64,
}

impl std::fmt::Display for Binlog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.pos)
    }
}

/// Runs `f` on the blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await?
}

/// Polls `sql` (one bool) every 10 ms until it is true; the time it took,
/// and when `probe` first held (it is checked before `sql` each time).
async fn wait_until(
    client: &Client,
    sql: &str,
    started: Instant,
    what: &str,
    pipeline: &Pipeline,
    mut probe: impl FnMut(&Pipeline) -> bool,
) -> Result<(Duration, Option<Duration>)> {
    let mut probed = None;
    loop {
        if probed.is_none() && probe(pipeline) {
            probed = Some(started.elapsed());
        }
        if client.query_one(sql, &[]).await?.get::<_, bool>(0) {
            return Ok((started.elapsed(), probed));
        }
        if started.elapsed() > TIMEOUT {
            return Err(format!(
                "{what} did not finish within {TIMEOUT:?}: {:?}",
                pipeline.status()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn bench(
    server: &MariaDb,
    sink: &evolve_test::Cluster,
    n: i64,
    baseline: debezium::Baseline,
) -> Result<()> {
    if let debezium::Baseline::Skipped(why) = &baseline {
        eprintln!("!!! DEBEZIUM BASELINE SKIPPED: {why}");
    }
    let db = server.create_database("bench_mysql")?;
    let my = My {
        client: tool(&["mariadb", "mysql"])?,
        port: server.port(),
        database: db.name.clone(),
    };
    let binlog_tool = tool(&["mariadb-binlog", "mysqlbinlog"])?;
    let version = my.sql("SELECT VERSION()")?;
    let pg_version = Command::new(sink.bin("postgres"))
        .arg("--version")
        .output()?;
    println!(
        "mysql benchmark: {n} row changes, MariaDB {} (binlog_format=ROW, binlog_row_image=FULL, binlog_row_metadata=FULL, sync_binlog=0), sink {}, loopback, fsync=off",
        version.trim(),
        String::from_utf8_lossy(&pg_version.stdout).trim()
    );
    let sink_db = sink.create_database("mysql_sink").await?;
    let sinkc = connect(&sink_db.url).await?;

    // Tables, the load procedure and the snapshot's data, before the
    // source's position: no consumer reads them.
    let started = Instant::now();
    {
        let my = my.clone();
        blocking(move || {
            my.sql(&format!(
                "CREATE TABLE nums (n INT PRIMARY KEY);\n\
                 INSERT INTO nums SELECT seq FROM seq_1_to_1000;\n\
                 CREATE TABLE bench_t ({COLUMNS});\n\
                 CREATE TABLE snap_full ({COLUMNS});\n\
                 INSERT INTO snap_full SELECT {ROW} FROM (SELECT seq AS g FROM seq_1_to_{n}) x;\n\
                 DELIMITER //\n{} //\nDELIMITER ;\n",
                LOAD_PROCEDURE.replace("ROW_EXPR", ROW)
            ))
        })
        .await?;
    }
    eprintln!("snap_full: {n} rows loaded in {}", fmt(started.elapsed()));

    // evolve: source (its binlog position), table, interface, sink; the
    // empty snapshot and initial load; then stopped.
    let state = std::env::temp_dir().join(format!("evolve-bench-mysql-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    let config = Config::new(&state)
        .with_connection("my", db.url.clone())
        .with_connection("sink", sink_db.url.clone());
    let pipeline = Arc::new(Pipeline::open(config)?);
    let source = pipeline.create_mysql_source("bench", "my").await?;
    create_objects(&pipeline, &db.name, "bench_t").await?;
    let running = Running::start(&pipeline);
    wait_until(
        &sinkc,
        "SELECT EXISTS (SELECT 1 FROM public.evolve_sink_progress WHERE sink = 'bench_t_sink')",
        Instant::now(),
        "evolve's empty snapshot",
        &pipeline,
        |_| false,
    )
    .await?;
    running.stop().await?;

    // Where every consumer starts: evolve's source position is at or
    // before it (nothing writes to the binlog in between).
    let start = my.binlog_end()?;
    if source.applied_lsn.as_u64() > my.gtid_position()? {
        return Err(format!(
            "evolve's source starts after the binlog's end {start}: {}",
            source.applied_lsn.as_u64()
        )
        .into());
    }

    // The load, then the marker row in a transaction of its own.
    let sizes = evolve_bench::stream::mix();
    let (transactions, updates) = evolve_bench::stream::simulate(&sizes, n);
    let array: Vec<String> = sizes.iter().map(i32::to_string).collect();
    let started = Instant::now();
    {
        let my = my.clone();
        let call = format!("CALL bench_load('[{}]', {n})", array.join(","));
        blocking(move || my.sql(&call)).await?;
    }
    let took = started.elapsed();
    let before_marker = my.gtid_position()?;
    my.sql(&format!(
        "INSERT INTO bench_t SELECT {ROW} FROM (SELECT 0 AS g) x"
    ))?;
    let end = my.binlog_end()?;
    let rows = my.number("SELECT COUNT(*) FROM bench_t")?;
    if rows != n - updates + 1 {
        return Err(format!(
            "bench_t has {rows} rows; the load should have left {}",
            n - updates + 1
        )
        .into());
    }
    println!(
        "load: {n} row changes ({updates} updates) in {transactions} transactions + a marker row, {} ({} changes/s); {rows} rows; {:.0} MiB of binlog from {start} to {end}",
        fmt(took),
        per_second(n, took),
        my.binlog_bytes(&start, &end)? as f64 / 1048576.0
    );

    // (a) evolve, timed from the restart until the marker is in the sink.
    let cpu = cpu_time();
    let started = Instant::now();
    let running = Running::start(&pipeline);
    let marker_at = before_marker;
    let (evolve, applied_at) = wait_until(
        &sinkc,
        "SELECT EXISTS (SELECT 1 FROM public.bench_t_json WHERE key = '{\"id\": 0}'::jsonb)",
        started,
        "evolve",
        &pipeline,
        |p| {
            p.sources()
                .ok()
                .and_then(|s| s.first().map(|s| s.applied_lsn.as_u64() > marker_at))
                .unwrap_or(false)
        },
    )
    .await?;
    let evolve_cpu = cpu_since(cpu);
    running.stop().await?;
    let got = count(&sinkc, "public.bench_t_json").await?;
    if got != rows {
        return Err(format!("evolve's sink has {got} rows, MariaDB {rows}").into());
    }

    // (b) mariadb-binlog, decoding the row events, to /dev/null.
    let mut reader = Command::new(&binlog_tool);
    reader
        .arg("--no-defaults")
        .args(["--read-from-remote-server", "--host=127.0.0.1"])
        .arg(format!("--port={}", my.port))
        .args(["--user=evolve", "--password=evolve"])
        .args(["--base64-output=DECODE-ROWS", "--verbose", "--to-last-log"])
        .arg(format!("--start-position={}", start.pos))
        .arg(&start.file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let reader_name = binlog_tool.file_name().map_or_else(
        || "mariadb-binlog".into(),
        |f| f.to_string_lossy().into_owned(),
    );
    let started = Instant::now();
    let out = blocking(move || Ok(reader.output()?)).await?;
    let decode = started.elapsed();
    if !out.status.success() {
        return Err(format!(
            "{reader_name} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let after = my.binlog_end()?;
    if (after.file.as_str(), after.pos) != (end.file.as_str(), end.pos) {
        return Err(format!("the binlog moved from {end} to {after} during the benchmark").into());
    }

    // (c) Debezium's embedded engine, discarding its JSON change events.
    let dbz = match &baseline {
        debezium::Baseline::Ready(dir) => {
            let table = format!("{}.bench_t", db.name);
            let target = debezium::Target {
                port: my.port,
                database: &db.name,
                table: &table,
                file: &start.file,
                pos: start.pos,
            };
            let drained = debezium::drain(dir, &target).await?;
            // Every change and the marker, one event each.
            if drained.events != n + 1 {
                return Err(format!(
                    "Debezium counted {} change events, the load made {}",
                    drained.events,
                    n + 1
                )
                .into());
            }
            Some(drained)
        }
        debezium::Baseline::Skipped(_) => None,
    };

    println!();
    println!("| consumer | time | row changes/s | evolve / it |");
    println!("|---|---|---|---|");
    println!(
        "| evolve into the sink | {} | {} | |",
        fmt(evolve),
        per_second(n, evolve)
    );
    println!(
        "| `{reader_name} --read-from-remote-server --base64-output=DECODE-ROWS --verbose` to /dev/null | {} | {} | **{}** |",
        fmt(decode),
        per_second(n, decode),
        ratio(decode, evolve)
    );
    evolve_bench::debezium::print_rows(
        &format!("Debezium {DEBEZIUM_VERSION} MySQL connector embedded"),
        dbz.as_ref(),
        &baseline,
        n,
        evolve,
    );
    if let Some(applied) = applied_at {
        println!(
            "evolve's source had applied everything to its store after {} ({} changes/s); the sink finished {} later",
            fmt(applied),
            per_second(n, applied),
            fmt(evolve.saturating_sub(applied))
        );
    }
    println!(
        "evolve's process used {evolve_cpu} of CPU in those {}",
        fmt(evolve)
    );
    println!("goals: evolve / {reader_name} >= 0.8x, evolve ahead of Debezium (> 1.0x)");

    // Snapshot: the baseline, then evolve.
    println!();
    println!(
        "| table | `mariadb --batch --raw --quick` JSON_OBJECT rows piped into `psql` COPY ... FROM STDIN | evolve snapshot into the sink | evolve / baseline | peak RSS during evolve's snapshot (RSS before) | evolve's CPU |"
    );
    println!("|---|---|---|---|---|---|");
    let table = "snap_full";
    let copy = copy_baseline(&my, sink, &sink_db.url, &sinkc, table, n).await?;
    create_objects(&pipeline, &db.name, table).await?;
    // Reset the peak to the current resident set.
    std::fs::write("/proc/self/clear_refs", "5")?;
    let before = proc_status("VmRSS:");
    let cpu = cpu_time();
    let started = Instant::now();
    let running = Running::start(&pipeline);
    // When the table is running, its snapshot is in the store; the sink's
    // initial load follows.
    let name = format!("{table}_v1");
    let (snapshot, stored) = wait_until(
        &sinkc,
        &format!(
            "SELECT EXISTS (SELECT 1 FROM public.evolve_sink_progress WHERE sink = '{table}_sink')"
        ),
        started,
        "evolve's snapshot",
        &pipeline,
        |p| {
            p.tables().is_ok_and(|t| {
                t.iter()
                    .any(|t| t.name == name && t.state == evolve_pipeline::TableState::Running)
            })
        },
    )
    .await?;
    let stored = stored.unwrap_or(snapshot);
    let peak = proc_status("VmHWM:");
    let snapshot_cpu = cpu_since(cpu);
    running.stop().await?;
    let got = count(&sinkc, &format!("public.{table}_json")).await?;
    if got != n {
        return Err(format!("evolve's snapshot sink has {got} rows of {n}").into());
    }
    // The baseline's documents are evolve's.
    let differ: i64 = sinkc
        .query_one(
            &format!(
                "SELECT count(*) FROM public.{table}_json e FULL JOIN public.{table}_copy c USING (key) \
                 WHERE e.data IS DISTINCT FROM c.data"
            ),
            &[],
        )
        .await?
        .get(0);
    println!(
        "| {n} rows | {} ({} rows/s) | {} ({} rows/s; in the store after {}, then the sink's initial load {}) | **{}** | {} ({}) | {snapshot_cpu} |",
        fmt(copy),
        per_second(n, copy),
        fmt(snapshot),
        per_second(n, snapshot),
        fmt(stored),
        fmt(snapshot.saturating_sub(stored)),
        ratio(copy, snapshot),
        mib(peak),
        mib(before),
    );
    println!("goal: evolve / baseline >= 0.7x");
    if differ != 0 {
        return Err(format!(
            "{differ} of the baseline's documents differ from evolve's (compare public.{table}_json and public.{table}_copy)"
        )
        .into());
    }
    if let debezium::Baseline::Skipped(why) = &baseline {
        eprintln!("!!! DEBEZIUM BASELINE SKIPPED: {why}");
    }
    let _ = std::fs::remove_dir_all(&state);
    Ok(())
}

/// Source `bench`'s table `<name>_v1` on `<database>.<name>`, interface
/// `<name>_json`, sink `<name>_sink` into `public.<name>_json`.
async fn create_objects(pipeline: &Pipeline, database: &str, name: &str) -> Result<()> {
    pipeline
        .create_table(&TableSpec {
            name: format!("{name}_v1"),
            source: "bench".into(),
            schema: database.into(),
            table: name.into(),
            ..TableSpec::default()
        })
        .await?;
    pipeline.create_interface(&format!("{name}_json"), &format!("{name}_v1"))?;
    pipeline
        .create_sink(
            &format!("{name}_sink"),
            &format!("{name}_json"),
            "sink",
            "public",
            &format!("{name}_json"),
        )
        .await?;
    Ok(())
}

/// The documents of evolve's sink, built by MariaDB: the key, and every
/// column with NULLs left out (as `jsonb_strip_nulls`), the TIMESTAMP as
/// PostgreSQL's JSON of a timestamptz (the session is at UTC), the JSON
/// column as JSON.
fn document_select(table: &str) -> String {
    let columns = "'id', id, 'name', name, 'amount', amount, \
         'created_at', DATE_FORMAT(created_at, '%Y-%m-%dT%H:%i:%s+00:00'), \
         'active', active, 'attrs', JSON_EXTRACT(attrs, '$')";
    format!(
        "SET time_zone = '+00:00'; \
         SELECT JSON_OBJECT('id', id), \
                IF(note IS NULL, JSON_OBJECT({columns}), JSON_OBJECT({columns}, 'note', note)) \
         FROM {table}"
    )
}

/// `mariadb --batch --raw --quick -e "SELECT <key>, <document> FROM <table>"`
/// piped by `bash` (`pipefail`) into
/// `psql -c "COPY <table>_copy (key, data) FROM STDIN"` on the sink, a table shaped like evolve's sink table. Its
/// rows are counted after.
async fn copy_baseline(
    my: &My,
    sink: &evolve_test::Cluster,
    sink_url: &str,
    sinkc: &Client,
    table: &str,
    rows: i64,
) -> Result<Duration> {
    sinkc
        .batch_execute(&format!(
            "CREATE TABLE public.{table}_copy (key jsonb PRIMARY KEY, data jsonb NOT NULL)"
        ))
        .await?;
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(
            "set -e -o pipefail; \
             \"$MARIADB\" --no-defaults --protocol=TCP --host=127.0.0.1 --port=\"$PORT\" \
               --user=evolve --password=evolve --batch --raw --quick --skip-column-names \
               -e \"$SELECT\" \"$DATABASE\" \
             | \"$PSQL\" -X -q -v ON_ERROR_STOP=1 -d \"$URL\" -c \"$COPY\"",
        )
        .env("MARIADB", &my.client)
        .env("PORT", my.port.to_string())
        .env("DATABASE", &my.database)
        .env("SELECT", document_select(table))
        .env("PSQL", sink.bin("psql"))
        .env("URL", sink_url)
        .env(
            "COPY",
            format!("COPY public.{table}_copy (key, data) FROM STDIN"),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let out = blocking(move || Ok(cmd.output()?)).await?;
    let elapsed = started.elapsed();
    if !out.status.success() {
        return Err(format!(
            "the snapshot baseline failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let copied = count(sinkc, &format!("public.{table}_copy")).await?;
    if copied != rows {
        return Err(format!("the baseline copied {copied} rows of {rows}").into());
    }
    Ok(elapsed)
}
