//! The pipeline over TLS: an upstream cluster that refuses plain TCP
//! (`hostssl` lines only, replication included) and a sink cluster that
//! does too, both reached with `sslmode=verify-full` and their CA.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::wait_until;
use evolve_pipeline::{Config, Connection, Pipeline, TableSpec, upstream};
use evolve_test::{Cluster, Options, TestDb, TlsOptions};
use pgwire_replication::SslMode as WireMode;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

const CONVERGE: Duration = Duration::from_secs(30);
const PASSWORD: &str = "hunter2-secret";

/// A cluster with TLS that refuses sessions without it over TCP; its
/// certificate names `localhost` and `127.0.0.1`.
fn tls_only_cluster() -> Cluster {
    Cluster::start_with(Options {
        tls: Some(TlsOptions {
            require: true,
            ..TlsOptions::default()
        }),
        ..Options::default()
    })
    .expect("start a TLS-only cluster")
}

/// `postgres://postgres:<PASSWORD>@localhost:<port>/<db>` with
/// `sslmode=verify-full` and `sslrootcert=<ca>`.
fn verify_full_url(cluster: &Cluster, db: &TestDb, ca: &std::path::Path) -> String {
    format!(
        "postgres://postgres:{PASSWORD}@localhost:{}/{}?sslmode=verify-full&sslrootcert={}",
        cluster.port(),
        db.name,
        ca.display()
    )
}

async fn connect(url: &str) -> Client {
    evolve_pg::connect(url, "evolve-pipeline tls test")
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A pipeline running in a task of this runtime.
struct Running {
    stop: oneshot::Sender<()>,
    handle: JoinHandle<()>,
}

impl Running {
    fn start(pipeline: Arc<Pipeline>) -> Running {
        let (stop, stopped) = oneshot::channel::<()>();
        let handle = tokio::spawn(async move {
            evolve_pipeline::absorb::run_with(&pipeline, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Running { stop, handle }
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(20), self.handle)
            .await
            .expect("the pipeline stops within 20 s")
            .unwrap();
    }
}

/// Rows of a sink table: `(key text, data text)` ordered by id.
async fn sink_rows(sink: &Client, table: &str) -> Vec<(String, String)> {
    sink.query(
        &format!("SELECT key::text, data::text FROM public.{table} ORDER BY (key->>'id')::int"),
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// The upstream server's own documents of `accounts`, in the sink's form.
async fn upstream_rows(up: &Client) -> Vec<(String, String)> {
    up.query(
        "SELECT jsonb_build_object('id', t.id)::text, \
                coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}')::text \
         FROM public.accounts t ORDER BY t.id",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// Waits until the sink holds exactly the upstream documents.
async fn wait_equal(up: &Client, sink: &Client) {
    wait_until(
        "the sink to hold exactly the upstream documents",
        CONVERGE,
        async || {
            let exists: bool = sink
                .query_one(
                    "SELECT to_regclass('public.accounts_json') IS NOT NULL",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            let want = upstream_rows(up).await;
            let have = if exists {
                sink_rows(sink, "accounts_json").await
            } else {
                Vec::new()
            };
            want == have
        },
    )
    .await;
}

/// Every row write into `accounts_json`, counted by a trigger.
async fn audit_sink(sink: &Client) {
    sink.batch_execute(
        "CREATE TABLE public.accounts_json_audit (op text, key jsonb);
         CREATE FUNCTION public.accounts_json_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO public.accounts_json_audit
             VALUES (TG_OP, CASE WHEN TG_OP = 'DELETE' THEN OLD.key ELSE NEW.key END);
           RETURN NULL;
         END $$;
         CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON public.accounts_json
           FOR EACH ROW EXECUTE FUNCTION public.accounts_json_audit_fn();",
    )
    .await
    .unwrap();
}

async fn audit_count(sink: &Client) -> i64 {
    sink.query_one("SELECT count(*) FROM public.accounts_json_audit", &[])
        .await
        .unwrap()
        .get(0)
}

/// Removes the state directory at the end.
struct StateDir(PathBuf);

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Source, table, interface and sink over verify-full TLS to both
/// clusters; the snapshot, inserts, updates and deletes arrive exactly
/// once; the walsender and sink sessions are encrypted; a wrong CA fails
/// naming the connection and the certificate problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_runs_over_verify_full_tls() {
    let (up_cluster, sink_cluster) = tokio::task::spawn_blocking(|| {
        let sink = std::thread::spawn(tls_only_cluster);
        (tls_only_cluster(), sink.join().unwrap())
    })
    .await
    .unwrap();
    let up_db = up_cluster.create_database("tls_up").await.unwrap();
    let sink_db = sink_cluster.create_database("tls_sink").await.unwrap();
    let up_ca = up_cluster.ca_cert().unwrap().to_path_buf();
    let sink_ca = sink_cluster.ca_cert().unwrap().to_path_buf();
    let up_url = verify_full_url(&up_cluster, &up_db, &up_ca);
    let sink_url = verify_full_url(&sink_cluster, &sink_db, &sink_ca);

    let up = connect(&up_url).await;
    let sink = connect(&sink_url).await;
    up.batch_execute(
        "CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2));
         INSERT INTO accounts SELECT i, 'owner ' || i, i * 10.5 FROM generate_series(1, 50) i;",
    )
    .await
    .unwrap();

    let state = StateDir(
        std::env::temp_dir().join(format!("evolve-pipeline-tls-test-{}", std::process::id())),
    );
    let _ = std::fs::remove_dir_all(&state.0);
    // The upstream's CA does not sign the sink's certificate.
    let wrong_ca_url = verify_full_url(&sink_cluster, &sink_db, &up_ca);
    let config = Config::new(&state.0)
        .with_connection("up", up_url.clone())
        .with_connection("sink", sink_url.clone())
        .with_connection("wrong_ca", wrong_ca_url);
    let pipeline = Arc::new(Pipeline::open(config).unwrap());

    let e = pipeline
        .create_source("src_wrong", "wrong_ca", "evolve_pub")
        .await
        .unwrap_err();
    let text = format!("{e} {}", e.detail().unwrap_or_default());
    assert!(text.contains("\"wrong_ca\""), "{text}");
    assert!(
        text.contains("certificate verify failed: the server's certificate is not signed by a CA in sslrootcert"),
        "{text}"
    );
    assert!(!text.contains(PASSWORD), "the password leaked: {text}");

    pipeline
        .create_source("src_tls", "up", "evolve_pub")
        .await
        .unwrap();
    pipeline
        .create_table(&TableSpec {
            name: "accounts_v1".into(),
            source: "src_tls".into(),
            schema: "public".into(),
            table: "accounts".into(),
            ..TableSpec::default()
        })
        .await
        .unwrap();
    pipeline
        .create_interface("accounts_json", "accounts_v1")
        .unwrap();
    pipeline
        .create_sink(
            "accounts_sink",
            "accounts_json",
            "sink",
            "public",
            "accounts_json",
        )
        .await
        .unwrap();
    audit_sink(&sink).await;

    let running = Running::start(pipeline.clone());
    wait_equal(&up, &sink).await;
    assert_eq!(audit_count(&sink).await, 50, "the initial load");
    let first = sink_rows(&sink, "accounts_json").await;
    assert_eq!(
        first[0],
        (
            r#"{"id": 1}"#.to_string(),
            r#"{"id": 1, "owner": "owner 1", "balance": 10.50}"#.to_string()
        )
    );

    up.batch_execute(
        "INSERT INTO accounts SELECT i, 'new ' || i, NULL FROM generate_series(51, 55) i;
         UPDATE accounts SET owner = owner || ' moved', balance = balance + 1 WHERE id <= 10;
         DELETE FROM accounts WHERE id BETWEEN 41 AND 43;",
    )
    .await
    .unwrap();
    wait_equal(&up, &sink).await;
    // 5 inserts + 10 updates + 3 deletes, each written once.
    assert_eq!(audit_count(&sink).await, 50 + 5 + 10 + 3);
    let rows = sink_rows(&sink, "accounts_json").await;
    assert_eq!(rows.len(), 52);
    assert_eq!(
        rows[0].1,
        r#"{"id": 1, "owner": "owner 1 moved", "balance": 11.50}"#
    );
    assert_eq!(rows[51].1, r#"{"id": 55, "owner": "new 55"}"#);
    assert_eq!(pipeline.documents("accounts_json").unwrap().len(), 52);

    // The source's walsender upstream, and every sink session, are TLS.
    let slot = pipeline.sources().unwrap()[0].slot.clone();
    let row = up
        .query_one(
            "SELECT s.ssl, a.backend_type, a.application_name \
             FROM pg_replication_slots r \
             JOIN pg_stat_ssl s ON s.pid = r.active_pid \
             JOIN pg_stat_activity a ON a.pid = r.active_pid \
             WHERE r.slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "the walsender session is encrypted");
    assert_eq!(row.get::<_, String>(1), "walsender");
    assert_eq!(row.get::<_, String>(2), "evolve-pipeline");
    let row = sink
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE s.ssl) \
             FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.application_name LIKE 'evolve-pipeline%'",
            &[],
        )
        .await
        .unwrap();
    let (sessions, encrypted): (i64, i64) = (row.get(0), row.get(1));
    assert!(sessions >= 1, "the sink has a session");
    assert_eq!(encrypted, sessions, "every sink session is encrypted");

    running.stop().await;
}

/// How the url's TLS parameters map onto the replication client's; what it
/// cannot express is refused with the reason, never weakened.
#[test]
fn replication_sessions_take_the_urls_tls_or_refuse_it() {
    let config = |query: &str| {
        upstream::replication_config(
            "up",
            &Connection::new(format!(
                "postgres://u:{PASSWORD}@db.example:5433/shop?{query}"
            )),
            "slot",
            "pub",
        )
    };
    let tls = |query: &str| config(query).unwrap().tls;

    let t = tls("");
    assert_eq!(t.mode, WireMode::Prefer, "libpq's default");
    assert_eq!(tls("sslmode=disable").mode, WireMode::Disable);
    assert_eq!(tls("sslmode=require").mode, WireMode::Require);
    let t = tls("sslmode=require&sslrootcert=/ca.pem");
    assert_eq!(t.mode, WireMode::VerifyCa, "require + root = verify-ca");
    assert_eq!(t.ca_pem_path, Some(PathBuf::from("/ca.pem")));
    let t = tls("sslmode=verify-full&sslrootcert=/ca.pem&sslcert=/c.pem&sslkey=/k.pem");
    assert_eq!(t.mode, WireMode::VerifyFull);
    assert_eq!(t.sni_hostname, None);
    assert_eq!(t.client_cert_pem_path, Some(PathBuf::from("/c.pem")));
    assert_eq!(t.client_key_pem_path, Some(PathBuf::from("/k.pem")));
    let c = config("sslmode=verify-full&sslrootcert=/ca.pem").unwrap();
    assert_eq!((c.host.as_str(), c.port), ("db.example", 5433));
    assert_eq!((c.user.as_str(), c.password.as_str()), ("u", PASSWORD));
    assert_eq!(c.database, "shop");

    // An IP address is checked against the certificate's IP names.
    let c = upstream::replication_config(
        "up",
        &Connection::new("postgres://u@127.0.0.1/db?sslmode=verify-full&sslrootcert=/ca.pem"),
        "slot",
        "pub",
    )
    .unwrap();
    assert_eq!(c.tls.sni_hostname.as_deref(), Some("127.0.0.1"));
    // No TLS over Unix-domain sockets, as libpq.
    let c = upstream::replication_config(
        "up",
        &Connection::new("host=/tmp user=u dbname=db sslmode=require"),
        "slot",
        "pub",
    )
    .unwrap();
    assert_eq!(c.tls.mode, WireMode::Disable);

    for (query, expected) in [
        (
            "sslmode=allow",
            "sslmode=allow is not supported for replication sessions",
        ),
        (
            "sslmode=prefer&sslrootcert=/ca.pem",
            "sslmode=prefer with sslrootcert is not supported for replication sessions",
        ),
        (
            "sslmode=verify-full",
            "sslmode=verify-full needs sslrootcert",
        ),
        ("sslmode=bogus", "sslmode \"bogus\" is not one of"),
    ] {
        let e = config(query).unwrap_err();
        let text = format!("{e} {}", e.detail().unwrap_or_default());
        assert!(text.contains(expected), "{query}: {text}");
        assert!(!text.contains(PASSWORD), "the password leaked: {text}");
    }
}
