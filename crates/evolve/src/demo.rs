//! `evolve demo [TOUR]`: tours against throwaway PostgreSQL clusters that
//! the command starts and removes itself.
//!
//! - `pipeline` (the default, [`pipeline`]): the pipeline absorbing
//!   upstream schema changes behind a stable JSON interface, under write
//!   load, with every count checked; exits 1 if an expectation failed.
//! - `migrate` ([`migrate`]): `evolve migrate` on five migration files.
//! - `mysql` ([`mysql`]): the pipeline's four absorb flows with a
//!   throwaway MariaDB server as the upstream (read from its binlog) and a
//!   PostgreSQL sink; exits 1 if an expectation failed.
//! - `kafka` ([`kafka`]): a Kafka table (Avro, schema registry) whose
//!   producer adds a field, then breaks the pinned reader, and the new
//!   table version that absorbs it; exits 1 if an expectation failed.

mod coordinate;
mod kafka;
mod migrate;
mod mysql;
mod pipeline;
mod stage;

use crate::cli::{DemoArgs, Tour};
use crate::output::Out;

pub async fn run(args: DemoArgs, out: &mut Out) -> anyhow::Result<()> {
    match args.tour {
        Tour::Pipeline => pipeline::run(args.keep).await,
        Tour::Migrate => migrate::run(args.keep, out).await,
        Tour::Mysql => mysql::run(args.keep).await,
        Tour::Kafka => kafka::run(args.keep).await,
    }
}

/// `--keep`: waits until the user presses Ctrl-C (SIGINT), so that what
/// the tour built can be looked at; the caller then cleans up.
async fn wait_for_ctrl_c() {
    if let Err(e) = tokio::signal::ctrl_c().await {
        tracing::warn!(error = %e, "cannot wait for Ctrl-C; cleaning up now");
    }
}
