//! `evolve refresh` on a real cluster: order, CONCURRENTLY, staleness.

use evolve_migrate::Refreshed;

async fn setup(hint: &str) -> (String, tokio_postgres::Client) {
    let db = evolve_test::fresh_db(hint).await;
    let client = evolve_pg::connect(&db.url, "evolve test")
        .await
        .expect("connect");
    client
        .batch_execute(
            "CREATE SCHEMA reporting;
             CREATE TABLE orders (id int PRIMARY KEY, created date NOT NULL, amount int NOT NULL);
             INSERT INTO orders SELECT i, date '2026-01-01' + i % 60, i FROM generate_series(1, 1000) i;
             -- Created out of order on purpose: names sort against the dependency order.
             CREATE MATERIALIZED VIEW zz_daily AS SELECT created, sum(amount) AS total FROM orders GROUP BY created;
             CREATE UNIQUE INDEX zz_daily_key ON zz_daily (created);
             CREATE VIEW daily_v AS SELECT * FROM zz_daily;
             CREATE MATERIALIZED VIEW reporting.monthly AS
                 SELECT date_trunc('month', created) AS month, sum(total) AS total FROM daily_v GROUP BY 1;
             CREATE UNIQUE INDEX monthly_partial ON reporting.monthly (month) WHERE total > 0;
             CREATE MATERIALIZED VIEW aa_yearly AS SELECT sum(total) AS total FROM reporting.monthly
                 WITH NO DATA;
             CREATE UNIQUE INDEX aa_yearly_key ON aa_yearly (total);",
        )
        .await
        .expect("schema");
    (db.url, client)
}

async fn refresh(url: &str, names: &[&str]) -> Vec<Refreshed> {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    evolve_migrate::refresh_matviews(url, &names, &mut |_| {})
        .await
        .expect("refresh")
}

#[tokio::test]
async fn refreshes_lowest_layer_first_and_concurrently_only_when_it_can() {
    let (url, client) = setup("refresh_order").await;
    let done = refresh(&url, &[]).await;
    let got: Vec<(String, bool)> = done
        .iter()
        .map(|r| (r.name.clone(), r.concurrently))
        .collect();
    assert_eq!(
        got,
        [
            // Populated with a plain unique index: concurrently.
            ("public.zz_daily".to_string(), true),
            // Its only unique index is partial: plain refresh.
            ("reporting.monthly".to_string(), false),
            // Not populated yet: the first refresh cannot be concurrent.
            ("public.aa_yearly".to_string(), false),
        ]
    );
    let total: i64 = client
        .query_one("SELECT total::int8 FROM aa_yearly", &[])
        .await
        .expect("yearly")
        .get(0);
    assert_eq!(total, 500_500);
    let logged: i64 = client
        .query_one("SELECT count(*) FROM evolve_refresh_log", &[])
        .await
        .expect("log")
        .get(0);
    assert_eq!(logged, 3);

    let again = refresh(&url, &["aa_yearly", "public.zz_daily"]).await;
    let names: Vec<&str> = again.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["public.zz_daily", "public.aa_yearly"],
        "named ones, still in dependency order"
    );
    assert!(again[1].concurrently, "populated now");

    let err = evolve_migrate::refresh_matviews(&url, &["nope".to_string()], &mut |_| {})
        .await
        .expect_err("unknown")
        .to_string();
    assert_eq!(
        err,
        "materialized view \"nope\" does not exist; 'evolve refresh --status' lists them"
    );
}

#[tokio::test]
async fn status_shows_a_layer_refreshed_before_its_input_as_stale() {
    let (url, _client) = setup("refresh_stale").await;
    let status = evolve_migrate::refresh_status(&url).await.expect("status");
    assert!(
        status
            .iter()
            .all(|m| m.stale.is_none() && m.last_refresh.is_none())
    );
    assert_eq!(
        status[1].reads,
        ["public.zz_daily"],
        "through the plain view daily_v"
    );

    refresh(&url, &["reporting.monthly"]).await;
    refresh(&url, &["zz_daily"]).await;
    let status = evolve_migrate::refresh_status(&url).await.expect("status");
    let by_name = |n: &str| status.iter().find(|m| m.name == n).expect(n).clone();
    let monthly = by_name("reporting.monthly");
    assert_eq!(monthly.stale, Some(true));
    assert_eq!(
        monthly.stale_because,
        ["public.zz_daily was refreshed after it"]
    );
    assert_eq!(by_name("public.zz_daily").stale, Some(false));
    assert_eq!(by_name("public.aa_yearly").stale, None);
    assert!(!by_name("public.aa_yearly").populated);

    refresh(&url, &[]).await;
    let status = evolve_migrate::refresh_status(&url).await.expect("status");
    assert!(status.iter().all(|m| m.stale == Some(false)), "{status:?}");
}

/// Two matviews whose unquoted names would read the same, `"x.y".mv` and
/// `x."y.mv"`, are refreshed, logged and reported apart: evolve keys them
/// by the quoted name (names that need no quotes keep the plain form).
#[tokio::test]
async fn names_that_read_alike_unquoted_are_kept_apart() {
    let db = evolve_test::fresh_db("refresh_quoted").await;
    let client = evolve_pg::connect(&db.url, "evolve test")
        .await
        .expect("connect");
    client
        .batch_execute(
            r#"CREATE SCHEMA "x.y"; CREATE SCHEMA x;
               CREATE MATERIALIZED VIEW "x.y".mv AS SELECT 1 AS one;
               CREATE MATERIALIZED VIEW x."y.mv" AS SELECT 2 AS two;
               CREATE MATERIALIZED VIEW "Plain" AS SELECT 3 AS three;"#,
        )
        .await
        .expect("schema");
    let done = refresh(&db.url, &[r#""x.y".mv"#]).await;
    let names: Vec<&str> = done.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, [r#""x.y".mv"#]);
    let status = evolve_migrate::refresh_status(&db.url)
        .await
        .expect("status");
    let seen: Vec<(String, bool)> = status
        .iter()
        .map(|m| (m.name.clone(), m.last_refresh.is_some()))
        .collect();
    assert_eq!(
        seen,
        [
            (r#""x.y".mv"#.to_string(), true),
            (r#"public."Plain""#.to_string(), false),
            (r#"x."y.mv""#.to_string(), false),
        ]
    );
    let logged: Vec<String> = client
        .query("SELECT matview FROM evolve_refresh_log", &[])
        .await
        .expect("log")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(logged, [r#""x.y".mv"#]);
}
