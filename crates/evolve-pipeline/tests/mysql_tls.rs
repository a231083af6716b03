//! The MySQL source over TLS, with the MySQL client's option names on the
//! connection url (`ssl-mode`, `ssl-ca`): against a MariaDB server of its
//! own that takes TLS (the harness's `MariaDb::start_tls`) and whose user
//! must use it (`REQUIRE SSL`), the snapshot and the binlog stream both
//! reach the sink; a plain session is refused by the server, a wrong CA by
//! evolve, and options that cannot be honoured are refused in one line
//! naming the connection, never its password.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use evolve_pipeline::{Config, Pipeline, TableSpec, TableState};
use evolve_test::MariaDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_reads_snapshot_and_binlog_over_verified_tls() {
    let server = tokio::task::spawn_blocking(|| MariaDb::start_tls().unwrap())
        .await
        .unwrap();
    let ca = server.ca_cert().unwrap().display().to_string();
    let db = {
        let s = &server;
        s.create_database("mysql_tls").unwrap()
    };
    server
        .client_sql("ALTER USER 'evolve'@'%' REQUIRE SSL; FLUSH PRIVILEGES;")
        .unwrap();
    let tls_url = format!("{}?ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}", db.url);
    // The data through the server's socket, as root.
    server
        .client_sql(&format!(
            "CREATE TABLE {db}.orders (id int PRIMARY KEY, note varchar(20));
             INSERT INTO {db}.orders VALUES (1, 'a'), (2, 'b'), (3, NULL);",
            db = db.name
        ))
        .unwrap();

    let sink_db = sink_cluster().create_database("mysql_tls").await.unwrap();
    let sink = connect(&sink_db.url).await;
    let state = std::env::temp_dir().join(format!("evolve-mysql-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    // Another CA: a certificate the server's was not signed by.
    let other_ca = state.with_extension("other-ca.pem");
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=other", "-keyout", "/dev/null", "-out"])
        .arg(&other_ca)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(made.success());
    let config = Config::new(&state)
        .with_connection("tls", tls_url.clone())
        .with_connection("plain", db.url.clone())
        .with_connection(
            "wrong_ca",
            format!(
                "{}?ssl-mode=VERIFY_CA&ssl-ca={}",
                db.url,
                other_ca.display()
            ),
        )
        .with_connection("preferred", format!("{}?ssl-mode=PREFERRED", db.url))
        .with_connection("no_ca", format!("{}?ssl-mode=VERIFY_CA", db.url))
        .with_connection("sink", sink_db.url.clone());
    let pipeline = Arc::new(Pipeline::open(config).unwrap());

    // Refusals: by the server (no TLS), by evolve (the certificate), by
    // the options; each one line without the password.
    let refused = |e: evolve_pipeline::PipelineError| {
        let text = e.to_string();
        assert!(!text.contains(":evolve@"), "the password leaked: {text}");
        text
    };
    let e = refused(
        pipeline
            .create_mysql_source("s1", "plain")
            .await
            .unwrap_err(),
    );
    assert!(e.contains("Access denied"), "{e}");
    let e = refused(
        pipeline
            .create_mysql_source("s2", "wrong_ca")
            .await
            .unwrap_err(),
    );
    assert!(e.to_lowercase().contains("certificate"), "{e}");
    let e = refused(
        pipeline
            .create_mysql_source("s4", "preferred")
            .await
            .unwrap_err(),
    );
    assert!(e.contains("ssl-mode=PREFERRED is not supported"), "{e}");
    let e = refused(
        pipeline
            .create_mysql_source("s5", "no_ca")
            .await
            .unwrap_err(),
    );
    assert!(e.contains("ssl-mode=VERIFY_CA needs ssl-ca"), "{e}");
    assert!(pipeline.sources().unwrap().is_empty());

    // Over TLS: the snapshot, then the stream.
    pipeline.create_mysql_source("src", "tls").await.unwrap();
    pipeline
        .create_table(&TableSpec {
            name: "orders_v1".into(),
            source: "src".into(),
            schema: db.name.clone(),
            table: "orders".into(),
            ..TableSpec::default()
        })
        .await
        .unwrap();
    pipeline
        .create_interface("orders_json", "orders_v1")
        .unwrap();
    pipeline
        .create_sink(
            "orders_sink",
            "orders_json",
            "sink",
            "public",
            "orders_json",
        )
        .await
        .unwrap();
    let running = Running::start(pipeline.clone());
    server
        .client_sql(&format!(
            "INSERT INTO {db}.orders VALUES (4, 'd'); UPDATE {db}.orders SET note = 'z' WHERE id = 1; \
             DELETE FROM {db}.orders WHERE id = 2;",
            db = db.name
        ))
        .unwrap();
    let want = vec![
        (
            r#"{"id": 1}"#.to_string(),
            r#"{"id": 1, "note": "z"}"#.to_string(),
        ),
        (r#"{"id": 3}"#.to_string(), r#"{"id": 3}"#.to_string()),
        (
            r#"{"id": 4}"#.to_string(),
            r#"{"id": 4, "note": "d"}"#.to_string(),
        ),
    ];
    let start = Instant::now();
    loop {
        let got = if sink_exists(&sink, "orders_json").await {
            sink_rows(&sink, "orders_json").await
        } else {
            Vec::new()
        };
        if got == want {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the sink holds {got:?}, not {want:?}: {:#?}",
            pipeline.status()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let table = pipeline
        .tables()
        .unwrap()
        .into_iter()
        .find(|t| t.name == "orders_v1")
        .unwrap();
    assert_eq!(table.state, TableState::Running);
    drop(running);
    let _ = std::fs::remove_dir_all(&state);
    let _ = std::fs::remove_file(&other_ca);
}
