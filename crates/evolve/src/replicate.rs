//! `evolve replicate`: what is done to a replica from outside the running
//! pipeline. `skip` records, on the replica's node, the upstream
//! transaction a halted replica is to skip ([`Replica::skip`], which
//! refuses any LSN but the one of the transaction the node records the
//! replica halted at); the running pipeline sees it within a second and
//! wakes the replica, which moves past exactly that transaction.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use evolve_pipeline::Position;
use evolve_replicate::Replica;

use crate::output::Out;

#[derive(Debug, Args)]
pub struct ReplicateArgs {
    #[command(subcommand)]
    pub verb: ReplicateVerb,
}

#[derive(Debug, Subcommand)]
pub enum ReplicateVerb {
    /// Skip the upstream transaction a halted replica stopped at, as
    /// ALTER SUBSCRIPTION ... SKIP does: the replica moves past it without
    /// applying any of it. The LSN is the one its halt names (SHOW
    /// REPLICAS shows it); any other, or a replica that is not halted, is
    /// refused.
    Skip {
        /// The replica.
        name: String,
        /// The finish LSN of the transaction to skip, e.g. 0/16B3748.
        #[arg(long, value_name = "LSN")]
        lsn: String,
        /// The pipeline's config file (its state_dir has the replicas'
        /// catalog, its connections the node's url).
        #[arg(long, default_value = "evolve.toml")]
        config: PathBuf,
    },
}

pub async fn run(args: ReplicateArgs, out: &Out) -> anyhow::Result<()> {
    match args.verb {
        ReplicateVerb::Skip { name, lsn, config } => {
            let position: Position = lsn.trim().parse().map_err(|_| {
                anyhow::anyhow!(
                    "--lsn {lsn:?} is not an LSN; write it as PostgreSQL does, e.g. 0/16B3748 (the replica's halt names it)"
                )
            })?;
            let config = crate::pipeline::load_config_lenient(&config)?;
            let node = evolve_replicate::service::node_url(&config, &name)
                .map_err(|e| crate::pipeline::pipeline_error(&e))?;
            Replica::skip(&node, &name, position)
                .await
                .with_context(|| format!("cannot record the skip on the node of replica {name}"))?;
            match out.format() {
                crate::cli::Format::Json => out.json_value(&serde_json::json!({
                    "replica": name,
                    "skip_lsn": position.to_string(),
                })),
                _ => out.text(&format!(
                    "replica {name} will skip the upstream transaction finished at {position} \
                     (only a transaction that finishes exactly there: SHOW REPLICAS shows the \
                     replica halted until it has passed it)"
                )),
            }
        }
    }
}
