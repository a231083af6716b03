//! The MariaDB harness against a real server: the binlog settings change
//! capture needs, fresh databases, the `evolve` user over TCP, settings that
//! win, and cleanup on drop.

use evolve_test::{MariaDb, MariaDbOptions, fresh_mariadb_db, shared_mariadb};

fn variables(server: &MariaDb, names: &str) -> String {
    server
        .client_sql(&format!(
            "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_VARIABLES \
             WHERE VARIABLE_NAME IN ({names}) ORDER BY VARIABLE_NAME"
        ))
        .unwrap()
}

#[test]
fn the_shared_server_logs_full_row_images_and_gives_fresh_databases() {
    let server = shared_mariadb();
    assert_eq!(
        variables(
            server,
            "'LOG_BIN', 'BINLOG_FORMAT', 'BINLOG_ROW_IMAGE', 'BINLOG_ROW_METADATA', 'SERVER_ID'"
        ),
        "BINLOG_FORMAT\tROW\nBINLOG_ROW_IMAGE\tFULL\nBINLOG_ROW_METADATA\tFULL\nLOG_BIN\tON\nSERVER_ID\t1\n"
    );
    let a = fresh_mariadb_db("Harness-A");
    let b = fresh_mariadb_db("harness a");
    assert_ne!(a.name, b.name);
    assert!(a.name.starts_with("evolve_harness_a_"), "{}", a.name);
    assert_eq!(
        a.url,
        format!(
            "mysql://evolve:evolve@127.0.0.1:{}/{}",
            server.port(),
            a.name
        )
    );
    server
        .client_sql(&format!(
            "CREATE TABLE `{}`.t (id int PRIMARY KEY); INSERT INTO `{}`.t VALUES (1)",
            a.name, a.name
        ))
        .unwrap();
    assert_eq!(
        server
            .client_sql(&format!("SELECT count(*) FROM `{}`.t", a.name))
            .unwrap(),
        "1\n"
    );
    // The evolve user logs in over TCP with its password.
    let out = std::process::Command::new("mariadb")
        .args([
            "--no-defaults",
            "--host=127.0.0.1",
            "--user=evolve",
            "--password=evolve",
        ])
        .arg(format!("--port={}", server.port()))
        .args([
            "--batch",
            "--skip-column-names",
            "-e",
            "SELECT CURRENT_USER()",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "evolve@%\n");
}

#[test]
fn settings_win_and_drop_removes_the_server() {
    let server = MariaDb::start_with(MariaDbOptions {
        settings: vec![("binlog_format".into(), "STATEMENT".into())],
    })
    .unwrap();
    assert_eq!(
        variables(&server, "'BINLOG_FORMAT'"),
        "BINLOG_FORMAT\tSTATEMENT\n"
    );
    let port = server.port();
    let socket = server.socket();
    let dir = socket.parent().unwrap().to_path_buf();
    assert!(dir.exists());
    drop(server);
    assert!(!dir.exists(), "{} is left behind", dir.display());
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server still accepts sessions on port {port}"
    );
    let bad = MariaDb::start_with(MariaDbOptions {
        settings: vec![("binlog format; rm".into(), "x".into())],
    })
    .unwrap_err();
    assert!(
        bad.to_string().contains("MariaDbOptions::settings"),
        "{bad}"
    );
}
