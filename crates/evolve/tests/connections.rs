//! Connections as PostgreSQL users expect them, through the `evolve` binary:
//! passwords from `PGPASSWORD`, the password file and the service file, as
//! psql finds them, against a cluster that asks for SCRAM passwords over
//! TCP; secrets never shown; each connection error said once.
//!
//! Every command runs with a clean environment: no `PG*` variables, `HOME`
//! and `PGSYSCONFDIR` a fresh directory, so that nothing of the machine's
//! own files is read.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use evolve_test::{Auth, Cluster, Options, Role, TestDb, TlsOptions};
use tokio::sync::OnceCell;

const EVOLVE: &str = env!("CARGO_BIN_EXE_evolve");
const APP: &str = "app";
const APP_PASSWORD: &str = "apppw";

/// scram-sha-256 over TCP for every role; role `app` (a superuser, for
/// replication and the registry's table) has password [`APP_PASSWORD`].
async fn cluster() -> &'static Cluster {
    static CLUSTER: OnceCell<Cluster> = OnceCell::const_new();
    CLUSTER
        .get_or_init(|| async {
            let cluster = tokio::task::spawn_blocking(|| {
                Cluster::start_with(Options {
                    auth: Auth::Scram {
                        password: "superuser-pw".into(),
                    },
                    ..Options::default()
                })
                .expect("start a cluster with password authentication")
            })
            .await
            .unwrap();
            cluster
                .create_role(&Role {
                    password: Some(APP_PASSWORD.into()),
                    superuser: true,
                    ..Role::new(APP)
                })
                .await
                .expect("create role app");
            cluster
        })
        .await
}

/// A `_schemas` export of two records, for `evolve registry import`.
const EXPORT: &str = concat!(
    r#"{"keytype":"SCHEMA","subject":"a","version":1,"magic":1}"#,
    "\t",
    r#"{"subject":"a","version":1,"id":10,"schema":"\"string\"","deleted":false}"#,
    "\n",
    r#"{"keytype":"CONFIG","subject":null,"magic":0}"#,
    "\t",
    r#"{"compatibilityLevel":"FULL"}"#,
    "\n"
);

/// A fresh directory, removed on drop: the commands' `HOME`, with an empty
/// `migrations` directory and `export.txt` ([`EXPORT`]).
struct Home(PathBuf);

impl Home {
    fn new(hint: &str) -> Home {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "evolve-connections-{}-{hint}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("migrations")).unwrap();
        std::fs::write(dir.join("export.txt"), EXPORT).unwrap();
        Home(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes `name` with `mode`.
    fn write(&self, name: &str, text: &str, mode: u32) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    /// `evolve args...` with nothing of the caller's `PG*` environment,
    /// this directory as `HOME` and `PGSYSCONFDIR`, and `env` set.
    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(EVOLVE);
        cmd.args(args).current_dir(&self.0).stdin(Stdio::null());
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("PG") {
                cmd.env_remove(key);
            }
        }
        cmd.env_remove("DATABASE_URL")
            .env_remove("EVOLVE_REGISTRY_STORAGE")
            .env_remove("EVOLVE_LOG")
            .env("HOME", &self.0)
            .env("PGSYSCONFDIR", &self.0)
            .envs(env.iter().copied());
        cmd
    }

    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.command(args, env).output().expect("run evolve")
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[track_caller]
fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
}

async fn admin(db: &TestDb) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .expect("connect as the superuser");
    tokio::spawn(connection);
    client
}

/// `postgres://app@127.0.0.1:<port>/<db>`: no password.
fn app_url(cluster: &Cluster, db: &TestDb) -> String {
    format!("postgres://{APP}@127.0.0.1:{}/{}", cluster.port(), db.name)
}

fn migrate_status(url: &str) -> Vec<String> {
    [
        "migrate",
        "status",
        "--dir",
        "migrations",
        "--database-url",
        url,
    ]
    .map(String::from)
    .to_vec()
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[tokio::test]
async fn migrate_finds_passwords_where_psql_does() {
    let cluster = cluster().await;
    let db = cluster.create_database("conn_migrate").await.unwrap();
    admin(&db)
        .await
        .batch_execute("CREATE TABLE t (id int); CREATE VIEW v AS SELECT id FROM t;")
        .await
        .unwrap();
    let home = Home::new("migrate");
    let url = app_url(cluster, &db);
    let status = migrate_status(&url);
    let status = args(&status);

    // No password anywhere: refused, saying where one goes.
    let out = home.run(&status, &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("the server asks for a password: none was given; set PGPASSWORD"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&home.path(".pgpass").display().to_string()),
        "{stderr}"
    );

    // PGPASSWORD.
    assert_ok(
        &home.run(&status, &[("PGPASSWORD", APP_PASSWORD)]),
        "PGPASSWORD",
    );
    // A wrong PGPASSWORD is the server's refusal, once.
    let out = home.run(&status, &[("PGPASSWORD", "wrong")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr.matches("password authentication failed").count(),
        1,
        "{stderr}"
    );
    // Its way out names where passwords come from, not the server's state.
    assert!(
        stderr.contains(
            "check the password: the one in --database-url, else PGPASSWORD or the password file (~/.pgpass)"
        ) && !stderr.contains("that the server is running"),
        "{stderr}"
    );
    // An unknown database names the name to check. (An unknown role is
    // refused as a wrong password under SCRAM, which hides whether it exists.)
    let missing_db = migrate_status(&url.replace(&format!("/{}", db.name), "/no_such_db"));
    let out = home.run(&args(&missing_db), &[("PGPASSWORD", APP_PASSWORD)]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("3D000") && stderr.contains("check the database name in --database-url"),
        "{stderr}"
    );

    // PGPASSFILE, mode 0600: the first line that matches wins.
    let pgpass = format!(
        "# evolve test\n*:*:*:someone_else:wrong\n127.0.0.1:{port}:{db}:{APP}:{APP_PASSWORD}\n127.0.0.1:{port}:*:{APP}:wrong\n",
        port = cluster.port(),
        db = db.name
    );
    let passfile = home.write("passfile", &pgpass, 0o600);
    let passfile_env = [("PGPASSFILE", passfile.to_str().unwrap())];
    assert_ok(&home.run(&status, &passfile_env), "PGPASSFILE 0600");
    // So does every command that takes a database URL.
    assert_ok(
        &home.run(&["deps", "t", "--database-url", &url], &passfile_env),
        "deps with PGPASSFILE",
    );
    assert_ok(
        &home.run(
            &["refresh", "--status", "--database-url", &url],
            &passfile_env,
        ),
        "refresh with PGPASSFILE",
    );
    // And the key=value form.
    let kv = format!(
        "host=127.0.0.1 port={} user={APP} dbname={}",
        cluster.port(),
        db.name
    );
    assert_ok(
        &home.run(&args(&migrate_status(&kv)), &passfile_env),
        "key=value with PGPASSFILE",
    );

    // ~/.pgpass, found through HOME.
    home.write(".pgpass", &pgpass, 0o600);
    assert_ok(&home.run(&status, &[]), "~/.pgpass 0600");

    // Readable by others: ignored with a warning naming the file and the fix.
    let open = home.write("open-passfile", &pgpass, 0o644);
    let shown = open.display().to_string();
    let out = home.run(&status, &[("PGPASSFILE", &shown)]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a 0644 password file is ignored"
    );
    let stderr = text(&out.stderr);
    // One line, as the command's own warnings: no timestamp or module.
    let warning = format!(
        "warning: password file {shown} is ignored because group or others can access it (mode 0644); run chmod 0600 {shown}"
    );
    assert!(stderr.lines().any(|l| l == warning), "{stderr}");
    assert!(
        stderr.contains("the server asks for a password"),
        "{stderr}"
    );
    assert!(!stderr.contains(APP_PASSWORD), "{stderr}");
}

#[tokio::test]
async fn services_come_before_the_environment_and_after_the_string() {
    let cluster = cluster().await;
    let db = cluster.create_database("conn_service").await.unwrap();
    let home = Home::new("service");
    let port = cluster.port();
    let services = format!(
        "# evolve test\n[other]\nhost=nowhere.invalid\n\n[evolve_svc]\nhost=127.0.0.1\nport={port}\nuser={APP}\ndbname={}\npassword={APP_PASSWORD}\n\n[bad_port]\nhost=127.0.0.1\nport=1\nuser={APP}\ndbname={}\npassword={APP_PASSWORD}\n",
        db.name, db.name
    );
    let file = home.write("services.conf", &services, 0o644);
    let file_env = ("PGSERVICEFILE", file.to_str().unwrap());

    // service= in key=value form, and in a URL.
    assert_ok(
        &home.run(&args(&migrate_status("service=evolve_svc")), &[file_env]),
        "service=evolve_svc",
    );
    assert_ok(
        &home.run(
            &args(&migrate_status("postgres://?service=evolve_svc")),
            &[file_env],
        ),
        "postgres://?service=evolve_svc",
    );
    // PGSERVICE with an otherwise empty connection string.
    assert_ok(
        &home.run(
            &args(&migrate_status("")),
            &[file_env, ("PGSERVICE", "evolve_svc")],
        ),
        "PGSERVICE",
    );
    // The service beats the environment: PGPORT and PGUSER are not used.
    assert_ok(
        &home.run(
            &args(&migrate_status("service=evolve_svc")),
            &[file_env, ("PGPORT", "1"), ("PGUSER", "nobody")],
        ),
        "service over PGPORT",
    );
    // The string beats the service: its port 1 is not used.
    let explicit = format!("postgres://127.0.0.1:{port}/{}?service=bad_port", db.name);
    assert_ok(
        &home.run(&args(&migrate_status(&explicit)), &[file_env]),
        "string over service",
    );
    let out = home.run(&args(&migrate_status("service=bad_port")), &[file_env]);
    assert_eq!(out.status.code(), Some(1), "the service's port 1 is used");
    assert!(
        text(&out.stderr).contains("127.0.0.1:1/"),
        "{}",
        text(&out.stderr)
    );
    // ~/.pg_service.conf, and PGSYSCONFDIR/pg_service.conf.
    home.write(".pg_service.conf", &services, 0o644);
    assert_ok(
        &home.run(&args(&migrate_status("service=evolve_svc")), &[]),
        "~/.pg_service.conf",
    );
    std::fs::remove_file(home.path(".pg_service.conf")).unwrap();
    home.write("pg_service.conf", &services, 0o644);
    assert_ok(
        &home.run(&args(&migrate_status("service=evolve_svc")), &[]),
        "PGSYSCONFDIR/pg_service.conf",
    );
    // An unknown service names the files looked in.
    let out = home.run(&args(&migrate_status("service=nope")), &[file_env]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "service \"nope\" is not defined in {}",
            file.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains(APP_PASSWORD), "{stderr}");
}

/// Every form of connection string that is not valid, each with the secret
/// `apppw` in it.
const MALFORMED: &[&str] = &[
    "postgres://app:apppw@host:99999/db",
    "postgres://app:apppw@host/db?sslmode=bogus",
    "postgres://app:apppw@host/db?nosuch=1",
    "postgresql://app:apppw%ZZ@host/db",
    "postgres://host/db?user=app&password=apppw&port=x",
    "app:apppw@host/db",
    "password=apppw host",
    "host=h password = 'apppw",
    "host=h password=apppw port=notaport",
    "host=h password='apppw x' sslmode=verify-full",
    "mysql://app:apppw@host/db",
];

#[test]
fn secrets_in_malformed_connection_strings_are_never_shown() {
    let home = Home::new("redact");
    for url in MALFORMED {
        let runs = [
            home.run(&args(&migrate_status(url)), &[]),
            home.run(&["deps", "t", "--database-url", url], &[]),
            home.run(&["refresh", "--status", "--database-url", url], &[]),
            home.run(&["registry", "import", "export.txt", "--storage", url], &[]),
        ];
        for out in runs {
            let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
            assert_eq!(out.status.code(), Some(1), "{url}: {stderr}");
            assert!(
                !stdout.contains("apppw") && !stderr.contains("apppw"),
                "{url} leaked its password:\n{stdout}{stderr}"
            );
            assert_eq!(stderr.lines().count(), 1, "{url}: {stderr}");
            assert!(
                stderr.contains("is not valid") || stderr.contains("is not understood"),
                "{url}: {stderr}"
            );
        }
    }
}

#[test]
fn an_unreachable_server_is_reported_once() {
    let home = Home::new("unreachable");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://{APP}:{APP_PASSWORD}@127.0.0.1:{port}/db");
    let storage = format!("postgres://{APP}@127.0.0.1:{port}/db");
    let runs = [
        home.run(&args(&migrate_status(&url)), &[]),
        home.run(&["deps", "t", "--database-url", &url], &[]),
        home.run(&["refresh", "--status", "--database-url", &url], &[]),
        home.run(
            &["registry", "import", "export.txt", "--storage", &storage],
            &[],
        ),
    ];
    for out in runs {
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert_eq!(stderr.matches("Connection refused").count(), 1, "{stderr}");
        assert_eq!(stderr.matches("could not connect").count(), 1, "{stderr}");
        assert!(stderr.contains(&format!("127.0.0.1:{port}/db")), "{stderr}");
        assert!(!stderr.contains(APP_PASSWORD), "{stderr}");
    }
}

#[tokio::test]
async fn the_registry_store_takes_its_password_from_pgpass() {
    let cluster = cluster().await;
    let db = cluster.create_database("conn_registry").await.unwrap();
    let home = Home::new("registry");
    home.write(
        ".pgpass",
        &format!("127.0.0.1:{}:*:{APP}:{APP_PASSWORD}\n", cluster.port()),
        0o600,
    );
    let storage = app_url(cluster, &db);
    let out = home.run(
        &["registry", "import", "export.txt", "--storage", &storage],
        &[],
    );
    assert_ok(&out, "registry import with ~/.pgpass");
    let rows: i64 = admin(&db)
        .await
        .query_one("SELECT count(*) FROM evolve_registry_log", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 2, "both records of the export are in the store");
}

/// A running `evolve pipeline run`; killed on drop.
struct Pipeline {
    child: Child,
    admin: String,
}

impl Pipeline {
    fn start(home: &Home, config: &Path, env: &[(&str, &str)]) -> Pipeline {
        let mut child = home
            .command(
                &["pipeline", "run", "--config", config.to_str().unwrap()],
                env,
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn evolve pipeline run");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("first line");
        let admin = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_owned();
        Pipeline { child, admin }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn sink_rows(sink: &tokio_postgres::Client) -> i64 {
    let exists: bool = sink
        .query_one("SELECT to_regclass('public.orders_json') IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    if !exists {
        return 0;
    }
    sink.query_one("SELECT count(*) FROM public.orders_json", &[])
        .await
        .unwrap()
        .get(0)
}

async fn wait_for_rows(sink: &tokio_postgres::Client, want: i64) {
    let start = Instant::now();
    loop {
        let got = sink_rows(sink).await;
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the sink has {got} rows after 30 s, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_takes_its_passwords_from_pgpass() {
    let cluster = cluster().await;
    let up_db = cluster.create_database("conn_pipe_up").await.unwrap();
    let sink_db = cluster.create_database("conn_pipe_sink").await.unwrap();
    let up = admin(&up_db).await;
    let sink = admin(&sink_db).await;
    up.batch_execute(
        "CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL);
         INSERT INTO orders VALUES (1, 'ada'), (2, 'bob');",
    )
    .await
    .unwrap();
    let home = Home::new("pipeline");
    let passfile = home.write(
        "passfile",
        &format!("127.0.0.1:{}:*:{APP}:{APP_PASSWORD}\n", cluster.port()),
        0o600,
    );
    let config = home.write(
        "evolve.toml",
        &format!(
            "state_dir = \"state\"\nadmin_listen = \"127.0.0.1:0\"\n\
             [connections.pg_conn]\nurl = \"{}\"\n[connections.sink_conn]\nurl = \"{}\"\n",
            app_url(cluster, &up_db),
            app_url(cluster, &sink_db)
        ),
        0o644,
    );
    let pipeline = Pipeline::start(
        &home,
        &config,
        &[("PGPASSFILE", passfile.to_str().unwrap())],
    );
    let statements = "\
CREATE SOURCE src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub');
CREATE TABLE orders_v1 FROM SOURCE src (REFERENCE public.orders);
CREATE MATERIALIZED VIEW orders_json AS
  SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{}'::jsonb) AS data FROM orders_v1 t;
CREATE SINK orders_sink FROM orders_json INTO POSTGRES CONNECTION sink_conn (TABLE 'public.orders_json');
";
    let out = home.run(&["sql", "--admin", &pipeline.admin, "-c", statements], &[]);
    assert_ok(&out, "the README's statements");
    // The snapshot (upstream session) reached the sink (sink session)...
    wait_for_rows(&sink, 2).await;
    // ...and so do changes (the replication session).
    up.batch_execute("INSERT INTO orders VALUES (3, 'cy'), (4, 'dee')")
        .await
        .unwrap();
    wait_for_rows(&sink, 4).await;
    // Every session of the pipeline logged in as app, with its password.
    let sessions: Vec<(String, String)> = up
        .query(
            "SELECT usename::text, coalesce(backend_type, '') FROM pg_stat_activity WHERE application_name LIKE 'evolve-pipeline%'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(
        sessions.iter().any(|(_, kind)| kind == "walsender"),
        "a replication session: {sessions:?}"
    );
    assert!(sessions.iter().all(|(user, _)| user == APP), "{sessions:?}");
}

/// TLS with a self-signed certificate for `localhost` that is its own CA
/// (as `openssl req -x509` makes one), and scram-sha-256 over TCP; role
/// `app` as in [`cluster`].
async fn tls_cluster() -> &'static Cluster {
    static CLUSTER: OnceCell<Cluster> = OnceCell::const_new();
    CLUSTER
        .get_or_init(|| async {
            let cluster = tokio::task::spawn_blocking(|| {
                Cluster::start_with(Options {
                    tls: Some(TlsOptions {
                        server_names: vec!["localhost".into()],
                        self_signed: true,
                        ..TlsOptions::default()
                    }),
                    auth: Auth::Scram {
                        password: "superuser-pw".into(),
                    },
                    ..Options::default()
                })
                .expect("start a cluster with a self-signed certificate")
            })
            .await
            .unwrap();
            cluster
                .create_role(&Role {
                    password: Some(APP_PASSWORD.into()),
                    superuser: true,
                    ..Role::new(APP)
                })
                .await
                .expect("create role app");
            cluster
        })
        .await
}

/// A migration that records, in table `seen`, what its session was:
/// `(version, user, database, server port, TLS)`.
fn seen_migration(version: i32) -> String {
    let select = format!(
        "SELECT {version} AS version, current_user::text AS who, current_database()::text AS db, \
         inet_server_port() AS port, s.ssl FROM pg_stat_ssl s WHERE s.pid = pg_backend_pid()"
    );
    if version == 1 {
        format!("CREATE TABLE seen AS {select};\n")
    } else {
        format!("INSERT INTO seen {select};\n")
    }
}

/// The rows of `seen`.
async fn seen(db: &TestDb) -> Vec<(i32, String, String, i32, bool)> {
    admin(db)
        .await
        .query(
            "SELECT version, who, db, port, ssl FROM seen ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}

#[tokio::test]
async fn the_pg_environment_alone_is_a_connection_for_migrate() {
    let cluster = tls_cluster().await;
    let db = cluster.create_database("conn_env").await.unwrap();
    let home = Home::new("env");
    home.write("migrations/V1__seen.sql", &seen_migration(1), 0o644);
    let port = cluster.port().to_string();
    let cert = cluster.ca_cert().unwrap().display().to_string();
    let all: Vec<(&str, &str)> = vec![
        ("PGHOST", "localhost"),
        ("PGPORT", &port),
        ("PGUSER", APP),
        ("PGDATABASE", &db.name),
        ("PGPASSWORD", APP_PASSWORD),
        ("PGSSLMODE", "verify-full"),
        ("PGSSLROOTCERT", &cert),
    ];
    let without = |name: &str| -> Vec<(&str, &str)> {
        all.iter().copied().filter(|(k, _)| *k != name).collect()
    };
    let with = |name: &'static str, value: &'static str| -> Vec<(&str, &str)> {
        let mut env = without(name);
        env.push((name, value));
        env
    };
    // The connection string gives nothing: empty, or a URL with no parts.
    let apply = [
        "migrate",
        "apply",
        "--dir",
        "migrations",
        "--database-url",
        "",
    ];
    let status = migrate_status("postgres://");
    let status = args(&status);

    assert_ok(&home.run(&apply, &all), "migrate apply from PG* alone");
    let port_number: i32 = cluster.port().into();
    assert_eq!(
        seen(&db).await,
        [(1, APP.to_string(), db.name.clone(), port_number, true)],
        "the session was app's, on PGDATABASE over TCP to PGPORT, with TLS"
    );
    assert_ok(&home.run(&status, &all), "migrate status from PG* alone");

    // Each variable is the one that was used: without it libpq's default
    // (the Unix socket, port 5432, the OS user, a database named after the
    // user, no password) fails.
    for (name, says) in [
        ("PGHOST", "/var/run/postgresql"),
        ("PGPORT", ":5432"),
        ("PGUSER", "password authentication failed"),
        ("PGDATABASE", &format!("database \"{APP}\" does not exist")),
        ("PGPASSWORD", "the server asks for a password"),
    ] {
        let out = home.run(&status, &without(name));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "without {name}: {stderr}");
        assert!(stderr.contains(says), "without {name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "without {name}: {stderr}");
        assert!(!stderr.contains(APP_PASSWORD), "{stderr}");
    }
    // PGSSLMODE decides: verify-full checks the name (the certificate is
    // for localhost), require does not, disable sends no TLS at all.
    let out = home.run(&status, &with("PGHOST", "127.0.0.1"));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("certificate not valid for name \"127.0.0.1\""),
        "{stderr}"
    );
    let mut require = with("PGHOST", "127.0.0.1");
    require.retain(|(k, _)| *k != "PGSSLMODE");
    require.push(("PGSSLMODE", "require"));
    assert_ok(&home.run(&status, &require), "PGSSLMODE=require");
    home.write("migrations/V2__seen.sql", &seen_migration(2), 0o644);
    assert_ok(
        &home.run(&apply, &with("PGSSLMODE", "disable")),
        "PGSSLMODE=disable",
    );
    assert_eq!(
        seen(&db).await[1],
        (2, APP.to_string(), db.name.clone(), port_number, false),
        "PGSSLMODE=disable: no TLS"
    );
}

#[tokio::test]
async fn a_self_signed_certificate_is_its_own_ca_for_the_binary() {
    let cluster = tls_cluster().await;
    let db = cluster.create_database("conn_self_signed").await.unwrap();
    let home = Home::new("self_signed");
    home.write("migrations/V1__seen.sql", &seen_migration(1), 0o644);
    home.write(
        ".pgpass",
        &format!("localhost:{}:*:{APP}:{APP_PASSWORD}\n", cluster.port()),
        0o600,
    );
    let cert = cluster.ca_cert().unwrap().display().to_string();
    let url = |host: &str| {
        format!(
            "postgres://{APP}@{host}:{}/{}?sslmode=verify-full&sslrootcert={cert}",
            cluster.port(),
            db.name
        )
    };
    let out = home.run(
        &[
            "migrate",
            "apply",
            "--dir",
            "migrations",
            "--database-url",
            &url("localhost"),
        ],
        &[],
    );
    assert_ok(&out, "verify-full with the self-signed certificate as CA");
    assert!(seen(&db).await[0].4, "the session used TLS");
    let kv = format!(
        "host=localhost port={} user={APP} dbname={} sslmode=verify-full sslrootcert='{cert}'",
        cluster.port(),
        db.name
    );
    assert_ok(
        &home.run(&args(&migrate_status(&kv)), &[]),
        "key=value form",
    );
    // The name is still checked under verify-full: one line, the reason,
    // not rustls' CaUsedAsEndEntity.
    let out = home.run(&args(&migrate_status(&url("127.0.0.1"))), &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("certificate not valid for name \"127.0.0.1\""),
        "{stderr}"
    );
    assert!(!stderr.contains("CaUsedAsEndEntity"), "{stderr}");
}

#[tokio::test]
async fn lint_and_plan_find_passwords_where_psql_does() {
    let cluster = cluster().await;
    let db = cluster.create_database("conn_lint_plan").await.unwrap();
    admin(&db)
        .await
        .batch_execute(
            "CREATE TABLE t (id int); INSERT INTO t VALUES (1); CREATE VIEW v AS SELECT id FROM t;",
        )
        .await
        .unwrap();
    let home = Home::new("lint_plan");
    home.write(
        "migrations/V1__widen.sql",
        "ALTER TABLE t ALTER COLUMN id TYPE bigint;\n",
        0o644,
    );
    let url = app_url(cluster, &db);
    let lint = ["lint", "--format", "json", "--database-url", &url];
    let plan = ["plan", "--dir", "migrations", "--database-url", &url];
    let probe = [
        "plan",
        "--probe",
        "--dir",
        "migrations",
        "--database-url",
        &url,
    ];
    // What only the catalog tells: int to bigint rewrites (lint), and
    // view v is rebuilt (plan).
    let lint_rules = |out: &Output| -> Vec<String> {
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
        doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["rule"].as_str().unwrap().to_string())
            .collect()
    };
    let read_catalog = |what: &str, env: &[(&str, &str)]| {
        let out = home.run(&lint, env);
        assert!(
            lint_rules(&out).contains(&"alter-type-rewrite".to_string()),
            "lint with {what}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert!(!text(&out.stderr).contains("cannot read the catalog"));
        let out = home.run(&plan, env);
        assert_ok(&out, &format!("plan with {what}"));
        assert!(
            text(&out.stdout).contains("rebuilds   view public.v"),
            "plan with {what}: {}",
            text(&out.stdout)
        );
    };

    // No password anywhere: both refused, saying where one goes.
    for command in [&lint[..], &plan[..]] {
        let out = home.run(command, &[]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command:?}: {stderr}");
        assert!(
            stderr.contains("the server asks for a password: none was given; set PGPASSWORD"),
            "{command:?}: {stderr}"
        );
    }
    read_catalog("PGPASSWORD", &[("PGPASSWORD", APP_PASSWORD)]);
    let pgpass = format!(
        "127.0.0.1:{}:{}:{APP}:{APP_PASSWORD}\n",
        cluster.port(),
        db.name
    );
    let passfile = home.write("passfile", &pgpass, 0o600);
    read_catalog("PGPASSFILE", &[("PGPASSFILE", passfile.to_str().unwrap())]);
    home.write(".pgpass", &pgpass, 0o600);
    read_catalog("~/.pgpass", &[]);
    // The probe's pg_dump and its scratch database get the password too.
    let out = home.run(&probe, &[]);
    assert_ok(&out, "plan --probe with ~/.pgpass");
    assert!(
        text(&out.stdout).contains("probe      agrees"),
        "{}",
        text(&out.stdout)
    );
    let kv = format!(
        "host=127.0.0.1 port={} user={APP} dbname={}",
        cluster.port(),
        db.name
    );
    let out = home.run(
        &[
            "plan",
            "--probe",
            "--dir",
            "migrations",
            "--database-url",
            &kv,
        ],
        &[],
    );
    assert_ok(&out, "plan --probe, key=value, with ~/.pgpass");
    assert!(
        text(&out.stdout).contains("probe      agrees"),
        "{}",
        text(&out.stdout)
    );
    // A password file others can read is ignored, as psql ignores it.
    std::fs::set_permissions(home.path(".pgpass"), std::fs::Permissions::from_mode(0o644)).unwrap();
    for command in [&lint[..], &plan[..]] {
        let out = home.run(command, &[]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command:?}: {stderr}");
        assert!(stderr.contains("chmod 0600"), "{command:?}: {stderr}");
        assert!(!stderr.contains(APP_PASSWORD), "{stderr}");
    }
}
