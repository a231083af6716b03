//! `evolve registry`: serve the Confluent-compatible schema registry,
//! import a `_schemas` export, hash a password for the users file.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use evolve_registry::access::Access;
use evolve_registry::auth::Users;
use evolve_registry::forward::{Forwarder, PeerUrl};
use evolve_registry::http::{App, DEFAULT_MAX_SCHEMA, default_max_body};
use evolve_registry::metrics::Metrics;
use evolve_registry::service::{Registry, Settings};
use evolve_registry::store::{Storage, StorageSpec};

#[derive(Debug, Args)]
pub struct RegistryArgs {
    #[command(subcommand)]
    pub verb: RegistryVerb,
}

#[derive(Debug, Args)]
pub struct StoreArgs {
    /// Where the registry keeps its log: sqlite:PATH (default, one file),
    /// postgres://user@host/db or kafka://host:port/_schemas (Confluent's
    /// topic; TLS and SASL as ?sslmode=...&sasl_mechanism=...&user=...&password=...);
    /// several instances share the last two.
    #[arg(
        long,
        default_value = "sqlite:evolve-registry.db",
        env = "EVOLVE_REGISTRY_STORAGE"
    )]
    pub storage: String,
}

#[derive(Debug, Subcommand)]
pub enum RegistryVerb {
    /// Serve Confluent Schema Registry's REST API.
    Serve {
        /// Address to listen on (loopback unless told otherwise; port 0
        /// picks a free one and prints it).
        #[arg(long, default_value = "127.0.0.1:8081")]
        listen: SocketAddr,
        #[command(flatten)]
        store: StoreArgs,
        /// Require HTTP basic auth for users in FILE (lines NAME:HASH,
        /// argon2 or bcrypt; see `evolve registry hash-password`).
        #[arg(long, value_name = "FILE")]
        users: Option<PathBuf>,
        /// Serve a --listen address that is not loopback without --users
        /// (behind a proxy or network policy that authenticates).
        #[arg(long, conflicts_with = "users")]
        no_auth: bool,
        /// Serve HTTPS with this PEM certificate chain (needs --tls-key).
        #[arg(long, value_name = "FILE", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The PEM private key of --tls-cert.
        #[arg(long, value_name = "FILE", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Largest schema text accepted (42209 beyond).
        #[arg(long, default_value_t = DEFAULT_MAX_SCHEMA)]
        max_schema_bytes: usize,
        /// Largest request body accepted (42209 beyond); by default twice
        /// --max-schema-bytes and 1 MiB.
        #[arg(long)]
        max_body_bytes: Option<usize>,
        /// Another host name clients use for this registry (besides
        /// localhost, loopback addresses and the --listen address), e.g. its
        /// DNS name behind a load balancer; repeatable.
        #[arg(long = "allowed-host", value_name = "NAME")]
        allowed_hosts: Vec<String>,
        /// error_code of an incompatible registration: 409 (Confluent up to
        /// 8.0.3, Karapace) or 40901 (Confluent 8.0.4 and later).
        #[arg(long, default_value_t = 409, value_parser = parse_incompatible_code)]
        incompatible_error_code: u32,
        /// How often to read other instances' writes from a shared store.
        #[arg(long, default_value_t = 1000)]
        poll_interval_ms: u64,
        /// With a Kafka store: the URL other instances forward writes to
        /// when this one writes (`http[s]://host:port`). By default the
        /// --listen address, or this machine's host name when it listens on
        /// all addresses.
        #[arg(long, value_name = "URL")]
        advertised_url: Option<String>,
        /// With a Kafka store: the PEM CA certificates that an https
        /// writer's certificate is checked against when writes are
        /// forwarded to it; by default the --tls-cert file.
        #[arg(long, value_name = "FILE")]
        peer_ca: Option<PathBuf>,
        /// With a Kafka store: whether this instance may become the writer
        /// (false: it always forwards writes, as Confluent's
        /// leader.eligibility=false).
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
        writer_eligible: bool,
    },
    /// Import a `_schemas` topic export (`KEY<TAB>VALUE` lines, or a JSON
    /// array of `[key, value]` pairs) with its ids, versions and deletions.
    Import {
        file: PathBuf,
        #[command(flatten)]
        store: StoreArgs,
        /// Import even though the registry already holds subjects.
        #[arg(long)]
        force: bool,
    },
    /// Read a password from stdin and print its argon2id hash, for --users.
    HashPassword,
}

fn parse_incompatible_code(s: &str) -> Result<u32, String> {
    match s {
        "409" => Ok(409),
        "40901" => Ok(40901),
        _ => Err("use 409 or 40901".into()),
    }
}

pub async fn run(args: RegistryArgs) -> anyhow::Result<()> {
    match args.verb {
        RegistryVerb::Serve {
            listen,
            store,
            users,
            no_auth,
            tls_cert,
            tls_key,
            max_schema_bytes,
            max_body_bytes,
            allowed_hosts,
            incompatible_error_code,
            poll_interval_ms,
            advertised_url,
            peer_ca,
            writer_eligible,
        } => {
            // Anyone who reaches the port could register and delete
            // schemas: off loopback, serving without users is said.
            if users.is_none() && !no_auth && !listen.ip().is_loopback() {
                anyhow::bail!(
                    "--listen {listen} is not a loopback address and no --users file is given, so anyone who reaches it could register and delete schemas; pass --users FILE (see evolve registry hash-password), or --no-auth when a proxy or network policy in front authenticates"
                );
            }
            let users = match users {
                Some(path) => {
                    let text = std::fs::read_to_string(&path)
                        .with_context(|| format!("cannot read users file {}", path.display()))?;
                    Some(
                        Users::parse(&text)
                            .map_err(|e| anyhow::anyhow!("users file {}: {e}", path.display()))?,
                    )
                }
                None => None,
            };
            let tls = match (&tls_cert, &tls_key) {
                (Some(cert), Some(key)) => {
                    Some(evolve_registry::serve::load_tls(cert, key).map_err(anyhow::Error::msg)?)
                }
                _ => None,
            };
            let settings = Settings {
                incompatible_code: incompatible_error_code,
                poll_interval: Duration::from_millis(poll_interval_ms.max(10)),
            };
            // Every flag checked and the port bound before the store is
            // opened: a refusal leaves no store file behind.
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| {
                    format!("cannot listen on {listen}; pick another --listen address")
                })?;
            let address = listener.local_addr()?;
            Access::new(address, tls.is_some(), &allowed_hosts).map_err(anyhow::Error::msg)?;
            let registry = open(&store.storage, settings).await?;
            let scheme = if tls.is_some() { "https" } else { "http" };
            let mut allowed_hosts = allowed_hosts;
            let mut advertised = String::new();
            if let Storage::Kafka(log) = registry.log() {
                let url = match advertised_url {
                    Some(url) => url,
                    None => default_advertised_url(scheme, address)?,
                };
                let url =
                    PeerUrl::parse(&url).map_err(|e| anyhow::anyhow!("--advertised-url: {e}"))?;
                // Forwarded writes arrive with the advertised host in Host.
                allowed_hosts.push(url.host().to_owned());
                let peer_tls = match (&peer_ca, &tls_cert) {
                    (Some(ca), _) => Some(
                        evolve_pg::tls::https_client_config(ca)
                            .map_err(|e| anyhow::anyhow!("--peer-ca: {e}"))?,
                    ),
                    (None, Some(cert)) => match evolve_pg::tls::https_client_config(cert) {
                        Ok(config) => Some(config),
                        Err(e) => {
                            tracing::warn!(error = %e, "the --tls-cert file cannot check other instances' certificates; writes forwarded to an https writer fail until --peer-ca names their CA");
                            None
                        }
                    },
                    (None, None) => None,
                };
                advertised = format!(", advertised as {url}");
                log.serve_as(Forwarder::new(Some(url), writer_eligible, peer_tls));
            }
            let access =
                Access::new(address, tls.is_some(), &allowed_hosts).map_err(anyhow::Error::msg)?;
            {
                let mut stdout = std::io::stdout().lock();
                writeln!(
                    stdout,
                    "evolve registry listening on {scheme}://{address} (store {}{advertised}{})",
                    registry.describe_store(),
                    if users.is_some() { ", basic auth" } else { "" }
                )?;
                stdout.flush()?;
            }
            let app = Arc::new(App {
                registry,
                users,
                metrics: Metrics::default(),
                max_body: max_body_bytes.unwrap_or(default_max_body(max_schema_bytes)),
                max_schema: max_schema_bytes,
                access,
            });
            evolve_registry::serve::serve(app, listener, tls, crate::output::shutdown_signal())
                .await?;
            Ok(())
        }
        RegistryVerb::Import { file, store, force } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read export {}", file.display()))?;
            let records = evolve_registry::record::parse_export(&text).map_err(|e| {
                anyhow::anyhow!("export {}: {e}; nothing was imported", file.display())
            })?;
            let registry = open(&store.storage, Settings::default()).await?;
            let count = registry.import(records, force).await.map_err(|e| {
                anyhow::anyhow!(
                    "import into {} refused: {}",
                    registry.describe_store(),
                    e.message
                )
            })?;
            let subjects = registry.read(|s| s.subject_names("", true, false).len());
            println!(
                "imported {count} records into {}: {subjects} subject(s)",
                registry.describe_store()
            );
            Ok(())
        }
        RegistryVerb::HashPassword => {
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line)?;
            let password = line.trim_end_matches(['\r', '\n']);
            if password.is_empty() {
                bail!(
                    "no password on stdin; e.g. `printf %s \"$PASSWORD\" | evolve registry hash-password`"
                );
            }
            println!(
                "{}",
                evolve_registry::auth::hash_password(password).map_err(anyhow::Error::msg)?
            );
            Ok(())
        }
    }
}

/// The URL other instances reach this one at when no --advertised-url is
/// given: the listen address, or the machine's host name when it listens
/// on all addresses (0.0.0.0, ::), where the address says nothing.
fn default_advertised_url(scheme: &str, address: SocketAddr) -> anyhow::Result<String> {
    let ip = address.ip();
    let host = if ip.is_unspecified() {
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty());
        match name {
            Some(name) => name,
            None => bail!(
                "listening on {address} (all addresses) and this machine's host name is unknown; give --advertised-url, the URL other registry instances reach this one at"
            ),
        }
    } else if ip.is_ipv6() {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    Ok(format!("{scheme}://{host}:{}", address.port()))
}

pub(crate) async fn open(spec: &str, settings: Settings) -> anyhow::Result<Registry<Storage>> {
    // Parsed here rather than by clap, whose error would echo the value
    // (and any password in it).
    let spec: StorageSpec = spec.parse().map_err(anyhow::Error::msg)?;
    let storage = Storage::open(&spec)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Registry::open(storage, settings)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
}
