//! Shared MariaDB helpers: a database on the harness's shared MariaDB
//! server with a source over it, a sink database, a state directory.

use evolve_pipeline::{Config, Pipeline, TableSpec};
use evolve_test::{MariaDbDb, TestDb, fresh_mariadb_db};

use super::sink_cluster;

/// A MariaDB database with a source over it, a sink database and a state
/// directory.
pub struct MyEnv {
    pub my: MariaDbDb,
    pub sink: TestDb,
    pub state: std::path::PathBuf,
    pub config: Config,
    pub source: String,
}

impl Drop for MyEnv {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// A fresh [`MyEnv`]; its state directory is `<prefix>-<pid>-<database>`
/// in the temporary directory. The connections: `my` (upstream) and
/// `sink`.
pub async fn my_env(prefix: &str, hint: &str) -> MyEnv {
    let hint_owned = hint.to_string();
    let my = tokio::task::spawn_blocking(move || fresh_mariadb_db(&hint_owned))
        .await
        .unwrap();
    my_env_on(prefix, hint, my).await
}

/// A [`MyEnv`] over database `my`, of a server of the test's own.
pub async fn my_env_on(prefix: &str, hint: &str, my: MariaDbDb) -> MyEnv {
    let sink_cluster = tokio::task::spawn_blocking(sink_cluster).await.unwrap();
    let sink = sink_cluster.create_database(hint).await.unwrap();
    let state = std::env::temp_dir().join(format!("{prefix}-{}-{}", std::process::id(), my.name));
    let _ = std::fs::remove_dir_all(&state);
    let config = Config::new(&state)
        .with_connection("my", my.url.clone())
        .with_connection("sink", sink.url.clone());
    MyEnv {
        source: format!("src_{}", my.name),
        my,
        sink,
        state,
        config,
    }
}

pub async fn my_conn(url: &str) -> mysql_async::Conn {
    mysql_async::Conn::new(mysql_async::Opts::from_url(url).unwrap())
        .await
        .unwrap()
}

/// Table `name` over `<db>.<table>` without the `exclude` columns.
pub fn spec(env: &MyEnv, name: &str, table: &str, exclude: &[&str]) -> TableSpec {
    TableSpec {
        name: name.into(),
        source: env.source.clone(),
        schema: env.my.name.clone(),
        table: table.into(),
        exclude: exclude.iter().map(|s| s.to_string()).collect(),
        ..TableSpec::default()
    }
}

/// Table `<name>_v1` over `<db>.<name>`, interface `<name>_json`, sink
/// `<name>_sink` into `public.<name>_json`.
pub async fn create_chain(pipeline: &Pipeline, env: &MyEnv, name: &str) {
    create_chain_excluding(pipeline, env, name, &[]).await;
}

/// [`create_chain`] with the table's EXCLUDE COLUMNS.
pub async fn create_chain_excluding(
    pipeline: &Pipeline,
    env: &MyEnv,
    name: &str,
    exclude: &[&str],
) {
    pipeline
        .create_table(&spec(env, &format!("{name}_v1"), name, exclude))
        .await
        .unwrap();
    pipeline
        .create_interface(&format!("{name}_json"), &format!("{name}_v1"))
        .unwrap();
    pipeline
        .create_sink(
            &format!("{name}_sink"),
            &format!("{name}_json"),
            "sink",
            "public",
            &format!("{name}_json"),
        )
        .await
        .unwrap();
}

/// Waits until the sink table's audit count reaches `expected` (never
/// going past it), and checks that it stays there for a moment.
pub async fn wait_writes(sink: &tokio_postgres::Client, table: &str, expected: i64) {
    super::wait_until(
        &format!("{table} to have {expected} writes"),
        std::time::Duration::from_secs(60),
        async || {
            let n = super::audit_count(sink, table).await;
            assert!(n <= expected, "{table}: {n} writes, more than {expected}");
            n == expected
        },
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        super::audit_count(sink, table).await,
        expected,
        "{table}: writes after settling"
    );
}

/// Stores `env`'s source as a store from before GTID positions had it:
/// resuming at the server's binlog file and offset now (`SHOW MASTER
/// STATUS` through `conn`). Its position.
pub async fn source_at_file_position(
    env: &MyEnv,
    conn: &mut mysql_async::Conn,
) -> evolve_pipeline::Position {
    use mysql_async::prelude::Queryable;
    let (file, offset): (String, u64) = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .unwrap()
        .map(|row: mysql_async::Row| (row.get(0).unwrap(), row.get(1).unwrap()))
        .unwrap();
    let at = evolve_pipeline::source::mysql::binlog_position(
        file.rsplit_once('.').unwrap().1.parse().unwrap(),
        u32::try_from(offset).unwrap(),
    );
    evolve_pipeline::store::Store::open(&env.state)
        .unwrap()
        .insert_source_resuming(
            &evolve_pipeline::SourceInfo {
                name: env.source.clone(),
                connection: "my".into(),
                publication: String::new(),
                publication_created: false,
                slot: format!("evolve_{}", env.source),
                applied_lsn: at,
                dropping: false,
                drop_error: None,
                kind: evolve_pipeline::store::SourceKind::Mysql,
            },
            None,
        )
        .unwrap();
    at
}
