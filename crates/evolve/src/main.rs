//! The `evolve` binary: parses arguments, calls the libraries, renders what
//! they report, and maps failures to exit codes (0 ok, 1 failed or refused,
//! 2 bad usage). A closed stdout (`evolve ... | head`) is not an error.

mod cli;
mod compat;
mod demo;
mod output;
mod pipeline;
mod registry;

use std::process::ExitCode;

use clap::Parser;

use crate::output::Out;

/// Warnings only, except the registry's access log when serving.
fn default_log_filter(args: &cli::Cli) -> &'static str {
    if cli::wants_multi_thread(args) {
        "warn,evolve::registry::access=info"
    } else {
        "warn"
    }
}

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("EVOLVE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_log_filter(&args))),
        )
        .with_writer(std::io::stderr)
        .init();
    // One thread: evolve's work is round trips to PostgreSQL, and a
    // single-threaded runtime answers them without cross-thread wake-ups
    // (measured: 1.06x psql's floor instead of 1.3x, see BENCHMARKS.md).
    // A server (the registry) uses every core.
    let mut builder = if cli::wants_multi_thread(&args) {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = Out::new(args.format);
    match runtime.block_on(cli::run(args, &mut out)) {
        Ok(code) => code,
        Err(e) if output::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            out.error(&e);
            // Input that cannot be used at all (compat check): 2, like bad usage.
            if e.downcast_ref::<compat::Unusable>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
