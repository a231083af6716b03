//! `evolve_pg::connect` with libpq's TLS parameters, against real servers:
//! one with TLS whose certificate names `localhost` only, one whose
//! self-signed certificate (naming `localhost` only) is its own CA, one that
//! refuses plain TCP sessions, and the shared cluster, which has no TLS.
//!
//! Every URL carries a password (trust authentication ignores it) so that
//! each error can be checked for it.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use evolve_pg::PgError;
use evolve_test::{Cluster, Options, TestDb, TlsOptions};

const PASSWORD: &str = "hunter2-secret";
const CERT_USER: &str = "evolve_cert";

/// TLS on, plain TCP accepted too; the certificate names `localhost` only,
/// and role `evolve_cert` must log in with a client certificate.
fn tls_cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        Cluster::start_with(Options {
            tls: Some(TlsOptions {
                server_names: vec!["localhost".into()],
                cert_auth_users: vec![CERT_USER.into()],
                ..TlsOptions::default()
            }),
            ..Options::default()
        })
        .expect("start the TLS cluster")
    })
}

/// TLS on with a self-signed certificate for `localhost`, its own CA.
fn self_signed_cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        Cluster::start_with(Options {
            tls: Some(TlsOptions {
                server_names: vec!["localhost".into()],
                self_signed: true,
                ..TlsOptions::default()
            }),
            ..Options::default()
        })
        .expect("start the self-signed TLS cluster")
    })
}

/// TLS on, plain TCP refused (`hostssl` lines only).
fn tls_only_cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        Cluster::start_with(Options {
            tls: Some(TlsOptions {
                require: true,
                ..TlsOptions::default()
            }),
            ..Options::default()
        })
        .expect("start the TLS-only cluster")
    })
}

async fn fresh_db(cluster: fn() -> &'static Cluster, hint: &str) -> (&'static Cluster, TestDb) {
    let cluster = tokio::task::spawn_blocking(cluster).await.unwrap();
    let db = cluster.create_database(hint).await.unwrap();
    (cluster, db)
}

/// `postgres://postgres:<PASSWORD>@<host>:<port>/<db>?<query>`.
fn url(host: &str, cluster: &Cluster, db: &TestDb, query: &str) -> String {
    let mut url = format!(
        "postgres://postgres:{PASSWORD}@{host}:{}/{}",
        cluster.port(),
        db.name
    );
    if !query.is_empty() {
        url.push('?');
        url.push_str(query);
    }
    url
}

fn ca_of(cluster: &Cluster) -> String {
    cluster
        .ca_cert()
        .expect("a TLS cluster")
        .display()
        .to_string()
}

/// Whether the session of `url` is encrypted, from the server's view.
async fn session_ssl(url: &str) -> bool {
    let client = evolve_pg::connect(url, "evolve-pg tls test")
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// The error of connecting to `url`, checked to be one line without the
/// password.
async fn connect_error(url: &str) -> PgError {
    let e = match evolve_pg::connect(url, "evolve-pg tls test").await {
        Ok(_) => panic!("connecting to {} should fail", evolve_pg::redact_url(url)),
        Err(e) => e,
    };
    let text = e.to_string();
    assert!(!text.contains(PASSWORD), "the password leaked: {text}");
    assert!(!text.contains('\n'), "not one line: {text}");
    e
}

/// A self-signed CA of our own, which signed nothing the servers use.
struct OtherCa {
    dir: PathBuf,
}

impl OtherCa {
    fn new() -> OtherCa {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "evolve-pg-tls-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let status = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
            .args(["-subj", "/CN=not the cluster's CA"])
            .arg("-keyout")
            .arg(dir.join("ca.key"))
            .arg("-out")
            .arg(dir.join("ca.crt"))
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run openssl");
        assert!(status.success(), "openssl could not make a CA");
        OtherCa { dir }
    }

    fn cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
}

impl Drop for OtherCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn verify_full_with_the_servers_ca_encrypts_the_session() {
    let (cluster, db) = fresh_db(tls_cluster, "verify_full").await;
    let ca = ca_of(cluster);
    let query = format!("sslmode=verify-full&sslrootcert={ca}");
    assert!(session_ssl(&url("localhost", cluster, &db, &query)).await);
    // The key=value form says the same.
    let kv = format!(
        "host=localhost port={} user=postgres password={PASSWORD} dbname={} sslmode=verify-full sslrootcert='{ca}'",
        cluster.port(),
        db.name
    );
    assert!(session_ssl(&kv).await);
    // TLS parameters mix with tokio-postgres's own.
    let query =
        format!("application_name=mixed&sslrootcert={ca}&connect_timeout=10&sslmode=verify-full");
    let client = evolve_pg::connect(&url("localhost", cluster, &db, &query), "unused")
        .await
        .unwrap();
    let name: String = client
        .query_one("SELECT current_setting('application_name')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(name, "mixed");
}

#[tokio::test]
async fn verify_full_with_another_ca_fails_naming_the_target() {
    let (cluster, db) = fresh_db(tls_cluster, "other_ca").await;
    let other = OtherCa::new();
    let query = format!("sslmode=verify-full&sslrootcert={}", other.cert().display());
    let e = connect_error(&url("localhost", cluster, &db, &query)).await;
    assert!(matches!(e, PgError::Tls { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "could not connect to postgres@localhost:{}/{}: certificate verify failed: the server's certificate is not signed by a CA in sslrootcert {}",
            cluster.port(),
            db.name,
            other.cert().display()
        )
    );
    // verify-ca checks the chain just the same; require with a root
    // certificate is verify-ca, as in libpq.
    for mode in ["verify-ca", "require", "prefer"] {
        let query = format!("sslmode={mode}&sslrootcert={}", other.cert().display());
        let e = connect_error(&url("localhost", cluster, &db, &query)).await;
        assert!(
            e.to_string().contains("certificate verify failed"),
            "sslmode={mode}: {e}"
        );
    }
}

#[tokio::test]
async fn host_names_are_checked_by_verify_full_only() {
    let (cluster, db) = fresh_db(tls_cluster, "names").await;
    let ca = ca_of(cluster);
    // The certificate names localhost, not 127.0.0.1.
    let query = format!("sslmode=verify-full&sslrootcert={ca}");
    let e = connect_error(&url("127.0.0.1", cluster, &db, &query)).await;
    let text = e.to_string();
    assert!(
        text.starts_with(&format!(
            "could not connect to postgres@127.0.0.1:{}/{}: certificate verify failed: certificate not valid for name \"127.0.0.1\"",
            cluster.port(),
            db.name
        )),
        "{text}"
    );
    assert!(
        text.contains("localhost"),
        "names what the certificate lists: {text}"
    );
    assert!(
        text.contains("sslmode=verify-ca"),
        "gives the way out: {text}"
    );
    // verify-ca checks the chain, not the name; so does require with a root.
    for mode in ["verify-ca", "require"] {
        let query = format!("sslmode={mode}&sslrootcert={ca}");
        assert!(
            session_ssl(&url("127.0.0.1", cluster, &db, &query)).await,
            "sslmode={mode}"
        );
    }
}

#[tokio::test]
async fn require_without_a_root_certificate_encrypts_without_verifying() {
    let (cluster, db) = fresh_db(tls_cluster, "require").await;
    assert!(session_ssl(&url("127.0.0.1", cluster, &db, "sslmode=require")).await);
    // The default, prefer, takes TLS when the server offers it.
    assert!(session_ssl(&url("127.0.0.1", cluster, &db, "")).await);
    assert!(session_ssl(&url("localhost", cluster, &db, "sslmode=prefer")).await);
}

#[tokio::test]
async fn disable_and_allow_stay_plain_when_the_server_accepts_it() {
    let (cluster, db) = fresh_db(tls_cluster, "disable").await;
    assert!(!session_ssl(&url("127.0.0.1", cluster, &db, "sslmode=disable")).await);
    assert!(!session_ssl(&url("127.0.0.1", cluster, &db, "sslmode=allow")).await);
}

#[tokio::test]
async fn allow_and_prefer_take_tls_when_the_server_insists() {
    let (cluster, db) = fresh_db(tls_only_cluster, "allow").await;
    assert!(session_ssl(&url("127.0.0.1", cluster, &db, "sslmode=allow")).await);
    assert!(session_ssl(&url("127.0.0.1", cluster, &db, "sslmode=prefer")).await);
    // disable gets the server's refusal.
    let e = connect_error(&url("127.0.0.1", cluster, &db, "sslmode=disable")).await;
    assert!(matches!(e, PgError::Connect { .. }), "{e:?}");
    assert!(e.to_string().contains("no encryption"), "{e}");
}

#[tokio::test]
async fn require_against_a_server_without_tls_fails_clearly() {
    let db = evolve_test::fresh_db("require_plain").await;
    let cluster = evolve_test::shared();
    for mode in ["require", "verify-full"] {
        let other = OtherCa::new();
        let query = format!("sslmode={mode}&sslrootcert={}", other.cert().display());
        let e = connect_error(&url("127.0.0.1", cluster, &db, &query)).await;
        assert_eq!(
            e.to_string(),
            format!(
                "could not connect to postgres@127.0.0.1:{}/{}: server does not support TLS but sslmode={mode}; turn ssl on in the server or use sslmode=prefer",
                cluster.port(),
                db.name
            )
        );
    }
}

#[tokio::test]
async fn prefer_against_a_server_without_tls_connects_in_plain() {
    let db = evolve_test::fresh_db("prefer_plain").await;
    let cluster = evolve_test::shared();
    assert!(!session_ssl(&url("127.0.0.1", cluster, &db, "sslmode=prefer")).await);
    assert!(!session_ssl(&url("127.0.0.1", cluster, &db, "")).await);
    assert!(!session_ssl(&url("127.0.0.1", cluster, &db, "sslmode=allow")).await);
}

#[tokio::test]
async fn unreadable_or_missing_tls_files_are_named() {
    let (cluster, db) = fresh_db(tls_cluster, "files").await;
    let query = "sslmode=verify-full&sslrootcert=/nonexistent/evolve/ca.pem";
    let e = connect_error(&url("localhost", cluster, &db, query)).await;
    assert_eq!(
        e.to_string(),
        format!(
            "could not connect to postgres@localhost:{}/{}: cannot read sslrootcert /nonexistent/evolve/ca.pem: No such file or directory",
            cluster.port(),
            db.name
        )
    );
    // Named files are read in every mode, unlike libpq's silent skip.
    let query = "sslmode=prefer&sslrootcert=/nonexistent/evolve/ca.pem";
    let e = connect_error(&url("localhost", cluster, &db, query)).await;
    assert!(e.to_string().contains("cannot read sslrootcert"), "{e}");
    // Inconsistent parameters are refused before anything is read.
    let e = connect_error(&url("localhost", cluster, &db, "sslmode=verify-full")).await;
    assert!(matches!(e, PgError::BadUrl { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains("sslmode=verify-full needs sslrootcert"),
        "{e}"
    );
    let e = connect_error(&url("localhost", cluster, &db, "sslmode=verify")).await;
    assert!(
        e.to_string().contains("sslmode \"verify\" is not one of"),
        "{e}"
    );
    assert!(
        e.to_string().contains("postgres:***@"),
        "the url is redacted: {e}"
    );
}

#[tokio::test]
async fn client_certificates_authenticate() {
    let (cluster, db) = fresh_db(tls_cluster, "client_cert").await;
    let admin = evolve_pg::connect(&url("127.0.0.1", cluster, &db, ""), "admin")
        .await
        .unwrap();
    // Roles are cluster-wide; another run of this test in this process
    // may have made it.
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN CREATE ROLE {CERT_USER} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        ))
        .await
        .unwrap();
    let (cert, key) = cluster.client_certificate(CERT_USER).unwrap();
    let ca = ca_of(cluster);
    let base = format!(
        "postgres://{CERT_USER}:{PASSWORD}@localhost:{}/{}?sslmode=verify-full&sslrootcert={ca}",
        cluster.port(),
        db.name
    );
    let with_cert = format!("{base}&sslcert={}&sslkey={}", cert.display(), key.display());
    let client = evolve_pg::connect(&with_cert, "cert").await.unwrap();
    let user: String = client
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(user, CERT_USER);
    let e = connect_error(&base).await;
    assert!(e.to_string().contains("certificate"), "{e}");
    // A key that is not one.
    let with_bad_key = format!(
        "{base}&sslcert={}&sslkey={}",
        cert.display(),
        cert.display()
    );
    let e = connect_error(&with_bad_key).await;
    assert!(
        e.to_string().contains(&format!(
            "sslkey {} holds no usable private key",
            cert.display()
        )),
        "{e}"
    );
}

/// psql's `SELECT ssl ...` on `conninfo`: `Ok("t")` or psql's error.
fn psql_ssl(cluster: &Cluster, conninfo: &str) -> Result<String, String> {
    let out = Command::new(cluster.bin("psql"))
        .args(["-X", "-At", "-c"])
        .arg("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .arg(conninfo)
        .env("PGCONNECT_TIMEOUT", "10")
        .stdin(Stdio::null())
        .output()
        .expect("run psql");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::test]
async fn a_self_signed_certificate_is_its_own_ca_as_for_psql() {
    let (cluster, db) = fresh_db(self_signed_cluster, "self_signed").await;
    let cert = ca_of(cluster);
    let kv = |host: &str, mode: &str| {
        format!(
            "host={host} port={} user=postgres dbname={} sslmode={mode} sslrootcert='{cert}'",
            cluster.port(),
            db.name
        )
    };
    // psql takes the certificate as its own CA under verify-full...
    assert_eq!(
        psql_ssl(cluster, &kv("localhost", "verify-full")).as_deref(),
        Ok("t")
    );
    // ...and still checks the name.
    let e = psql_ssl(cluster, &kv("127.0.0.1", "verify-full")).unwrap_err();
    assert!(e.contains("127.0.0.1"), "{e}");
    // So does evolve, in both forms.
    assert!(session_ssl(&kv("localhost", "verify-full")).await);
    let query = format!("sslmode=verify-full&sslrootcert={cert}");
    assert!(session_ssl(&url("localhost", cluster, &db, &query)).await);
    let e = connect_error(&url("127.0.0.1", cluster, &db, &query)).await;
    assert!(
        e.to_string()
            .contains("certificate verify failed: certificate not valid for name \"127.0.0.1\""),
        "{e}"
    );
    // verify-ca checks the certificate, not the name.
    assert!(session_ssl(&kv("127.0.0.1", "verify-ca")).await);
    // Another self-signed certificate is no CA of the server's.
    let other = OtherCa::new();
    let query = format!("sslmode=verify-full&sslrootcert={}", other.cert().display());
    let e = connect_error(&url("localhost", cluster, &db, &query)).await;
    assert!(
        e.to_string()
            .contains("the server's certificate is not signed by a CA in sslrootcert"),
        "{e}"
    );
    // Nor is it when it comes after the server's in the file: the server's
    // own entry is what makes it trusted.
    let both = other.dir.join("both.pem");
    std::fs::write(
        &both,
        [
            std::fs::read(other.cert()).unwrap(),
            std::fs::read(&cert).unwrap(),
        ]
        .concat(),
    )
    .unwrap();
    let query = format!("sslmode=verify-full&sslrootcert={}", both.display());
    assert!(session_ssl(&url("localhost", cluster, &db, &query)).await);
}
