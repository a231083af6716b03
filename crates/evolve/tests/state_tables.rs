//! evolve's own tables in the user's database (migration history, backfill
//! jobs, rewrite state, refresh log) found in place, created by a role
//! that could run code through them with the privileges of whoever runs
//! evolve: a superuser's run refuses them, writes nothing to them, and the
//! role gains nothing.

use std::process::{Command, Output};

use tokio_postgres::Client;

async fn connect(url: &str) -> Client {
    evolve_pg::connect(url, "evolve test")
        .await
        .expect("connect")
}

fn evolve(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_evolve"))
        .args(args)
        .env("DATABASE_URL", url)
        .output()
        .expect("run evolve")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A role that may create in `public` plants `table` (with `columns`) and
/// a trigger that makes it a superuser and counts its firings.
async fn plant(client: &Client, role: &str, table: &str, columns: &str) {
    client
        .batch_execute(&format!(
            "SET ROLE {role};
             CREATE TABLE public.{table} ({columns});
             CREATE FUNCTION public.{table}_fire() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               INSERT INTO public.fired VALUES (TG_TABLE_NAME);
               EXECUTE 'ALTER ROLE {role} SUPERUSER';
               RETURN NEW;
             END $$;
             CREATE TRIGGER fire BEFORE INSERT OR UPDATE OR DELETE ON public.{table}
               FOR EACH ROW EXECUTE FUNCTION public.{table}_fire();
             RESET ROLE;"
        ))
        .await
        .expect("plant");
}

#[tokio::test]
async fn state_tables_planted_by_a_lesser_role_are_refused_by_a_superuser() {
    let db = evolve_test::fresh_db("state_tables").await;
    let client = connect(&db.url).await;
    let role = format!("evolve_planter_{}", std::process::id());
    client
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role};
             CREATE ROLE {role};
             GRANT CREATE ON SCHEMA public TO {role};
             CREATE TABLE public.fired (t text);
             GRANT INSERT ON public.fired TO {role};
             CREATE TABLE public.items (id int PRIMARY KEY, n int);
             INSERT INTO public.items SELECT g, 0 FROM generate_series(1, 10) g;
             CREATE MATERIALIZED VIEW public.item_count AS SELECT count(*) FROM public.items;"
        ))
        .await
        .expect("setup");
    plant(
        &client,
        &role,
        "evolve_refresh_log",
        "matview text, started_at timestamptz, finished_at timestamptz, concurrent boolean, duration_ms integer",
    )
    .await;
    plant(
        &client,
        &role,
        "evolve_backfill_jobs",
        "name text PRIMARY KEY, table_name text NOT NULL, definition jsonb NOT NULL, last_key text[], \
         rows_done int8 NOT NULL DEFAULT 0, batches int8 NOT NULL DEFAULT 0, keys_seen int8 NOT NULL DEFAULT 0, \
         state text NOT NULL, error text, started_at timestamptz NOT NULL DEFAULT now(), \
         updated_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz",
    )
    .await;
    plant(
        &client,
        &role,
        "evolve_rewrites",
        "table_name text PRIMARY KEY, table_oid oid NOT NULL, alters text[] NOT NULL, keep_old bool NOT NULL, \
         phase text NOT NULL, last_key text[], rows_copied int8 NOT NULL DEFAULT 0, batches int8 NOT NULL DEFAULT 0, \
         index_pairs text[] NOT NULL DEFAULT '{}', after_swap text[] NOT NULL DEFAULT '{}', \
         started_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now()",
    )
    .await;
    plant(
        &client,
        &role,
        "evolve_schema_history",
        "installed_rank INT NOT NULL PRIMARY KEY, version VARCHAR(50), description VARCHAR(200) NOT NULL, \
         type VARCHAR(20) NOT NULL, script VARCHAR(1000) NOT NULL, checksum INT, installed_by VARCHAR(100) NOT NULL, \
         installed_on TIMESTAMP NOT NULL DEFAULT now(), execution_time INT NOT NULL, success BOOLEAN NOT NULL",
    )
    .await;
    let migrations =
        std::env::temp_dir().join(format!("evolve-state-tables-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&migrations);
    std::fs::create_dir_all(&migrations).unwrap();
    std::fs::write(
        migrations.join("V1__add.sql"),
        "CREATE TABLE public.added (id int);\n",
    )
    .unwrap();

    let runs: [(&str, Vec<&str>); 4] = [
        ("evolve_refresh_log", vec!["refresh", "--all"]),
        (
            "evolve_backfill_jobs",
            vec![
                "backfill", "run", "--name", "fill", "--table", "items", "--set", "n = 1",
            ],
        ),
        (
            "evolve_rewrites",
            vec!["rewrite", "items", "--alter", "ALTER COLUMN n TYPE bigint"],
        ),
        (
            "evolve_schema_history",
            vec!["migrate", "apply", "--dir", migrations.to_str().unwrap()],
        ),
    ];
    for (table, args) in &runs {
        let out = evolve(&db.url, args);
        let stderr = text(&out.stderr);
        assert!(
            !out.status.success(),
            "{args:?} succeeded:\n{}{stderr}",
            text(&out.stdout)
        );
        assert!(
            stderr.contains(table)
                && stderr.contains(&format!(
                    "is owned by role {role}, which cannot act as postgres"
                )),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains("OWNER TO \"postgres\""),
            "{args:?}: {stderr}"
        );
    }
    let fired: i64 = client
        .query_one("SELECT count(*) FROM public.fired", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(fired, 0, "a planted trigger fired");
    let superuser: bool = client
        .query_one("SELECT rolsuper FROM pg_roles WHERE rolname = $1", &[&role])
        .await
        .unwrap()
        .get(0);
    assert!(!superuser, "the planting role became a superuser");
    let changed: i64 = client
        .query_one("SELECT count(*) FROM public.items WHERE n <> 0", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(changed, 0, "the refused backfill wrote rows");
    let added: bool = client
        .query_one("SELECT to_regclass('public.added') IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!added, "the refused migration ran");

    // Owned by the role that runs evolve, the same tables are used.
    for (table, _) in &runs {
        client
            .batch_execute(&format!(
                "ALTER TABLE public.{table} OWNER TO postgres; DROP TRIGGER fire ON public.{table}"
            ))
            .await
            .unwrap();
    }
    let out = evolve(&db.url, &runs[0].1);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let logged: i64 = client
        .query_one("SELECT count(*) FROM public.evolve_refresh_log", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(logged, 1);
    let _ = std::fs::remove_dir_all(&migrations);
    client
        .batch_execute(&format!(
            "DROP OWNED BY {role}; REVOKE ALL ON SCHEMA public FROM {role}; DROP ROLE {role}"
        ))
        .await
        .unwrap();
}
