//! The `evolve` binary: parses arguments, calls the libraries, renders what
//! they report, and maps failures to exit codes (0 ok, 1 failed or refused,
//! 2 bad usage). A closed stdout (`evolve ... | head`) is not an error.

mod backfill;
mod change;
mod cli;
mod compat;
mod contracts;
mod coordinate;
mod demo;
mod lint;
mod output;
mod pipeline;
mod plan;
mod registry;
mod replicate;
mod rollout;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::output::Out;

/// Warnings only, except what a server reports of its own work: the
/// pipeline's steps (tables hydrated, replacements applied, ...) under
/// `evolve pipeline run`, the access log under `evolve registry serve`.
fn default_log_filter(args: &cli::Cli) -> &'static str {
    match &args.command {
        cli::Command::Pipeline(pipeline::PipelineArgs {
            verb: pipeline::PipelineVerb::Run { .. },
        }) => "warn,evolve_pipeline=info,evolve_replicate=info",
        cli::Command::Registry(registry::RegistryArgs {
            verb: registry::RegistryVerb::Serve { .. },
        }) => "warn,evolve::registry::access=info",
        _ => "warn",
    }
}

/// Whether `args` runs a server (`evolve pipeline run`, `evolve registry
/// serve`), whose log lines say when each thing happened.
fn is_server(args: &cli::Cli) -> bool {
    matches!(
        &args.command,
        cli::Command::Pipeline(pipeline::PipelineArgs {
            verb: pipeline::PipelineVerb::Run { .. },
        }) | cli::Command::Registry(registry::RegistryArgs {
            verb: registry::RegistryVerb::Serve { .. },
        })
    )
}

/// Whether neither `--log-level` nor `EVOLVE_LOG` sets the filter.
fn default_logging(args: &cli::Cli) -> bool {
    args.log_level.is_none() && std::env::var("EVOLVE_LOG").map_or(true, |v| v.trim().is_empty())
}

/// The text log lines of a command that is not a server, at the default
/// filter (warnings only): `warning: <message> <field>=<value> ...`, as
/// the command's own warnings and errors are written, with no timestamp
/// or module path. A filter set with `--log-level` or `EVOLVE_LOG` (to
/// debug, say) gets tracing's full lines instead.
struct Plain;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Plain
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warning",
            tracing::Level::INFO => "info",
            tracing::Level::DEBUG => "debug",
            tracing::Level::TRACE => "trace",
        };
        write!(writer, "{level}: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// The log filter: `--log-level`, else `EVOLVE_LOG`, else the command's
/// default. Both take tracing's filter syntax; a bare word must be a
/// level (`--log-level verbose` and `EVOLVE_LOG=verbose` are refused
/// rather than read as the target "verbose").
fn log_filter(args: &cli::Cli) -> Result<EnvFilter, String> {
    if let Some(level) = &args.log_level {
        return parse_log_filter(level, "--log-level");
    }
    match std::env::var("EVOLVE_LOG") {
        Ok(value) if !value.trim().is_empty() => parse_log_filter(&value, "EVOLVE_LOG"),
        _ => Ok(EnvFilter::new(default_log_filter(args))),
    }
}

/// `value` as a log filter, `given` by that option or variable.
fn parse_log_filter(value: &str, given: &str) -> Result<EnvFilter, String> {
    let bare = !value.contains(['=', ',', '[', ':']);
    let is_level = matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "off" | "error" | "warn" | "info" | "debug" | "trace"
    );
    if bare && !is_level {
        return Err(format!(
            "{given} {value:?} is not a log level; use off, error, warn, info, debug or \
             trace, or directives such as \"warn,evolve_pipeline=debug\""
        ));
    }
    EnvFilter::try_new(value.trim()).map_err(|e| {
        format!(
            "{given} {value:?} is not a log filter ({e}); use a level (off, error, warn, info, \
             debug, trace) or directives such as \"warn,evolve_pipeline=debug\""
        )
    })
}

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    let filter = match log_filter(&args) {
        Ok(filter) => filter,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        cli::LogFormat::Json => logs
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
        cli::LogFormat::Text => {
            // Colour codes only for a terminal: a file or a pipe gets plain text.
            let colour = std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            let logs = logs.with_ansi(colour);
            if default_logging(&args) && !is_server(&args) {
                logs.event_format(Plain).init()
            } else {
                logs.init()
            }
        }
    }
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
