//! A newcomer's first hour: the README's pipeline walkthrough exactly as
//! written, and the mistakes people make on the way (no `evolve.toml` yet,
//! a wrong `DATABASE_URL`, a second pipeline on one state directory), each
//! answered with one line that names the object and the way out.

mod support;

use std::process::Stdio;

use support::*;

const README: &str = include_str!("../../../README.md");

/// The text of README.md between `start` (excluded) and the first `end`
/// after it.
fn readme_between(start: &str, end: &str) -> &'static str {
    let from = README
        .find(start)
        .unwrap_or_else(|| panic!("README.md has no {start:?}"))
        + start.len();
    let to = README[from..]
        .find(end)
        .unwrap_or_else(|| panic!("README.md has no {end:?} after {start:?}"));
    &README[from..from + to]
}

/// The walkthrough under "Running it", statement by statement as the README
/// gives them: the upstream table it defines, `setup.sql`, the `psql shop`
/// line of changes; the sink then holds the rows the README shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_pipeline_walkthrough_runs_as_written() {
    let env = env("first_hour_walk").await;
    let table = readme_between("-- upstream, as app:\n", "```");
    assert!(table.contains("CREATE TABLE orders"), "{table}");
    env.up.batch_execute(table).await.unwrap();

    let setup = readme_file("setup.sql");
    let file = env.dir.join("setup.sql");
    std::fs::write(&file, &setup).unwrap();
    let mut pipeline = Pipeline::start(&env.config);
    let admin = pipeline.url.clone();
    let out = sql_ok(&admin, &["-f", file.to_str().unwrap()]).await;
    assert_eq!(
        out,
        "CREATE SOURCE\nCREATE TABLE\nCREATE MATERIALIZED VIEW\nCREATE SINK\n"
    );
    wait_all_running(&admin).await;

    let changes = readme_between("$ psql shop -c \"", "\"\n");
    assert!(changes.starts_with("UPDATE orders"), "{changes}");
    env.up.batch_execute(changes).await.unwrap();
    wait_converged(&env).await;

    let shown: Vec<(String, String)> = readme_between(
        "$ psql reporting -c \"SELECT key, data FROM orders_json ORDER BY key\"\n",
        "\n\n",
    )
    .lines()
    .filter(|l| l.trim_start().starts_with('{'))
    .map(|l| {
        let (key, data) = l.split_once('|').expect("key | data");
        (key.trim().to_string(), data.trim().to_string())
    })
    .collect();
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert_eq!(sink_rows(&env.sink).await, shown);
    assert!(pipeline.terminate().success());
}

/// A second `evolve pipeline run` on a state directory in use is refused
/// before it prints that it is listening: its stdout is empty, and its one
/// error names the directory, the process that holds it and the way out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_pipeline_on_one_state_directory_is_refused_before_it_listens() {
    let env = env("first_hour_twice").await;
    let mut first = Pipeline::start(&env.config);
    let config = env.config.clone();
    let second = tokio::task::spawn_blocking(move || {
        std::process::Command::new(EVOLVE)
            .args(["pipeline", "run", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .output()
            .expect("run evolve")
    })
    .await
    .unwrap();
    assert_eq!(second.status.code(), Some(1), "{}", text(&second.stderr));
    assert_eq!(text(&second.stdout), "", "{}", text(&second.stderr));
    let stderr = text(&second.stderr);
    assert!(
        stderr.starts_with("error: state directory ")
            && stderr.contains("is in use by another running pipeline (process ")
            && stderr.contains("give this one a state_dir of its own"),
        "{stderr}"
    );
    // The first one is unharmed.
    assert!(
        !status(&first.url)
            .await
            .iter()
            .any(|o| o["state"] == "stalled")
    );
    assert!(first.terminate().success());
}

/// `evolve pipeline run` (and every other command that reads the
/// pipeline's config) where no `evolve.toml` exists: one line naming the
/// file, what to write in it and `--config`.
#[tokio::test]
async fn a_missing_config_file_says_how_to_write_one() {
    let dir = std::env::temp_dir().join(format!("evolve-first-hour-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("evolve.toml");
    let missing = missing.to_str().unwrap();
    for args in [
        vec!["pipeline", "run", "--config", missing],
        vec!["pipeline", "check", "--config", missing],
        vec!["status", "--config", missing],
        vec!["sql", "--config", missing, "-c", "SHOW SOURCES"],
        vec![
            "replicate",
            "skip",
            "r",
            "--lsn",
            "0/1",
            "--config",
            missing,
        ],
        vec!["rollout", "--nodes", "a,b", "--config", missing],
    ] {
        let out = evolve(&args).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(
            stderr,
            format!(
                "error: config file {missing} does not exist; write one with state_dir, \
                 admin_listen and a [connections.NAME] url for each server (see \"Running it\" \
                 in the README's pipeline section), or name yours with --config FILE\n"
            ),
            "{args:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `admin_listen` written as the URL the clients use: said as such, with
/// the form it takes, not as "not a loopback address" asking for a token.
#[tokio::test]
async fn an_admin_listen_written_as_a_url_says_so() {
    let dir = std::env::temp_dir().join(format!("evolve-first-hour-listen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("evolve.toml");
    std::fs::write(
        &config,
        "admin_listen = \"http://127.0.0.1:7800\"\n[connections.pg_conn]\n\
         url = \"postgres://replicator@127.0.0.1:5432/shop\"\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let out = evolve(&["pipeline", "run", "--config", config]).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(
        text(&out.stderr),
        format!(
            "error: admin_listen in {config} is \"http://127.0.0.1:7800\", a URL; it is the \
             address the pipeline listens on, HOST:PORT, e.g. 127.0.0.1:7800\n"
        )
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `evolve status` typed in the directory of an `evolve.toml` whose
/// pipeline listens elsewhere than the clients' default: the error names
/// the file's address and `--config`, rather than asking whether the
/// pipeline runs.
#[tokio::test]
async fn a_client_beside_an_evolve_toml_listening_elsewhere_is_told_so() {
    if std::net::TcpStream::connect("127.0.0.1:7800").is_ok() {
        // Something listens on the default address: the client would
        // reach it, and there is nothing to say.
        return;
    }
    let dir = std::env::temp_dir().join(format!("evolve-first-hour-here-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("evolve.toml"),
        "admin_listen = \"127.0.0.1:7801\"\n[connections.pg_conn]\n\
         url = \"postgres://replicator@127.0.0.1:5432/shop\"\n",
    )
    .unwrap();
    let run = |dir: std::path::PathBuf| {
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(EVOLVE)
                .arg("status")
                .current_dir(dir)
                .env_remove("EVOLVE_ADMIN")
                .env_remove("EVOLVE_ADMIN_TOKEN")
                .stdin(Stdio::null())
                .output()
                .expect("run evolve")
        })
    };
    let out = run(dir.clone()).await.unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr
            .starts_with("error: cannot reach the pipeline's admin API at http://127.0.0.1:7800 (")
            && stderr.ends_with(
                "); evolve.toml here has admin_listen = \"127.0.0.1:7801\": pass --config \
                 evolve.toml (or --admin http://127.0.0.1:7801)\n"
            ),
        "{stderr}"
    );
    // Without an evolve.toml, the question as before.
    std::fs::remove_file(dir.join("evolve.toml")).unwrap();
    let out = run(dir.clone()).await.unwrap();
    assert!(
        text(&out.stderr).ends_with("; is `evolve pipeline run` running?\n"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A connection that fails names where its string came from: the
/// `DATABASE_URL` someone exported, not a `--database-url` they never
/// typed; the flag when it was given; libpq's variables when neither was.
/// The password is never shown.
#[tokio::test]
async fn a_failed_connection_names_where_its_url_came_from() {
    // Port 1 on loopback: nothing listens, the connection is refused.
    let url = "postgres://app:hunter2secret@127.0.0.1:1/shop";
    // The arguments, the variables set, and what the error says to check.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 8] = [
        (
            &["backfill", "status"],
            &[("DATABASE_URL", url)],
            "check DATABASE_URL and",
        ),
        (
            &[
                "rewrite",
                "public.orders",
                "--alter",
                "ALTER COLUMN id TYPE bigint",
            ],
            &[("DATABASE_URL", url)],
            "check DATABASE_URL and",
        ),
        (
            &["migrate", "status"],
            &[("DATABASE_URL", url)],
            "check DATABASE_URL and",
        ),
        (
            &["deps", "orders"],
            &[("DATABASE_URL", url)],
            "check DATABASE_URL and",
        ),
        (
            &["refresh", "--status"],
            &[("DATABASE_URL", url)],
            "check DATABASE_URL and",
        ),
        (
            &["refresh", "--all", "--database-url", url],
            &[],
            "check --database-url and",
        ),
        (
            &["migrate", "status", "--database-url", url],
            &[],
            "check --database-url and",
        ),
        (
            &["migrate", "status"],
            &[("PGHOST", "127.0.0.1"), ("PGPORT", "1")],
            "check the PG* environment variables (PGHOST, PGPORT, PGUSER, PGDATABASE, PGSERVICE) and",
        ),
    ];
    for (n, (args, vars, expected)) in cases.into_iter().enumerate() {
        let dir = std::env::temp_dir().join(format!(
            "evolve-first-hour-url-{}-{}",
            std::process::id(),
            n
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let out = tokio::task::spawn_blocking({
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let dir = dir.clone();
            move || {
                let mut command = std::process::Command::new(EVOLVE);
                command.args(&args).current_dir(&dir).stdin(Stdio::null());
                for v in [
                    "DATABASE_URL",
                    "PGHOST",
                    "PGHOSTADDR",
                    "PGPORT",
                    "PGUSER",
                    "PGDATABASE",
                    "PGSERVICE",
                ] {
                    command.env_remove(v);
                }
                command.envs(vars).output().expect("run evolve")
            }
        })
        .await
        .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: could not connect to "),
            "{stderr}"
        );
        assert!(stderr.contains(expected), "{args:?} {vars:?}: {stderr}");
        assert!(!stderr.contains("hunter2secret"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

/// `evolve --help` and `evolve demo --help` name every kind of source the
/// pipeline reads and every tour, as the README does.
#[tokio::test]
async fn help_names_every_source_and_tour() {
    let out = evolve(&["--help"]).await;
    assert!(out.status.success());
    let help = text(&out.stdout);
    let line = |name: &str| {
        help.lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {help}"))
            .to_string()
    };
    let pipeline = line("pipeline ");
    for source in ["PostgreSQL", "MySQL", "Kafka"] {
        assert!(pipeline.contains(source), "{pipeline}");
    }
    let demo = line("demo ");
    for tour in ["demo migrate", "demo mysql", "demo kafka"] {
        assert!(demo.contains(tour), "{demo}");
        assert!(README.contains(&format!("`evolve {tour}`")), "{tour}");
    }
}
