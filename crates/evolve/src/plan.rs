//! `evolve plan`: the locks, rewrites, scans and rebuilds of the pending
//! migrations, from the live catalog, optionally probed on a scratch copy.

use std::path::PathBuf;

use clap::Args;
use evolve_core::migration::effects::LockMode;
use evolve_migrate::{Held, LockPlan, PlannedStatement};

use crate::cli::{DatabaseArgs, DirArgs, Format};
use crate::output::Out;

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Files to plan, in the order they apply (default: the migrations of
    /// --dir that 'evolve migrate apply' would run now).
    pub files: Vec<PathBuf>,
    /// Check each prediction on a scratch database made from the target's
    /// schema only (read from the catalog without locking any real table; no
    /// rows are copied and the real tables are never altered); needs
    /// CREATEDB. The scratch database is dropped at the end.
    #[arg(long)]
    pub probe: bool,
    /// Ask the pipeline whose admin API is at URL which consumers read the
    /// columns the statements drop, rename or retype, and report the
    /// contracts they would break (`migrate apply --pipeline` refuses
    /// those files); the exit status is 1 when one would break.
    #[arg(long, value_name = "URL")]
    pub pipeline: Option<String>,
    /// The pipeline's evolve.toml, for its admin API's token (and address,
    /// when --pipeline is not given).
    #[arg(long, value_name = "FILE")]
    pub pipeline_config: Option<PathBuf>,
    /// With --pipeline: FIELD (`field` or `interface.field`) may be taken
    /// from its consumers (repeat for more).
    #[arg(long, value_name = "FIELD")]
    pub allow_breaking_contract: Vec<String>,
    #[command(flatten)]
    pub db: DatabaseArgs,
    #[command(flatten)]
    pub dir: DirArgs,
}

pub async fn run(args: PlanArgs, out: &Out) -> anyhow::Result<std::process::ExitCode> {
    let (opts, _) = crate::cli::options(&args.db, &args.dir, None, None)?;
    let mut plan = evolve_migrate::lock_plan(&opts, &args.files, args.probe).await?;
    let mut breaking = 0;
    if args.pipeline.is_some() || args.pipeline_config.is_some() {
        let admin = crate::pipeline::AdminArg {
            admin: args.pipeline.clone(),
            config: args.pipeline_config.clone(),
        }
        .resolve_as("--pipeline")?;
        let coordinator = crate::coordinate::HttpCoordinator::new(admin);
        breaking = evolve_migrate::check_contracts(
            &opts,
            &mut plan,
            &coordinator,
            &args.allow_breaking_contract,
        )
        .await?;
    }
    match out.format() {
        Format::Json => out.json_value(&serde_json::to_value(&plan)?)?,
        _ => out.text(&render(&plan))?,
    }
    // A statement that fails on the scratch copy would fail `apply` too.
    Ok(if breaking > 0 || plan.probe_failures > 0 {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    })
}

fn size(bytes: i64) -> String {
    const UNITS: [&str; 5] = ["bytes", "kB", "MB", "GB", "TB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

fn statement(out: &mut String, st: &PlannedStatement) {
    let sql = st.sql.split_whitespace().collect::<Vec<_>>().join(" ");
    let sql = if sql.chars().count() > 100 {
        format!("{}...", sql.chars().take(97).collect::<String>())
    } else {
        sql
    };
    out.push_str(&format!("{}:{}  {sql}\n", st.file, st.line));
    if !st.analysed {
        out.push_str(
            "  locks      not predicted for this kind of statement (--probe observes them)\n",
        );
    } else if st.locks.is_empty() {
        out.push_str("  locks      none on existing tables\n");
    }
    let held_text = |held: Held| match held {
        Held::Transaction => "until the file's transaction commits",
        Held::Statement => "for the statement",
    };
    // A partitioned table's partitions take one line per lock, however
    // many they are.
    let mut partitions: Vec<(&str, LockMode, Held, bool, Vec<&str>)> = Vec::new();
    for l in &st.locks {
        let Some(parent) = &l.partition_of else {
            out.push_str(&format!(
                "  lock       {} on {} ({}; blocks {})\n",
                l.mode,
                l.relation,
                held_text(l.held),
                l.mode.blocks()
            ));
            continue;
        };
        match partitions
            .iter_mut()
            .find(|p| p.0 == parent && p.1 == l.mode && p.2 == l.held && p.3 == l.if_reached)
        {
            Some(p) => p.4.push(&l.relation),
            None => partitions.push((parent, l.mode, l.held, l.if_reached, vec![&l.relation])),
        }
    }
    for (parent, mode, held, if_reached, names) in partitions {
        const SHOWN: usize = 5;
        let mut list = names
            .iter()
            .take(SHOWN)
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        if names.len() > SHOWN {
            list.push_str(&format!(" and {} more", names.len() - SHOWN));
        }
        let which = if if_reached {
            format!(
                "the partitions of {parent} its rows reach, of {}: {list}",
                names.len()
            )
        } else if names.len() == 1 {
            format!("the partition of {parent}: {list}")
        } else {
            format!("each of the {} partitions of {parent}: {list}", names.len())
        };
        out.push_str(&format!(
            "  lock       {mode} on {which} ({}; blocks {})\n",
            held_text(held),
            mode.blocks()
        ));
    }
    let what = match (st.rewrites, st.scans) {
        (true, _) => "rewrites the table",
        (false, true) => "reads every row (no rewrite)",
        (false, false) => "catalog only (no rewrite, no scan)",
    };
    let table = match (st.table_rows, st.table_bytes) {
        (Some(r), Some(b)) => format!("; table {r} rows, {}", size(b)),
        (None, Some(b)) => format!("; table {}", size(b)),
        _ => String::new(),
    };
    out.push_str(&format!(
        "  effect     {what}{table}; locked time: {}\n",
        st.locked_time
    ));
    for n in &st.notes {
        out.push_str(&format!("  why        {n}\n"));
    }
    for r in &st.rebuilds {
        out.push_str(&format!(
            "  rebuilds   {} {} (depth {})\n",
            r.kind, r.name, r.depth
        ));
    }
    for a in &st.advice {
        out.push_str(&format!("  advice     {a}\n"));
    }
    for c in &st.contracts {
        out.push_str(&format!("  contract   {c}\n"));
    }
    if let Some(p) = &st.probe {
        if let Some(e) = &p.error {
            out.push_str(&format!("  probe      failed on the scratch copy: {e}\n"));
        } else if p.disagreements.is_empty() {
            let locks = p
                .locks
                .iter()
                .map(|l| format!("{} on {}", l.mode, l.relation))
                .collect::<Vec<_>>()
                .join(", ");
            out.push_str(&format!(
                "  probe      agrees ({}{})\n",
                if locks.is_empty() {
                    "no locks".into()
                } else {
                    locks
                },
                if p.rewrites { "; new relfilenode" } else { "" }
            ));
        } else {
            for d in &p.disagreements {
                out.push_str(&format!("  probe      DISAGREES: {d}\n"));
            }
        }
    }
}

fn render(plan: &LockPlan) -> String {
    if plan.statements.is_empty() {
        return "nothing to plan: no pending migrations".into();
    }
    let mut out = String::new();
    for st in &plan.statements {
        statement(&mut out, st);
        out.push('\n');
    }
    let rewrites = plan.statements.iter().filter(|s| s.rewrites).count();
    let scans = plan
        .statements
        .iter()
        .filter(|s| s.scans && !s.rewrites)
        .count();
    out.push_str(&format!(
        "{} statements: {rewrites} rewrite, {scans} scan without rewrite",
        plan.statements.len()
    ));
    if plan.probed {
        out.push_str(&format!(
            "; probe: {} disagreement{}",
            plan.disagreements,
            if plan.disagreements == 1 { "" } else { "s" }
        ));
        if plan.probe_failures > 0 {
            out.push_str(&format!(
                ", {} statement{} failed on the scratch copy (apply would fail there too)",
                plan.probe_failures,
                if plan.probe_failures == 1 { "" } else { "s" }
            ));
        }
    }
    out
}
