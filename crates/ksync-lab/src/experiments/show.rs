//! `show`: re-reads a `--json` report, prints its records (and summary),
//! and re-writes `--csv` or `--plot` from it.

use crate::output::files::{resolve_output, Outputs};
use crate::output::report::Report;
use crate::output::summary::summary_table;
use crate::output::table::Table;
use std::path::PathBuf;

/// `show`'s options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A report written by --json (a relative path is looked up under the results folder
    /// first, then as given).
    pub file: PathBuf,
}

/// Re-reads a JSON report, prints its records, and re-writes --csv/--plot from it.
pub fn run(args: Args, outputs: &Outputs) -> Result<(), String> {
    let resolved = resolve_output(&args.file);
    let path = if resolved.exists() {
        resolved
    } else {
        args.file.clone()
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let report = Report::from_json(&text)?;
    println!(
        "{} {} `{}`, repeat {}, machine: {}",
        report.tool,
        report.version,
        report.command.join(" "),
        report.repeat,
        report.machine
    );
    let mut t = Table::new([
        "experiment",
        "workload",
        "lock",
        "threads",
        "repeat",
        "metrics",
    ]);
    for r in &report.records {
        let metrics: Vec<String> = r
            .metrics
            .iter()
            .map(|(k, v)| format!("{k}={v:.4}"))
            .collect();
        t.row(vec![
            r.experiment.clone(),
            r.workload.clone(),
            r.lock.clone(),
            r.threads.to_string(),
            r.repeat.to_string(),
            metrics.join(" "),
        ]);
    }
    print!("\n{}", t.render());
    if !report.summary.is_empty() {
        print!("\n{}", summary_table(&report.summary).render());
    }
    outputs.write(&report)
}
