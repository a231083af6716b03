//! Large upstream transactions, applied in parts as they arrive
//! (`Replica::part_rows`) inside one node transaction committed at the
//! upstream's COMMIT: the node equals the upstream, a halt inside one is
//! at its LSN with nothing of it on the node and skip passes it, and a
//! stop in the middle rolls it back so the next run applies every row once.

mod common;

use common::*;
use std::sync::Arc;
use std::time::Duration;

use evolve_core::conflict::{ConflictType, Resolver, Resolvers};
use evolve_replicate::{Replica, ReplicaSpec, ReplicateError};
use tokio_postgres::Client;

/// The parts' size in these tests.
const PART: usize = 1_000;

const DDL: &str = "CREATE TABLE big (id int PRIMARY KEY, v int NOT NULL, note text)";

/// On the node: every row written to `big` is counted by a sequence (not
/// transactional: it shows rows written in a node transaction still
/// open, or rolled back) and recorded in `big_audit` with its node
/// transaction (transactional: what committed).
const AUDIT: &str = "
CREATE SEQUENCE big_written;
CREATE TABLE big_audit (id int NOT NULL, op text NOT NULL, xid bigint NOT NULL);
CREATE FUNCTION big_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nextval('big_written');
    INSERT INTO big_audit VALUES (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END,
                                  TG_OP, txid_current());
    RETURN NULL;
END $$;
CREATE TRIGGER big_audit AFTER INSERT OR UPDATE OR DELETE ON big
    FOR EACH ROW EXECUTE FUNCTION big_audit();";

fn spec(name: &str, up: &str, node: &str, resolvers: Resolvers) -> ReplicaSpec {
    ReplicaSpec {
        name: name.into(),
        upstream: up.into(),
        upstream_connection: "up".into(),
        node: node.into(),
        tables: vec![("public".into(), "big".into())],
        resolvers,
        transforms: Vec::new(),
    }
}

/// `big`'s rows in order, as text.
async fn table(client: &Client) -> Vec<String> {
    rows(client, "SELECT id, v, note FROM big ORDER BY id").await
}

async fn one(client: &Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

/// The upstream's WAL insert position now, as an LSN's text.
async fn wal(up: &Client) -> String {
    up.query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .await
        .unwrap()
        .get(0)
}

/// Whether LSN `a` is before LSN `b`, asked of `client`.
async fn before(client: &Client, a: &str, b: &str) -> bool {
    client
        .query_one("SELECT $1::text::pg_lsn < $2::text::pg_lsn", &[&a, &b])
        .await
        .unwrap()
        .get(0)
}

/// One upstream transaction of 50,000 row changes (30,000 inserts, then
/// 20,000 updates of them) between two small ones, with parts of 1,000
/// rows: the node ends equal to the upstream, the large transaction went
/// in parts (`ReplicaStatus::parts`) and in one node transaction (every
/// row's audit has the same node xid), each row written once, and the
/// insert_exists its parts met is logged once at the transaction's LSN.
///
/// On the old code the read loop held the whole transaction and applied
/// it as one group: `parts` stays 0 (and `Replica::part_rows` and
/// `ReplicaStatus::parts` did not exist).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_transaction_goes_in_parts_in_one_node_transaction() {
    let up_db = evolve_test::fresh_db("rep_large_up").await;
    let node_db = evolve_test::fresh_db("rep_large_node").await;
    let up = connect(&up_db.url).await;
    let node = connect(&node_db.url).await;
    up.batch_execute(DDL).await.unwrap();
    node.batch_execute(DDL).await.unwrap();
    // A row of the node's own that the large transaction inserts too:
    // insert_exists, resolved by `update`, in the middle of it.
    node.batch_execute("INSERT INTO big VALUES (12345, -1, 'local')")
        .await
        .unwrap();
    node.batch_execute(AUDIT).await.unwrap();
    let spec = spec("large", &up_db.url, &node_db.url, Resolvers::default());
    let replica = Arc::new(Replica::create(spec).await.unwrap().part_rows(PART));
    up.batch_execute("INSERT INTO big VALUES (0, 0, 'small before')")
        .await
        .unwrap();
    let from = wal(&up).await;
    up.batch_execute(
        "BEGIN;
         INSERT INTO big SELECT g, g, 'n' || g FROM generate_series(1, 30000) g;
         UPDATE big SET v = v * 2, note = note || 'u' WHERE id BETWEEN 1 AND 20000;
         COMMIT;",
    )
    .await
    .unwrap();
    let to = wal(&up).await;
    up.batch_execute("INSERT INTO big VALUES (30001, 1, 'small after')")
        .await
        .unwrap();
    run_until_caught_up(replica.clone(), &up, &node, "large").await;

    let upstream = table(&up).await;
    assert_eq!(upstream.len(), 30_002);
    assert_eq!(table(&node).await, upstream, "the node equals the upstream");
    let parts = replica.status().parts;
    assert!(parts > 10, "the transaction went in parts: {parts}");
    assert_eq!(parts, 50, "50,000 rows in parts of 1,000");
    // Every row of the large transaction written once, all in one node
    // transaction (the small ones in their own).
    let audit = node
        .query_one(
            "SELECT count(*), count(DISTINCT xid) FROM big_audit WHERE id BETWEEN 1 AND 30000",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(audit.get::<_, i64>(0), 50_000, "every row once");
    assert_eq!(audit.get::<_, i64>(1), 1, "one node transaction");
    assert_eq!(one(&node, "SELECT count(*) FROM big_audit").await, 50_002);
    // The conflict its parts met, logged once, at its transaction's end.
    let logged: Vec<(String, String, String)> = node
        .query(
            "SELECT conflict_type, resolution, remote_lsn::text FROM evolve_conflict_history
             WHERE replica = 'large'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(
        (logged[0].0.as_str(), logged[0].1.as_str()),
        ("insert_exists", "update")
    );
    let lsn = &logged[0].2;
    assert!(
        before(&node, &from, lsn).await && !before(&node, &to, lsn).await,
        "the conflict's LSN {lsn} is the large transaction's end, in ({from}, {to}]"
    );
    assert_eq!(
        replica
            .status()
            .conflicts
            .get(&(ConflictType::InsertExists, Resolver::Update)),
        Some(&1)
    );
}

/// A conflict whose resolver is `error` in the middle of a large
/// transaction (its third part of five): the replica halts at that
/// transaction's LSN (known only at its COMMIT, two parts later), nothing
/// of it is on the node (its node transaction rolled back, though its
/// first parts were written there), the halt is in the conflict history
/// and the progress row once, and `Replica::skip` at that LSN passes
/// exactly it.
///
/// Impossible on the old code: it has no parts (`Replica::part_rows`);
/// it held the transaction whole, so its end was known before any row
/// was applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_halt_inside_a_large_transaction_is_at_its_lsn_and_skip_passes_it() {
    let up_db = evolve_test::fresh_db("rep_large_halt_up").await;
    let node_db = evolve_test::fresh_db("rep_large_halt_node").await;
    let up = connect(&up_db.url).await;
    let node = connect(&node_db.url).await;
    up.batch_execute(DDL).await.unwrap();
    node.batch_execute(DDL).await.unwrap();
    node.batch_execute("INSERT INTO big VALUES (2500, -1, 'local')")
        .await
        .unwrap();
    node.batch_execute(AUDIT).await.unwrap();
    let mut resolvers = Resolvers::default();
    resolvers
        .set(ConflictType::InsertExists, Resolver::Error)
        .unwrap();
    let spec = spec("large_h", &up_db.url, &node_db.url, resolvers);
    let replica = Arc::new(Replica::create(spec.clone()).await.unwrap().part_rows(PART));
    up.batch_execute("INSERT INTO big VALUES (0, 0, 'small before')")
        .await
        .unwrap();
    let from = wal(&up).await;
    up.batch_execute("INSERT INTO big SELECT g, g, 'n' || g FROM generate_series(1, 5000) g")
        .await
        .unwrap();
    let to = wal(&up).await;
    up.batch_execute("INSERT INTO big VALUES (5001, 1, 'small after')")
        .await
        .unwrap();

    let e = run(replica.clone(), &up, &node, "large_h")
        .await
        .expect("the replica halts");
    let ReplicateError::Halted { lsn, message, .. } = &e else {
        panic!("not a halt: {e}");
    };
    assert!(message.contains("insert_exists"), "{e}");
    let lsn_text = lsn.to_string();
    assert!(
        before(&node, &from, &lsn_text).await && !before(&node, &to, &lsn_text).await,
        "the halt's LSN {lsn} is the large transaction's end, in ({from}, {to}]"
    );
    assert!(
        e.to_string()
            .contains(&format!("evolve replicate skip large_h --lsn {lsn}")),
        "{e}"
    );
    assert_eq!(replica.status().state, "halted");
    // Its first two parts were written on the node, then rolled back;
    // the conflict's part was written up to the conflict (pipelined, then
    // one row at a time for the exact halt), and the two parts after it
    // never: the halt came while the transaction was still being read,
    // and its end was waited for without applying them.
    let written = one(&node, "SELECT last_value FROM big_written").await;
    assert!(
        (2_001..4_000).contains(&written),
        "rows written on the node before the halt: {written}"
    );
    assert_eq!(
        table(&node).await,
        vec!["(0,0,\"small before\")", "(2500,-1,local)"],
        "nothing of the halted transaction is on the node"
    );
    assert_eq!(one(&node, "SELECT count(*) FROM big_audit").await, 1);
    let halted: (Option<String>, String) = node
        .query_one(
            "SELECT halted_lsn::text, lsn::text FROM evolve_replica_progress WHERE replica = 'large_h'",
            &[],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(halted.0.as_deref(), Some(lsn_text.as_str()));
    assert!(before(&node, &halted.1, &from).await || halted.1 == from);
    let history: Vec<(String, String, String, String, String)> = node
        .query(
            "SELECT conflict_type, resolution, key::text, detail, remote_lsn::text
             FROM evolve_conflict_history WHERE replica = 'large_h'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    assert_eq!(
        history,
        vec![(
            "insert_exists".into(),
            "error".into(),
            r#"{"id": "2500"}"#.into(),
            "halted the replica".into(),
            lsn_text.clone()
        )]
    );
    assert_eq!(
        replica
            .status()
            .conflicts
            .get(&(ConflictType::InsertExists, Resolver::Error)),
        Some(&1)
    );
    // Met again (a retry), the halt is logged no second time.
    let again = run(replica.clone(), &up, &node, "large_h")
        .await
        .expect("the replica halts again");
    assert_eq!(again.to_string(), e.to_string());
    assert_eq!(
        one(
            &node,
            "SELECT count(*) FROM evolve_conflict_history WHERE replica = 'large_h'"
        )
        .await,
        1
    );

    // Skipped at its LSN: the next run passes exactly it.
    Replica::skip(&node_db.url, "large_h", *lsn).await.unwrap();
    let replica = Arc::new(Replica::new(spec).part_rows(PART));
    run_until_caught_up(replica.clone(), &up, &node, "large_h").await;
    assert_eq!(
        table(&node).await,
        vec![
            "(0,0,\"small before\")",
            "(2500,-1,local)",
            "(5001,1,\"small after\")"
        ]
    );
    assert_eq!(
        replica.status().parts,
        0,
        "a skipped transaction applies no part"
    );
    let progress: (Option<String>, Option<String>) = node
        .query_one(
            "SELECT skip_lsn::text, halted_lsn::text FROM evolve_replica_progress WHERE replica = 'large_h'",
            &[],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(
        progress,
        (None, None),
        "the skip and the halt are cleared once passed"
    );
}

/// The upstream of the restart tests: a small transaction, then one of
/// 54,001 row changes (40,000 inserts, 10,001 updates, 4,000 deletes),
/// then a small one; the replica made (not run), the node audited.
struct Restart {
    _up_db: evolve_test::TestDb,
    node_db: evolve_test::TestDb,
    up: Client,
    node: Client,
    spec: ReplicaSpec,
    /// The upstream's WAL position before the large transaction and
    /// after it.
    from: String,
    to: String,
}

async fn restart_setup(name: &str) -> Restart {
    let up_db = evolve_test::fresh_db(&format!("rep_{name}_up")).await;
    let node_db = evolve_test::fresh_db(&format!("rep_{name}_node")).await;
    let up = connect(&up_db.url).await;
    let node = connect(&node_db.url).await;
    up.batch_execute(DDL).await.unwrap();
    node.batch_execute(DDL).await.unwrap();
    node.batch_execute(AUDIT).await.unwrap();
    let spec = spec(name, &up_db.url, &node_db.url, Resolvers::default());
    Replica::create(spec.clone()).await.unwrap();
    up.batch_execute("INSERT INTO big VALUES (0, 0, 'small before')")
        .await
        .unwrap();
    let from = wal(&up).await;
    up.batch_execute(
        "BEGIN;
         INSERT INTO big SELECT g, g, 'n' || g FROM generate_series(1, 40000) g;
         UPDATE big SET v = -v WHERE id % 4 = 0;
         DELETE FROM big WHERE id % 10 = 5;
         COMMIT;",
    )
    .await
    .unwrap();
    let to = wal(&up).await;
    up.batch_execute("INSERT INTO big VALUES (40001, 1, 'small after')")
        .await
        .unwrap();
    Restart {
        _up_db: up_db,
        node_db,
        up,
        node,
        spec,
        from,
        to,
    }
}

impl Restart {
    /// Waits until the node has written thousands of the large
    /// transaction's rows (in its node transaction, still open), while
    /// `running` says the replica still runs.
    async fn wait_for_the_middle(&self, running: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while one(&self.node, "SELECT last_value FROM big_written").await < 5_000 {
            assert!(running(), "the replica ended");
            assert!(
                tokio::time::Instant::now() < deadline,
                "the replica did not start the large transaction"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// After the replica was stopped or killed in the middle: nothing of
    /// the large transaction is on the node, its position is before it,
    /// and nothing past it was confirmed upstream.
    async fn nothing_of_it(&self) {
        let written = one(&self.node, "SELECT last_value FROM big_written").await;
        assert!(
            written < 1 + 54_001,
            "stopped before the large transaction was all written ({written} rows)"
        );
        assert_eq!(
            table(&self.node).await,
            vec!["(0,0,\"small before\")"],
            "nothing of the large transaction is on the node"
        );
        assert_eq!(one(&self.node, "SELECT count(*) FROM big_audit").await, 1);
        let position: String = self
            .node
            .query_one(
                "SELECT lsn::text FROM evolve_replica_progress WHERE replica = $1",
                &[&self.spec.name],
            )
            .await
            .unwrap()
            .get(0);
        assert!(
            !before(&self.up, &self.from, &position).await,
            "the node's position {position} is before the large transaction ({})",
            self.from
        );
        let confirmed: String = self
            .up
            .query_one(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&Replica::slot_name(&self.spec.name)],
            )
            .await
            .unwrap()
            .get(0);
        // (An idle stream may confirm WAL it has read without a
        // transaction to send, which can be some of the large
        // transaction's changes; never its COMMIT.)
        assert!(
            before(&self.up, &confirmed, &self.to).await,
            "confirmed {confirmed} is not past the large transaction, which ends by {}",
            self.to
        );
    }

    /// Runs the replica again to the end: the node equals the upstream,
    /// every row of the large transaction written once, in one node
    /// transaction.
    async fn applied_once(&self) {
        let replica = Arc::new(Replica::new(self.spec.clone()).part_rows(PART));
        run_until_caught_up(replica.clone(), &self.up, &self.node, &self.spec.name).await;
        let upstream = table(&self.up).await;
        assert_eq!(upstream.len(), 36_002);
        assert_eq!(
            table(&self.node).await,
            upstream,
            "the node equals the upstream"
        );
        assert!(replica.status().parts > 10);
        let audit = self
            .node
            .query_one(
                "SELECT count(*), count(DISTINCT (id, op)), count(DISTINCT xid) FROM big_audit
                 WHERE id BETWEEN 1 AND 40000",
                &[],
            )
            .await
            .unwrap();
        // 40,000 inserts, 10,000 updates, 4,000 deletes.
        assert_eq!(audit.get::<_, i64>(0), 54_000, "every row once");
        assert_eq!(audit.get::<_, i64>(1), 54_000);
        assert_eq!(audit.get::<_, i64>(2), 1, "one node transaction");
        assert_eq!(
            rows(
                &self.node,
                "SELECT id, op FROM big_audit WHERE id NOT BETWEEN 1 AND 40000 ORDER BY id, op"
            )
            .await,
            // Row 0's update (`id % 4 = 0`) is the large transaction's.
            vec!["(0,INSERT)", "(0,UPDATE)", "(40001,INSERT)"]
        );
        let conflicts: i64 = self
            .node
            .query_one(
                "SELECT count(*) FROM evolve_conflict_history WHERE replica = $1",
                &[&self.spec.name],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(conflicts, 0, "no row met twice");
    }
}

/// A stop while a large transaction's parts are being applied (the node
/// has written thousands of its rows, in a node transaction still open):
/// the node transaction is rolled back, the replica's position stays
/// before it and nothing past it is confirmed upstream; the next run
/// applies it whole, every row once, and the node equals the upstream.
///
/// On the old code a stop waited for the whole transaction, read before
/// any of it was applied, to be applied and committed: there is no
/// middle to stop in, and the check that nothing of it is on the node
/// after the stop fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_in_the_middle_of_a_large_transaction_rolls_it_back_and_the_next_run_applies_it_once()
 {
    let r = restart_setup("large_s").await;
    let replica = Arc::new(Replica::new(r.spec.clone()).part_rows(PART));
    let (stop, task) = start(replica.clone());
    r.wait_for_the_middle(|| !task.is_finished()).await;
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("the replica stops")
        .unwrap()
        .unwrap();
    r.nothing_of_it().await;
    r.applied_once().await;
}

/// SIGKILL of the replica's process while a large transaction's parts
/// are being applied: the node's server rolls its transaction back, and
/// the next run applies it whole, every row once.
///
/// On the old code the process holds the whole transaction before any
/// of it reaches the node (`--part-rows` did not exist): a kill while the
/// node writes its rows is one inside a single apply, not between parts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_in_the_middle_of_a_large_transaction_leaves_nothing_and_the_next_run_applies_it_once()
 {
    let r = restart_setup("large_k").await;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_evolve-replicate-run"))
        .args([
            "--part-rows",
            &PART.to_string(),
            "large_k",
            &r.spec.upstream,
            &r.node_db.url,
            "public.big",
        ])
        .spawn()
        .expect("start evolve-replicate-run");
    let running = std::sync::Mutex::new(&mut child);
    r.wait_for_the_middle(|| {
        running
            .lock()
            .unwrap()
            .try_wait()
            .is_ok_and(|s| s.is_none())
    })
    .await;
    // SIGKILL: nothing of the process's own shutdown runs.
    child.kill().unwrap();
    child.wait().unwrap();
    // The node's server ends the killed session's transaction when it
    // sees the connection gone.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while one(
        &r.node,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'evolve replicate' AND datname = current_database()",
    )
    .await
        > 0
    {
        assert!(tokio::time::Instant::now() < deadline, "the killed session stays");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    r.nothing_of_it().await;
    r.applied_once().await;
}

/// The same upstream transactions into two nodes, one replica applying
/// the large one in parts and one holding it whole (the small path):
/// a transform (a column set from `NEW`, a filter that keeps rows off
/// the node and takes updated ones off it), insert_exists,
/// update_missing (insert_or_skip, through the transform),
/// delete_missing and a column the upstream lacks: both nodes end with the same rows and the same
/// conflict history, every conflict at the large transaction's LSN.
///
/// On the old code both replicas held it whole (`parts` 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_apply_transforms_and_resolvers_as_a_whole_transaction_does() {
    let up_db = evolve_test::fresh_db("rep_large_tf_up").await;
    let up = connect(&up_db.url).await;
    up.batch_execute(DDL).await.unwrap();
    // Rows the nodes do not have: updated and deleted by the large
    // transaction.
    up.batch_execute("INSERT INTO big VALUES (50000, 7, 'before'), (50001, 1, 'before')")
        .await
        .unwrap();
    let transform = evolve_replicate::Transform {
        name: "shout".into(),
        schema: "public".into(),
        table: "big".into(),
        sets: vec![("shout".into(), "upper(NEW.note)".into())],
        filter: Some("NEW.v % 3 <> 0".into()),
    };
    let mut nodes = Vec::new();
    for (name, part_rows) in [("large_tf_parts", PART), ("large_tf_whole", usize::MAX)] {
        let node_db = evolve_test::fresh_db(&format!("rep_{name}")).await;
        let node = connect(&node_db.url).await;
        node.batch_execute(
            "CREATE TABLE big (id int PRIMARY KEY, v int NOT NULL, note text, shout text,
                               region text NOT NULL DEFAULT 'eu');
             INSERT INTO big VALUES (101, -1, 'local', 'LOCAL');",
        )
        .await
        .unwrap();
        let mut spec = spec(name, &up_db.url, &node_db.url, Resolvers::default());
        spec.transforms = vec![transform.clone()];
        let replica = Arc::new(Replica::create(spec).await.unwrap().part_rows(part_rows));
        nodes.push((name, node_db, node, replica));
    }
    let from = wal(&up).await;
    up.batch_execute(
        "BEGIN;
         INSERT INTO big SELECT g, g, 'n' || g FROM generate_series(1, 12000) g;
         UPDATE big SET v = v + 1 WHERE id % 5 = 0 AND id <= 12000;
         UPDATE big SET v = 8, note = 'updated' WHERE id = 50000;
         DELETE FROM big WHERE id = 50001;
         COMMIT;",
    )
    .await
    .unwrap();
    let to = wal(&up).await;
    let mut results = Vec::new();
    for (name, _db, node, replica) in &nodes {
        run_until_caught_up(replica.clone(), &up, node, name).await;
        let history = rows(
            node,
            "SELECT conflict_type, resolution, key, remote_tuple, local_tuple, remote_lsn, detail
             FROM evolve_conflict_history ORDER BY conflict_type, key::text",
        )
        .await;
        let lsns = rows(
            node,
            "SELECT DISTINCT remote_lsn FROM evolve_conflict_history",
        )
        .await;
        assert_eq!(lsns.len(), 1, "{name}: {lsns:?}");
        let lsn = lsns[0].trim_matches(|c| c == '(' || c == ')');
        assert!(
            before(node, &from, lsn).await && !before(node, &to, lsn).await,
            "{name}: the conflicts' LSN {lsn} is the large transaction's end, in ({from}, {to}]"
        );
        let counted = history_counts(node).await;
        assert_eq!(
            counted.get(&key("insert_exists", "update")),
            Some(&1),
            "{name}"
        );
        assert_eq!(
            counted.get(&key("update_missing", "insert_or_skip")),
            Some(&801),
            "{name}: 800 rows the filter kept off and their update lets in, and 50000"
        );
        assert_eq!(
            counted.get(&key("delete_missing", "skip")),
            Some(&1),
            "{name}"
        );
        // Once per match, though the match is read again during the
        // transaction (every second).
        assert_eq!(
            counted.get(&key("source_column_missing", "use_default_value")),
            Some(&1),
            "{name}"
        );
        results.push((
            rows(node, "SELECT id, v, note, shout FROM big ORDER BY id").await,
            history,
            replica.status().parts,
        ));
    }
    let want = rows(
        &up,
        "SELECT id, v, note, upper(note) FROM big WHERE v % 3 <> 0 ORDER BY id",
    )
    .await;
    assert_eq!(
        results[0].0, want,
        "the node in parts has the transform's rows"
    );
    assert_eq!(
        results[1].0, want,
        "the node held whole has the transform's rows"
    );
    assert_eq!(results[0].1, results[1].1, "the same conflict history");
    assert!(results[0].2 > 10, "in parts: {}", results[0].2);
    assert_eq!(results[1].2, 0, "held whole");
}

async fn history_counts(node: &Client) -> std::collections::BTreeMap<(String, String), i64> {
    node.query(
        "SELECT conflict_type, resolution, count(*) FROM evolve_conflict_history GROUP BY 1, 2",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| ((r.get(0), r.get(1)), r.get(2)))
    .collect()
}
