//! The pipeline's admin API against browsers, DNS rebinding and callers
//! without the token, driven with curl as an attacker would, and the
//! evolve commands that call it.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use support::{EVOLVE, Pipeline, evolve_with, text};

const TOKEN: &str = "tok-4b1d6c0e9f";

fn temp_dir(hint: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "evolve-admin-security-{}-{hint}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// `127.0.0.1:PORT` of a running pipeline.
fn authority(running: &Pipeline) -> &str {
    running.url.strip_prefix("http://").expect("an http URL")
}

fn url(running: &Pipeline, path: &str) -> String {
    format!("{}{path}", running.url)
}

/// curl with `args`; the HTTP status and the body.
fn curl(args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "-o", "-", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("run curl (installed by cargo xtask test)");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let all = text(&out.stdout);
    let (body, code) = all.rsplit_once('\n').expect("status line");
    (code.trim().parse().expect("status"), body.to_string())
}

/// curl's response headers only (`-D -`), lower case.
fn curl_headers(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-D", "-"])
        .args(args)
        .output()
        .expect("run curl");
    text(&out.stdout).to_ascii_lowercase()
}

/// The sinks the pipeline has, by `SHOW SINKS` over JSON.
fn sinks(running: &Pipeline, token: Option<&str>) -> Vec<String> {
    let auth = token.map(|t| format!("Authorization: Bearer {t}"));
    let mut args = vec![
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "--data",
        r#"{"sql": "SHOW SINKS"}"#,
    ];
    if let Some(auth) = &auth {
        args.extend(["-H", auth.as_str()]);
    }
    let url = url(running, "/sql");
    args.push(&url);
    let (status, body) = curl(&args);
    assert_eq!(status, 200, "{body}");
    let value: serde_json::Value = serde_json::from_str(&body).unwrap();
    value["results"][0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

fn write_config(dir: &Path, up: &str, sink: &str, extra: &str) -> PathBuf {
    let config = dir.join("evolve.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"state\"\nadmin_listen = \"127.0.0.1:0\"\n{extra}\
             [connections.up]\nurl = \"{up}\"\n[connections.sink]\nurl = \"{sink}\"\n"
        ),
    )
    .unwrap();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_pages_and_rebinding_cannot_drive_the_admin_api() {
    let up = evolve_test::fresh_db("sec_up").await;
    let sink = evolve_test::fresh_db("sec_sink").await;
    let (client, connection) = tokio_postgres::connect(&up.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute("CREATE TABLE canary (id int PRIMARY KEY)")
        .await
        .unwrap();
    let dir = temp_dir("browser");
    let config = write_config(&dir, &up.url, &sink.url, "");
    let running = Pipeline::start(&config);
    let setup = format!(
        "CREATE SOURCE src_{db} FROM POSTGRES CONNECTION up (PUBLICATION 'evolve_pub');
         CREATE TABLE canary_v1 FROM SOURCE src_{db} (REFERENCE public.canary);
         CREATE MATERIALIZED VIEW canary_json AS
           SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM canary_v1 t;
         CREATE SINK canary FROM canary_json INTO POSTGRES CONNECTION sink (TABLE 'public.canary_json');",
        db = up.name
    );
    let out = evolve_with(&["sql", "--admin", &url(&running, ""), "-c", &setup], &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(sinks(&running, None), ["canary"]);

    let sql = url(&running, "/sql");
    // The request from the report: a page of another origin, a "simple"
    // request that needs no preflight.
    let (status, body) = curl(&[
        "-X",
        "POST",
        "-H",
        "Origin: http://evil.example",
        "-H",
        "Content-Type: text/plain",
        "--data",
        "DROP SINK canary",
        &sql,
    ]);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("evil.example"), "{body}");
    // Without Origin, the other simple content types are refused too.
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let (status, body) = curl(&[
            "-X",
            "POST",
            "-H",
            &format!("Content-Type: {content_type}"),
            "--data",
            "DROP SINK canary",
            &sql,
        ]);
        assert_eq!(status, 415, "{content_type}: {body}");
    }
    // DNS rebinding: the page's own host name in Host.
    let port = authority(&running).rsplit_once(':').unwrap().1.to_string();
    let rebound = format!("Host: rebind.evil.example:{port}");
    for args in [
        vec!["-H", rebound.as_str(), sql.as_str()],
        vec![
            "-X",
            "POST",
            "-H",
            rebound.as_str(),
            "-H",
            "Content-Type: application/sql",
            "--data",
            "DROP SINK canary",
            sql.as_str(),
        ],
    ] {
        let (status, body) = curl(&args);
        assert_eq!(status, 403, "{args:?}: {body}");
    }
    let status_url = url(&running, "/status");
    let (status, _) = curl(&["-H", rebound.as_str(), &status_url]);
    assert_eq!(status, 403);
    // A preflight gets no CORS headers, so a browser never sends the
    // request that would follow it.
    let headers = curl_headers(&[
        "-X",
        "OPTIONS",
        "-H",
        "Origin: http://evil.example",
        "-H",
        "Access-Control-Request-Method: POST",
        "-H",
        "Access-Control-Request-Headers: content-type",
        &sql,
    ]);
    assert!(!headers.contains("access-control-"), "{headers}");
    assert_eq!(sinks(&running, None), ["canary"], "nothing was dropped");

    // The API's own clients: application/sql and the evolve command.
    let (status, body) = curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/sql",
        "--data",
        "SHOW SOURCES",
        &sql,
    ]);
    assert_eq!(status, 200, "{body}");
    let out = evolve_with(
        &["sql", "--admin", &url(&running, ""), "-c", "SHOW SINKS"],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("canary"));
    let (status, _) = curl(&["-H", "Host: localhost", &status_url]);
    assert_eq!(status, 200);
    drop(running);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_guards_every_endpoint_but_metrics() {
    let up = evolve_test::fresh_db("tok_up").await;
    let sink = evolve_test::fresh_db("tok_sink").await;
    let dir = temp_dir("token");
    std::fs::write(dir.join("admin.token"), format!("{TOKEN}\n")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.join("admin.token"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
    }
    let config = write_config(
        &dir,
        &up.url,
        &sink.url,
        "admin_token_file = \"admin.token\"\n",
    );
    let running = Pipeline::start(&config);
    let bearer = format!("Authorization: Bearer {TOKEN}");
    for path in ["/status", "/drift", "/subscribe/nothing"] {
        let url = url(&running, path);
        let (status, body) = curl(&[&url]);
        assert_eq!(status, 401, "{path}: {body}");
        assert!(!body.contains(TOKEN));
        let (status, _) = curl(&["-H", "Authorization: Bearer wrong", &url]);
        assert_eq!(status, 401, "{path}");
    }
    let (status, _) = curl(&["-H", &bearer, &url(&running, "/status")]);
    assert_eq!(status, 200);
    let (status, body) = curl(&[&url(&running, "/metrics")]);
    assert_eq!(status, 200, "{body}");
    let (status, _) = curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/sql",
        "--data",
        "SHOW SOURCES",
        &url(&running, "/sql"),
    ]);
    assert_eq!(status, 401);
    assert!(sinks(&running, Some(TOKEN)).is_empty());

    let admin = url(&running, "");
    // Without the token the command says how to give it.
    let out = evolve_with(&["status", "--admin", &admin], &[]).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("requires a token"), "{stderr}");
    assert!(stderr.contains("EVOLVE_ADMIN_TOKEN"), "{stderr}");
    // From the environment, or from the config file (which also gives the
    // address when it is fixed; here --admin gives the ephemeral port).
    let out = evolve_with(
        &["status", "--admin", &admin],
        &[("EVOLVE_ADMIN_TOKEN", TOKEN)],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = evolve_with(
        &[
            "sql",
            "--admin",
            &admin,
            "--config",
            config.to_str().unwrap(),
            "-c",
            "SHOW SOURCES",
        ],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = evolve_with(
        &["drift", "--admin", &admin],
        &[("EVOLVE_ADMIN_TOKEN", "wrong")],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(all.contains("token is not valid"), "{all}");
    assert!(!all.contains(TOKEN));
    drop(running);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `evolve subscribe ARGS` as a child process with `EVOLVE_ADMIN_TOKEN`
/// set to `token` (removed when `None`), and its stdout lines.
fn subscriber(
    args: &[&str],
    token: Option<&str>,
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut command = Command::new(EVOLVE);
    command
        .arg("subscribe")
        .args(args)
        .env_remove("EVOLVE_ADMIN")
        .env_remove("EVOLVE_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(token) = token {
        command.env("EVOLVE_ADMIN_TOKEN", token);
    }
    let mut child = command.spawn().expect("spawn evolve subscribe");
    let stdout = child.stdout.take().expect("stdout");
    let (send, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if send.send(line).is_err() {
                return;
            }
        }
    });
    (child, lines)
}

/// Waits up to 20 s for `child` to exit; its status and stderr.
fn exited(child: &mut std::process::Child) -> (std::process::ExitStatus, String) {
    use std::io::Read;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("evolve subscribe still running after 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .unwrap();
    (status, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evolve_subscribe_needs_the_admin_token_and_streams_with_it() {
    let up = evolve_test::fresh_db("subtok_up").await;
    let sink = evolve_test::fresh_db("subtok_sink").await;
    let (client, connection) = tokio_postgres::connect(&up.url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(
            "CREATE TABLE orders (id int PRIMARY KEY, customer text); \
             INSERT INTO orders VALUES (1, 'ada'), (2, 'bob')",
        )
        .await
        .unwrap();
    let dir = temp_dir("subscribe");
    let config = write_config(
        &dir,
        &up.url,
        &sink.url,
        &format!("admin_token = \"{TOKEN}\"\n"),
    );
    let running = Pipeline::start(&config);
    let admin = url(&running, "");
    let setup = format!(
        "CREATE SOURCE src_{db} FROM POSTGRES CONNECTION up (PUBLICATION 'evolve_pub');
         CREATE TABLE orders_v1 FROM SOURCE src_{db} (REFERENCE public.orders);
         CREATE MATERIALIZED VIEW orders_json AS
           SELECT coalesce(jsonb_strip_nulls(to_jsonb(t)), '{{}}'::jsonb) AS data FROM orders_v1 t;",
        db = up.name
    );
    let out = evolve_with(
        &["sql", "--admin", &admin, "-c", &setup],
        &[("EVOLVE_ADMIN_TOKEN", TOKEN)],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Without the token: refused at once, exit 1, nothing on stdout, and
    // the error says where the token goes.
    let args = ["orders_json", "--snapshot", "--admin", admin.as_str()];
    let (mut child, lines) = subscriber(&args, None);
    let (status, stderr) = exited(&mut child);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("requires a token"), "{stderr}");
    assert!(stderr.contains("EVOLVE_ADMIN_TOKEN"), "{stderr}");
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("error: ")
            && first.contains(&admin)
            && first.contains("requires a token"),
        "the first line names the API and what is missing: {stderr}"
    );
    assert!(lines.try_iter().next().is_none(), "no line was streamed");
    // A wrong token: refused too, and neither token is printed.
    let (mut child, lines) = subscriber(&args, Some("wrong-token"));
    let (status, stderr) = exited(&mut child);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("token is not valid"), "{stderr}");
    assert!(
        !stderr.contains("wrong-token") && !stderr.contains(TOKEN),
        "{stderr}"
    );
    assert!(lines.try_iter().next().is_none(), "no line was streamed");

    // With the token: the snapshot, its progress line, then a live change.
    let (mut child, lines) = subscriber(&args, Some(TOKEN));
    let next = || -> serde_json::Value {
        let line = lines
            .recv_timeout(Duration::from_secs(30))
            .expect("a line from evolve subscribe within 30 s");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    let mut snapshot = Vec::new();
    loop {
        let line = next();
        match line["type"].as_str() {
            Some("change") => snapshot.push(line["data"].clone()),
            Some("progress") => break,
            _ => panic!("{line}"),
        }
    }
    assert_eq!(
        snapshot,
        [
            serde_json::json!({"id": 1, "customer": "ada"}),
            serde_json::json!({"id": 2, "customer": "bob"})
        ]
    );
    client
        .batch_execute("INSERT INTO orders VALUES (3, 'cy')")
        .await
        .unwrap();
    let insert = next();
    assert_eq!(insert["type"], "change", "{insert}");
    assert_eq!(insert["diff"], 1, "{insert}");
    assert_eq!(
        insert["data"],
        serde_json::json!({"id": 3, "customer": "cy"})
    );
    let _ = child.kill();
    let _ = child.wait();
    drop(running);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_listen_address_off_loopback_needs_a_token() {
    let dir = temp_dir("listen");
    let config = dir.join("evolve.toml");
    std::fs::write(
        &config,
        "state_dir = \"state\"\nadmin_listen = \"0.0.0.0:0\"\n",
    )
    .unwrap();
    let mut child = Command::new(EVOLVE)
        .args(["pipeline", "run", "--config"])
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("evolve pipeline run listened on 0.0.0.0 without a token");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    assert_eq!(status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("admin_token"), "{stderr}");
    assert!(stderr.contains("0.0.0.0:0"), "{stderr}");
    assert!(text(&out.stdout).is_empty(), "it never listened");
    let _ = std::fs::remove_dir_all(&dir);
}
