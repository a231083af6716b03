//! `evolve demo migrate`: a short tour of `evolve migrate` against a
//! throwaway PostgreSQL cluster that the command starts and removes itself.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use evolve_migrate::{ApplyOptions, Options};

use crate::output::Out;

const FILES: &[(&str, &str)] = &[
    (
        "V1__create_customers.sql",
        "CREATE TABLE customers (\n    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n    name text NOT NULL\n);\n",
    ),
    (
        "V1.1__add_email.sql",
        "ALTER TABLE customers ADD COLUMN email text;\n",
    ),
    (
        "V2__create_orders.sql",
        "CREATE TABLE orders (\n    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n    customer_id bigint NOT NULL REFERENCES customers,\n    note text DEFAULT 'it''s; fine' -- semicolons in strings stay put\n);\nCREATE FUNCTION order_count(c bigint) RETURNS bigint LANGUAGE sql AS $$\n    SELECT count(*) FROM orders WHERE customer_id = c;\n$$;\n",
    ),
    (
        "V3__index_orders_concurrently.sql",
        "-- evolve:no-transaction\nCREATE INDEX CONCURRENTLY orders_customer_idx ON orders (customer_id);\n",
    ),
    (
        "R__customer_summary.sql",
        "CREATE OR REPLACE VIEW customer_summary AS\n    SELECT c.id, c.name, order_count(c.id) AS orders FROM customers c;\n",
    ),
];

pub async fn run(keep: bool, out: &mut Out) -> anyhow::Result<()> {
    let say = |s: &str| println!("{s}");
    say("== evolve demo migrate: migrations as code for PostgreSQL");
    say("starting a throwaway PostgreSQL cluster (initdb + pg_ctl) ...");
    let cluster = evolve_test::Cluster::start().context("starting the demo cluster")?;
    let db = cluster
        .create_database("demo")
        .await
        .context("creating the demo database")?;
    say(&format!(
        "  cluster on 127.0.0.1:{}, database {}",
        cluster.port(),
        db.name
    ));

    let dir = std::env::temp_dir().join(format!("evolve-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, body) in FILES {
        write(&dir, name, body)?;
    }
    let mut opts = Options::new(db.url.clone(), &dir);
    opts.lock_timeout = Duration::from_millis(300);
    opts.lock_retries = 5;
    opts.retry_delay = Duration::from_millis(200);

    say(&format!(
        "\n== 1. five migration files in {} (versioned V1, V1.1, V2, V3 and a repeatable R__)",
        dir.display()
    ));
    say("$ evolve migrate status");
    out.status(&evolve_migrate::status(&opts).await?)?;

    say(
        "\n== 2. apply: each file in one transaction with its history row; V3 runs outside one (CREATE INDEX CONCURRENTLY)",
    );
    say("$ evolve migrate apply");
    apply(&opts, out).await?;
    say("\n$ evolve migrate status");
    out.status(&evolve_migrate::status(&opts).await?)?;

    say("\n== 3. somebody edits an applied file: validate refuses, apply refuses");
    let v1 = dir.join("V1__create_customers.sql");
    let original = std::fs::read_to_string(&v1)?;
    std::fs::write(&v1, original.replace("name text", "full_name text"))?;
    say("$ evolve migrate validate");
    match evolve_migrate::validate(&opts).await {
        Err(e) => say(&format!("error: {e}")),
        Ok(_) => anyhow::bail!("validate accepted an edited file"),
    }
    std::fs::write(&v1, original)?;
    say("(file restored)");
    say("$ evolve migrate validate");
    out.validated(&evolve_migrate::validate(&opts).await?)?;

    say(
        "\n== 4. a long transaction holds a lock on customers; V4 waits at most lock_timeout (300ms here), then retries, naming the blocker",
    );
    write(
        &dir,
        "V4__add_customer_tier.sql",
        "ALTER TABLE customers ADD COLUMN tier text NOT NULL DEFAULT 'standard';\n",
    )?;
    let blocker = evolve_pg::connect(&db.url, "nightly report").await?;
    blocker
        .batch_execute(
            "BEGIN; LOCK TABLE customers IN ACCESS SHARE MODE; SELECT count(*) FROM customers",
        )
        .await?;
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(900)).await;
        let _ = blocker.batch_execute("COMMIT").await;
        blocker
    });
    say("$ evolve migrate apply --lock-timeout 300ms");
    apply(&opts, out).await?;
    let _ = release.await;

    say("\n== 5. a migration with a mistake fails as a whole: no table, no history row");
    write(
        &dir,
        "V5__loyalty.sql",
        "CREATE TABLE loyalty_points (customer_id bigint REFERENCES customers, points int);\nINSERT INTO loyalty_points SELECT id, 0 FROM customer;\n",
    )?;
    say("$ evolve migrate apply");
    match evolve_migrate::apply(&opts, &ApplyOptions::default(), &mut |e| out.event(&e)).await {
        Err(e) => say(&format!("error: {e}")),
        Ok(_) => anyhow::bail!("a broken migration was applied"),
    }
    let client = evolve_pg::connect(&db.url, "evolve demo").await?;
    let exists: bool = client
        .query_one("SELECT to_regclass('loyalty_points') IS NOT NULL", &[])
        .await?
        .get(0);
    say(&format!("  table loyalty_points exists: {exists}"));
    say("$ evolve migrate status");
    out.status(&evolve_migrate::status(&opts).await?)?;

    if keep {
        say(&format!(
            "\nkeeping the cluster until Ctrl-C: {} (data in {}); files in {}",
            db.url,
            cluster.data_dir().display(),
            dir.display()
        ));
        super::wait_for_ctrl_c().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    drop(cluster);
    say("\nthrowaway cluster stopped and removed. Next: evolve migrate --help");
    Ok(())
}

async fn apply(opts: &Options, out: &mut Out) -> anyhow::Result<()> {
    let mut events = out.clone();
    let report =
        evolve_migrate::apply(opts, &ApplyOptions::default(), &mut |e| events.event(&e)).await?;
    out.apply_summary(&report)
}

fn write(dir: &Path, name: &str, body: &str) -> anyhow::Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))
}
