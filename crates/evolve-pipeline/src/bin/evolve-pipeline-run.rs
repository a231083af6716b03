//! Test helper: runs the pipeline of a config file until SIGTERM or SIGINT.
//! The crash tests start it as a child process and kill it with SIGKILL.
//!
//! Usage: `evolve-pipeline-run CONFIG`

use std::path::Path;
use std::process::ExitCode;

use evolve_pipeline::{Config, Pipeline};
use tokio::signal::unix::{SignalKind, signal};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: evolve-pipeline-run CONFIG");
        return ExitCode::from(2);
    };
    let result = async {
        let config = Config::load(Path::new(&path))?;
        let pipeline = Pipeline::open(config)?;
        let mut term = signal(SignalKind::terminate()).map_err(|e| {
            evolve_pipeline::PipelineError::Config {
                message: format!("install a SIGTERM handler: {e}"),
            }
        })?;
        pipeline
            .run(async move {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            })
            .await
    }
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
