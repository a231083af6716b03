//! One throwaway cluster: a temp dir, `initdb`, `pg_ctl start`, and on drop
//! `pg_ctl stop -m immediate` and removal of the dir.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::os::{self, RunAs};
use crate::tls::{TlsFiles, TlsOptions};
use crate::{HarnessError, pg_bin_dir};

/// Attempts at starting the server, each on a fresh free port, when the
/// port turns out to be taken between choosing it and the server binding it.
const START_ATTEMPTS: usize = 5;

/// Lines of the server log (or of a tool's output) quoted in errors.
const TAIL_LINES: usize = 30;

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);
static NEXT_DB: AtomicU64 = AtomicU64::new(0);

/// Woken when its stdin reaches end of file, which happens when the process
/// holding the other end exits, however it exits. Then it stops the server
/// (SIGQUIT to the postmaster is what `pg_ctl stop -m immediate` sends) and
/// removes the directory. `$1` is the cluster's directory. It runs as
/// ourselves, so as root it can both signal the postmaster and remove a
/// directory in a parent that only root may write.
///
/// Like `pg_ctl`, it waits for the postmaster to remove its pid file rather
/// than for the process to vanish: an exited postmaster stays a zombie until
/// init reaps it, which some inits do only every second or so. `kill -0`
/// ends the wait for a postmaster that died without removing the file.
const WATCHDOG: &str = r#"
trap '' HUP INT QUIT
cat >/dev/null
pidfile="$1/data/postmaster.pid"
if [ -f "$pidfile" ]; then
    pid=$(head -n 1 "$pidfile")
    if [ -n "$pid" ] && kill -QUIT "$pid" 2>/dev/null; then
        i=0
        while [ -f "$pidfile" ] && kill -0 "$pid" 2>/dev/null && [ "$i" -lt 100 ]; do
            sleep 0.05
            i=$((i + 1))
        done
        if [ -f "$pidfile" ]; then
            kill -KILL "$pid" 2>/dev/null
        fi
    fi
fi
rm -rf "$1"
"#;

/// A PostgreSQL cluster in a temp dir, listening on 127.0.0.1 at a free port,
/// with `trust` authentication for the `postgres` superuser (unless
/// [`Options::auth`] says otherwise).
///
/// Settings: `wal_level=logical`, `fsync=off`, `synchronous_commit=off`,
/// `full_page_writes=off`, `max_connections=200`, `max_wal_senders=20`,
/// `max_replication_slots=20`, `shared_buffers=128MB`, then
/// [`Options::settings`] (which win); the Unix socket lives in the temp dir,
/// not in `/var/run/postgresql`.
///
/// Dropping it stops the server (`pg_ctl stop -m immediate`) and removes the
/// directory. A watchdog process does the same if this process exits
/// without dropping it, even when killed. With `EVOLVE_TEST_KEEP=1` neither
/// happens and the cluster keeps running.
#[derive(Debug)]
pub struct Cluster {
    dir: PathBuf,
    data: PathBuf,
    bin: PathBuf,
    port: u16,
    run_as: Option<RunAs>,
    keep: bool,
    /// `sh` running [`WATCHDOG`]; we hold its stdin open for our lifetime.
    watchdog: Option<Child>,
    /// The certificates of a cluster started with TLS.
    tls: Option<TlsFiles>,
    /// How TCP sessions authenticate.
    auth: Auth,
    /// [`Options::settings`], written after the harness's own.
    extra_settings: Vec<(String, String)>,
}

/// How to start a cluster: [`Cluster::start_with`]. The default is what
/// [`Cluster::start`] does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// TLS on the server (`ssl=on`, a throwaway CA and a server certificate
    /// made with the `openssl` command line); `None` for none, the default.
    pub tls: Option<TlsOptions>,
    /// How sessions over TCP authenticate: [`Auth::Trust`] by default.
    pub auth: Auth,
    /// Server settings `(name, value)` written to `postgresql.conf` after
    /// the harness's own, so they win over them: e.g. `("wal_level",
    /// "replica")` or `("max_replication_slots", "2")`. Each value is
    /// written quoted, as `postgresql.conf` accepts for every type. A
    /// setting the server rejects fails [`Cluster::start_with`] with the
    /// server log's last lines. Empty by default.
    pub settings: Vec<(String, String)>,
}

/// How a cluster's TCP sessions (`host` and `hostssl` lines, replication
/// included) authenticate. Unix-socket sessions are always trusted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Auth {
    /// No password asked of anyone. The default.
    #[default]
    Trust,
    /// `scram-sha-256` for every role, as a production server does; the
    /// `postgres` superuser's password is `password` (it is in
    /// [`Cluster::url`]). Make more roles with [`Cluster::create_role`].
    Scram {
        /// The `postgres` superuser's password.
        password: String,
    },
}

/// A role for [`Cluster::create_role`]: `LOGIN`, with a password unless
/// `password` is `None`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Role {
    /// The role's name.
    pub name: String,
    /// Its password (stored as a SCRAM verifier); `None` for none.
    pub password: Option<String>,
    /// `SUPERUSER`, which also allows replication sessions.
    pub superuser: bool,
}

impl Role {
    /// A `LOGIN` role named `name`, without password or superuser.
    pub fn new(name: impl Into<String>) -> Role {
        Role {
            name: name.into(),
            password: None,
            superuser: false,
        }
    }
}

/// A fresh, empty database on a [`Cluster`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestDb {
    /// The database's name, `evolve_<hint>_<n>`.
    pub name: String,
    /// `postgres://postgres@127.0.0.1:<port>/<name>`, with the superuser's
    /// password under [`Auth::Scram`].
    pub url: String,
}

impl Cluster {
    /// Create, initialise and start a new cluster. Takes about two seconds,
    /// nearly all of it `initdb`.
    ///
    /// Blocks the calling thread; from async code that is acceptable in tests
    /// (each `#[tokio::test]` owns its runtime), elsewhere use
    /// `tokio::task::spawn_blocking`.
    pub fn start() -> Result<Cluster, HarnessError> {
        Cluster::start_with(Options::default())
    }

    /// [`Cluster::start`] with `options`. [`Options::settings`] are written
    /// to `postgresql.conf` after the harness's own settings, so they win.
    /// With [`Auth::Scram`], TCP sessions
    /// need a password (SCRAM), Unix-socket sessions do not. With
    /// [`Options::tls`], the server
    /// also has `ssl=on`, `ssl_cert_file`, `ssl_key_file` and `ssl_ca_file`
    /// from `<dir>/tls` (a fresh CA, see [`Cluster::ca_cert`], and a server
    /// certificate for [`TlsOptions::server_names`]), and a `pg_hba.conf`
    /// with `hostssl` lines (and plain `host` lines unless
    /// [`TlsOptions::require`]). Needs `openssl` on `PATH`.
    ///
    /// ```no_run
    /// # fn example() -> Result<(), evolve_test::HarnessError> {
    /// use evolve_test::{Cluster, Options, TlsOptions};
    /// let cluster = Cluster::start_with(Options {
    ///     tls: Some(TlsOptions { require: true, ..TlsOptions::default() }),
    ///     ..Options::default()
    /// })?;
    /// let ca = cluster.ca_cert().unwrap().display();
    /// let url = format!(
    ///     "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={ca}",
    ///     cluster.port()
    /// );
    /// # Ok(()) }
    /// ```
    pub fn start_with(options: Options) -> Result<Cluster, HarnessError> {
        let bin = pg_bin_dir()?;
        let run_as = RunAs::detect()?;
        let keep = keep_requested();
        let dir = create_dir(&os::base_dir(run_as))?;
        // From here on, dropping `cluster` (on any error) cleans up.
        let mut cluster = Cluster {
            data: dir.join("data"),
            dir,
            bin,
            port: 0,
            run_as,
            keep,
            watchdog: None,
            tls: None,
            auth: options.auth.clone(),
            extra_settings: checked_settings(&options.settings)?,
        };
        if let Some(ids) = run_as {
            std::os::unix::fs::chown(&cluster.dir, Some(ids.uid), Some(ids.gid)).map_err(|e| {
                HarnessError::io(
                    format!("give {} to the postgres user", cluster.dir.display()),
                    e,
                )
            })?;
        }
        if !keep {
            cluster.watchdog = Some(spawn_watchdog(&cluster.dir)?);
        }
        cluster.initdb()?;
        if let Some(tls) = &options.tls {
            let files = TlsFiles::create(&cluster.dir, tls, run_as)?;
            let hba = cluster.data.join("pg_hba.conf");
            std::fs::write(&hba, files.hba(cluster.tcp_method()))
                .map_err(|e| HarnessError::io(format!("write {}", hba.display()), e))?;
            cluster.tls = Some(files);
        }
        cluster.start_server()?;
        if keep {
            let as_postgres = if run_as.is_some() {
                "runuser -u postgres -- "
            } else {
                ""
            };
            // Straight to fd 2, past the test harness's output capture.
            let _ = writeln!(
                std::io::stderr(),
                "evolve-test: EVOLVE_TEST_KEEP is set; keeping PostgreSQL cluster {dir} on port {port} ({url}); remove it with: {as_postgres}{pg_ctl} -D {data} -m immediate stop; rm -rf {dir}",
                dir = cluster.dir.display(),
                port = cluster.port,
                url = cluster.url("postgres"),
                pg_ctl = cluster.bin("pg_ctl").display(),
                data = cluster.data.display(),
            );
        }
        Ok(cluster)
    }

    /// A streaming replica of this cluster, started and caught up: a
    /// `pg_basebackup -R` over the Unix socket (so it needs no password
    /// under [`Auth::Scram`]), connecting with `application_name` `name`
    /// (the name `pg_stat_replication` shows), reporting its position every
    /// second (`wal_receiver_status_interval = 1s`). It is a [`Cluster`] of
    /// its own: its own port, directory and watchdog, stopped when dropped.
    /// Pause its replay with `SELECT pg_wal_replay_pause()` on it to make it
    /// fall behind.
    pub fn start_standby(&self, name: &str) -> Result<Cluster, HarnessError> {
        let dir = create_dir(&os::base_dir(self.run_as))?;
        let mut standby = Cluster {
            data: dir.join("data"),
            dir,
            bin: self.bin.clone(),
            port: 0,
            run_as: self.run_as,
            keep: self.keep,
            watchdog: None,
            tls: None,
            auth: self.auth.clone(),
            // A hot standby needs settings such as max_wal_senders at
            // least as high as its primary's: the same ones.
            extra_settings: self.extra_settings.clone(),
        };
        if let Some(ids) = self.run_as {
            std::os::unix::fs::chown(&standby.dir, Some(ids.uid), Some(ids.gid)).map_err(|e| {
                HarnessError::io(
                    format!("give {} to the postgres user", standby.dir.display()),
                    e,
                )
            })?;
        }
        if !standby.keep {
            standby.watchdog = Some(spawn_watchdog(&standby.dir)?);
        }
        let conninfo = format!(
            "host={} port={} user=postgres application_name={}",
            self.dir.display(),
            self.port,
            name
        );
        let mut cmd = standby.tool("pg_basebackup");
        cmd.arg("-D")
            .arg(&standby.data)
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync", "-d"])
            .arg(&conninfo);
        let out = standby.run(cmd, "pg_basebackup")?;
        if !out.status.success() {
            return Err(HarnessError::Tool {
                tool: format!("pg_basebackup -D {}", standby.data.display()),
                status: out.status,
                output: tail(&combined(&out), TAIL_LINES),
            });
        }
        let conf = standby.data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf)
            .map_err(|e| HarnessError::io(format!("read {}", conf.display()), e))?;
        text.push_str("\nwal_receiver_status_interval = 1s\nhot_standby = on\n");
        std::fs::write(&conf, text)
            .map_err(|e| HarnessError::io(format!("write {}", conf.display()), e))?;
        standby.start_server()?;
        Ok(standby)
    }

    /// The TCP port the server listens on at 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:<port>/<database>`, under
    /// [`Auth::Scram`] with the superuser's password (percent-encoded). The
    /// name is not percent-encoded; names from [`Cluster::create_database`]
    /// need none.
    pub fn url(&self, database: &str) -> String {
        let password = match &self.auth {
            Auth::Trust => String::new(),
            Auth::Scram { password } => format!(":{}", percent_encode(password)),
        };
        format!(
            "postgres://postgres{password}@127.0.0.1:{}/{database}",
            self.port
        )
    }

    /// The directory of the server's Unix socket, where every session is
    /// trusted (`host=<dir>` in a connection string).
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// The path of a tool from the server's bin directory, e.g. `psql`,
    /// `pg_recvlogical`, `pg_dump`.
    pub fn bin(&self, tool: &str) -> PathBuf {
        self.bin.join(tool)
    }

    /// The data directory (`PGDATA`). As root, it belongs to `postgres`.
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The PEM file of the CA that signed the server's certificate, for
    /// `sslrootcert` (the server's certificate itself under
    /// [`TlsOptions::self_signed`]); `None` for a cluster started without
    /// TLS.
    pub fn ca_cert(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.ca_cert.as_path())
    }

    /// A fresh client certificate for role `user` (its CN), signed by the
    /// cluster's CA, and its key: `(cert, key)` PEM files in `<dir>/tls`,
    /// for `sslcert` and `sslkey`. The server trusts the CA for client
    /// certificates; roles in [`TlsOptions::cert_auth_users`] must use one.
    ///
    /// # Errors
    ///
    /// For a cluster started without TLS, or when `openssl` fails.
    pub fn client_certificate(&self, user: &str) -> Result<(PathBuf, PathBuf), HarnessError> {
        let Some(tls) = &self.tls else {
            return Err(HarnessError::io(
                format!("make a client certificate for {user}"),
                std::io::Error::other(
                    "the cluster was started without TLS; use Cluster::start_with(Options { tls: Some(..) })",
                ),
            ));
        };
        let n = NEXT_DB.fetch_add(1, Ordering::Relaxed);
        let stem = format!("client-{n}");
        let (cert, key) = (
            tls.dir.join(format!("{stem}.crt")),
            tls.dir.join(format!("{stem}.key")),
        );
        tls.issue(user, "client", &cert, &key)?;
        Ok((cert, key))
    }

    /// The last `lines` lines of the server log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        match std::fs::read(self.log_path()) {
            Ok(bytes) => tail(&String::from_utf8_lossy(&bytes), lines),
            Err(e) => format!("(server log {} unreadable: {e})", self.log_path().display()),
        }
    }

    /// Create a fresh empty database named `evolve_<hint>_<n>`: the hint
    /// lowercased with anything but `[a-z0-9_]` replaced by `_` and cut to 35
    /// bytes, `n` unique in this process.
    ///
    /// The connection it uses runs on the caller's runtime and is closed
    /// before this returns, so nothing outlives the caller's runtime.
    pub async fn create_database(&self, hint: &str) -> Result<TestDb, HarnessError> {
        let name = database_name(hint, NEXT_DB.fetch_add(1, Ordering::Relaxed));
        let fail = |source: tokio_postgres::Error| HarnessError::CreateDatabase {
            detail: source
                .as_db_error()
                .map_or_else(|| source.to_string(), |db| db.message().to_owned()),
            name: name.clone(),
            port: self.port,
            source,
        };
        self.admin_execute(&format!("CREATE DATABASE {}", quote_ident(&name)))
            .await
            .map_err(fail)?;
        Ok(TestDb {
            url: self.url(&name),
            name,
        })
    }

    /// Creates `role` (cluster-wide), e.g. a role that logs in with a
    /// password on a cluster with [`Auth::Scram`]. It may connect to every
    /// database (as `PUBLIC` may).
    ///
    /// ```no_run
    /// # async fn example(cluster: &evolve_test::Cluster) -> Result<(), evolve_test::HarnessError> {
    /// use evolve_test::Role;
    /// cluster
    ///     .create_role(&Role { password: Some("apppw".into()), ..Role::new("app") })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn create_role(&self, role: &Role) -> Result<(), HarnessError> {
        let mut sql = format!("CREATE ROLE {} LOGIN", quote_ident(&role.name));
        if role.superuser {
            sql.push_str(" SUPERUSER");
        }
        if let Some(password) = &role.password {
            sql.push_str(&format!(" PASSWORD {}", quote_literal(password)));
        }
        self.admin_execute(&sql)
            .await
            .map_err(|source| HarnessError::CreateRole {
                detail: source
                    .as_db_error()
                    .map_or_else(|| source.to_string(), |db| db.message().to_owned()),
                name: role.name.clone(),
                port: self.port,
                source,
            })
    }

    /// Runs `sql` as `postgres` in database `postgres`, over the Unix socket
    /// when TCP needs TLS or a password, on the caller's runtime; the
    /// connection is closed before this returns, so nothing outlives the
    /// caller's runtime.
    async fn admin_execute(&self, sql: &str) -> Result<(), tokio_postgres::Error> {
        let mut config = tokio_postgres::Config::new();
        if self.tls.as_ref().is_some_and(|t| t.options.require) || self.auth != Auth::Trust {
            config.host_path(&self.dir);
        } else {
            config.host("127.0.0.1");
        }
        let (client, connection) = config
            .port(self.port)
            .user("postgres")
            .dbname("postgres")
            .application_name("evolve-test")
            .connect_timeout(Duration::from_secs(10))
            .connect(tokio_postgres::NoTls)
            .await?;
        let connection = tokio::spawn(connection);
        let done = client.batch_execute(sql).await;
        drop(client);
        // The connection ends once the client is gone; wait for it so that
        // no task is left behind on the caller's runtime.
        let _ = connection.await;
        done
    }

    /// The `pg_hba.conf` method of TCP sessions.
    fn tcp_method(&self) -> &'static str {
        match self.auth {
            Auth::Trust => "trust",
            Auth::Scram { .. } => "scram-sha-256",
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// A command for one of the server's tools: as `postgres` when we are
    /// root, in the cluster's directory, with no stdin.
    fn tool(&self, name: &str) -> Command {
        let mut cmd = Command::new(self.bin(name));
        cmd.current_dir(&self.dir).stdin(Stdio::null());
        if let Some(ids) = self.run_as {
            ids.apply(&mut cmd);
        }
        cmd
    }

    fn run(&self, mut cmd: Command, what: &str) -> Result<Output, HarnessError> {
        cmd.output()
            .map_err(|e| HarnessError::io(format!("run {what} ({})", self.bin.display()), e))
    }

    fn initdb(&self) -> Result<(), HarnessError> {
        let mut cmd = self.tool("initdb");
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-U", "postgres", "--auth-local=trust", "--encoding=UTF8"])
            .args(["--locale=C", "--no-sync"])
            .arg(format!("--auth-host={}", self.tcp_method()));
        let pwfile = self.dir.join("pwfile");
        if let Auth::Scram { password } = &self.auth {
            std::fs::write(&pwfile, format!("{password}\n"))
                .map_err(|e| HarnessError::io(format!("write {}", pwfile.display()), e))?;
            if let Some(ids) = self.run_as {
                std::os::unix::fs::chown(&pwfile, Some(ids.uid), Some(ids.gid)).map_err(|e| {
                    HarnessError::io(format!("give {} to the postgres user", pwfile.display()), e)
                })?;
            }
            cmd.arg("--pwfile").arg(&pwfile);
        }
        let out = self.run(cmd, "initdb");
        let _ = std::fs::remove_file(&pwfile);
        let out = out?;
        if out.status.success() {
            return Ok(());
        }
        Err(HarnessError::Tool {
            tool: format!("initdb -D {}", self.data.display()),
            status: out.status,
            output: tail(&combined(&out), TAIL_LINES),
        })
    }

    /// Append our settings to postgresql.conf and start the server, choosing
    /// another port when the chosen one was taken meanwhile.
    fn start_server(&mut self) -> Result<(), HarnessError> {
        let conf_path = self.data.join("postgresql.conf");
        let initial = std::fs::read_to_string(&conf_path)
            .map_err(|e| HarnessError::io(format!("read {}", conf_path.display()), e))?;
        let mut attempt = 1;
        loop {
            let port = free_port()?;
            let conf = format!("{initial}\n{}", self.settings(port));
            std::fs::write(&conf_path, conf)
                .map_err(|e| HarnessError::io(format!("write {}", conf_path.display()), e))?;
            let log_before = std::fs::metadata(self.log_path()).map_or(0, |m| m.len());
            let mut cmd = self.tool("pg_ctl");
            cmd.arg("-D")
                .arg(&self.data)
                .arg("-l")
                .arg(self.log_path())
                .args(["-w", "-t", "60", "start"]);
            let out = self.run(cmd, "pg_ctl start")?;
            if out.status.success() {
                self.port = port;
                return Ok(());
            }
            let port_taken = std::fs::read(self.log_path()).is_ok_and(|log| {
                let new = log.get(log_before as usize..).unwrap_or_default();
                String::from_utf8_lossy(new).contains("Address already in use")
            });
            if port_taken && attempt < START_ATTEMPTS {
                attempt += 1;
                continue;
            }
            // A server still coming up after the timeout must not linger,
            // not even with EVOLVE_TEST_KEEP (when Drop leaves it alone).
            self.stop();
            let mut output = tail(&combined(&out), TAIL_LINES);
            let _ = write!(
                output,
                "\nserver log {} (last lines):\n{}",
                self.log_path().display(),
                self.log_tail(TAIL_LINES)
            );
            if !self.keep {
                output.push_str(
                    "\n(set EVOLVE_TEST_KEEP=1 to keep the cluster directory for inspection)",
                );
            }
            return Err(HarnessError::Tool {
                tool: format!("pg_ctl start (port {port}, attempt {attempt})"),
                status: out.status,
                output,
            });
        }
    }

    fn settings(&self, port: u16) -> String {
        let socket_dir = self.dir.to_string_lossy().replace('\'', "''");
        let tls = self
            .tls
            .as_ref()
            .map(TlsFiles::settings)
            .unwrap_or_default();
        let extra: String = self
            .extra_settings
            .iter()
            .map(|(name, value)| format!("{name} = {}\n", quote_literal(value)))
            .collect();
        format!(
            "# evolve-test\n\
             listen_addresses = '127.0.0.1'\n\
             port = {port}\n\
             unix_socket_directories = '{socket_dir}'\n\
             wal_level = logical\n\
             fsync = off\n\
             synchronous_commit = off\n\
             full_page_writes = off\n\
             max_connections = 200\n\
             max_wal_senders = 20\n\
             max_replication_slots = 20\n\
             shared_buffers = 128MB\n\
             {tls}{extra}"
        )
    }

    /// `pg_ctl stop -m immediate` if a server may be running; errors ignored.
    fn stop(&self) {
        if !self.data.join("postmaster.pid").exists() {
            return;
        }
        let mut cmd = self.tool("pg_ctl");
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"]);
        let _ = cmd.output();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(mut watchdog) = self.watchdog.take() {
            // End of file wakes it; with the directory gone it has nothing
            // to do but exit, and we reap it.
            drop(watchdog.stdin.take());
            let _ = watchdog.wait();
        }
    }
}

/// `settings` when every name is a setting's name (letters, digits,
/// underscores, and dots for extensions' settings), as
/// `postgresql.conf` would read it, and no value holds a line break.
fn checked_settings(settings: &[(String, String)]) -> Result<Vec<(String, String)>, HarnessError> {
    for (name, value) in settings {
        let name_ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        if !name_ok || value.contains(['\n', '\r']) {
            return Err(HarnessError::io(
                format!("use server setting {name:?} = {value:?}"),
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "a setting's name is letters, digits, underscores and dots, and its value one line; fix Options::settings",
                ),
            ));
        }
    }
    Ok(settings.to_vec())
}

/// `EVOLVE_TEST_KEEP` is set to something other than empty or `0`.
fn keep_requested() -> bool {
    std::env::var_os("EVOLVE_TEST_KEEP").is_some_and(|v| !v.is_empty() && v != "0")
}

/// `<base>/evolve-pg-<pid>-<n>`, created empty. One left over from an earlier
/// process that had our pid (so is certainly dead) is removed first.
fn create_dir(base: &Path) -> Result<PathBuf, HarnessError> {
    let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
    let dir = base.join(format!("evolve-pg-{}-{n}", std::process::id()));
    if dir.exists() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    std::fs::create_dir(&dir)
        .map_err(|e| HarnessError::io(format!("create directory {}", dir.display()), e))?;
    Ok(dir)
}

fn spawn_watchdog(dir: &Path) -> Result<Child, HarnessError> {
    Command::new("/bin/sh")
        .arg("-c")
        .arg(WATCHDOG)
        .arg("evolve-pg-watchdog")
        .arg(dir)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Out of the terminal's process group: Ctrl-C kills the tests, not
        // the watchdog that cleans up after them.
        .process_group(0)
        .spawn()
        .map_err(|e| HarnessError::io("start the cleanup watchdog (/bin/sh)", e))
}

/// A port that was free a moment ago.
fn free_port() -> Result<u16, HarnessError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| HarnessError::io("find a free port on 127.0.0.1", e))?;
    listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(|e| HarnessError::io("find a free port on 127.0.0.1", e))
}

fn database_name(hint: &str, n: u64) -> String {
    let mut clean: String = hint
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '_') => c,
            _ => '_',
        })
        .collect();
    clean.truncate(35);
    if clean.is_empty() {
        clean.push_str("db");
    }
    format!("evolve_{clean}_{n}")
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// Everything but RFC 3986's unreserved characters as `%XX`.
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn combined(out: &Output) -> String {
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    text
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_names_are_sanitised() {
        assert_eq!(
            database_name("Orders-V2 test", 7),
            "evolve_orders_v2_test_7"
        );
        assert_eq!(database_name("", 0), "evolve_db_0");
        assert_eq!(
            database_name("\"; DROP TABLE x; --", 1),
            "evolve____drop_table_x_____1"
        );
        assert_eq!(database_name("héllo", 2), "evolve_h_llo_2");
        let long = database_name(&"x".repeat(100), u64::MAX);
        assert!(long.len() <= 63, "{long} is {} bytes", long.len());
    }

    #[test]
    fn identifiers_and_literals_are_quoted() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(percent_encode("a b@c:d/é~"), "a%20b%40c%3Ad%2F%C3%A9~");
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }
}
