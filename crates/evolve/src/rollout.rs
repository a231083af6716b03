//! `evolve rollout`: pending migrations applied one node at a time while
//! replicas keep the nodes in step ([`evolve_replicate::rollout`]). The
//! nodes are connections of the pipeline's config; the replicas come from
//! its catalog (those of `--source`, or every one).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use evolve_replicate::catalog::Catalog;
use evolve_replicate::rollout::{self, ReplicaView, RolloutSpec, Step};

use crate::output::Out;

#[derive(Debug, Args)]
pub struct RolloutArgs {
    /// The migrations directory.
    #[arg(long, default_value = "migrations")]
    dir: PathBuf,
    /// The nodes in the order they are migrated: connection names of the
    /// config, comma-separated; one of them is the replicas' upstream.
    #[arg(long, value_delimiter = ',', required = true)]
    nodes: Vec<String>,
    /// Only the replicas of this pipeline source (default: every replica).
    #[arg(long)]
    source: Option<String>,
    /// The pipeline's config file (connections, and the replicas' catalog
    /// in its state_dir).
    #[arg(long, default_value = "evolve.toml")]
    config: PathBuf,
    /// Print the check (what would halt replication, with the fixes) and
    /// run nothing.
    #[arg(long)]
    plan: bool,
    /// How long every replica may take to catch up after each node, e.g.
    /// 90s or 5m.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    catchup_timeout: Duration,
}

/// A duration; a bare number is in seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    crate::cli::parse_duration_or(Duration::from_secs(1), text)
}

pub async fn run(args: RolloutArgs, out: &Out) -> anyhow::Result<()> {
    let config = crate::pipeline::load_config_lenient(&args.config)?;
    let url = |name: &str| -> anyhow::Result<String> {
        Ok(config
            .connection(name)
            .map_err(|e| crate::pipeline::pipeline_error(&e))?
            .url()
            .to_string())
    };
    let mut nodes = Vec::new();
    for name in &args.nodes {
        nodes.push((name.clone(), url(name)?));
    }
    let catalog =
        Catalog::open(&config.state_dir).map_err(|e| crate::pipeline::pipeline_error(&e))?;
    let transforms = catalog
        .transforms()
        .map_err(|e| crate::pipeline::pipeline_error(&e))?;
    let mut upstream: Option<String> = None;
    let mut replicas = Vec::new();
    for r in catalog
        .replicas()
        .map_err(|e| crate::pipeline::pipeline_error(&e))?
    {
        if args.source.as_ref().is_some_and(|s| *s != r.source) {
            continue;
        }
        match &upstream {
            Some(u) if *u != r.upstream_connection => anyhow::bail!(
                "replicas read different upstreams ({u} and {}): name the source with --source",
                r.upstream_connection
            ),
            _ => upstream = Some(r.upstream_connection.clone()),
        }
        if !args.nodes.contains(&r.node_connection) {
            anyhow::bail!(
                "replica {} (of source {}) writes into connection {}, which --nodes does not list: add it to --nodes, since a rollout migrates every node the source's replicas write into (--source leaves out only the replicas of other sources)",
                r.name,
                r.source,
                r.node_connection
            );
        }
        replicas.push((
            ReplicaView {
                name: r.name.clone(),
                node: r.node_connection.clone(),
                resolvers: r.resolvers.clone(),
                transforms: transforms
                    .iter()
                    .filter(|t| t.replica == r.name)
                    .map(|t| t.transform.clone())
                    .collect(),
                tables: r.tables.clone(),
            },
            url(&r.node_connection)?,
        ));
    }
    let Some(upstream) = upstream else {
        anyhow::bail!(
            "no replica to keep in step{}: create them with CREATE REPLICA through evolve sql, or migrate each node with evolve migrate apply",
            args.source
                .as_ref()
                .map_or(String::new(), |s| format!(" from source {s}"))
        );
    };
    if !args.nodes.contains(&upstream) {
        anyhow::bail!(
            "the replicas' upstream is connection {upstream}, which --nodes does not list: add it where it is to be migrated"
        );
    }
    let spec = RolloutSpec {
        dir: args.dir.clone(),
        nodes,
        upstream,
        replicas,
        catchup_timeout: args.catchup_timeout,
    };
    if args.plan {
        let (statements, found) = rollout::check(&spec).await?;
        let order = args.nodes.join(", ");
        if found.is_empty() {
            out.text(&format!(
                "rollout of {statements} pending statement(s) over {order}: no replica would halt"
            ))?;
            return Ok(());
        }
        for f in &found {
            out.text(&format!(
                "replica {} into node {}: {}\n  fix: {}",
                f.replica, f.node, f.problem, f.fix
            ))?;
        }
        anyhow::bail!(
            "the rollout would halt replication ({} finding(s) above)",
            found.len()
        );
    }
    let mut lines = Vec::new();
    rollout::run(&spec, &mut |step| {
        lines.push(match step {
            Step::Checked {
                statements,
                replicas,
            } => format!(
                "checked {statements} pending statement(s) against {replicas} replica(s): nothing would halt"
            ),
            Step::AlreadyMigrated { node } => format!("node {node}: nothing pending (migrated before)"),
            Step::Migrated { node, applied } => format!("node {node}: applied {applied} migration(s)"),
            Step::CaughtUp { node, millis } => {
                format!("node {node}: every replica caught up in {millis} ms")
            }
        });
        if let Some(last) = lines.last() {
            eprintln!("{last}");
        }
    })
    .await
    .context("rollout stopped")?;
    out.text(&format!("rollout done over {}", args.nodes.join(", ")))
}
