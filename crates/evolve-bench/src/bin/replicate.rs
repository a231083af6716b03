//! `cargo xtask bench replicate [CHANGES]`: evolve's replicas
//! (`evolve-replicate`) against PostgreSQL's own logical replication, on
//! two throwaway clusters (upstream and target).
//!
//! The pipeline benchmark's stream (see `pipeline.rs` and
//! [`evolve_bench::stream`]): CHANGES (default 1,000,000) row changes,
//! inserts and updates in transactions of 1, 10, 100 and 1000 rows in a
//! fixed shuffled mix, are loaded into `bench_t` once, after every
//! consumer's slot exists, then a marker row (id 0) in a transaction of its
//! own; each consumer drains the same WAL, one after the other, in two
//! rounds:
//!
//! - evolve: a [`Replica`] into a database of the target cluster with the
//!   same table, created (publication and slot upstream) before the load;
//!   timed from [`Replica::run`] until the node's position in
//!   `evolve_replica_progress` is past the position before the marker's
//!   transaction (and the marker row is there: the two commit together);
//! - native: a subscription (`copy_data = false`, created disabled on a
//!   slot made before the load) into a plain copy of the table in another
//!   database of the target cluster, timed from `ALTER SUBSCRIPTION ...
//!   ENABLE` until the marker row is applied.
//!
//! Round one has no conflicts. In round two 1% of the row changes hit a
//! resolver: the node already has CHANGES / 100 of the keys the load
//! inserts (spread evenly over them, with other values), so each of those
//! inserts meets `insert_exists`, resolved by `update`. The native
//! subscriber of round two has the plain table again (it has no resolver:
//! a key it already has stops it), so the round repeats its baseline.
//!
//! Checked, or the program exits non-zero: each node has as many rows as
//! the upstream and its round's native subscriber, with the same contents
//! (a hash of every row's text); the node's `evolve_conflict_history` and
//! the replica's status count no conflict in round one and exactly CHANGES
//! / 100 `insert_exists` resolved by `update` in round two.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use evolve_bench::stream::{
    COLUMNS, ROW, TIMEOUT, connect, count, load_procedure, mix, per_second, simulate, wait_for,
};
use evolve_bench::{cpu_since, cpu_time, fmt, ratio};
use evolve_core::conflict::{ConflictType, Resolver, Resolvers};
use evolve_replicate::{Replica, ReplicaSpec};
use tokio::sync::watch;
use tokio_postgres::Client;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

/// The conflict of round two and its resolver.
const CONFLICT: (ConflictType, Resolver) = (ConflictType::InsertExists, Resolver::Update);

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
    let changes: i64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(1_000_000);
    if changes < 100 {
        return Err("CHANGES must be at least 100".into());
    }
    let up = evolve_test::Cluster::start()?;
    let target = evolve_test::Cluster::start()?;
    // The runtime `evolve pipeline run` uses: multi-threaded, one worker
    // per core.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let version = Command::new(up.bin("postgres")).arg("--version").output()?;
    println!(
        "replicate benchmark: {changes} row changes, {}, two clusters (upstream, target) on loopback, fsync=off",
        String::from_utf8_lossy(&version.stdout).trim()
    );
    let result = rt.block_on(bench(&up, &target, changes));
    if result.is_err() {
        eprintln!("upstream log:\n{}", up.log_tail(20));
        eprintln!("target log:\n{}", target.log_tail(20));
    }
    result
}

/// One round's two consumers, each into its own database of the target
/// cluster.
struct Round {
    label: String,
    /// The native subscription, and its slot upstream.
    subscription: String,
    native: Client,
    /// The replica, its name and its node.
    replica: Arc<Replica>,
    name: String,
    node: Client,
    /// The conflicts the round must log.
    expected: BTreeMap<(String, String), i64>,
}

/// What a round measured.
struct Measured {
    evolve: Duration,
    evolve_cpu: String,
    native: Duration,
}

async fn bench(up: &evolve_test::Cluster, target: &evolve_test::Cluster, n: i64) -> Result<()> {
    let up_db = up.create_database("replicate_up").await?;
    let upc = connect(&up_db.url).await?;
    upc.batch_execute(&format!(
        "CREATE TABLE bench_t ({COLUMNS});
         {};",
        load_procedure()
    ))
    .await?;
    upc.batch_execute("CREATE PUBLICATION bench_pub FOR TABLE bench_t")
        .await?;

    // The ids the load will insert are 1 to `inserted`; round two's node
    // has `seeded` of them, spread evenly.
    let (_, updates) = simulate(&mix(), n);
    let inserted = n - updates;
    let seeded = n / 100;
    let mut resolvers = Resolvers::default();
    resolvers.set(CONFLICT.0, CONFLICT.1)?;
    let mut rounds = Vec::new();
    for (i, (label, keys)) in [
        ("no conflicts".to_string(), 0),
        (
            format!("1% {} → {}", CONFLICT.0.name(), CONFLICT.1.name()),
            seeded,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let native_db = target
            .create_database(&format!("replicate_native_{i}"))
            .await?;
        let node_db = target
            .create_database(&format!("replicate_node_{i}"))
            .await?;
        let native = connect(&native_db.url).await?;
        let node = connect(&node_db.url).await?;
        native
            .batch_execute(&format!("CREATE TABLE bench_t ({COLUMNS})"))
            .await?;
        // evolve's tables on the node now (the replica creates them when
        // missing), so that its progress can be polled from the start.
        node.batch_execute(&format!(
            "CREATE TABLE bench_t ({COLUMNS}); {}",
            evolve_replicate::apply::NODE_SETUP
        ))
        .await?;
        if keys > 0 {
            node.batch_execute(&format!(
                "INSERT INTO bench_t SELECT {ROW}
                   FROM (SELECT 1 + k * {inserted} / {keys} AS g FROM generate_series(0::int8, {keys} - 1) k) s;
                 UPDATE bench_t SET name = 'on the node ' || id, amount = -1, note = NULL;"
            ))
            .await?;
            node.batch_execute("VACUUM ANALYZE bench_t").await?;
        }
        let subscription = format!("bench_native_{i}");
        upc.batch_execute(&format!(
            "SELECT pg_create_logical_replication_slot('{subscription}', 'pgoutput')"
        ))
        .await?;
        native
            .batch_execute(&format!(
                "CREATE SUBSCRIPTION {subscription}
                   CONNECTION 'host=127.0.0.1 port={} user=postgres dbname={}'
                   PUBLICATION bench_pub
                   WITH (create_slot = false, slot_name = '{subscription}', copy_data = false, enabled = false)",
                up.port(),
                up_db.name
            ))
            .await?;
        let name = format!("bench_{i}");
        let replica = Replica::create(ReplicaSpec {
            name: name.clone(),
            upstream: up_db.url.clone(),
            upstream_connection: "up".into(),
            node: node_db.url.clone(),
            tables: vec![("public".into(), "bench_t".into())],
            resolvers: resolvers.clone(),
            transforms: Vec::new(),
        })
        .await?;
        let mut expected = BTreeMap::new();
        if keys > 0 {
            expected.insert(
                (CONFLICT.0.name().to_string(), CONFLICT.1.name().to_string()),
                keys,
            );
        }
        rounds.push(Round {
            label,
            subscription,
            native,
            replica: Arc::new(replica),
            name,
            node,
            expected,
        });
    }

    // The load, then the marker row in a transaction of its own.
    let load = evolve_bench::stream::load(&upc, n, "bench_native_0").await?;
    println!("{load}");
    if load.inserted() != inserted {
        return Err(format!(
            "the load inserted {} rows, {inserted} expected",
            load.inserted()
        )
        .into());
    }
    println!(
        "round two, 1% of the row changes hitting a resolver: the node already has {seeded} of the {inserted} keys the load inserts \
         (spread evenly, other values), so {seeded} inserts meet {} and are resolved by {}; \
         its native subscriber has the plain table (no resolver: a key it has stops it)",
        CONFLICT.0.name(),
        CONFLICT.1.name()
    );

    let mut measured = Vec::new();
    for round in &rounds {
        measured.push(measure(round, load.before_marker, load.rows).await?);
    }

    println!();
    println!("| round | consumer | time | row changes/s | evolve / native |");
    println!("|---|---|---|---|---|");
    for (round, m) in rounds.iter().zip(&measured) {
        println!(
            "| {} | evolve replica | {} | {} | |",
            round.label,
            fmt(m.evolve),
            per_second(n, m.evolve)
        );
        println!(
            "| {} | native subscription | {} | {} | **{}** |",
            round.label,
            fmt(m.native),
            per_second(n, m.native),
            ratio(m.native, m.evolve)
        );
    }
    for (round, m) in rounds.iter().zip(&measured) {
        let conflicts = if round.expected.is_empty() {
            "none".to_string()
        } else {
            round
                .expected
                .iter()
                .map(|((c, r), k)| format!("{c} resolved by {r}: {k}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "{}: the node has {} rows, the same as the native subscriber's (and the same contents); conflicts in evolve_conflict_history: {conflicts} (as expected); evolve's process used {} of CPU in its {}",
            round.label,
            load.rows,
            m.evolve_cpu,
            fmt(m.evolve)
        );
    }
    println!("goal: evolve / native >= 1.0x");
    Ok(())
}

/// Round `round`: the replica, then the native subscription, each timed
/// until it has the marker row; then the checks.
async fn measure(round: &Round, before_marker: u64, rows: i64) -> Result<Measured> {
    // (a) evolve, from `run` until the node's position is past the marker.
    let marker = format!(
        "{:X}/{:X}",
        before_marker >> 32,
        before_marker & 0xffff_ffff
    );
    let done = format!(
        "SELECT EXISTS (SELECT 1 FROM evolve_replica_progress
                        WHERE replica = '{}' AND lsn > '{marker}'::pg_lsn)
            AND EXISTS (SELECT 1 FROM bench_t WHERE id = 0)",
        round.name
    );
    let (stop, stop_rx) = watch::channel(false);
    let cpu = cpu_time();
    let started = Instant::now();
    let task = tokio::spawn({
        let replica = round.replica.clone();
        async move { replica.run(stop_rx).await }
    });
    let mut retrying = false;
    let evolve = loop {
        if round.node.query_one(&done, &[]).await?.get::<_, bool>(0) {
            break started.elapsed();
        }
        if task.is_finished() {
            let result = task.await?;
            return Err(format!(
                "replica {} stopped before the marker: {result:?}",
                round.name
            )
            .into());
        }
        let status = round.replica.status();
        if status.state == "retrying" && !retrying {
            eprintln!("replica {} is retrying: {:?}", round.name, status.error);
        }
        retrying = status.state == "retrying";
        if started.elapsed() > TIMEOUT {
            return Err(format!(
                "replica {} did not finish within {TIMEOUT:?}: {status:?}",
                round.name
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let evolve_cpu = cpu_since(cpu);
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .map_err(|_| "the replica did not stop within 60 s")???;

    // (b) native logical replication.
    let started = Instant::now();
    round
        .native
        .batch_execute(&format!("ALTER SUBSCRIPTION {} ENABLE", round.subscription))
        .await?;
    let native = wait_for(
        &round.native,
        "SELECT EXISTS (SELECT 1 FROM bench_t WHERE id = 0)",
        started,
        "the native subscription",
    )
    .await?;
    round
        .native
        .batch_execute(&format!(
            "ALTER SUBSCRIPTION {} DISABLE",
            round.subscription
        ))
        .await?;

    // The node against the subscriber and the upstream.
    let got = count(&round.native, "bench_t").await?;
    if got != rows {
        return Err(format!("the subscriber has {got} rows, upstream {rows}").into());
    }
    let (native_rows, native_hash) = contents(&round.native).await?;
    let (node_rows, node_hash) = contents(&round.node).await?;
    if node_rows != native_rows {
        return Err(format!(
            "{}: the node has {node_rows} rows, the native subscriber {native_rows}",
            round.label
        )
        .into());
    }
    if node_hash != native_hash {
        return Err(format!(
            "{}: the node's rows differ from the native subscriber's",
            round.label
        )
        .into());
    }
    let history: BTreeMap<(String, String), i64> = round
        .node
        .query(
            "SELECT conflict_type, resolution, count(*) FROM evolve_conflict_history
             WHERE replica = $1 GROUP BY 1, 2",
            &[&round.name],
        )
        .await?
        .iter()
        .map(|r| ((r.get(0), r.get(1)), r.get(2)))
        .collect();
    if history != round.expected {
        return Err(format!(
            "{}: evolve_conflict_history has {history:?}, expected {:?}",
            round.label, round.expected
        )
        .into());
    }
    let counted: BTreeMap<(String, String), i64> = round
        .replica
        .status()
        .conflicts
        .iter()
        .map(|((c, r), k)| ((c.name().to_string(), r.name().to_string()), *k as i64))
        .collect();
    if counted != round.expected {
        return Err(format!(
            "{}: the replica counted {counted:?}, expected {:?}",
            round.label, round.expected
        )
        .into());
    }
    Ok(Measured {
        evolve,
        evolve_cpu,
        native,
    })
}

/// `bench_t`'s row count and a hash of every row's text.
async fn contents(client: &Client) -> Result<(i64, i64)> {
    let row = client
        .query_one(
            "SELECT count(*), coalesce(sum(hashtext(t::text)), 0)::int8 FROM bench_t t",
            &[],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}
