//! evolve's automation, run as `cargo xtask <command>` (an alias in
//! `.cargo/config.toml`). Standard library only, so it builds in seconds.
//!
//! - `cargo xtask test [ARGS]`: make sure the PostgreSQL server, the
//!   MariaDB server and client (`mariadb-server`, `mariadb-client`, for the
//!   MySQL source's tests; installed with apt-get when `mariadbd` is
//!   missing, `EVOLVE_MARIADB_BIN` names another directory), curl,
//!   openssl, the librdkafka build's packages and the Python clients (pip)
//!   are installed and the Flyway and Kafka jars fetched, then `cargo fmt
//!   --check`, `cargo clippy -D warnings`, `cargo doc --no-deps` with
//!   `RUSTDOCFLAGS=-D warnings` and `cargo test --workspace ARGS`,
//!   stopping at the first failure. This is
//!   the repository's test command; `.ci/run` runs it.
//! - `cargo xtask demo [ARGS]`: PostgreSQL (and for `mysql` MariaDB, for
//!   `kafka` the Kafka jars), then `evolve demo ARGS`.
//! - `cargo xtask bench NAME [ARGS]`: PostgreSQL (and for `migrate` the
//!   Flyway jars, for `registry` and `kafka` the Kafka jars, for `pipeline`
//!   and `mysql` their Debezium baseline built with Maven, skipped with the
//!   reason when java or mvn is missing, for `mysql` MariaDB as `test`
//!   installs it), then the release build of benchmark `NAME` from
//!   `evolve-bench` with `ARGS`.
//!
//! The Flyway jars (the real Flyway that the migrate tests and benchmark
//! compare evolve with) are fetched by Maven into `target/flyway/jars`
//! when `flyway-core` is not there yet: xtask writes `target/flyway/pom.xml`
//! and runs `mvn dependency:copy-dependencies`; `java`, `javac` and `mvn`
//! must be installed.
//!
//! The Kafka jars (Apache Kafka's own broker, `org.apache.kafka:kafka_2.13`
//! at `KAFKA_VERSION`, that `evolve-test`'s `Kafka` harness runs with
//! `java -cp 'jars/*'`) are fetched the same way into `target/kafka/jars`
//! when `kafka_2.13` is not there yet (`target/kafka/pom.xml`, `mvn
//! dependency:copy-dependencies`). The build of librdkafka (the `rdkafka`
//! crate's `rdkafka-sys`) needs a C compiler, `make`, `pkg-config` and the
//! OpenSSL and zlib headers: `cargo xtask test` installs `libssl-dev`,
//! `zlib1g-dev`, `make` and `pkg-config` with apt-get when they are missing,
//! as it does `curl` and `openssl`.
//!
//! The PostgreSQL server is found by the same search as `evolve-test`'s
//! `pg_bin_dir` (keep the two in step): `EVOLVE_PG_BIN`, the highest
//! `/usr/lib/postgresql/<version>/bin` with `initdb`, `pg_config --bindir`,
//! `initdb` on `PATH`. When none has `initdb`, the `postgresql` and
//! `postgresql-contrib` packages are installed with apt-get, as root or
//! through `sudo -n`. `CARGO` names the cargo to run, as cargo itself sets it.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  test [ARGS]         install PostgreSQL if missing, fetch the Flyway and Kafka jars, then cargo fmt --check, cargo clippy
                      -D warnings, cargo doc -D warnings, cargo test --workspace ARGS (e.g. -- --nocapture)
  demo [ARGS]         install PostgreSQL if missing, then run `evolve demo ARGS`
  bench NAME [ARGS]   install PostgreSQL if missing (and for migrate fetch the Flyway jars, for registry
                      and kafka the Kafka jars, for mysql install MariaDB, for pipeline and mysql build
                      the Debezium baseline with mvn), then run benchmark NAME of evolve-bench (release
                      build) with ARGS

environment:
  EVOLVE_PG_BIN       directory of the PostgreSQL server binaries (initdb, pg_ctl, ...)
  EVOLVE_MARIADB_BIN  directory of the MariaDB binaries (mariadbd, mariadb-install-db, mariadb)
  CARGO               the cargo to run (set by cargo itself)";

/// Where Debian and Ubuntu install the versioned server binaries.
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";

const PACKAGES: [&str; 2] = ["postgresql", "postgresql-contrib"];

/// Why xtask stops: a message, and the exit code to stop with.
#[derive(Debug)]
struct Failure {
    message: String,
    code: u8,
}

impl Failure {
    fn new(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: 1,
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("xtask: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

fn run(args: &[String]) -> Result<(), Failure> {
    let Some((command, rest)) = args.split_first() else {
        println!("{USAGE}");
        return Ok(());
    };
    match command.as_str() {
        "test" => test(rest),
        "demo" => {
            ensure_postgres()?;
            // `evolve demo mysql` starts a MariaDB server, `evolve demo
            // kafka` a Kafka broker.
            match rest.first().map(String::as_str) {
                Some("mysql") => ensure_mariadb()?,
                Some("kafka") => ensure_kafka_jars()?,
                _ => {}
            }
            let mut cmd = cargo(["run", "--quiet", "-p", "evolve", "--", "demo"]);
            cmd.args(rest);
            step("demo", &mut cmd)
        }
        "bench" => {
            let Some((name, bench_args)) = rest.split_first() else {
                return Err(usage_error("bench needs the name of a benchmark"));
            };
            ensure_postgres()?;
            if name == "migrate" {
                ensure_flyway_jars()?;
            }
            if name == "rewrite" {
                ensure_repack()?;
            }
            if name == "registry" || name == "kafka" {
                // The Kafka store's figures, and the Kafka benchmark, run
                // on a broker of their own.
                ensure_kafka_jars()?;
            }
            let mut cmd = cargo(["run", "--release", "-p", "evolve-bench", "--bin"]);
            cmd.arg(name).arg("--").args(bench_args);
            if name == "mysql" {
                // The MySQL source's benchmark runs on a MariaDB server.
                ensure_mariadb()?;
            }
            // The Debezium baseline: (its Maven project, where it goes, the
            // variable naming that directory to the benchmark).
            let debezium = match name.as_str() {
                "pipeline" => Some(("debezium", "debezium", "EVOLVE_BENCH_DEBEZIUM")),
                "mysql" => Some((
                    "debezium-mysql",
                    "debezium-mysql",
                    "EVOLVE_BENCH_DEBEZIUM_MYSQL",
                )),
                _ => None,
            };
            if let Some((project, out, var)) = debezium {
                match build_debezium(project, out) {
                    Ok(dir) => cmd.env(var, dir),
                    Err(why) => {
                        eprintln!("==> DEBEZIUM BASELINE SKIPPED: {why}");
                        cmd.env(format!("{var}_SKIP"), why)
                    }
                };
            }
            step(&format!("bench {name}"), &mut cmd)
        }
        "help" | "-h" | "--help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => Err(usage_error(&format!("unknown command `{other}`"))),
    }
}

fn usage_error(message: &str) -> Failure {
    Failure {
        message: format!("{message}\n\n{USAGE}"),
        code: 2,
    }
}

fn test(cargo_test_args: &[String]) -> Result<(), Failure> {
    let started = Instant::now();
    ensure_postgres()?;
    ensure_mariadb()?;
    ensure_tools()?;
    ensure_python_clients()?;
    ensure_flyway_jars()?;
    ensure_kafka_jars()?;
    step("fmt", &mut cargo(["fmt", "--all", "--", "--check"]))?;
    step(
        "clippy",
        &mut cargo([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    // The docs' links resolve and point at public items.
    step(
        "doc",
        cargo(["doc", "--no-deps", "--workspace"]).env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    let mut cmd = cargo(["test", "--workspace"]);
    cmd.args(cargo_test_args);
    step("test", &mut cmd)?;
    eprintln!("==> all steps passed in {}", seconds(started));
    Ok(())
}

/// A cargo command, from the workspace root.
fn cargo<const N: usize>(args: [&str; N]) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.args(args).current_dir(workspace_root());
    cmd
}

fn workspace_root() -> &'static Path {
    let xtask_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask_dir.parent().unwrap_or(xtask_dir)
}

/// Run one step: a header, the command with inherited output, and a closing
/// line with its elapsed time. A failed step stops xtask with its exit code.
fn step(name: &str, cmd: &mut Command) -> Result<(), Failure> {
    eprintln!("==> {name}: {}", describe(cmd));
    let started = Instant::now();
    let status = cmd.status().map_err(|e| {
        Failure::new(format!(
            "{name}: could not run {}: {e}",
            cmd.get_program().to_string_lossy()
        ))
    })?;
    if status.success() {
        eprintln!("==> {name}: ok in {}", seconds(started));
        return Ok(());
    }
    eprintln!("==> {name}: FAILED ({status}) after {}", seconds(started));
    Err(Failure {
        message: format!("step `{name}` failed ({status})"),
        // A child killed by a signal has no code; 1 then.
        code: status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .filter(|&c| c != 0)
            .unwrap_or(1),
    })
}

fn describe(cmd: &Command) -> String {
    let mut words = vec![cmd.get_program().to_string_lossy().into_owned()];
    words.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    words.join(" ")
}

fn seconds(since: Instant) -> String {
    format!("{:.1}s", since.elapsed().as_secs_f64())
}

/// The outcome of searching for the PostgreSQL server binaries.
#[derive(Debug, PartialEq, Eq)]
enum PgBin {
    Found(PathBuf),
    /// `EVOLVE_PG_BIN` is set but has no `initdb`; installing won't help.
    BadEnv(PathBuf),
    NotFound,
}

/// The same search as `evolve_test::pg_bin_dir`.
fn find_pg_bin() -> PgBin {
    if let Some(dir) = std::env::var_os("EVOLVE_PG_BIN") {
        let dir = PathBuf::from(dir);
        return if has_initdb(&dir) {
            PgBin::Found(dir)
        } else {
            PgBin::BadEnv(dir)
        };
    }
    highest_versioned_bin(Path::new(DEBIAN_ROOT))
        .or_else(pg_config_bindir)
        .or_else(initdb_on_path)
        .map_or(PgBin::NotFound, PgBin::Found)
}

fn has_initdb(dir: &Path) -> bool {
    dir.join("initdb").is_file()
}

/// The `<root>/<version>/bin` with the highest version that contains `initdb`.
fn highest_versioned_bin(root: &Path) -> Option<PathBuf> {
    std::fs::read_dir(root)
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = version_key(entry.file_name().to_str()?)?;
            let bin = entry.path().join("bin");
            has_initdb(&bin).then_some((version, bin))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, bin)| bin)
}

/// `"15"` -> `[15]`, `"9.6"` -> `[9, 6]`; `None` for anything that is not a
/// dotted number. Vectors compare element by element, so 9.6 < 15 < 17.
fn version_key(name: &str) -> Option<Vec<u64>> {
    name.split('.').map(|part| part.parse().ok()).collect()
}

fn pg_config_bindir() -> Option<PathBuf> {
    let out = Command::new("pg_config")
        .arg("--bindir")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    has_initdb(&dir).then_some(dir)
}

/// The directory of the `initdb` on `PATH`, following symlinks: a
/// `/usr/local/bin/initdb` linking into the server's bin directory must
/// yield that directory, where `psql` and `pg_recvlogical` live too.
fn initdb_on_path() -> Option<PathBuf> {
    let dir = std::env::split_paths(&std::env::var_os("PATH")?).find(|dir| has_initdb(dir))?;
    let real = std::fs::canonicalize(dir.join("initdb")).ok()?;
    Some(real.parent()?.to_path_buf())
}

/// Command-line clients the tests drive, and the Debian package of each.
const TOOLS: [(&str, &str); 2] = [("curl", "curl"), ("openssl", "openssl")];

/// What the build of librdkafka (`rdkafka-sys`) needs: a header under
/// `/usr/include` or a binary on `PATH`, and the Debian package of each.
const BUILD_NEEDS: [(&str, &str); 4] = [
    ("openssl/ssl.h", "libssl-dev"),
    ("zlib.h", "zlib1g-dev"),
    ("make", "make"),
    ("pkg-config", "pkg-config"),
];

/// Install the clients in [`TOOLS`] that are not on `PATH`, and the
/// packages of [`BUILD_NEEDS`] whose header or binary is missing.
fn ensure_tools() -> Result<(), Failure> {
    let mut missing: Vec<&str> = TOOLS
        .iter()
        .filter(|(binary, _)| !on_path(binary))
        .map(|(_, package)| *package)
        .collect();
    missing.extend(
        BUILD_NEEDS
            .iter()
            .filter(|(need, _)| {
                if need.ends_with(".h") {
                    !Path::new("/usr/include").join(need).is_file()
                } else {
                    !on_path(need)
                }
            })
            .map(|(_, package)| *package),
    );
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("==> installing {}", missing.join(" "));
    let elevate = privilege()?;
    step("apt-get update", &mut apt(elevate, &["update"]))?;
    let mut install = vec!["install", "-y", "--no-install-recommends"];
    install.extend(&missing);
    step("install tools", &mut apt(elevate, &install))
}

fn on_path(binary: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(binary).is_file()))
}

/// The Python packages of the client tests (Confluent's schema registry
/// client and serializers) and squawk-cli (the lint comparison), pinned in
/// `crates/evolve/tests/python/requirements.txt`, installed with pip when
/// they do not import.
fn ensure_python_clients() -> Result<(), Failure> {
    let imports = "import confluent_kafka.schema_registry.avro, google.protobuf, jsonschema";
    let present = Command::new("python3")
        .args(["-c", imports])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if present && on_path("squawk") {
        return Ok(());
    }
    let requirements = workspace_root().join("crates/evolve/tests/python/requirements.txt");
    step(
        "pip install the Python clients",
        Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements),
    )
}

/// The Flyway the migrate tests and benchmark run, with the PostgreSQL
/// JDBC driver; keep in step with the README's Flyway section.
const FLYWAY_VERSION: &str = "13.12.1";
const PGJDBC_VERSION: &str = "42.7.4";

/// `target/flyway`, where the jars and the compiled test driver live.
fn flyway_dir() -> PathBuf {
    workspace_root().join("target").join("flyway")
}

/// Fetches the Flyway jars into `target/flyway/jars` unless `flyway-core`
/// of [`FLYWAY_VERSION`] is there already.
fn ensure_flyway_jars() -> Result<(), Failure> {
    let dir = flyway_dir();
    let jars = dir.join("jars");
    if jars
        .join(format!("flyway-core-{FLYWAY_VERSION}.jar"))
        .is_file()
    {
        return Ok(());
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure::new(format!("cannot create {}: {e}", dir.display())))?;
    let dependency = |group: &str, artifact: &str, version: &str| {
        format!(
            "    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>{version}</version></dependency>\n"
        )
    };
    let pom = format!(
        "<project xmlns=\"http://maven.apache.org/POM/4.0.0\">\n  <modelVersion>4.0.0</modelVersion>\n  <groupId>evolve</groupId>\n  <artifactId>flyway-jars</artifactId>\n  <version>1</version>\n  <dependencies>\n{}{}{}  </dependencies>\n</project>\n",
        dependency("org.flywaydb", "flyway-core", FLYWAY_VERSION),
        dependency("org.flywaydb", "flyway-database-postgresql", FLYWAY_VERSION),
        dependency("org.postgresql", "postgresql", PGJDBC_VERSION),
    );
    let pom_path = dir.join("pom.xml");
    std::fs::write(&pom_path, pom)
        .map_err(|e| Failure::new(format!("cannot write {}: {e}", pom_path.display())))?;
    let _ = std::fs::remove_dir_all(&jars);
    step(
        "fetch the Flyway jars",
        Command::new("mvn")
            .args(["-q", "-B", "-f"])
            .arg(&pom_path)
            .arg("dependency:copy-dependencies")
            .arg(format!("-DoutputDirectory={}", jars.display()))
            .stdin(Stdio::null()),
    )
}

/// The Apache Kafka broker the Kafka tests run (`evolve-test`'s
/// `KAFKA_VERSION`; keep the two in step).
const KAFKA_VERSION: &str = "4.1.1";

/// The log4j2 binding of the broker's slf4j logging (as Kafka's own
/// distribution ships it), so the broker writes a log the harness shows.
const LOG4J_VERSION: &str = "2.24.3";

/// Fetches the Kafka broker's jars (`org.apache.kafka:kafka_2.13` of
/// [`KAFKA_VERSION`] and its runtime dependencies, and
/// `log4j-slf4j-impl`) unless they are there already: into
/// `EVOLVE_KAFKA_JARS` when it is set (where the test harness then looks
/// for them), else into `target/kafka/jars`.
fn ensure_kafka_jars() -> Result<(), Failure> {
    let dir = workspace_root().join("target").join("kafka");
    let chosen = std::env::var_os("EVOLVE_KAFKA_JARS").map(PathBuf::from);
    let jars = chosen.clone().unwrap_or_else(|| dir.join("jars"));
    if jars
        .join(format!("kafka_2.13-{KAFKA_VERSION}.jar"))
        .is_file()
        && jars
            .join(format!("log4j-slf4j-impl-{LOG4J_VERSION}.jar"))
            .is_file()
    {
        return Ok(());
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure::new(format!("cannot create {}: {e}", dir.display())))?;
    let pom = format!(
        "<project xmlns=\"http://maven.apache.org/POM/4.0.0\">\n  <modelVersion>4.0.0</modelVersion>\n  <groupId>evolve</groupId>\n  <artifactId>kafka-jars</artifactId>\n  <version>1</version>\n  <dependencies>\n    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{KAFKA_VERSION}</version></dependency>\n    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>{LOG4J_VERSION}</version></dependency>\n  </dependencies>\n</project>\n"
    );
    let pom_path = dir.join("pom.xml");
    std::fs::write(&pom_path, pom)
        .map_err(|e| Failure::new(format!("cannot write {}: {e}", pom_path.display())))?;
    // Our own directory is emptied of other versions' jars first; one the
    // user named is only added to.
    if chosen.is_none() {
        let _ = std::fs::remove_dir_all(&jars);
    }
    step(
        "fetch the Kafka jars",
        Command::new("mvn")
            .args(["-q", "-B", "-f"])
            .arg(&pom_path)
            .arg("dependency:copy-dependencies")
            .arg("-DincludeScope=runtime")
            .arg(format!("-DoutputDirectory={}", jars.display()))
            .stdin(Stdio::null()),
    )
}

/// Builds a benchmark's Debezium baseline (`crates/evolve-bench/<project>`,
/// a Maven project: `debezium` for the pipeline benchmark,
/// `debezium-mysql` for the mysql one) into `target/<out>`, offline when
/// the Maven cache (the one the Flyway jars go to) already has every
/// artifact, online otherwise. Its directory, or why it cannot be built;
/// the benchmark then runs without it and says so.
fn build_debezium(project: &str, out: &str) -> Result<PathBuf, String> {
    if !on_path("java") {
        return Err("`java` is not installed".into());
    }
    if !on_path("mvn") {
        return Err("`mvn` is not installed".into());
    }
    let out = workspace_root().join("target").join(out);
    let pom = workspace_root()
        .join("crates/evolve-bench")
        .join(project)
        .join("pom.xml");
    let mvn = |offline: bool| {
        let mut cmd = Command::new("mvn");
        cmd.args(["-q", "-B"]);
        if offline {
            cmd.arg("-o");
        }
        cmd.arg("-f")
            .arg(&pom)
            .arg(format!("-Devolve.out={}", out.display()))
            .arg("package")
            .stdin(Stdio::null());
        if offline {
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
        }
        cmd.status().is_ok_and(|s| s.success())
    };
    eprintln!(
        "==> build the Debezium baseline (mvn package into {})",
        out.display()
    );
    if mvn(true) || mvn(false) {
        Ok(out)
    } else {
        Err(format!(
            "`mvn package` of {} failed (output above)",
            pom.display()
        ))
    }
}

/// Install the PostgreSQL server packages unless `initdb` is found.
fn ensure_postgres() -> Result<(), Failure> {
    match find_pg_bin() {
        PgBin::Found(_) => return Ok(()),
        PgBin::BadEnv(dir) => {
            return Err(Failure::new(format!(
                "EVOLVE_PG_BIN={} contains no initdb; point it at the bin directory of a PostgreSQL server installation, or unset it to have xtask install the postgresql package",
                dir.display()
            )));
        }
        PgBin::NotFound => {}
    }
    eprintln!(
        "==> PostgreSQL server binaries not found (no initdb in EVOLVE_PG_BIN, {DEBIAN_ROOT}/*/bin, pg_config --bindir or PATH); installing {}",
        PACKAGES.join(" ")
    );
    let elevate = privilege()?;
    step("apt-get update", &mut apt(elevate, &["update"]))?;
    let mut install = vec!["install", "-y", "--no-install-recommends"];
    install.extend(PACKAGES);
    step("install postgresql", &mut apt(elevate, &install))?;
    match find_pg_bin() {
        PgBin::Found(dir) => {
            eprintln!("==> PostgreSQL server binaries in {}", dir.display());
            Ok(())
        }
        _ => Err(Failure::new(format!(
            "installed {} but still found no initdb; set EVOLVE_PG_BIN to the server's bin directory",
            PACKAGES.join(" ")
        ))),
    }
}

/// The MariaDB packages the MySQL source's tests start servers from.
const MARIADB_PACKAGES: [&str; 2] = ["mariadb-server", "mariadb-client"];

/// Installs MariaDB with apt-get when `mariadbd` is missing (the same
/// search as `evolve-test`'s MariaDB harness: `EVOLVE_MARIADB_BIN`, else
/// `/usr/sbin`, `/usr/bin` and `PATH`). The package's own service is not
/// needed: the tests start throwaway servers.
fn ensure_mariadb() -> Result<(), Failure> {
    let found = || match std::env::var_os("EVOLVE_MARIADB_BIN") {
        Some(dir) => Path::new(&dir).join("mariadbd").is_file(),
        None => Path::new("/usr/sbin/mariadbd").is_file() || on_path("mariadbd"),
    };
    if found() {
        return Ok(());
    }
    if let Some(dir) = std::env::var_os("EVOLVE_MARIADB_BIN") {
        return Err(Failure::new(format!(
            "EVOLVE_MARIADB_BIN={} contains no mariadbd; point it at the directory of the MariaDB server binaries, or unset it to have xtask install {}",
            Path::new(&dir).display(),
            MARIADB_PACKAGES.join(" ")
        )));
    }
    eprintln!(
        "==> MariaDB server not found (no mariadbd in /usr/sbin or PATH); installing {}",
        MARIADB_PACKAGES.join(" ")
    );
    let elevate = privilege()?;
    step("apt-get update", &mut apt(elevate, &["update"]))?;
    let mut install = vec!["install", "-y", "--no-install-recommends"];
    install.extend(MARIADB_PACKAGES);
    step("install mariadb", &mut apt(elevate, &install))?;
    if found() {
        Ok(())
    } else {
        Err(Failure::new(format!(
            "installed {} but still found no mariadbd; set EVOLVE_MARIADB_BIN to the directory holding it",
            MARIADB_PACKAGES.join(" ")
        )))
    }
}

/// pg_repack, the rewrite benchmark's baseline: Debian's
/// `postgresql-<major>-repack` for the server found, installed with
/// apt-get when its binary is missing.
fn ensure_repack() -> Result<(), Failure> {
    let PgBin::Found(bin) = find_pg_bin() else {
        return Err(Failure::new("no PostgreSQL server binaries found"));
    };
    if bin.join("pg_repack").is_file() {
        return Ok(());
    }
    let major = bin
        .parent()
        .and_then(|p| p.file_name())
        .map(|m| m.to_string_lossy().into_owned())
        .unwrap_or_else(|| "15".to_string());
    let package = format!("postgresql-{major}-repack");
    let elevate = privilege()?;
    step("apt-get update", &mut apt(elevate, &["update"]))?;
    step(
        "install pg_repack",
        &mut apt(
            elevate,
            &["install", "-y", "--no-install-recommends", &package],
        ),
    )
}

/// How apt-get gets root.
#[derive(Debug, Clone, Copy)]
enum Elevate {
    AlreadyRoot,
    Sudo,
}

fn privilege() -> Result<Elevate, Failure> {
    if is_root() {
        return Ok(Elevate::AlreadyRoot);
    }
    let sudo_ok = Command::new("sudo")
        .args(["-n", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if sudo_ok {
        Ok(Elevate::Sudo)
    } else {
        Err(Failure::new(format!(
            "cannot install {}: not running as root and `sudo -n` is not available; install them yourself (apt-get install {}) or set EVOLVE_PG_BIN to the server's bin directory",
            PACKAGES.join(" "),
            PACKAGES.join(" ")
        )))
    }
}

/// `apt-get ARGS` without questions, as root.
fn apt(elevate: Elevate, args: &[&str]) -> Command {
    let mut cmd = match elevate {
        Elevate::AlreadyRoot => {
            let mut cmd = Command::new("apt-get");
            cmd.env("DEBIAN_FRONTEND", "noninteractive");
            cmd
        }
        Elevate::Sudo => {
            // sudo resets the environment; `env` sets it on the far side.
            let mut cmd = Command::new("sudo");
            cmd.args(["-n", "env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]);
            cmd
        }
    };
    cmd.args(args).stdin(Stdio::null());
    cmd
}

/// Our effective uid is 0 (`/proc/self` belongs to it).
fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_numerically() {
        let mut names = vec!["17", "9.6", "15", "10", "9.10"];
        names.sort_by_key(|n| version_key(n));
        assert_eq!(names, ["9.6", "9.10", "10", "15", "17"]);
        assert_eq!(version_key("main"), None);
        assert_eq!(version_key("15.beta"), None);
        assert_eq!(version_key(""), None);
    }

    #[test]
    fn highest_version_with_initdb_wins() {
        let root = std::env::temp_dir().join(format!("xtask-pgbin-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (version, with_initdb) in [("9", true), ("15", true), ("17", false), ("common", true)] {
            let bin = root.join(version).join("bin");
            std::fs::create_dir_all(&bin).unwrap();
            if with_initdb {
                std::fs::write(bin.join("initdb"), "").unwrap();
            }
        }
        // 17 is client-only (no initdb); "common" is no version.
        assert_eq!(highest_versioned_bin(&root), Some(root.join("15/bin")));
        std::fs::write(root.join("17/bin/initdb"), "").unwrap();
        assert_eq!(highest_versioned_bin(&root), Some(root.join("17/bin")));
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(highest_versioned_bin(&root), None);
    }

    #[test]
    fn apt_commands_are_noninteractive() {
        let root = apt(Elevate::AlreadyRoot, &["update"]);
        assert_eq!(describe(&root), "apt-get update");
        assert!(
            root.get_envs()
                .any(|(k, v)| k == "DEBIAN_FRONTEND" && v == Some("noninteractive".as_ref()))
        );
        let sudo = apt(Elevate::Sudo, &["install", "-y", "postgresql"]);
        assert_eq!(
            describe(&sudo),
            "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql"
        );
    }
}
