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

use evolve_test::{Auth, Cluster, Options, Role, TestDb};
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
    assert!(stderr.contains("WARN"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "password file {shown} is ignored because group or others can access it (mode 0644); run chmod 0600 {shown}"
        )),
        "{stderr}"
    );
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
