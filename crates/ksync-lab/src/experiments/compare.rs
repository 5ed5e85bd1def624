//! `compare`, the default: every experiment with small parameters, every
//! ksync primitive beside its peers, and one summary table at the end.
//!
//! Each part ([`PARTS`]) prints its own tables and returns summary rows;
//! the summary has one row per workload: the best peer and its figure,
//! then each ksync primitive as a multiple of it (above 1 is better for
//! ksync, whatever the unit).

use super::{backoff, options, rwsem, sembench, spin, uncontended, ComparePart, Quick};
use crate::output::lab::Lab;
use crate::output::summary::summary_table;

/// The parts, in the order they run and their rows appear in the summary.
pub const PARTS: [&dyn ComparePart; 5] = [
    &uncontended::InCompare,
    &spin::InCompare,
    &backoff::InCompare,
    &rwsem::InCompare,
    &sembench::InCompare,
];

/// `compare`'s options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds per contended run (uncontended rounds are fixed).
    #[arg(long, default_value_t = 0.5)]
    pub seconds: f64,
}

/// Runs every part and prints the summary.
pub fn run(lab: &mut Lab, args: Args) -> Result<(), String> {
    options::seconds("--seconds", args.seconds)?;
    let cores = lab.machine().cores;
    let quick = Quick {
        seconds: args.seconds,
        threads: vec![cores, (4 * cores).max(64)],
        cores,
    };
    lab.print(&format!("machine: {}\n", lab.machine()));
    for part in PARTS {
        part.plan(lab, &quick);
    }
    let mut rows = Vec::new();
    for part in PARTS {
        rows.extend(part.run(lab, &quick)?);
    }
    lab.print(&format!(
        "\n## Summary: each ksync primitive as a multiple of the best peer (> 1: ksync is better)\n\n{}",
        summary_table(&rows).render()
    ));
    lab.add_summary(rows);
    Ok(())
}
