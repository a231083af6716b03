//! `evolve contracts`: what each interface's consumers read, from the
//! pipeline's admin API (`GET /contracts`), with the sink database walked
//! by the pipeline through its own connections, or by this command when
//! `--sink-url` names the database.

use clap::Args;
use evolve_pipeline::contracts::{Consumer, Contracts};
use hyper::{Method, StatusCode};

use crate::cli::Format;
use crate::output::Out;
use crate::pipeline::AdminArg;

#[derive(Debug, Args)]
pub struct ContractsArgs {
    /// Only this interface (materialized view).
    pub interface: Option<String>,
    /// Walk this sink database for the consumers instead of letting the
    /// pipeline walk its sinks' databases (a postgres:// URL; the
    /// password from ~/.pgpass or PGPASSWORD when not in it).
    #[arg(
        long,
        value_name = "URL",
        env = "EVOLVE_SINK_URL",
        hide_env_values = true
    )]
    pub sink_url: Option<String>,
    /// Forget the fields subscriber CONSUMER declared (of INTERFACE, or of
    /// every interface).
    #[arg(long, value_name = "CONSUMER")]
    pub forget: Option<String>,
    #[command(flatten)]
    pub admin: AdminArg,
}

pub async fn run(args: ContractsArgs, out: &Out) -> anyhow::Result<()> {
    let admin = args.admin.resolve()?;
    if let Some(consumer) = &args.forget {
        let mut path = format!("/contracts/{}", crate::pipeline::query_value(consumer));
        if let Some(i) = &args.interface {
            path.push_str(&format!("?interface={}", crate::pipeline::query_value(i)));
        }
        let (status, body) = admin.request_json(Method::DELETE, &path, None).await?;
        if !status.is_success() {
            return Err(crate::pipeline::admin_error(&admin, &path, status, &body));
        }
        let answer: serde_json::Value =
            serde_json::from_slice(&body).map_err(|_| admin.unexpected(&path, status, &body))?;
        let n = answer["forgotten"].as_u64().unwrap_or(0);
        if n == 0 {
            // A typo would otherwise look like success.
            anyhow::bail!(
                "subscriber {consumer} has declared no fields{}; `evolve contracts` lists the subscribers that have",
                args.interface
                    .as_deref()
                    .map(|i| format!(" of {i}"))
                    .unwrap_or_default()
            );
        }
        return out.text(&format!(
            "forgot {n} declaration{} of {consumer}",
            if n == 1 { "" } else { "s" }
        ));
    }
    let mut params = Vec::new();
    if let Some(i) = &args.interface {
        params.push(format!("interface={}", crate::pipeline::query_value(i)));
    }
    if args.sink_url.is_some() {
        params.push("walk=false".to_string());
    }
    let path = if params.is_empty() {
        "/contracts".to_string()
    } else {
        format!("/contracts?{}", params.join("&"))
    };
    let (status, body) = admin.request_json(Method::GET, &path, None).await?;
    if status == StatusCode::NOT_FOUND && args.interface.is_none() {
        anyhow::bail!(
            "the admin API at {} has no /contracts; is the pipeline running an older evolve?",
            admin.url
        );
    }
    if !status.is_success() {
        return Err(crate::pipeline::admin_error(&admin, &path, status, &body));
    }
    let mut contracts: Contracts =
        serde_json::from_slice(&body).map_err(|_| admin.unexpected(&path, status, &body))?;
    if let Some(url) = &args.sink_url {
        let client = evolve_pg::connect(url, "evolve contracts")
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot connect to the sink database: {}",
                    e.given_by("--sink-url")
                )
            })?;
        for interface in &mut contracts.interfaces {
            let mut found = Vec::new();
            for sink in interface.sinks.iter().filter(|s| s.kind == "postgres") {
                let via = format!("sink {} ({}.{})", sink.name, sink.schema, sink.table);
                let mut consumers = evolve_pipeline::contracts::consumers_in(
                    &client,
                    &sink.schema,
                    &sink.table,
                    &via,
                )
                .await
                .map_err(|e| {
                    anyhow::anyhow!("cannot read the consumers of sink {}: {e}", sink.name)
                })?;
                found.append(&mut consumers);
            }
            found.append(&mut interface.consumers);
            interface.consumers = found;
        }
    }
    match out.format() {
        Format::Json => out.json_value(&serde_json::to_value(&contracts)?),
        _ => out.text(&text(&contracts)),
    }
}

/// One line per field a consumer reads, psql's aligned table; then the
/// whole-document readers and the sinks that could not be read.
fn text(contracts: &Contracts) -> String {
    let mut rows: Vec<[String; 5]> = Vec::new();
    let mut notes = Vec::new();
    for i in &contracts.interfaces {
        for c in &i.consumers {
            for r in &c.reads {
                rows.push([
                    i.interface.clone(),
                    r.field.clone(),
                    r.cast.clone().unwrap_or_default(),
                    consumer_name(c),
                    c.via.clone(),
                ]);
            }
            if !c.whole_document.is_empty() {
                rows.push([
                    i.interface.clone(),
                    "(whole document)".to_string(),
                    String::new(),
                    consumer_name(c),
                    c.via.clone(),
                ]);
                for w in &c.whole_document {
                    notes.push(format!(
                        "{} reads the whole document of {}: {w}",
                        consumer_name(c),
                        i.interface
                    ));
                }
            }
        }
        for u in &i.unread {
            notes.push(format!(
                "the consumers of sink {} were not read: {}",
                u.sink, u.error
            ));
        }
    }
    let header = ["interface", "field", "cast", "consumer", "via"];
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| -> String {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join(" | ")
            .trim_end()
            .to_string()
    };
    let mut out = String::new();
    out.push_str(&line(&header.map(str::to_string)));
    out.push('\n');
    for row in &rows {
        out.push_str(&line(row));
        out.push('\n');
    }
    out.push_str(&format!(
        "({} row{})\n",
        rows.len(),
        if rows.len() == 1 { "" } else { "s" }
    ));
    for n in notes {
        out.push_str(&n);
        out.push('\n');
    }
    out.trim_end().to_string()
}

fn consumer_name(c: &Consumer) -> String {
    format!("{} {}", c.kind, c.name)
}
