//! The README's pipeline section as a new user follows it with a
//! least-privilege replication role: every `$ ` line of it, top to bottom,
//! as printed. And the checks that catch each missing privilege and each
//! server setting in the way (`wal_level`, replication slots, WAL senders),
//! with the statement that fixes it and nothing created upstream.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::{Pipeline, connect, evolve, readme_file, text};

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md")
}

/// The fenced block of `lang` that follows the first line containing
/// `after` in the README.
fn readme_block(after: &str, lang: &str) -> String {
    let text = readme();
    let start = text
        .find(after)
        .unwrap_or_else(|| panic!("{after:?} not in README"));
    let rest = &text[start..];
    let open = format!("```{lang}\n");
    let body = &rest[rest.find(&open).expect("a fenced block") + open.len()..];
    body[..body.find("```").expect("its end")].to_string()
}

fn temp_dir(hint: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "evolve-pipeline-privileges-{}-{hint}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn as_user(url: &str, user: &str) -> String {
    let changed = url.replacen("postgres@", &format!("{user}@"), 1);
    assert_ne!(changed, url, "{url} names the postgres user");
    changed
}

fn config(dir: &Path, up: &str, sink: &str) -> PathBuf {
    let path = dir.join("evolve.toml");
    std::fs::write(
        &path,
        format!(
            "state_dir = \"state\"\nadmin_listen = \"127.0.0.1:0\"\n\
             [connections.pg_conn]\nurl = \"{up}\"\n[connections.sink_conn]\nurl = \"{sink}\"\n"
        ),
    )
    .unwrap();
    path
}

/// The README's section on the pipeline, from its heading to the next
/// `## ` heading.
fn pipeline_section() -> String {
    let text = readme();
    let start = text
        .find("## `evolve pipeline`")
        .expect("README has a pipeline section");
    let end = text[start + 3..]
        .find("\n## ")
        .map_or(text.len(), |n| start + 3 + n + 1);
    text[start..end].to_string()
}

/// Each `$ command` of the section's code blocks (a trailing `\` joins the
/// next line), with the lines printed after it up to the next `$ ` line
/// or the end of its block.
fn readme_commands(section: &str) -> Vec<(String, String)> {
    let mut steps: Vec<(String, String)> = Vec::new();
    let mut in_block = false;
    let mut current = None;
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if line.starts_with("```") {
            in_block = !in_block;
            current = None;
        } else if !in_block {
        } else if let Some(command) = line.strip_prefix("$ ") {
            let mut command = command.to_string();
            while command.ends_with('\\') {
                command.pop();
                command.push_str(lines.next().expect("a continued line").trim_start());
            }
            steps.push((command, String::new()));
            current = Some(steps.len() - 1);
        } else if let Some(i) = current {
            steps[i].1.push_str(line);
            steps[i].1.push('\n');
        }
    }
    steps
}

/// The README's `$ ` lines as a user types them into a shell: `sh -c` in
/// the directory of `evolve.toml`, with `evolve`, `psql` and `cat` on
/// `PATH` and the environment of `env`.
struct Shell {
    dir: PathBuf,
    env: Vec<(String, String)>,
}

impl Shell {
    fn command(&self, line: &str, env: &[(&str, &str)]) -> std::process::Command {
        let mut command = std::process::Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(line)
            .current_dir(&self.dir)
            .env_remove("EVOLVE_ADMIN")
            .env_remove("EVOLVE_ADMIN_TOKEN")
            .env_remove("PGPASSWORD")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null());
        command
    }

    /// Runs `line` to its end; its exit status and what it printed, stdout
    /// and stderr in the order a terminal shows them.
    async fn run(&self, line: &str, env: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
        let mut command = self.command(line, env);
        let path = self.dir.join("terminal.out");
        tokio::task::spawn_blocking(move || {
            let terminal = std::fs::File::create(&path).unwrap();
            let status = command
                .stdout(terminal.try_clone().unwrap())
                .stderr(terminal)
                .status()
                .expect("run sh");
            (status, std::fs::read_to_string(&path).unwrap())
        })
        .await
        .unwrap()
    }

    /// Starts `line` (prefixed with `exec`, so that the child is the
    /// command itself) and returns it with a channel of its stdout's lines.
    fn spawn(&self, line: &str) -> (Background, std::sync::mpsc::Receiver<String>) {
        let mut child = self
            .command(&format!("exec {line}"), &[])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn sh");
        let stdout = child.stdout.take().unwrap();
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        (Background(child), receive)
    }
}

/// A command of the README left running; ended (by its pid) on drop, as
/// `^C` ends it.
struct Background(std::process::Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn next_line(lines: &std::sync::mpsc::Receiver<String>, what: &str) -> String {
    tokio::task::block_in_place(|| lines.recv_timeout(Duration::from_secs(30)))
        .unwrap_or_else(|e| panic!("no line from {what} in 30 s: {e}"))
}

/// Subscription lines with their positions numbered in order of first
/// appearance (`"ts":"#1"`), to compare the README's with a run's.
fn numbered_positions(lines: &[String]) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    lines
        .iter()
        .map(|line| {
            let Some(start) = line.find("\"ts\":\"").map(|n| n + 6) else {
                return line.clone();
            };
            let end = start + line[start..].find('"').unwrap();
            let ts = line[start..end].to_string();
            let n = match seen.iter().position(|s| *s == ts) {
                Some(n) => n + 1,
                None => {
                    seen.push(ts);
                    seen.len()
                }
            };
            format!("{}#{n}{}", &line[..start], &line[end..])
        })
        .collect()
}

/// Polls `line` until it prints `want`, for output that depends on the
/// data reaching the sink or the lag catching up (psql's lines without
/// their trailing blanks).
async fn wait_printed(shell: &Shell, line: &str, env: &[(&str, &str)], want: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, mut got) = shell.run(line, env).await;
        if line.starts_with("psql ") {
            // psql pads its header line; the README does not.
            got = got.lines().map(|l| format!("{}\n", l.trim_end())).collect();
        }
        if status.success() && got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "`{line}` never printed what the README prints:\n{want}\nlast:\n{got}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn sink_count(sink: &tokio_postgres::Client) -> i64 {
    sink.query_one("SELECT count(*) FROM public.orders_json", &[])
        .await
        .unwrap()
        .get(0)
}

/// Every `$ ` line of the README's pipeline section, run as printed from
/// top to bottom by a new user on a server with passwords: the
/// prerequisites (each statement as the role its comment names), the
/// README's `evolve.toml` (only its host names and admin port changed),
/// `evolve pipeline check`, `pipeline run`, the setup file twice, `SHOW
/// TABLES`, the table owner's changes with psql, the sink as psql shows
/// it, `evolve status`, the two errors, `subscribe` with and without
/// `--as-of`, and the schema change absorbed with a replacement. evolve's
/// roles are `replicator` (LOGIN REPLICATION, SELECT on the table) and
/// `writer` (CREATE on the sink's schema). Each command prints what the
/// README prints (positions aside), and the sink holds the upstream's
/// documents after each step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_runs_as_printed_for_a_least_privilege_role() {
    let cluster = tokio::task::spawn_blocking(|| {
        evolve_test::Cluster::start_with(evolve_test::Options {
            auth: evolve_test::Auth::Scram {
                password: "postgres-secret".into(),
            },
            ..evolve_test::Options::default()
        })
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("{e}"));
    // The README's databases and the roles its comments name: `app` owns
    // the tables and may create in `shop`, `report_owner` owns
    // `reporting`, `admin` has CREATEROLE.
    let postgres = connect(&cluster.url("postgres")).await;
    for statement in [
        "CREATE ROLE app LOGIN",
        "CREATE ROLE admin CREATEROLE",
        "CREATE ROLE report_owner LOGIN",
        "CREATE DATABASE shop",
        "GRANT CREATE ON DATABASE shop TO app",
        "CREATE DATABASE reporting OWNER report_owner",
    ] {
        postgres.batch_execute(statement).await.unwrap();
    }
    let up = connect(&cluster.url("shop")).await;
    let sink = connect(&cluster.url("reporting")).await;
    up.batch_execute(
        "GRANT CREATE ON SCHEMA public TO app;
         SET ROLE app;
         CREATE TABLE public.orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2), placed date);
         INSERT INTO orders VALUES (1, 'ada', 10.50, NULL), (2, 'bob', NULL, NULL);
         RESET ROLE;",
    )
    .await
    .unwrap();

    // The prerequisites, each statement as the role its comment names.
    let prerequisites = readme_block("### Prerequisites", "sql");
    let mut target = &up;
    let mut role = "postgres";
    let mut ran = 0;
    for line in prerequisites.lines() {
        let line = line.trim();
        if let Some(comment) = line.strip_prefix("--") {
            target = if comment.trim_start().starts_with("upstream") {
                &up
            } else if comment.trim_start().starts_with("sink") {
                &sink
            } else {
                panic!("{line}: neither upstream nor sink")
            };
            role = if comment.contains("as a superuser") {
                "postgres"
            } else if comment.contains("as a role with CREATEROLE") {
                "admin"
            } else if comment.contains("as the owner of the tables") {
                "app"
            } else if comment.contains("as the database's owner") {
                "report_owner"
            } else {
                panic!("{line}: which role?")
            };
            continue;
        }
        let statement = line.split(" --").next().unwrap().trim();
        if statement.is_empty() {
            continue;
        }
        target
            .batch_execute(&format!("SET ROLE {role}; {statement} RESET ROLE;"))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{statement} as {role}: {}",
                    e.as_db_error()
                        .map_or(e.to_string(), |d| d.message().to_string())
                )
            });
        ran += 1;
    }
    assert_eq!(ran, 5, "{prerequisites}");
    let powers: bool = up
        .query_one(
            "SELECT bool_or(rolsuper OR rolcreaterole OR rolcreatedb OR rolbypassrls) \
             FROM pg_roles WHERE rolname IN ('replicator', 'writer')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!powers, "evolve's roles have no powers");

    // The README's evolve.toml, at this cluster; the writer's password in
    // ~/.pgpass (mode 0600), the replicator's in PG_PASSWORD.
    let dir = temp_dir("walkthrough");
    let toml = readme_block("### Running it", "toml");
    let port = cluster.port().to_string();
    let mut config = toml.clone();
    for (from, to) in [
        ("db.example:5432", format!("127.0.0.1:{port}")),
        ("reporting.example:5432", format!("127.0.0.1:{port}")),
        ("127.0.0.1:7800", "127.0.0.1:0".to_string()),
    ] {
        assert!(config.contains(from), "{from} not in\n{toml}");
        config = config.replace(from, &to);
    }
    std::fs::write(dir.join("evolve.toml"), &config).unwrap();
    let pgpass = dir.join(".pgpass");
    std::fs::write(&pgpass, format!("127.0.0.1:{port}:reporting:writer:...\n")).unwrap();
    std::fs::set_permissions(&pgpass, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let bin = Path::new(support::EVOLVE).parent().unwrap();
    let mut shell = Shell {
        dir: dir.clone(),
        env: vec![
            (
                "PATH".into(),
                format!(
                    "{}:{}:{}",
                    bin.display(),
                    cluster.bin("psql").parent().unwrap().display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            ),
            ("HOME".into(), dir.display().to_string()),
            ("PG_PASSWORD".into(), "...".into()),
            // psql's sessions go through the Unix socket.
            ("PGHOST".into(), cluster.socket_dir().display().to_string()),
            ("PGPORT".into(), port.clone()),
        ],
    };

    let section = pipeline_section();
    let steps = readme_commands(&section);
    // The files the README shows with `cat`, as the user has them.
    for (command, output) in &steps {
        if let Some(file) = command.strip_prefix("cat ") {
            std::fs::write(dir.join(file), output).unwrap();
        }
    }
    // What another shell does while `evolve subscribe` runs (the only
    // psql command of the section's prose).
    let meanwhile = section
        .lines()
        .find_map(|l| {
            let marker = "`psql shop -c \"";
            let start = l.find(marker)? + marker.len();
            Some(l[start..start + l[start..].find('"')?].to_string())
        })
        .expect("the README's update made while subscribed");
    let owner = [("PGUSER", "app")];
    let reader = [("PGUSER", "writer")];

    let mut pipeline = None;
    let mut subscribed: Vec<String> = Vec::new();
    let mut ran = Vec::new();
    for (command, printed) in &steps {
        let words: Vec<&str> = command.split_whitespace().collect();
        match words.as_slice() {
            ["cat", ..] => {}
            ["evolve", "pipeline", "check", ..] => {
                // The README shows a failing check; here every check passes.
                let (status, out) = shell.run(command, &[]).await;
                assert!(status.success(), "{command}:\n{out}");
                assert!(out.ends_with("every check passed\n"), "{out}");
                assert!(out.contains("(replicator@127.0.0.1:"), "{out}");
                assert!(out.contains("(writer@127.0.0.1:"), "{out}");
                assert!(
                    !dir.join("evolve-state").exists(),
                    "a check creates no state"
                );
            }
            ["evolve", "pipeline", "run", ..] => {
                let (child, lines) = shell.spawn(command);
                let line = next_line(&lines, command);
                let url = line
                    .split_whitespace()
                    .find(|w| w.starts_with("http://"))
                    .unwrap_or_else(|| panic!("no URL in {line:?}"))
                    .to_string();
                let port = url.rsplit(':').next().unwrap();
                assert_eq!(
                    format!("{line}\n"),
                    printed.replace("7800", port),
                    "{command}"
                );
                shell.env.push(("EVOLVE_ADMIN".into(), url));
                pipeline = Some((child, lines));
            }
            ["evolve", "subscribe", _, "--snapshot", ..] => {
                let printed: Vec<String> = printed
                    .lines()
                    .filter(|l| *l != "^C")
                    .map(str::to_string)
                    .collect();
                let (child, lines) = shell.spawn(command);
                // The snapshot, up to its progress line.
                let mut got = Vec::new();
                while !got
                    .last()
                    .is_some_and(|l: &String| l.contains("\"progress\""))
                {
                    got.push(next_line(&lines, command));
                }
                let snapshot = got.len();
                up.batch_execute(&format!("SET ROLE app; {meanwhile}; RESET ROLE"))
                    .await
                    .unwrap();
                while got.len() < printed.len() {
                    got.push(next_line(&lines, command));
                }
                assert_eq!(
                    numbered_positions(&got),
                    numbered_positions(&printed),
                    "{command}"
                );
                drop(child);
                subscribed = got;
                assert_eq!(snapshot, 3);
            }
            ["evolve", "subscribe", _, "--as-of", position, ..] => {
                // From the position of the snapshot above: only the update.
                let first = &subscribed[2];
                let ts = first
                    .split("\"ts\":\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap();
                let (child, lines) = shell.spawn(&command.replace(position, ts));
                let mut got = Vec::new();
                while got.len() < 3 {
                    got.push(next_line(&lines, command));
                }
                assert_eq!(got, subscribed[3..6], "{command}");
                drop(child);
            }
            ["evolve", "status"] => wait_printed(&shell, command, &[], printed).await,
            ["evolve", ..] => {
                let (status, out) = shell.run(command, &[]).await;
                assert_eq!(&out, printed, "{command}");
                // The README's errors exit 1, the rest 0.
                let failed = printed.starts_with("ERROR:");
                assert_eq!(status.code(), Some(i32::from(failed)), "{command}");
            }
            ["psql", "shop", ..] => {
                let (status, out) = shell.run(command, &owner).await;
                assert!(status.success(), "{command}: {out}");
            }
            ["psql", "reporting", ..] => wait_printed(&shell, command, &reader, printed).await,
            // The admin API's security, not the servers' privileges: see
            // admin_security.rs.
            ["curl", ..] => continue,
            // The replicator's password, as the README sets it (its `...`
            // is the password the test's role has).
            ["export", assignment, ..] => {
                let (name, value) = assignment
                    .split_once('=')
                    .unwrap_or_else(|| panic!("the README's `$ {command}` sets nothing"));
                shell.env.retain(|(n, _)| n != name);
                shell
                    .env
                    .push((name.to_string(), value.trim_matches('\'').to_string()));
            }
            _ => panic!("the README's `$ {command}`: what does it do?"),
        }
        ran.push(command.clone());
        // The data has reached the sink after each step that changes it.
        if command.starts_with("evolve sql -f") || command.starts_with("psql shop") {
            let want = support::upstream_rows(&up).await;
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let exists: bool = sink
                    .query_one("SELECT to_regclass('public.orders_json') IS NOT NULL", &[])
                    .await
                    .unwrap()
                    .get(0);
                if exists && support::sink_rows(&sink).await == want {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "after `{command}` the sink never had the upstream's {} documents",
                    want.len()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    eprintln!("ran: {ran:#?}");
    assert_eq!(sink_count(&sink).await, 2);
    // After the swap the new column flows.
    up.batch_execute("SET ROLE app; UPDATE orders SET region = 'eu' WHERE id = 1; RESET ROLE")
        .await
        .unwrap();
    wait_printed(
        &shell,
        "psql reporting -Atc \"SELECT data FROM orders_json WHERE key = '{\\\"id\\\": 1}'\"",
        &reader,
        "{\"id\": 1, \"total\": 11.00, \"region\": \"eu\", \"customer\": \"ada\"}\n",
    )
    .await;
    drop(pipeline);
    let _ = std::fs::remove_dir_all(&dir);
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_missing_privilege_is_named_with_its_fix() {
    // A cluster of its own: the README's source name is the other test's,
    // and slot names are per cluster.
    let cluster = tokio::task::spawn_blocking(|| evolve_test::Cluster::start().unwrap())
        .await
        .unwrap();
    let up_db = cluster.create_database("weak_up").await.unwrap();
    let sink_db = cluster.create_database("weak_sink").await.unwrap();
    let up = connect(&up_db.url).await;
    let sink = connect(&sink_db.url).await;
    up.batch_execute(
        "CREATE ROLE weak LOGIN;
         CREATE TABLE public.orders (id int PRIMARY KEY, v text);",
    )
    .await
    .unwrap();
    sink.batch_execute("CREATE ROLE weak_writer LOGIN")
        .await
        .unwrap();
    let dir = temp_dir("weak");
    let config = config(
        &dir,
        &as_user(&up_db.url, "weak"),
        &as_user(&sink_db.url, "weak_writer"),
    );
    let setup = dir.join("setup.sql");
    std::fs::write(&setup, readme_file("setup.sql")).unwrap();
    let check = async || {
        evolve(&[
            "pipeline",
            "check",
            "--config",
            config.to_str().unwrap(),
            "-f",
            setup.to_str().unwrap(),
        ])
        .await
    };
    let out = check().await;
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    for fix in [
        "fix: ALTER ROLE weak REPLICATION;",
        "fix: GRANT SELECT ON public.orders TO weak;",
        "fix: CREATE PUBLICATION evolve_pub FOR TABLE <the tables>; as the tables' owner (or GRANT CREATE ON DATABASE",
        "fix: GRANT CREATE ON SCHEMA public TO weak_writer;",
    ] {
        assert!(stdout.contains(fix), "{fix:?} not in\n{stdout}");
    }
    assert!(stdout.contains("6 check(s) failed"), "{stdout}");
    assert!(
        text(&out.stderr).contains("not ready"),
        "{}",
        text(&out.stderr)
    );
    // Statements that cannot run fail the check too: a connection
    // evolve.toml lacks, a table of a source nothing creates.
    let typos = dir.join("typos.sql");
    std::fs::write(
        &typos,
        "CREATE SOURCE s2 FROM POSTGRES CONNECTION pg_conm (PUBLICATION 'p');\n\
         CREATE TABLE t2 FROM SOURCE scr (REFERENCE public.orders);\n\
         CREATE SINK k2 FROM orders_json INTO POSTGRES CONNECTION sink_conn (TABLE 't2');\n",
    )
    .unwrap();
    let out = evolve(&[
        "pipeline",
        "check",
        "--config",
        config.to_str().unwrap(),
        "-f",
        typos.to_str().unwrap(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    for failed in [
        "statements\n  FAIL  CREATE TABLE t2 reads source \"scr\", which neither the pipeline has nor the statements create",
        "  FAIL  CREATE SOURCE s2 names connection \"pg_conm\", which evolve.toml does not have\n        fix: add a [connections.pg_conm] section",
    ] {
        assert!(stdout.contains(failed), "{failed:?} not in\n{stdout}");
    }
    assert!(
        !stdout.contains("connection \"sink_conn\", which"),
        "{stdout}"
    );
    // SELECT on a table of a schema the role may not use: its snapshot
    // would fail, so the check does.
    up.batch_execute(
        "CREATE SCHEMA hidden; CREATE TABLE hidden.items (id int PRIMARY KEY);
         GRANT SELECT ON hidden.items TO weak;",
    )
    .await
    .unwrap();
    let hidden = dir.join("hidden.sql");
    std::fs::write(
        &hidden,
        "CREATE SOURCE src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub');\n\
         CREATE TABLE items_v1 FROM SOURCE src (REFERENCE hidden.items);\n",
    )
    .unwrap();
    let out = evolve(&[
        "pipeline",
        "check",
        "--config",
        config.to_str().unwrap(),
        "-f",
        hidden.to_str().unwrap(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    for failed in [
        "role weak may not read hidden.items: it lacks USAGE on schema hidden",
        "fix: GRANT USAGE ON SCHEMA hidden TO weak; GRANT SELECT ON hidden.items TO weak;",
    ] {
        assert!(stdout.contains(failed), "{failed:?} not in\n{stdout}");
    }
    assert!(!stdout.contains("may read hidden.items"), "{stdout}");

    // The statements refuse with the same checks, creating nothing.
    let running = Pipeline::start(&config);
    let source = "CREATE SOURCE src FROM POSTGRES CONNECTION pg_conn (PUBLICATION 'evolve_pub')";
    let out = evolve(&["sql", "--admin", &running.url, "-c", source]).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("role weak does not have the REPLICATION attribute"),
        "{stderr}"
    );
    assert!(
        stderr.contains("HINT:  Run: ALTER ROLE weak REPLICATION;"),
        "{stderr}"
    );
    up.batch_execute("ALTER ROLE weak REPLICATION")
        .await
        .unwrap();
    let out = evolve(&["sql", "--admin", &running.url, "-c", source]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("may not create it"),
        "{}",
        text(&out.stderr)
    );
    let slots: i64 = up
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 0);
    // A publication of the owner's with the table, SELECT granted: the
    // source and table are created; the sink still lacks CREATE.
    up.batch_execute(
        "CREATE PUBLICATION evolve_pub FOR TABLE public.orders; GRANT SELECT ON public.orders TO weak",
    )
    .await
    .unwrap();
    let out = evolve(&[
        "sql",
        "--admin",
        &running.url,
        "-f",
        setup.to_str().unwrap(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stdout),
        "CREATE SOURCE\nCREATE TABLE\nCREATE MATERIALIZED VIEW\n"
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("HINT:  Run: GRANT CREATE ON SCHEMA public TO weak_writer;"),
        "{stderr}"
    );
    let tables: i64 = sink
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "nothing was created on the sink");
    sink.batch_execute("GRANT CREATE ON SCHEMA public TO weak_writer")
        .await
        .unwrap();
    let out = check().await;
    assert!(out.status.success(), "{}", text(&out.stdout));
    drop(running);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A cluster of its own started with `settings`; on it an upstream database
/// whose table `public.orders` (3 rows) belongs to `replicator`, a
/// `REPLICATION` role without superuser that may create the publication,
/// and a sink database where `writer` may create tables; the README's
/// setup file and an evolve.toml for the two roles in `dir`.
struct Servers {
    cluster: evolve_test::Cluster,
    up: tokio_postgres::Client,
    dir: PathBuf,
    config: PathBuf,
    setup: PathBuf,
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn servers(hint: &str, settings: &[(&str, &str)]) -> Servers {
    let options = evolve_test::Options {
        settings: settings
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..evolve_test::Options::default()
    };
    let cluster = tokio::task::spawn_blocking(move || evolve_test::Cluster::start_with(options))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    let up_db = cluster
        .create_database(&format!("{hint}_up"))
        .await
        .unwrap();
    let sink_db = cluster
        .create_database(&format!("{hint}_sink"))
        .await
        .unwrap();
    let up = connect(&up_db.url).await;
    up.batch_execute(&format!(
        "CREATE ROLE replicator LOGIN REPLICATION;
         CREATE ROLE writer LOGIN;
         GRANT CREATE ON DATABASE {} TO replicator;
         GRANT CREATE ON SCHEMA public TO replicator;
         SET ROLE replicator;
         CREATE TABLE public.orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2), placed date);
         INSERT INTO orders VALUES (1, 'ada', 1, NULL), (2, 'bob', 2, NULL), (3, 'cy', 3, NULL);
         RESET ROLE;",
        up_db.name
    ))
    .await
    .unwrap();
    connect(&sink_db.url)
        .await
        .batch_execute("GRANT CREATE ON SCHEMA public TO writer")
        .await
        .unwrap();
    let dir = temp_dir(hint);
    let config = config(
        &dir,
        &as_user(&up_db.url, "replicator"),
        &as_user(&sink_db.url, "writer"),
    );
    let setup = dir.join("setup.sql");
    std::fs::write(&setup, readme_file("setup.sql")).unwrap();
    Servers {
        cluster,
        up,
        dir,
        config,
        setup,
    }
}

impl Servers {
    async fn check(&self) -> std::process::Output {
        evolve(&[
            "pipeline",
            "check",
            "--config",
            self.config.to_str().unwrap(),
            "-f",
            self.setup.to_str().unwrap(),
        ])
        .await
    }

    /// `(replication slots, publications)` of the whole upstream server
    /// and database.
    async fn upstream_objects(&self) -> (i64, i64) {
        let row = self
            .up
            .query_one(
                "SELECT (SELECT count(*) FROM pg_replication_slots), \
                        (SELECT count(*) FROM pg_publication)",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    }

    /// A replication session of the `postgres` superuser, which holds one
    /// WAL sender for as long as it lives (psql waiting on its stdin).
    async fn hold_wal_sender(&self) -> Psql {
        let before = self.wal_senders().await;
        let child = std::process::Command::new(self.cluster.bin("psql"))
            .arg(format!(
                "host=127.0.0.1 port={} user=postgres dbname=postgres replication=database",
                self.cluster.port()
            ))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("psql");
        let held = Psql(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.wal_senders().await == before {
            assert!(Instant::now() < deadline, "psql never got a WAL sender");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        held
    }

    async fn wal_senders(&self) -> i64 {
        self.up
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender'",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    }
}

/// A psql replication session; ended (by its pid) on drop.
struct Psql(std::process::Child);

impl Drop for Psql {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `evolve pipeline check` failed with exactly `fixes`: exit 1, one `FAIL`
/// line per failed check, each followed by its fix, and the count.
fn assert_failed_with(out: &std::process::Output, fixes: &[&str]) {
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    let failed: Vec<(&str, &str)> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("  FAIL  "))
        .map(|(i, l)| (*l, lines.get(i + 1).copied().unwrap_or_default()))
        .collect();
    let found: Vec<&str> = failed
        .iter()
        .map(|(_, fix)| fix.strip_prefix("        fix: ").unwrap_or(fix))
        .collect();
    assert_eq!(found, fixes, "{stdout}");
    assert!(
        stdout.ends_with(&format!("{} check(s) failed\n", fixes.len())),
        "{stdout}"
    );
    assert_eq!(
        text(&out.stderr),
        format!(
            "error: the pipeline's servers are not ready: {} check(s) failed (the fixes are above)\n",
            fixes.len()
        )
    );
}

const WAL_LEVEL_FIX: &str = "ALTER SYSTEM SET wal_level = logical; then restart the server";
const SLOTS_FIX: &str = "ALTER SYSTEM SET max_replication_slots = <more>; then restart the server (or drop unused slots with pg_drop_replication_slot)";
const SENDERS_FIX: &str = "ALTER SYSTEM SET max_wal_senders = <more>; then restart the server";

/// `CREATE SOURCE` (the README's setup file) refused with `message` and
/// the hint `Run: fix`, nothing of the file run.
async fn assert_refused(running: &Pipeline, servers: &Servers, message: &str, fix: &str) {
    let out = evolve(&[
        "sql",
        "--admin",
        &running.url,
        "-f",
        servers.setup.to_str().unwrap(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(&format!("ERROR:  {message}\n")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("\nHINT:  Run: {fix}\n")),
        "{stderr}"
    );
    let out = evolve(&["sql", "--admin", &running.url, "-c", "SHOW SOURCES"]).await;
    assert!(
        text(&out.stdout).contains("(0 rows)"),
        "{}",
        text(&out.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_level_replica_is_named_with_its_fix() {
    let servers = servers("replica", &[("wal_level", "replica")]).await;
    let before = servers.upstream_objects().await;
    assert_eq!(before, (0, 0));

    let out = servers.check().await;
    assert_failed_with(&out, &[WAL_LEVEL_FIX]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("  FAIL  wal_level is replica; logical replication needs logical\n"),
        "{stdout}"
    );
    // Everything else is ready: only wal_level stands in the way.
    assert!(
        stdout.contains("  ok    20 replication slots free\n"),
        "{stdout}"
    );
    assert!(stdout.contains("  ok    20 WAL senders free\n"), "{stdout}");

    let running = Pipeline::start(&servers.config);
    assert_refused(
        &running,
        &servers,
        "wal_level is replica; logical replication needs logical",
        WAL_LEVEL_FIX,
    )
    .await;
    assert_eq!(servers.upstream_objects().await, before, "nothing upstream");
    drop(running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn used_up_slots_and_wal_senders_are_named_with_their_fix() {
    let servers = servers(
        "full",
        &[("max_replication_slots", "2"), ("max_wal_senders", "2")],
    )
    .await;
    // Two of each free: enough for a source whose table's snapshot is
    // being copied, so every check passes.
    let out = servers.check().await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("  ok    2 replication slots free\n"),
        "{stdout}"
    );
    assert!(stdout.contains("  ok    2 WAL senders free\n"), "{stdout}");

    // Someone else's slots and replication sessions use them all up.
    servers
        .up
        .batch_execute(
            "SELECT pg_create_physical_replication_slot('standby_a');
             SELECT pg_create_physical_replication_slot('standby_b');",
        )
        .await
        .unwrap();
    let senders = [
        servers.hold_wal_sender().await,
        servers.hold_wal_sender().await,
    ];
    let before = servers.upstream_objects().await;
    assert_eq!(before, (2, 0));
    let out = servers.check().await;
    assert_failed_with(&out, &[SLOTS_FIX, SENDERS_FIX]);
    let stdout = text(&out.stdout);
    let slots_message = "0 replication slots free; a source needs one, and one more while a table's snapshot is copied";
    let senders_message = "0 WAL senders free; a source streams with one, and one more while a table's snapshot is copied";
    assert!(
        stdout.contains(&format!("  FAIL  {slots_message}\n")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("  FAIL  {senders_message}\n")),
        "{stdout}"
    );

    // CREATE SOURCE refuses with the first, then (slots dropped) the
    // second, creating neither slot nor publication.
    let running = Pipeline::start(&servers.config);
    assert_refused(&running, &servers, slots_message, SLOTS_FIX).await;
    assert_eq!(servers.upstream_objects().await, before, "nothing upstream");
    servers
        .up
        .batch_execute(
            "SELECT pg_drop_replication_slot('standby_a');
             SELECT pg_drop_replication_slot('standby_b');",
        )
        .await
        .unwrap();
    let out = servers.check().await;
    assert_failed_with(&out, &[SENDERS_FIX]);
    assert_refused(&running, &servers, senders_message, SENDERS_FIX).await;
    assert_eq!(servers.upstream_objects().await, (0, 0), "nothing upstream");

    // With the WAL senders free again the same file runs: the checks
    // were all that stood in the way.
    drop(senders);
    let out = servers.check().await;
    assert!(out.status.success(), "{}", text(&out.stdout));
    let out = evolve(&[
        "sql",
        "--admin",
        &running.url,
        "-f",
        servers.setup.to_str().unwrap(),
    ])
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (slots, publications) = servers.upstream_objects().await;
    assert!(slots >= 1, "{slots} slots");
    assert_eq!(publications, 1);
    drop(running);
}
