//! The README's pipeline section as a new user follows it with a
//! least-privilege replication role: the prerequisites block, `evolve
//! pipeline check`, the setup file, run twice. And the checks that catch
//! each missing privilege, with the statement that fixes it.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_runs_as_printed_for_a_least_privilege_role() {
    let up_db = evolve_test::fresh_db("least_up").await;
    let sink_db = evolve_test::fresh_db("least_sink").await;
    let up = connect(&up_db.url).await;
    let sink = connect(&sink_db.url).await;
    // The application owns its table (and may create publications in its
    // database); nobody else has any privilege.
    up.batch_execute(&format!(
        "CREATE ROLE app LOGIN;
         GRANT CREATE ON SCHEMA public TO app;
         GRANT CREATE ON DATABASE {} TO app;
         SET ROLE app;
         CREATE TABLE public.orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2), placed date);
         INSERT INTO orders SELECT g, 'c' || g, g, NULL FROM generate_series(1, 50) g;
         RESET ROLE;",
        up_db.name
    ))
    .await
    .unwrap();
    // The README's prerequisites, each statement as the role it names.
    let prerequisites = readme_block("### Prerequisites", "sql");
    let mut target = &up;
    let mut as_owner = false;
    let mut ran = 0;
    for line in prerequisites.lines() {
        let line = line.trim();
        if line.starts_with("-- upstream") {
            target = &up;
        } else if line.starts_with("-- sink") {
            target = &sink;
        }
        if line.starts_with("--") {
            as_owner = line.contains("owner of the tables");
            continue;
        }
        let statement = line.split(" --").next().unwrap().trim();
        if statement.is_empty() {
            continue;
        }
        let sql = if as_owner {
            format!("SET ROLE app; {statement} RESET ROLE;")
        } else {
            statement.to_string()
        };
        target
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
        ran += 1;
    }
    assert_eq!(ran, 5, "{prerequisites}");
    let superuser: bool = up
        .query_one(
            "SELECT rolsuper OR rolcreaterole OR rolcreatedb FROM pg_roles WHERE rolname = 'replicator'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!superuser);

    let dir = temp_dir("least");
    let config = config(
        &dir,
        &as_user(&up_db.url, "replicator"),
        &as_user(&sink_db.url, "writer"),
    );
    let setup = dir.join("setup.sql");
    std::fs::write(&setup, readme_file("setup.sql")).unwrap();

    let out = evolve(&[
        "pipeline",
        "check",
        "--config",
        config.to_str().unwrap(),
        "-f",
        setup.to_str().unwrap(),
    ])
    .await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("every check passed"), "{stdout}");
    assert!(stdout.contains("(replicator@127.0.0.1:"), "{stdout}");
    assert!(stdout.contains("as source"), "{stdout}");
    assert!(stdout.contains("as sink"), "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    let state = dir.join("state");
    assert!(!state.exists(), "a check creates no state");

    let running = Pipeline::start(&config);
    for run in 0..2 {
        let out = evolve(&[
            "sql",
            "--admin",
            &running.url,
            "-f",
            setup.to_str().unwrap(),
        ])
        .await;
        assert!(
            out.status.success(),
            "run {run}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let exists: bool = sink
            .query_one("SELECT to_regclass('public.orders_json') IS NOT NULL", &[])
            .await
            .unwrap()
            .get(0);
        if exists {
            let rows: i64 = sink
                .query_one("SELECT count(*) FROM public.orders_json", &[])
                .await
                .unwrap()
                .get(0);
            if rows == 50 {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the sink never had the 50 rows");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    up.batch_execute("INSERT INTO orders VALUES (51, 'new', 1, NULL)")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows: i64 = sink
            .query_one("SELECT count(*) FROM public.orders_json", &[])
            .await
            .unwrap()
            .get(0);
        if rows == 51 {
            break;
        }
        assert!(Instant::now() < deadline, "the new row never arrived");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(running);
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
