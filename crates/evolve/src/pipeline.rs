//! `evolve pipeline run`, and the clients of its admin API: `evolve sql`,
//! `evolve status` and `evolve drift`.
//!
//! The clients speak plain HTTP/1.1 to the admin API (loopback by default)
//! with hyper's connection-level client: one connection per command.

use std::io::{IsTerminal, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use evolve_core::control::ControlError;
use evolve_pipeline::admin::{ObjectReport, SqlError, SqlResponse, StatusReport};
use evolve_pipeline::drift::{DriftReport, DriftRow};
use evolve_pipeline::{Config, Pipeline, PipelineError};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode, header};
use hyper_util::rt::TokioIo;

use crate::cli::Format;
use crate::output::Out;

/// Where `evolve sql` and `evolve status` find the admin API.
pub const DEFAULT_ADMIN: &str = "http://127.0.0.1:7800";

#[derive(Debug, Args)]
pub struct PipelineArgs {
    #[command(subcommand)]
    pub verb: PipelineVerb,
}

#[derive(Debug, Subcommand)]
pub enum PipelineVerb {
    /// Run the pipeline and its admin API until SIGINT or SIGTERM.
    Run {
        /// The pipeline's config file (state_dir, admin_listen, connections).
        #[arg(long, default_value = "evolve.toml")]
        config: PathBuf,
    },
    /// Check what the pipeline's objects need of their servers
    /// (wal_level, the REPLICATION attribute, free slots and WAL senders,
    /// publication and table privileges, the sinks' privileges), and
    /// print the statement that fixes each failure. Exit 1 when any fails.
    Check {
        /// The pipeline's config file.
        #[arg(long, default_value = "evolve.toml")]
        config: PathBuf,
        /// Also check what the statements of this file would need (the
        /// setup file before its first run).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub struct AdminArg {
    /// The running pipeline's admin API [default: admin_listen of --config,
    /// else http://127.0.0.1:7800].
    #[arg(long, value_name = "URL", env = "EVOLVE_ADMIN")]
    pub admin: Option<String>,
    /// The pipeline's config file, for the admin API's address and token.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

impl AdminArg {
    /// The admin API to call: `--admin` (or `EVOLVE_ADMIN`), else the
    /// config's `admin_listen`; the token from `EVOLVE_ADMIN_TOKEN`, else
    /// the config's `admin_token` or `admin_token_file`.
    pub(crate) fn resolve(&self) -> anyhow::Result<AdminUrl> {
        self.resolve_as("--admin")
    }

    /// [`AdminArg::resolve`] where the URL was given as `flag`
    /// (`--pipeline` on the commands that coordinate with a pipeline).
    pub(crate) fn resolve_as(&self, flag: &str) -> anyhow::Result<AdminUrl> {
        let (listen, token) = match &self.config {
            Some(path) => {
                config_exists(path)?;
                let (listen, token) = Config::load_admin(path).map_err(|e| pipeline_error(&e))?;
                (
                    Some((listen, path.display().to_string())),
                    token.map(|t| t.secret().to_string()),
                )
            }
            None => (None, None),
        };
        let (url, given) = match (&self.admin, listen) {
            (Some(url), _) => (url.clone(), flag.to_string()),
            (None, Some((listen, path))) => {
                if listen.contains("://") {
                    bail!(
                        "admin_listen in {path} is {:?}, a URL; it is the address the pipeline listens on, HOST:PORT, e.g. 127.0.0.1:7800",
                        without_credentials(&listen)
                    );
                }
                (
                    format!("http://{listen}"),
                    format!("admin_listen in {path}"),
                )
            }
            (None, None) => (DEFAULT_ADMIN.to_string(), "--admin".to_string()),
        };
        let mut admin = AdminUrl::parse(&url, &given)?;
        admin.defaulted = self.admin.is_none() && self.config.is_none();
        admin.token = std::env::var("EVOLVE_ADMIN_TOKEN")
            .ok()
            .filter(|t| !t.trim().is_empty())
            .map(|t| t.trim().to_string())
            .or(token);
        if let Some(problem) = admin
            .token
            .as_deref()
            .and_then(evolve_pipeline::config::AdminToken::problem)
        {
            bail!("the admin token (EVOLVE_ADMIN_TOKEN, or the config's) {problem}");
        }
        Ok(admin)
    }
}

/// When a client was given neither `--admin` nor `--config` and the
/// directory has the `evolve.toml` that `evolve pipeline run` reads by
/// default, listening elsewhere than the clients' default address: the
/// way out that names it (someone who ran the pipeline here with
/// `admin_listen = "127.0.0.1:7801"` and typed `evolve status` would
/// otherwise be asked whether the pipeline runs, which it does).
fn default_config_elsewhere() -> Option<String> {
    let path = Path::new("evolve.toml");
    let (listen, _) = Config::load_admin(path).ok()?;
    let default = DEFAULT_ADMIN
        .strip_prefix("http://")
        .unwrap_or(DEFAULT_ADMIN);
    (listen != default).then(|| {
        format!(
            "evolve.toml here has admin_listen = {listen:?}: pass --config evolve.toml (or --admin http://{listen})"
        )
    })
}

#[derive(Debug, Args)]
pub struct SqlArgs {
    /// Statements to run, e.g. "SHOW SOURCES". Without -c or -f, the
    /// statements piped to stdin.
    #[arg(
        short = 'c',
        long = "command",
        value_name = "SQL",
        conflicts_with = "file"
    )]
    pub command: Option<String>,
    /// A file of statements (`-` for stdin).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Let each ALTER MATERIALIZED VIEW ... APPLY REPLACEMENT without a
    /// WAIT wait up to DURATION (e.g. 60s, 2min) for the replacement to
    /// be hydrated, as WITH (WAIT = 'DURATION') would.
    #[arg(long, value_name = "DURATION", value_parser = parse_wait)]
    pub wait: Option<Duration>,
    #[command(flatten)]
    pub admin: AdminArg,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Wait until the table or replacement NAME is hydrated (a table
    /// running, a replacement hydrated), then exit 0; exit 1 with its
    /// state when --timeout passes first, or at once when it is stalled.
    #[arg(long, value_name = "NAME")]
    pub wait_hydrated: Option<String>,
    /// How long --wait-hydrated waits (e.g. 60s, 10min).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "60s",
        value_parser = parse_wait,
        requires = "wait_hydrated"
    )]
    pub timeout: Duration,
    #[command(flatten)]
    pub admin: AdminArg,
}

/// A duration as the control language's `WAIT` takes it.
pub(crate) fn parse_wait(text: &str) -> Result<Duration, String> {
    evolve_core::control::parse_duration(text.trim()).ok_or_else(|| {
        format!(
            "{text:?} is not a duration; use {}",
            evolve_core::control::DURATION_FORMAT
        )
    })
}

#[derive(Debug, Args)]
pub struct DriftArgs {
    /// Only the tables of this source.
    #[arg(long, value_name = "NAME")]
    pub source: Option<String>,
    #[command(flatten)]
    pub admin: AdminArg,
}

/// A pipeline error as the binary prints errors: the primary line, then
/// the detail and hint indented.
pub(crate) fn pipeline_error(e: &PipelineError) -> anyhow::Error {
    let mut message = e.primary();
    for line in [e.detail(), e.hint()].into_iter().flatten() {
        message.push_str("\n  ");
        message.push_str(&line);
    }
    anyhow::anyhow!(message)
}

/// Refuses a config file that is not there with the way out, before the
/// loader's bare "No such file or directory": a first `evolve pipeline run`
/// in a directory without `evolve.toml` is the usual way to meet it.
pub(crate) fn config_exists(path: &Path) -> anyhow::Result<()> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "config file {} does not exist; write one with state_dir, admin_listen and a \
             [connections.NAME] url for each server (see \"Running it\" in the README's \
             pipeline section), or name yours with --config FILE",
            path.display()
        ),
        _ => Ok(()),
    }
}

/// [`Config::load`] with [`config_exists`]'s way out.
pub(crate) fn load_config(path: &Path) -> anyhow::Result<Config> {
    config_exists(path)?;
    Config::load(path).map_err(|e| pipeline_error(&e))
}

/// [`Config::load_lenient`] with [`config_exists`]'s way out.
pub(crate) fn load_config_lenient(path: &Path) -> anyhow::Result<Config> {
    config_exists(path)?;
    Config::load_lenient(path).map_err(|e| pipeline_error(&e))
}

// ------------------------------------------------------------------ run

pub async fn run(args: PipelineArgs, out: &Out) -> anyhow::Result<()> {
    let path = match args.verb {
        PipelineVerb::Run { config } => config,
        PipelineVerb::Check { config, file } => return check(&config, file.as_deref(), out).await,
    };
    let config = load_config(&path)?;
    if config.admin_listen.contains("://") {
        // Said before the loopback check, which would call it "not a
        // loopback address" and ask for a token.
        bail!(
            "admin_listen in {} is {:?}, a URL; it is the address the pipeline listens on, HOST:PORT, e.g. 127.0.0.1:7800",
            path.display(),
            without_credentials(&config.admin_listen)
        );
    }
    evolve_pipeline::access::check_listen(&config).map_err(|e| pipeline_error(&e))?;
    let listen = config.admin_listen.clone();
    let state_dir = config.state_dir.clone();
    let listener = tokio::net::TcpListener::bind(&listen).await.map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::AddrInUse => "is another pipeline running? Stop it, or give this one another admin_listen",
            std::io::ErrorKind::AddrNotAvailable => "no interface of this machine has that address; use 127.0.0.1:PORT or one of its own",
            std::io::ErrorKind::PermissionDenied => "ports under 1024 need privileges; pick a higher port",
            _ => "admin_listen is HOST:PORT, e.g. 127.0.0.1:7800",
        };
        anyhow::anyhow!(
            "cannot listen on {listen} (admin_listen in {}): {e}; {why}",
            path.display()
        )
    })?;
    let address: SocketAddr = listener.local_addr()?;
    // Replicas and transforms: evolve-replicate runs their statements and
    // tasks beside the pipeline (which never depends on it).
    let replicas: Arc<dyn evolve_pipeline::admin::StatementHandler> = Arc::new(
        evolve_replicate::service::ReplicaService::open(&state_dir)
            .map_err(|e| pipeline_error(&e))?,
    );
    let pipeline = Arc::new(Pipeline::open(config).map_err(|e| pipeline_error(&e))?);
    // The engine takes the state directory's lock once it runs; a second
    // pipeline on the same directory is refused then. Ask first, so that
    // it is refused before it says it is listening (the lock is let go at
    // once and taken again by the engine).
    drop(evolve_pipeline::store::Store::lock_engine(&state_dir).map_err(|e| pipeline_error(&e))?);
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(
            stdout,
            "evolve pipeline listening on http://{address} (state {})",
            state_dir.display()
        )?;
        stdout.flush()?;
    }
    evolve_pipeline::admin::serve_with(
        pipeline,
        Some(replicas),
        listener,
        crate::output::shutdown_signal(),
    )
    .await
    .map_err(|e| match e {
        evolve_pipeline::admin::ServeError::Pipeline(e) => pipeline_error(&e),
        other => anyhow::anyhow!(other),
    })
}

/// `evolve pipeline check`.
async fn check(path: &Path, file: Option<&Path>, out: &Out) -> anyhow::Result<()> {
    use evolve_pipeline::preflight;
    let config = load_config(path)?;
    let catalog = config.state_dir.join("pipeline.db");
    let (sources, tables, sinks) = if catalog.exists() {
        let pipeline = Pipeline::open(config.clone()).map_err(|e| pipeline_error(&e))?;
        (
            pipeline.sources().map_err(|e| pipeline_error(&e))?,
            pipeline.tables().map_err(|e| pipeline_error(&e))?,
            pipeline.sinks().map_err(|e| pipeline_error(&e))?,
        )
    } else {
        Default::default()
    };
    let mut plan = preflight::Plan::from_catalog(&sources, &tables, &sinks);
    if let Some(file) = file {
        let text = crate::output::read_input(file).map_err(anyhow::Error::msg)?;
        let statements = evolve_core::control::parse(&text).map_err(|e| {
            anyhow::anyhow!(
                "{}: {}",
                file.display(),
                render_error(
                    &text,
                    &SqlError {
                        code: "42601".into(),
                        message: e.message.clone(),
                        detail: e.detail.clone(),
                        hint: e.hint.clone(),
                        position: None,
                        statement: None,
                    }
                )
                .trim_end()
            )
        })?;
        plan.add_statements(&statements, &sources);
    }
    let report = preflight::run(&config, &plan).await;
    if out.format() == Format::Json {
        out.text(&serde_json::to_string_pretty(&report)?)?;
    } else {
        let mut text = String::new();
        for c in &report.connections {
            let used = if c.used_as.is_empty() {
                "not used yet".to_string()
            } else {
                format!("as {}", c.used_as.join(" and "))
            };
            text.push_str(&format!(
                "connection {} ({}, {used})\n",
                c.connection, c.target
            ));
            for check in &c.checks {
                text.push_str(&format!(
                    "  {}  {}\n",
                    if check.ok { "ok  " } else { "FAIL" },
                    check.message
                ));
                if let Some(fix) = &check.fix {
                    text.push_str(&format!("        fix: {fix}\n"));
                }
            }
        }
        if !report.statements.is_empty() {
            text.push_str("statements\n");
            for check in &report.statements {
                text.push_str(&format!("  FAIL  {}\n", check.message));
                if let Some(fix) = &check.fix {
                    text.push_str(&format!("        fix: {fix}\n"));
                }
            }
        }
        let failures = report.failures();
        text.push_str(&if failures == 0 {
            "every check passed".to_string()
        } else {
            format!("{failures} check(s) failed")
        });
        out.text(&text)?;
    }
    if report.failures() > 0 {
        bail!(
            "the pipeline's servers are not ready: {} check(s) failed (the fixes are above)",
            report.failures()
        );
    }
    Ok(())
}

// --------------------------------------------------------------- client

/// The admin API's address: `http://host[:port][/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AdminUrl {
    /// As given, for messages.
    pub(crate) url: String,
    /// For connecting: the host without brackets.
    host: String,
    port: u16,
    /// The `Host` header.
    authority: String,
    /// A path prefix without the trailing `/` (usually empty).
    prefix: String,
    /// The bearer token, if the API needs one.
    token: Option<String>,
    /// Neither `--admin` nor `--config` was given: when the API cannot
    /// be reached, an `evolve.toml` here that listens elsewhere is the way
    /// out ([`default_config_elsewhere`], read only then).
    defaulted: bool,
}

/// `url` with any user information masked: an admin URL is echoed in
/// errors, and whatever precedes an `@` may be a password.
fn without_credentials(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..].find('/').map_or(url.len(), |i| start + i);
    match url[start..end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..start], &url[start + at..]),
        None => url.to_string(),
    }
}

impl AdminUrl {
    /// Reads `url`, which `given` (a flag, or a setting and its file) gave.
    fn parse(url: &str, given: &str) -> anyhow::Result<AdminUrl> {
        let shown = without_credentials(url);
        let Some(rest) = url.strip_prefix("http://") else {
            if url.starts_with("https://") {
                bail!(
                    "{given} {shown}: the admin API speaks plain HTTP (it listens on loopback); use http://"
                );
            }
            bail!("{given} {shown}: expected http://HOST:PORT, e.g. {DEFAULT_ADMIN}");
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if authority.contains('@') {
            bail!(
                "{given} {shown}: an admin URL takes no user name or password (the token comes from EVOLVE_ADMIN_TOKEN or the config's admin_token); use http://HOST:PORT"
            );
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !port.contains(']') => {
                let port = port
                    .parse::<u16>()
                    .map_err(|_| anyhow::anyhow!("{given} {shown}: {port:?} is not a port"))?;
                (host, port)
            }
            _ => (authority, 80),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            bail!("{given} {shown}: expected http://HOST:PORT, e.g. {DEFAULT_ADMIN}");
        }
        Ok(AdminUrl {
            url: url.to_string(),
            host: host.to_string(),
            port,
            authority: authority.to_string(),
            prefix: path.trim_end_matches('/').to_string(),
            token: None,
            defaulted: false,
        })
    }

    fn unreachable(&self, why: impl std::fmt::Display) -> anyhow::Error {
        let way_out = self
            .defaulted
            .then(default_config_elsewhere)
            .flatten()
            .unwrap_or_else(|| "is `evolve pipeline run` running?".to_string());
        anyhow::anyhow!(
            "cannot reach the pipeline's admin API at {} ({why}); {way_out}",
            self.url
        )
    }

    /// One request with `sql` as `POST /sql`'s JSON body; the status and
    /// the whole body.
    async fn request(
        &self,
        method: Method,
        path: &str,
        sql: Option<String>,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let body = match sql {
            Some(sql) => Some(serde_json::to_string(&serde_json::json!({ "sql": sql }))?),
            None => None,
        };
        self.request_json(method, path, body).await
    }

    /// One request with `body` as its JSON body; the status and the whole
    /// body.
    pub(crate) async fn request_json(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let connect = tokio::net::TcpStream::connect((self.host.as_str(), self.port));
        let stream = match tokio::time::timeout(Duration::from_secs(10), connect).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(self.unreachable(e)),
            Err(_) => return Err(self.unreachable("no answer in 10 s")),
        };
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| self.unreachable(e))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.prefix))
            .header(header::HOST, &self.authority);
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let body = match body {
            Some(json) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                json
            }
            None => String::new(),
        };
        let request = request.body(Full::new(Bytes::from(body)))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!("reading the answer of {}: {e}", self.url))?
            .to_bytes();
        self.refused(status, &bytes)?;
        Ok((status, bytes))
    }

    /// The API's refusal of the request itself (`401`, `403`, `415`) as an
    /// error: its message and hint.
    fn refused(&self, status: StatusCode, body: &[u8]) -> anyhow::Result<()> {
        if !matches!(
            status,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::UNSUPPORTED_MEDIA_TYPE
        ) {
            return Ok(());
        }
        let Some(error) = serde_json::from_slice::<SqlResponse>(body)
            .ok()
            .and_then(|r| r.error)
        else {
            return Ok(());
        };
        let mut message = format!("the admin API at {} refused: {}", self.url, error.message);
        if let Some(hint) = error.hint {
            message.push_str("\n  hint: ");
            message.push_str(&hint);
        }
        bail!(message)
    }

    pub(crate) fn unexpected(&self, path: &str, status: StatusCode, body: &[u8]) -> anyhow::Error {
        let text = String::from_utf8_lossy(body);
        let first = text
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect::<String>();
        anyhow::anyhow!(
            "unexpected answer from {}{path}: HTTP {status} {first}; is this an evolve pipeline's admin API?",
            self.url
        )
    }
}

// ------------------------------------------------------------------ sql

/// `evolve sql`: exit 0 when every statement ran, 1 otherwise (the error
/// on stderr, psql's way).
pub async fn sql(args: SqlArgs, out: &Out) -> anyhow::Result<ExitCode> {
    if matches!(out.format(), Format::Dot | Format::Mermaid) {
        bail!("--format dot and --format mermaid are for evolve deps; use text or json here");
    }
    let admin = args.admin.resolve()?;
    let input = match (&args.command, &args.file) {
        (Some(c), _) => c.clone(),
        (None, Some(path)) if path.as_os_str() == "-" => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read statements from stdin")?;
            text
        }
        (None, Some(path)) => crate::output::read_input(path).map_err(anyhow::Error::msg)?,
        (None, None) => {
            let mut text = String::new();
            let stdin = std::io::stdin();
            if !stdin.is_terminal() {
                stdin
                    .lock()
                    .read_to_string(&mut text)
                    .context("cannot read statements from stdin")?;
            }
            if text.trim().is_empty() {
                eprintln!("{SQL_USAGE}");
                return Ok(ExitCode::from(2));
            }
            text
        }
    };
    let input = match args.wait {
        Some(wait) => with_wait(&input, wait),
        None => input,
    };
    let (status, body) = admin
        .request(Method::POST, "/sql", Some(input.clone()))
        .await?;
    let response: SqlResponse =
        serde_json::from_slice(&body).map_err(|_| admin.unexpected("/sql", status, &body))?;
    match out.format() {
        Format::Json => out.json_value(&serde_json::to_value(&response)?)?,
        _ => {
            for result in &response.results {
                if let Some(notice) = &result.notice {
                    eprintln!("NOTICE:  {notice}");
                }
                match (&result.columns, &result.rows) {
                    (Some(columns), Some(rows)) => out.text(&psql_table(columns, rows))?,
                    _ => out.text(&result.status)?,
                }
            }
        }
    }
    match &response.error {
        None if status.is_success() => Ok(ExitCode::SUCCESS),
        None => Err(admin.unexpected("/sql", status, &body)),
        Some(error) => {
            eprintln!("{}", render_error(&input, error));
            Ok(ExitCode::FAILURE)
        }
    }
}

/// What `evolve sql` says when it is given no statements.
const SQL_USAGE: &str =
    "error: no statements to run; give them with -c SQL, in a file with -f FILE, or on stdin
Usage: evolve sql -c \"SHOW SOURCES\"
       evolve sql -f setup.sql        (-f - reads stdin)
       evolve sql < setup.sql";

/// `input` with ` WITH (WAIT = '...')` added to each `APPLY REPLACEMENT`
/// that has no `WAIT`, where the statement ends. Input that does not parse
/// is sent as it is, for the pipeline to point at the error.
fn with_wait(input: &str, wait: Duration) -> String {
    let Ok(statements) = evolve_core::control::parse(input) else {
        return input.to_string();
    };
    let mut text = input.to_string();
    for statement in statements.iter().rev() {
        if let evolve_core::control::Statement::ApplyReplacement(apply) = statement
            && apply.wait.is_none()
        {
            text.insert_str(apply.span.end, &evolve_core::control::wait_option(wait));
        }
    }
    text
}

/// psql's rendering: `ERROR:  message`, the `LINE n:` excerpt with a caret
/// when there is a position, `DETAIL:` and `HINT:`.
/// The excerpt is shown for syntax errors, and for errors of a statement
/// that is not the first (so that the failing one is clear).
fn render_error(input: &str, e: &SqlError) -> String {
    match e.position {
        Some(position) if e.code == "42601" || position.offset > 0 => {
            let mut error = ControlError::new(input, position.offset, e.message.clone());
            if let Some(detail) = &e.detail {
                error = error.with_detail(detail.clone());
            }
            if let Some(hint) = &e.hint {
                error = error.with_hint(hint.clone());
            }
            error.to_string()
        }
        _ => {
            let mut text = format!("ERROR:  {}", e.message);
            if let Some(detail) = &e.detail {
                text.push_str(&format!("\nDETAIL:  {detail}"));
            }
            if let Some(hint) = &e.hint {
                text.push_str(&format!("\nHINT:  {hint}"));
            }
            text
        }
    }
}

fn cell(value: &serde_json::Value) -> (String, bool) {
    match value {
        serde_json::Value::Null => (String::new(), false),
        serde_json::Value::String(s) => (s.clone(), false),
        serde_json::Value::Number(n) => (n.to_string(), true),
        other => (other.to_string(), false),
    }
}

/// psql's aligned format: centered headers, numbers right-aligned, a row
/// count.
fn psql_table(columns: &[String], rows: &[serde_json::Map<String, serde_json::Value>]) -> String {
    let cells: Vec<Vec<(String, bool)>> = rows
        .iter()
        .map(|row| {
            columns
                .iter()
                .map(|c| cell(row.get(c).unwrap_or(&serde_json::Value::Null)))
                .collect()
        })
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            cells
                .iter()
                .map(|r| r[i].0.chars().count())
                .chain([c.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let header: Vec<String> = columns
        .iter()
        .zip(&widths)
        .map(|(c, w)| {
            let pad = w - c.chars().count();
            format!("{}{c}{}", " ".repeat(pad / 2), " ".repeat(pad - pad / 2))
        })
        .collect();
    out.push(' ');
    out.push_str(header.join(" | ").trim_end());
    out.push('\n');
    out.push_str(
        &widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("+"),
    );
    out.push('\n');
    for row in &cells {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|((text, number), w)| {
                if *number {
                    format!("{text:>w$}")
                } else {
                    format!("{text:<w$}")
                }
            })
            .collect();
        out.push(' ');
        out.push_str(line.join(" | ").trim_end());
        out.push('\n');
    }
    out.push_str(&format!(
        "({} row{})\n",
        rows.len(),
        if rows.len() == 1 { "" } else { "s" }
    ));
    out
}

// --------------------------------------------------------------- status

/// `evolve status`: every object of the running pipeline.
pub async fn status(args: StatusArgs, out: &Out) -> anyhow::Result<()> {
    let admin = args.admin.resolve()?;
    if let Some(name) = &args.wait_hydrated {
        return wait_hydrated(&admin, name, args.timeout, out).await;
    }
    let (status, body) = admin.request(Method::GET, "/status", None).await?;
    if !status.is_success() {
        return Err(admin.unexpected("/status", status, &body));
    }
    let report: StatusReport =
        serde_json::from_slice(&body).map_err(|_| admin.unexpected("/status", status, &body))?;
    match out.format() {
        Format::Json => out.json_value(&serde_json::to_value(&report)?),
        _ => out.text(&status_text(&report)),
    }
}

/// The `ts` of a subscription line (`{"type":...,"ts":"0/16B3748",...}`).
fn line_ts(line: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(line).ok()?;
    let start = text.find("\"ts\":\"")? + 6;
    let len = text[start..].find('"')?;
    Some(text[start..start + len].to_string())
}

/// The stalled table replacement `o` reads, if it reads one: a
/// replacement hydrates from its table, so it never will.
fn stalled_table_of<'a>(report: &'a StatusReport, o: &ObjectReport) -> Option<&'a ObjectReport> {
    let table = o.table.as_deref().filter(|_| o.replacement_for.is_some())?;
    report
        .objects
        .iter()
        .find(|t| t.kind == "table" && t.name == table && t.state == "stalled")
}

/// `evolve status --wait-hydrated NAME`: polls `/status` until the table
/// or replacement `name` is hydrated (Ok), it is stalled, or `timeout`
/// passes (errors, exit 1).
async fn wait_hydrated(
    admin: &AdminUrl,
    name: &str,
    timeout: Duration,
    out: &Out,
) -> anyhow::Result<()> {
    let start = std::time::Instant::now();
    loop {
        let (status, body) = admin.request(Method::GET, "/status", None).await?;
        if !status.is_success() {
            return Err(admin.unexpected("/status", status, &body));
        }
        let report: StatusReport = serde_json::from_slice(&body)
            .map_err(|_| admin.unexpected("/status", status, &body))?;
        let objects: Vec<&ObjectReport> = report
            .objects
            .iter()
            .filter(|o| o.name == name && (o.kind == "table" || o.replacement_for.is_some()))
            .collect();
        if objects.is_empty() {
            bail!(
                "the pipeline has no table or replacement \"{name}\"; `evolve status` lists its objects"
            );
        }
        let noun = |o: &ObjectReport| {
            let noun = if o.kind == "table" {
                "table"
            } else {
                "replacement"
            };
            format!("{noun} \"{name}\"")
        };
        let state = |o: &ObjectReport| {
            format!(
                "{} ({} rows copied)",
                o.state,
                o.rows_copied.unwrap_or_default()
            )
        };
        if let Some(stalled) = objects.iter().find(|o| o.state == "stalled") {
            bail!(
                "{} is stalled: {}; create a new table version that matches upstream",
                noun(stalled),
                stalled.error.as_deref().unwrap_or_default()
            );
        }
        if let Some((o, table)) = objects
            .iter()
            .find_map(|o| stalled_table_of(&report, o).map(|t| (o, t)))
        {
            bail!(
                "{} reads table \"{}\", which is stalled: {}; drop the replacement and the table, then create a new table version that matches upstream",
                noun(o),
                table.name,
                table.error.as_deref().unwrap_or_default()
            );
        }
        let hydrated = |o: &&ObjectReport| match o.replacement_for {
            Some(_) => o.hydrated == Some(true),
            None => o.state == "running",
        };
        let Some(pending) = objects.iter().find(|o| !hydrated(o)) else {
            return match out.format() {
                Format::Json => out.json_value(&serde_json::json!({ "objects": objects })),
                _ => out.text(
                    &objects
                        .iter()
                        .map(|o| format!("{} is {}", noun(o), state(o)))
                        .collect::<Vec<_>>()
                        .join("\n"),
                ),
            };
        };
        let waited = start.elapsed();
        if waited >= timeout {
            bail!(
                "{} is not hydrated after waiting {}: it is {}; wait longer with --timeout, or see `evolve status`",
                noun(pending),
                evolve_core::control::format_duration(timeout),
                state(pending)
            );
        }
        tokio::time::sleep((timeout - waited).min(Duration::from_millis(200))).await;
    }
}

fn status_text(report: &StatusReport) -> String {
    if report.objects.is_empty() {
        return "the pipeline has no objects yet; create them with evolve sql".into();
    }
    let columns: Vec<String> = [
        "kind",
        "name",
        "state",
        "documents",
        "lag bytes",
        "lag",
        "rows/s",
        "note",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let rows: Vec<serde_json::Map<String, serde_json::Value>> = report
        .objects
        .iter()
        .map(|o| {
            let mut row = serde_json::Map::new();
            row.insert("kind".into(), o.kind.clone().into());
            row.insert("name".into(), o.name.clone().into());
            row.insert("state".into(), o.state.clone().into());
            row.insert("documents".into(), o.documents.into());
            row.insert("lag bytes".into(), o.lag_bytes.into());
            row.insert(
                "lag".into(),
                o.lag_seconds.map(|l| format!("{l:.1} s")).into(),
            );
            row.insert(
                "rows/s".into(),
                o.rows_per_second.map(|r| r.round() as u64).into(),
            );
            row.insert("note".into(), note(o).into());
            row
        })
        .collect();
    let mut text = psql_table(&columns, &rows);
    text.truncate(text.trim_end().len());
    for o in &report.objects {
        if let Some(warning) = &o.warning {
            text.push_str(&format!("\nwarning: {} {}: {warning}", o.kind, o.name));
        }
    }
    // The note shows an error's first line; its detail, hint and way out
    // follow the table in full.
    for o in &report.objects {
        if let Some(error) = o.error.as_deref().filter(|e| e.lines().nth(1).is_some()) {
            text.push_str(&format!("\n{} {}:", o.kind, o.name));
            for line in error.lines() {
                text.push_str("\n  ");
                text.push_str(line);
            }
        }
    }
    text
}

/// What an object reads or writes, and its error.
fn note(o: &ObjectReport) -> String {
    let mut parts = Vec::new();
    if let Some(error) = &o.error {
        parts.push(error.lines().next().unwrap_or_default().to_string());
    }
    if o.state == "snapshotting"
        && let Some(copied) = o.rows_copied
    {
        parts.push(format!("{copied} rows copied"));
    }
    match o.kind.as_str() {
        "source" => {
            let slot = o.slot.as_deref().unwrap_or_default();
            parts.push(match o.retained_wal_bytes {
                // Someone has to act: how much WAL waits on them.
                Some(bytes) if o.state == "stalled" || o.state == "retrying" => {
                    format!("slot {slot} retains {} MiB of WAL", bytes >> 20)
                }
                _ => format!("slot {slot}"),
            })
        }
        "table" => {
            parts.push(format!(
                "{} of {}",
                o.reference.as_deref().unwrap_or_default(),
                o.source.as_deref().unwrap_or_default()
            ));
            // A SUBJECT table: its topic's records of other types.
            if let Some(n) = o.skipped_records.filter(|n| *n > 0) {
                parts.push(format!(
                    "{n} record{} of other types skipped",
                    if n == 1 { "" } else { "s" }
                ));
            }
        }
        "materialized view" => {
            parts.push(format!("over {}", o.table.as_deref().unwrap_or_default()))
        }
        "sink" => parts.push(format!(
            "{} into {}",
            o.from.as_deref().unwrap_or_default(),
            o.target.as_deref().unwrap_or_default()
        )),
        "replica" => {
            parts.push(format!(
                "{} into {} at {}",
                o.source.as_deref().unwrap_or_default(),
                o.connection.as_deref().unwrap_or_default(),
                o.applied_lsn.as_deref().unwrap_or("-")
            ));
            let conflicts: Vec<String> = o
                .conflicts
                .iter()
                .flatten()
                .flat_map(|(c, by)| by.iter().map(move |(r, n)| format!("{c} {r} {n}")))
                .collect();
            parts.push(if conflicts.is_empty() {
                "no conflicts".to_string()
            } else {
                format!("conflicts: {}", conflicts.join(", "))
            });
            if let Some(n) = o.large_transaction_parts.filter(|n| *n > 0) {
                parts.push(format!("{n} parts of large transactions"));
            }
        }
        _ => {}
    }
    parts.join("; ")
}

// ---------------------------------------------------------------- drift

/// `evolve drift`: the tables that differ from upstream. Drift is not an
/// error: the exit code is 0 whether or not there is any.
pub async fn drift(args: DriftArgs, out: &Out) -> anyhow::Result<()> {
    let admin = args.admin.resolve()?;
    let path = match &args.source {
        Some(source) => format!("/drift?source={}", query_value(source)),
        None => "/drift".to_string(),
    };
    let (status, body) = admin.request(Method::GET, &path, None).await?;
    if status == StatusCode::NOT_FOUND {
        bail!(
            "the admin API at {} has no /drift; is the pipeline running an older evolve?",
            admin.url
        );
    }
    if !status.is_success() {
        return Err(match serde_json::from_slice::<SqlResponse>(&body) {
            Ok(SqlResponse {
                error: Some(error), ..
            }) => {
                let mut message = error.message;
                for line in [error.detail, error.hint].into_iter().flatten() {
                    message.push_str("\n  ");
                    message.push_str(&line);
                }
                anyhow::anyhow!(message)
            }
            _ => admin.unexpected(&path, status, &body),
        });
    }
    let report: DriftReport =
        serde_json::from_slice(&body).map_err(|_| admin.unexpected(&path, status, &body))?;
    match out.format() {
        Format::Json => out.json_value(&serde_json::to_value(&report)?),
        _ => {
            let mut text = drift_text(&report.tables);
            for r in &report.readers {
                text.push_str(&format!(
                    "\n{}: {} reads {} of {} (field {}{})",
                    r.table,
                    r.consumer,
                    r.column,
                    r.interface,
                    r.field,
                    r.cast
                        .as_deref()
                        .map(|c| format!(" as {c}"))
                        .unwrap_or_default()
                ));
            }
            out.text(&text)
        }
    }
}

/// An admin API error answer as one message (primary line, then detail
/// and hint indented).
pub(crate) fn admin_error(
    admin: &AdminUrl,
    path: &str,
    status: StatusCode,
    body: &[u8],
) -> anyhow::Error {
    match serde_json::from_slice::<SqlResponse>(body) {
        Ok(SqlResponse {
            error: Some(error), ..
        }) => {
            let mut message = error.message;
            for line in [error.detail, error.hint].into_iter().flatten() {
                message.push_str("\n  ");
                message.push_str(&line);
            }
            anyhow::anyhow!(message)
        }
        _ => admin.unexpected(path, status, body),
    }
}

/// A query-string value, percent-encoded.
pub(crate) fn query_value(value: &str) -> String {
    value
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A text array as psql prints one: `{a,b}`, `{}`, elements quoted when
/// they are empty, `NULL`, or hold spaces or `{},"\\`.
fn pg_array<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    let items: Vec<String> = items
        .into_iter()
        .map(|item| {
            let item = item.as_ref();
            let plain = !item.is_empty()
                && !item.eq_ignore_ascii_case("null")
                && !item
                    .chars()
                    .any(|c| c.is_whitespace() || matches!(c, '{' | '}' | ',' | '"' | '\\'));
            if plain {
                item.to_string()
            } else {
                format!("\"{}\"", item.replace('\\', "\\\\").replace('"', "\\\""))
            }
        })
        .collect();
    format!("{{{}}}", items.join(","))
}

/// The drift rows as the product spec shows them: a header of left-aligned
/// column names, one line per table, arrays in psql's notation; then one
/// line per error or detail.
fn drift_text(rows: &[DriftRow]) -> String {
    if rows.is_empty() {
        return "no drift: every table matches its upstream table".into();
    }
    let header = [
        "table",
        "upstream",
        "signal",
        "status",
        "added_upstream",
        "dropped_upstream",
        "type_changed",
    ]
    .map(String::from);
    let cells: Vec<[String; 7]> = rows
        .iter()
        .map(|r| {
            [
                r.table.clone(),
                r.upstream.clone(),
                r.signal.to_string(),
                r.status.clone(),
                pg_array(&r.added_upstream),
                pg_array(&r.dropped_upstream),
                pg_array(r.type_changed.iter().map(|c| c.to_string())),
            ]
        })
        .collect();
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |row: &[String; 7]| {
        let padded: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        format!(" {}", padded.join(" | ")).trim_end().to_string()
    };
    let mut lines = vec![line(&header)];
    lines.extend(cells.iter().map(line));
    for r in rows {
        for note in [&r.error, &r.detail].into_iter().flatten() {
            lines.push(format!("{}: {}", r.table, note.replace('\n', " ")));
        }
    }
    lines.join("\n")
}

// ------------------------------------------------------------ subscribe

#[derive(Debug, Args)]
pub struct SubscribeArgs {
    /// The materialized view to follow.
    pub name: String,
    /// Send every document first (as +1 changes at one position), then the
    /// changes.
    #[arg(long)]
    pub snapshot: bool,
    /// Start at this position, a `ts` the stream reported (e.g.
    /// 0/16B3748), instead of now: the changes after it, or with
    /// --snapshot the documents as they were then and the changes after.
    #[arg(long, value_name = "POSITION")]
    pub as_of: Option<String>,
    /// The fields this subscriber reads (a,b or addr.city), kept by the
    /// pipeline as its contract: `evolve contracts` lists them, and
    /// `migrate apply --pipeline` refuses a file that would take one away.
    #[arg(long, value_name = "FIELDS")]
    pub fields: Option<String>,
    /// The subscriber's name in its contract [default: subscriber].
    #[arg(long = "as", value_name = "CONSUMER", requires = "fields")]
    pub consumer: Option<String>,
    #[command(flatten)]
    pub admin: AdminArg,
}

impl AdminUrl {
    /// Sends a request without a body; the response, its body unread.
    async fn open(&self, path: &str) -> anyhow::Result<hyper::Response<hyper::body::Incoming>> {
        let connect = tokio::net::TcpStream::connect((self.host.as_str(), self.port));
        let stream = match tokio::time::timeout(Duration::from_secs(10), connect).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(self.unreachable(e)),
            Err(_) => return Err(self.unreachable("no answer in 10 s")),
        };
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| self.unreachable(e))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut request = Request::builder()
            .method(Method::GET)
            .uri(format!("{}{path}", self.prefix))
            .header(header::HOST, &self.authority);
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request.body(Full::new(Bytes::new()))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| self.unreachable(e))?;
        if matches!(
            response.status(),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
        ) {
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| anyhow::anyhow!("reading the answer of {}: {e}", self.url))?
                .to_bytes();
            self.refused(status, &body)?;
            bail!(
                "the admin API at {} refused the request (HTTP {status})",
                self.url
            );
        }
        Ok(response)
    }
}

/// `evolve subscribe`: the materialized view's lines on stdout as they
/// arrive, each flushed (the format is `evolve_pipeline::subscribe`'s).
/// Exit 0 on SIGINT or SIGTERM, or when the pipeline ends the stream; 1
/// when the admin API refuses or the stream ends with an error line (the
/// error also on stderr, psql's way).
pub async fn subscribe(args: SubscribeArgs, out: &Out) -> anyhow::Result<ExitCode> {
    if matches!(out.format(), Format::Dot | Format::Mermaid) {
        bail!("--format dot and --format mermaid are for evolve deps; subscribe writes JSON lines");
    }
    let admin = args.admin.resolve()?;
    let mut path = format!("/subscribe/{}", query_value(&args.name));
    let mut params = Vec::new();
    if args.snapshot {
        params.push("snapshot=true".to_string());
    }
    if let Some(position) = &args.as_of {
        params.push(format!("as_of={}", query_value(position)));
    }
    if let Some(fields) = &args.fields {
        params.push(format!("fields={}", query_value(fields)));
    }
    if let Some(consumer) = &args.consumer {
        params.push(format!("consumer={}", query_value(consumer)));
    }
    if !params.is_empty() {
        path.push('?');
        path.push_str(&params.join("&"));
    }
    let shutdown = crate::output::shutdown_signal();
    tokio::pin!(shutdown);
    let response = tokio::select! {
        _ = &mut shutdown => return Ok(ExitCode::SUCCESS),
        response = admin.open(&path) => response?,
    };
    let status = response.status();
    if !status.is_success() {
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!("reading the answer of {}: {e}", admin.url))?
            .to_bytes();
        return match serde_json::from_slice::<SqlResponse>(&body) {
            Ok(SqlResponse {
                error: Some(error), ..
            }) => {
                eprintln!("{}", render_error("", &error));
                Ok(ExitCode::FAILURE)
            }
            _ => Err(admin.unexpected(&path, status, &body)),
        };
    }
    let mut body = response.into_body();
    let mut pending: Vec<u8> = Vec::new();
    // The last position sent, to resume from when the stream ends.
    let mut last_ts: Option<String> = None;
    loop {
        let frame = tokio::select! {
            _ = &mut shutdown => return Ok(ExitCode::SUCCESS),
            frame = body.frame() => frame,
        };
        let data = match frame {
            None => {
                // The pipeline ended the stream (it stopped): said, and not
                // a success, so that whatever runs the subscriber knows
                // the changes stopped and where to take them up again.
                if !pending.is_empty() {
                    let mut stdout = std::io::stdout().lock();
                    stdout.write_all(&pending)?;
                    stdout.flush()?;
                }
                let resume = match &last_ts {
                    Some(ts) => format!(
                        "run evolve subscribe again with --as-of {ts} to go on where it stopped"
                    ),
                    None => "run evolve subscribe again once it runs".to_string(),
                };
                eprintln!(
                    "ERROR:  the pipeline at {} ended the stream of \"{}\" (it stopped); {resume}",
                    admin.url, args.name
                );
                return Ok(ExitCode::FAILURE);
            }
            Some(Err(e)) => bail!("the stream from {} broke off: {e}", admin.url),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue,
            },
        };
        pending.extend_from_slice(&data);
        let Some(end) = pending.iter().rposition(|b| *b == b'\n') else {
            continue;
        };
        let lines: Vec<u8> = pending.drain(..=end).collect();
        if let Some(ts) = lines
            .split(|b| *b == b'\n')
            .rev()
            .filter(|line| line.starts_with(br#"{"type":"progress""#))
            .find_map(line_ts)
        {
            last_ts = Some(ts);
        }
        {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&lines)?;
            stdout.flush()?;
        }
        // An error line is the last one.
        if let Some(error) = lines
            .split(|b| *b == b'\n')
            .filter(|line| line.starts_with(b"{\"type\":\"error\""))
            .find_map(|line| serde_json::from_slice::<SqlError>(line).ok())
        {
            eprintln!("{}", render_error("", &error));
            return Ok(ExitCode::FAILURE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_lines_give_their_position() {
        assert_eq!(
            line_ts(br#"{"type":"progress","ts":"0/16B3748"}"#).as_deref(),
            Some("0/16B3748")
        );
        assert_eq!(
            line_ts(br#"{"type":"change","ts":"1/A","diff":1,"data":{"ts":"x"}}"#).as_deref(),
            Some("1/A")
        );
        assert_eq!(line_ts(b"not json"), None);
        assert_eq!(line_ts(b""), None);
    }

    /// `--wait-hydrated` of a replacement whose table is stalled stops at
    /// once instead of waiting out its timeout.
    #[test]
    fn a_replacement_of_a_stalled_table_is_said_at_once() {
        let object = |kind: &str, name: &str, state: &str| ObjectReport {
            kind: kind.into(),
            name: name.into(),
            state: state.into(),
            ..ObjectReport::default()
        };
        let mut replacement = object("materialized view", "s_json_v2", "hydrating");
        replacement.table = Some("s_v2".into());
        replacement.replacement_for = Some("s_json".into());
        let mut report = StatusReport {
            objects: vec![
                object("table", "s_v1", "running"),
                object("table", "s_v2", "stalled"),
                replacement.clone(),
            ],
        };
        assert_eq!(
            stalled_table_of(&report, &replacement).map(|t| t.name.as_str()),
            Some("s_v2")
        );
        report.objects[1].state = "snapshotting".into();
        assert!(stalled_table_of(&report, &replacement).is_none());
        // A view that is not a replacement is not waited on this way.
        let mut view = object("materialized view", "s_json", "running");
        view.table = Some("s_v1".into());
        report.objects[0].state = "stalled".into();
        assert!(stalled_table_of(&report, &view).is_none());
    }

    #[test]
    fn sql_wait_goes_to_each_apply_without_one() {
        let wait = Duration::from_secs(60);
        assert_eq!(
            with_wait(
                "ALTER MATERIALIZED VIEW v APPLY REPLACEMENT r; -- now\n\
                 SHOW TABLES;\n\
                 ALTER MATERIALIZED VIEW w APPLY REPLACEMENT s WITH (WAIT = '1s');\n\
                 alter materialized view x apply replacement \"T\"",
                wait
            ),
            "ALTER MATERIALIZED VIEW v APPLY REPLACEMENT r WITH (WAIT = '60s'); -- now\n\
             SHOW TABLES;\n\
             ALTER MATERIALIZED VIEW w APPLY REPLACEMENT s WITH (WAIT = '1s');\n\
             alter materialized view x apply replacement \"T\" WITH (WAIT = '60s')"
        );
        // Text that does not parse goes as it is, for the pipeline's error.
        let broken = "ALTER MATERIALIZED VIEW v APPLY REPLACEMENT r; CREAT SINK";
        assert_eq!(with_wait(broken, wait), broken);
    }

    #[test]
    fn admin_urls_parse() {
        let a = AdminUrl::parse("http://127.0.0.1:7800", "--admin").unwrap();
        assert_eq!(
            (a.host.as_str(), a.port, a.prefix.as_str()),
            ("127.0.0.1", 7800, "")
        );
        let a = AdminUrl::parse("http://[::1]:9/admin/", "--admin").unwrap();
        assert_eq!(
            (a.host.as_str(), a.port, a.prefix.as_str()),
            ("::1", 9, "/admin")
        );
        assert_eq!(a.authority, "[::1]:9");
        assert_eq!(
            AdminUrl::parse("http://localhost", "--admin").unwrap().port,
            80
        );
        assert!(AdminUrl::parse("https://x:1", "--admin").is_err());
        assert!(AdminUrl::parse("127.0.0.1:7800", "--admin").is_err());
        let e = AdminUrl::parse("http://u:hunter2pw@h:1", "--pipeline").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--pipeline http://***@h:1: an admin URL takes no user name or password (the token comes from EVOLVE_ADMIN_TOKEN or the config's admin_token); use http://HOST:PORT"
        );
        assert_eq!(
            without_credentials("http://a:b@c@h:1/x@y"),
            "http://***@h:1/x@y"
        );
        assert!(AdminUrl::parse("http://h:port", "--admin").is_err());
    }

    #[test]
    fn tables_look_like_psql() {
        let columns = vec!["name".to_string(), "columns".to_string()];
        let rows = vec![
            serde_json::json!({"name": "orders_v1", "columns": 3}),
            serde_json::json!({"name": "x", "columns": 12}),
        ]
        .into_iter()
        .map(|v| v.as_object().unwrap().clone())
        .collect::<Vec<_>>();
        assert_eq!(
            psql_table(&columns, &rows),
            "   name    | columns\n-----------+---------\n orders_v1 |       3\n x         |      12\n(2 rows)\n"
        );
    }

    /// A stalled source's note shows the error's first line and the WAL
    /// its slot keeps; the whole error (detail, hint, way out) follows
    /// the table; rates are a column.
    #[test]
    fn status_text_shows_the_whole_error_and_the_rates() {
        use evolve_pipeline::admin::ObjectReport;
        let report = StatusReport {
            objects: vec![
                ObjectReport {
                    kind: "source".into(),
                    name: "src".into(),
                    state: "stalled".into(),
                    error: Some(
                        "ERROR: could not connect to connection \"pg_conn\"\nDETAIL: password authentication failed\nnot retried".into(),
                    ),
                    slot: Some("evolve_src".into()),
                    retained_wal_bytes: Some(3 << 20),
                    ..ObjectReport::default()
                },
                ObjectReport {
                    kind: "table".into(),
                    name: "t_v1".into(),
                    state: "snapshotting".into(),
                    rows_per_second: Some(51234.0),
                    rows_copied: Some(7),
                    reference: Some("public.t".into()),
                    source: Some("src".into()),
                    ..ObjectReport::default()
                },
                ObjectReport {
                    kind: "table".into(),
                    name: "orders_v1".into(),
                    state: "running".into(),
                    reference: Some("topic".into()),
                    source: Some("ev".into()),
                    skipped_records: Some(3),
                    ..ObjectReport::default()
                },
            ],
        };
        let text = status_text(&report);
        assert!(
            text.contains("topic of ev; 3 records of other types skipped"),
            "{text}"
        );
        assert!(
            text.contains("ERROR: could not connect to connection \"pg_conn\"; slot evolve_src retains 3 MiB of WAL"),
            "{text}"
        );
        assert!(text.contains("|  51234 |"), "{text}");
        assert!(
            text.ends_with(
                "source src:\n  ERROR: could not connect to connection \"pg_conn\"\n  DETAIL: password authentication failed\n  not retried"
            ),
            "{text}"
        );
    }

    #[test]
    fn errors_render_like_psql() {
        let input = "SHOW SOURCES;\nCREAT SOURCE s";
        let e = SqlError {
            code: "42601".into(),
            message: "syntax error at or near \"CREAT\"".into(),
            detail: None,
            hint: Some("Did you mean CREATE?".into()),
            position: Some(evolve_pipeline::admin::ErrorPosition {
                offset: 14,
                line: 2,
                column: 1,
            }),
            statement: None,
        };
        assert_eq!(
            render_error(input, &e),
            "ERROR:  syntax error at or near \"CREAT\"\nLINE 2: CREAT SOURCE s\n        ^\nHINT:  Did you mean CREATE?"
        );
        let e = SqlError {
            code: "42704".into(),
            position: Some(evolve_pipeline::admin::ErrorPosition {
                offset: 0,
                line: 1,
                column: 1,
            }),
            detail: Some("d.".into()),
            hint: None,
            ..e
        };
        assert_eq!(
            render_error(input, &e),
            "ERROR:  syntax error at or near \"CREAT\"\nDETAIL:  d."
        );
    }

    fn drift_row(table: &str) -> DriftRow {
        DriftRow {
            table: table.into(),
            source: "src".into(),
            upstream: "public.orders".into(),
            signal: evolve_pipeline::drift::Signal::ColumnDrift,
            status: "running".into(),
            added_upstream: vec!["region".into()],
            dropped_upstream: Vec::new(),
            type_changed: Vec::new(),
            error: None,
            detail: None,
            renamed_to: None,
            recreated_oid: None,
        }
    }

    #[test]
    fn drift_looks_like_the_spec() {
        assert_eq!(
            drift_text(&[drift_row("orders_v1")]),
            " table     | upstream      | signal       | status  | added_upstream | dropped_upstream | type_changed\n \
             orders_v1 | public.orders | column_drift | running | {region}       | {}               | {}"
        );
        let mut row = drift_row("o");
        row.signal = evolve_pipeline::drift::Signal::Stalled;
        row.status = "stalled".into();
        row.added_upstream = vec!["a".into(), "b c".into()];
        row.type_changed = vec![evolve_pipeline::drift::TypeChange {
            column: "priority".into(),
            from: "integer".into(),
            to: "bigint".into(),
        }];
        row.error = Some("column \"priority\" changed type".into());
        row.detail = Some("column \"x\" was dropped and re-added (attnum 3 → 7)".into());
        assert_eq!(
            drift_text(&[row]),
            " table | upstream      | signal  | status  | added_upstream | dropped_upstream | type_changed\n \
             o     | public.orders | stalled | stalled | {a,\"b c\"}      | {}               | {\"priority integer → bigint\"}\n\
             o: column \"priority\" changed type\n\
             o: column \"x\" was dropped and re-added (attnum 3 → 7)"
        );
        assert_eq!(
            drift_text(&[]),
            "no drift: every table matches its upstream table"
        );
    }

    #[test]
    fn arrays_and_query_values_are_escaped() {
        assert_eq!(pg_array(Vec::<String>::new()), "{}");
        assert_eq!(
            pg_array(["a", "", "NULL", "x,y", "q\"\\"]),
            r#"{a,"","NULL","x,y","q\"\\"}"#
        );
        assert_eq!(query_value("src 1&x=é"), "src%201%26x%3D%C3%A9");
    }
}
