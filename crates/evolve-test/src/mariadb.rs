//! Throwaway MariaDB servers: a temp dir, `mariadb-install-db`, `mariadbd`,
//! and on drop SIGKILL and removal of the dir.
//!
//! A [`MariaDb`] listens on 127.0.0.1 at a free port and on its own Unix
//! socket in its directory, with the row-based binlog that change capture
//! needs (`log_bin`, `binlog_format=ROW`, `binlog_row_image=FULL`,
//! `binlog_row_metadata=FULL`, `server_id=1`) and settings for speed over
//! durability (`innodb_flush_log_at_trx_commit=0`, `sync_binlog=0`,
//! `innodb_doublewrite=0`, a 64 MB buffer pool, no performance schema).
//! The OS user running the tests (`root` as root) logs in without a
//! password over the socket; TCP sessions use the
//! `evolve` user (password `evolve`, every privilege), which is what
//! [`MariaDb::url`] names. Starting one takes a few seconds, most of it
//! `mariadb-install-db`.
//!
//! Tests share one server per test binary ([`shared_mariadb`]) and take a
//! fresh database each ([`fresh_mariadb_db`]), as they do with PostgreSQL.
//! [`MariaDbOptions::settings`] start a server of their own with other
//! settings (e.g. `binlog_format=STATEMENT`), which win over the harness's.
//! [`MariaDb::restart`] shuts a server down and starts it again on the
//! same port; [`MariaDb::crash_and_restart`] kills it first.
//!
//! Cleanup is the PostgreSQL clusters' (see the crate docs): dropping the
//! server kills it and removes its directory, and a watchdog process whose
//! stdin is a pipe we hold does the same when this process exits however it
//! exits. `EVOLVE_TEST_KEEP=1` keeps the server running and prints how to
//! stop it.
//!
//! As root, `mariadbd` runs as root (`--user=root`): MariaDB allows that
//! when asked explicitly, and the directory stays ours to remove.
//!
//! `EVOLVE_MARIADB_BIN` names a directory holding `mariadbd`,
//! `mariadb-install-db` and `mariadb`; by default they are looked up in
//! `/usr/sbin`, `/usr/bin` and on `PATH`.

use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::HarnessError;

/// Attempts at starting the server, each on a fresh free port.
const START_ATTEMPTS: usize = 5;
/// Lines of the server log quoted in errors.
const TAIL_LINES: usize = 30;
/// How long the server may take to accept sessions.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);
static NEXT_DB: AtomicU64 = AtomicU64::new(0);

/// Woken when its stdin reaches end of file (this process exited, however
/// it exited): kills the server named by the pid file and removes the
/// directory `$1`.
const WATCHDOG: &str = r#"
trap '' HUP INT QUIT
cat >/dev/null
pidfile="$1/mariadbd.pid"
if [ -f "$pidfile" ]; then
    pid=$(head -n 1 "$pidfile")
    if [ -n "$pid" ]; then
        kill -KILL "$pid" 2>/dev/null
        i=0
        while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 100 ]; do
            sleep 0.05
            i=$((i + 1))
        done
    fi
fi
rm -rf "$1"
"#;

/// How to start a server: [`MariaDb::start_with`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MariaDbOptions {
    /// Server options `(name, value)` passed as `--name=value` after the
    /// harness's own, so they win: e.g. `("binlog_format", "STATEMENT")`.
    pub settings: Vec<(String, String)>,
}

/// A MariaDB server in a temp dir; see the module docs.
#[derive(Debug)]
pub struct MariaDb {
    dir: PathBuf,
    port: u16,
    /// The options given on top of the harness's, kept for a restart.
    settings: Vec<(String, String)>,
    bin: Binaries,
    server: Option<Child>,
    keep: bool,
    watchdog: Option<Child>,
    /// [`MariaDb::start_tls`]'s CA certificate.
    ca_cert: Option<PathBuf>,
}

/// A fresh, empty database on a [`MariaDb`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MariaDbDb {
    /// The database's name, `evolve_<hint>_<n>`.
    pub name: String,
    /// `mysql://evolve:evolve@127.0.0.1:<port>/<name>`.
    pub url: String,
}

#[derive(Debug, Clone)]
struct Binaries {
    server: PathBuf,
    install_db: PathBuf,
    client: PathBuf,
}

impl MariaDb {
    /// Creates and starts a server with the harness's settings. Blocks the
    /// calling thread for a few seconds.
    pub fn start() -> Result<MariaDb, HarnessError> {
        MariaDb::start_with(MariaDbOptions::default())
    }

    /// [`MariaDb::start`] with `options`.
    pub fn start_with(options: MariaDbOptions) -> Result<MariaDb, HarnessError> {
        MariaDb::start_inner(options, false)
    }

    /// A server that also takes TLS sessions: a CA and a server certificate
    /// for `localhost` and `127.0.0.1` are made with `openssl` in its
    /// directory ([`MariaDb::ca_cert`]) and given to `mariadbd`
    /// (`ssl_ca`, `ssl_cert`, `ssl_key`). Plain sessions are accepted too.
    pub fn start_tls() -> Result<MariaDb, HarnessError> {
        MariaDb::start_inner(MariaDbOptions::default(), true)
    }

    /// The CA certificate (PEM) of a [`MariaDb::start_tls`] server.
    pub fn ca_cert(&self) -> Option<&Path> {
        self.ca_cert.as_deref()
    }

    fn start_inner(mut options: MariaDbOptions, tls: bool) -> Result<MariaDb, HarnessError> {
        for (name, value) in &options.settings {
            let ok = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                && !value.contains(['\n', '\r']);
            if !ok {
                return Err(HarnessError::io(
                    format!("use server option {name:?} = {value:?}"),
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        "an option's name is letters, digits, '_' and '-', and its value one line; fix MariaDbOptions::settings",
                    ),
                ));
            }
        }
        let bin = binaries()?;
        let keep = std::env::var_os("EVOLVE_TEST_KEEP").is_some_and(|v| !v.is_empty() && v != "0");
        let dir = create_dir()?;
        let mut server = MariaDb {
            dir,
            port: 0,
            settings: Vec::new(),
            bin,
            server: None,
            keep,
            watchdog: None,
            ca_cert: None,
        };
        if !keep {
            server.watchdog = Some(spawn_watchdog(&server.dir)?);
        }
        if tls {
            let files = crate::tls::TlsFiles::create(
                &server.dir,
                &crate::tls::TlsOptions::default(),
                None,
            )?;
            for (name, file) in [
                ("ssl_ca", &files.ca_cert),
                ("ssl_cert", &files.server_cert),
                ("ssl_key", &files.server_key),
            ] {
                options
                    .settings
                    .push((name.into(), file.display().to_string()));
            }
            server.ca_cert = Some(files.ca_cert.clone());
        }
        // One more try on a fresh data directory before failing: a bootstrap
        // takes a second, and one failed bootstrap should not fail a run.
        if let Err(first) = server.install_db() {
            eprintln!("evolve-test: mariadb-install-db failed once, trying again: {first}");
            let _ = std::fs::remove_dir_all(server.dir.join("data"));
            server.install_db()?;
        }
        server.settings = options.settings;
        server.start_server(None)?;
        server.client_sql(
            "CREATE USER 'evolve'@'%' IDENTIFIED BY 'evolve'; \
             GRANT ALL PRIVILEGES ON *.* TO 'evolve'@'%' WITH GRANT OPTION;",
        )?;
        if keep {
            let pid = server.server.as_ref().map_or(0, Child::id);
            let _ = writeln!(
                std::io::stderr(),
                "evolve-test: EVOLVE_TEST_KEEP is set; keeping MariaDB server {dir} on port {port} ({url}); remove it with: kill {pid}; rm -rf {dir}",
                dir = server.dir.display(),
                port = server.port,
                url = server.url(""),
            );
        }
        Ok(server)
    }

    /// The TCP port the server listens on at 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's Unix socket, where the OS user running the tests logs
    /// in as itself without a password.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("mariadbd.sock")
    }

    /// `mysql://evolve:evolve@127.0.0.1:<port>/<database>`.
    pub fn url(&self, database: &str) -> String {
        format!("mysql://evolve:evolve@127.0.0.1:{}/{database}", self.port)
    }

    /// The last `lines` lines of the server's error log.
    pub fn log_tail(&self, lines: usize) -> String {
        match std::fs::read(self.log_path()) {
            Ok(bytes) => tail(&String::from_utf8_lossy(&bytes), lines),
            Err(e) => format!("(server log {} unreadable: {e})", self.log_path().display()),
        }
    }

    /// Creates a fresh empty database named `evolve_<hint>_<n>` (the hint
    /// lowercased, anything but `[a-z0-9_]` replaced by `_`, cut to 35
    /// bytes; `n` unique in this process). Blocks for the `mariadb` client.
    pub fn create_database(&self, hint: &str) -> Result<MariaDbDb, HarnessError> {
        let name = database_name(hint, NEXT_DB.fetch_add(1, Ordering::Relaxed));
        self.client_sql(&format!("CREATE DATABASE `{name}`"))?;
        Ok(MariaDbDb {
            url: self.url(&name),
            name,
        })
    }

    /// Runs `sql` (one or more statements) as the OS user over the socket with
    /// the `mariadb` client, in batch mode; returns its standard output
    /// (tab-separated rows, no header). Blocks.
    pub fn client_sql(&self, sql: &str) -> Result<String, HarnessError> {
        let out = Command::new(&self.bin.client)
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!("--user={}", os_user()))
            .args(["--batch", "--skip-column-names", "-e", sql])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| HarnessError::io(format!("run {}", self.bin.client.display()), e))?;
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        Err(HarnessError::Tool {
            tool: format!("mariadb --socket={} -e ...", self.socket().display()),
            status: out.status,
            output: tail(&combined(&out), TAIL_LINES),
        })
    }

    /// The server's own temp directory: internal temporary tables are named
    /// by pid and thread, and servers bootstrapping side by side in a shared
    /// `/tmp` have lost each other's (`Could not remove temporary table`).
    fn tmpdir(&self) -> Result<PathBuf, HarnessError> {
        let dir = self.dir.join("tmp");
        std::fs::create_dir_all(&dir)
            .map_err(|e| HarnessError::io(format!("create directory {}", dir.display()), e))?;
        Ok(dir)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    fn install_db(&self) -> Result<(), HarnessError> {
        let mut cmd = Command::new(&self.bin.install_db);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir.join("data").display()))
            .arg(format!("--tmpdir={}", self.tmpdir()?.display()))
            .args(["--auth-root-authentication-method=socket", "--skip-test-db"])
            .stdin(Stdio::null());
        if crate::os::is_root() {
            cmd.arg("--user=root");
        }
        let out = cmd
            .output()
            .map_err(|e| HarnessError::io(format!("run {}", self.bin.install_db.display()), e))?;
        if out.status.success() {
            return Ok(());
        }
        Err(HarnessError::Tool {
            tool: format!(
                "mariadb-install-db --datadir={}",
                self.dir.join("data").display()
            ),
            status: out.status,
            output: tail(&combined(&out), TAIL_LINES),
        })
    }

    /// Shuts the server down cleanly (`SHUTDOWN`, as a service manager's
    /// restart does) and starts it again on the same data directory, port
    /// and settings. Sessions are cut; the binlog goes on in a new file.
    /// Blocks until the server takes sessions again.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        // The statement's answer may be lost with the connection.
        let _ = self.client_sql("SHUTDOWN");
        if let Some(mut server) = self.server.take() {
            let started = Instant::now();
            while matches!(server.try_wait(), Ok(None)) {
                if started.elapsed() > READY_TIMEOUT {
                    let _ = server.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = server.wait();
        }
        let port = self.port;
        self.start_server(Some(port))
    }

    /// Kills the server with SIGKILL, as a crash would, and starts it
    /// again on the same data directory, port and settings: InnoDB's crash
    /// recovery and the binlog's run at startup. Blocks until the server
    /// takes sessions again. (With the harness's own settings,
    /// `innodb_flush_log_at_trx_commit=0` and `sync_binlog=0`, a crash may
    /// lose the last second of commits; start the server with both at 1
    /// for a crash that loses nothing committed.)
    pub fn crash_and_restart(&mut self) -> Result<(), HarnessError> {
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
        // The killed server's socket file stays behind.
        let _ = std::fs::remove_file(self.socket());
        let port = self.port;
        self.start_server(Some(port))
    }

    /// Starts `mariadbd` on `port`, or on a free one.
    fn start_server(&mut self, port: Option<u16>) -> Result<(), HarnessError> {
        let extra = self.settings.clone();
        let mut attempt = 1;
        loop {
            let port = match port {
                Some(port) => port,
                None => free_port()?,
            };
            let log_before = std::fs::metadata(self.log_path()).map_or(0, |m| m.len());
            let mut cmd = Command::new(&self.bin.server);
            cmd.arg("--no-defaults")
                .arg(format!("--datadir={}", self.dir.join("data").display()))
                .arg(format!("--socket={}", self.socket().display()))
                .arg(format!("--tmpdir={}", self.tmpdir()?.display()))
                .arg(format!(
                    "--pid-file={}",
                    self.dir.join("mariadbd.pid").display()
                ))
                .arg(format!("--log-error={}", self.log_path().display()))
                .arg(format!(
                    "--log-bin={}",
                    self.dir.join("data/binlog").display()
                ))
                .arg(format!("--port={port}"))
                .args([
                    "--bind-address=127.0.0.1",
                    "--server-id=1",
                    "--binlog-format=ROW",
                    "--binlog-row-image=FULL",
                    "--binlog-row-metadata=FULL",
                    "--character-set-server=utf8mb4",
                    "--collation-server=utf8mb4_general_ci",
                    "--innodb-flush-log-at-trx-commit=0",
                    "--sync-binlog=0",
                    "--innodb-doublewrite=0",
                    "--innodb-buffer-pool-size=64M",
                    "--innodb-log-file-size=32M",
                    "--performance-schema=OFF",
                    "--max-connections=200",
                    "--skip-name-resolve",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                // Out of the terminal's process group, as the watchdog.
                .process_group(0);
            if crate::os::is_root() {
                cmd.arg("--user=root");
            }
            for (name, value) in &extra {
                cmd.arg(format!("--{}={value}", name.replace('_', "-")));
            }
            let mut child = cmd
                .spawn()
                .map_err(|e| HarnessError::io(format!("run {}", self.bin.server.display()), e))?;
            let started = Instant::now();
            let ready = loop {
                if let Ok(Some(status)) = child.try_wait() {
                    break Err(status);
                }
                if self.socket().exists() && self.client_sql("SELECT 1").is_ok() {
                    break Ok(());
                }
                if started.elapsed() > READY_TIMEOUT {
                    let _ = child.kill();
                    let status = child
                        .wait()
                        .map_err(|e| HarnessError::io("wait for mariadbd", e))?;
                    break Err(status);
                }
                std::thread::sleep(Duration::from_millis(100));
            };
            match ready {
                Ok(()) => {
                    self.port = port;
                    self.server = Some(child);
                    return Ok(());
                }
                Err(status) => {
                    let new_log = std::fs::read(self.log_path())
                        .map(|log| {
                            String::from_utf8_lossy(
                                log.get(log_before as usize..).unwrap_or_default(),
                            )
                            .into_owned()
                        })
                        .unwrap_or_default();
                    let port_taken = new_log.contains("Address already in use")
                        || new_log.contains("Can't start server: Bind on TCP/IP port");
                    if port_taken && attempt < START_ATTEMPTS {
                        attempt += 1;
                        // The same port once more, or another one.
                        std::thread::sleep(Duration::from_millis(200));
                        continue;
                    }
                    let mut output = format!(
                        "server log {} (last lines):\n{}",
                        self.log_path().display(),
                        tail(&new_log, TAIL_LINES)
                    );
                    if !self.keep {
                        output.push_str("\n(set EVOLVE_TEST_KEEP=1 to keep the server directory for inspection)");
                    }
                    return Err(HarnessError::Tool {
                        tool: format!("mariadbd (port {port}, attempt {attempt})"),
                        status,
                        output,
                    });
                }
            }
        }
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(mut watchdog) = self.watchdog.take() {
            drop(watchdog.stdin.take());
            let _ = watchdog.wait();
        }
    }
}

/// The server shared by every test of this process, started on first use.
///
/// # Panics
///
/// If the server cannot be started, with the reason; every later call
/// panics with the same message.
pub fn shared_mariadb() -> &'static MariaDb {
    static SHARED: OnceLock<Result<MariaDb, String>> = OnceLock::new();
    match SHARED.get_or_init(|| MariaDb::start().map_err(|e| e.to_string())) {
        Ok(server) => server,
        Err(message) => panic!("could not start the shared MariaDB server: {message}"),
    }
}

/// A fresh empty database on the [`shared_mariadb`] server: see
/// [`MariaDb::create_database`]. Blocks for the `mariadb` client.
///
/// # Panics
///
/// If the server cannot be started or the database not created.
pub fn fresh_mariadb_db(hint: &str) -> MariaDbDb {
    match shared_mariadb().create_database(hint) {
        Ok(db) => db,
        Err(e) => panic!("{e}"),
    }
}

/// Who we are: the account `mariadb-install-db` makes for the socket
/// (`root`, or the user running the tests).
fn os_user() -> String {
    static USER: OnceLock<String> = OnceLock::new();
    USER.get_or_init(|| {
        Command::new("id")
            .arg("-un")
            .stdin(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| "root".to_string())
    })
    .clone()
}

/// `mariadbd`, `mariadb-install-db` and `mariadb`, from
/// `EVOLVE_MARIADB_BIN` or the usual places.
fn binaries() -> Result<Binaries, HarnessError> {
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
    let find = |name: &str| {
        dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()).ok_or_else(|| {
            HarnessError::io(
                format!("find {name}"),
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "MariaDB server binaries not found; install the mariadb-server and mariadb-client packages (cargo xtask test does) or set EVOLVE_MARIADB_BIN",
                ),
            )
        })
    };
    Ok(Binaries {
        server: find("mariadbd")?,
        install_db: find("mariadb-install-db")?,
        client: find("mariadb")?,
    })
}

/// `<tmp>/evolve-my-<pid>-<n>`, created empty; short, so the socket path
/// fits.
fn create_dir() -> Result<PathBuf, HarnessError> {
    let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
    let preferred = std::env::temp_dir();
    let base = if preferred.as_os_str().len() <= 60 {
        preferred
    } else {
        PathBuf::from("/tmp")
    };
    let dir = base.join(format!("evolve-my-{}-{n}", std::process::id()));
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
        .arg("evolve-mariadb-watchdog")
        .arg(dir)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| HarnessError::io("start the cleanup watchdog (/bin/sh)", e))
}

fn free_port() -> Result<u16, HarnessError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
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
        assert_eq!(database_name("Orders-V2", 7), "evolve_orders_v2_7");
        assert_eq!(database_name("`; DROP", 1), "evolve____drop_1");
        assert!(database_name(&"x".repeat(100), u64::MAX).len() <= 64);
    }
}
