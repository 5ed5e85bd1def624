//! The commands, one module each: an experiment parses its options, picks
//! what to measure from the registries (`peers`), runs a workload's loop
//! for each entry through a visitor (`workloads`), and prints and records
//! the results (`output`).
//!
//! `compare` runs a quick version of several experiments: each offers one
//! [`ComparePart`], and `compare` lists them. A new experiment joins
//! `compare` by implementing the trait and taking a line in that list.

use crate::output::lab::Lab;
use crate::output::record::Measured;
use crate::output::summary::SummaryRow;
use crate::peers::mutex::registry::MutexEntry;
use crate::peers::registry::Origin;
use std::time::Duration;

pub mod backoff;
pub mod compare;
pub mod dining;
pub mod ipcrm;
pub mod ipcs;
pub mod list;
pub mod options;
pub mod rwsem;
pub mod sembench;
pub mod semop;
pub mod show;
pub mod spin;
pub mod torture;
pub mod uncontended;
pub mod wake;

/// The small parameters every part of `compare` uses.
#[derive(Debug, Clone)]
pub struct Quick {
    /// Seconds per timed run.
    pub seconds: f64,
    /// Contended thread counts: the cores, and an oversubscribed count.
    pub threads: Vec<usize>,
    pub cores: usize,
}

impl Quick {
    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.seconds)
    }
}

/// An experiment's part of `compare`: every ksync primitive beside its
/// peers with small parameters, printing its own tables and condensing
/// them into summary rows.
pub trait ComparePart: Sync {
    /// Announces the part's points to the progress bar; `compare` plans
    /// every part before it runs the first.
    fn plan(&self, lab: &mut Lab, quick: &Quick);
    /// Measures, prints its tables, and returns one summary row per workload.
    fn run(&self, lab: &mut Lab, quick: &Quick) -> Result<Vec<SummaryRow>, String>;
}

/// The points of `points` measured on usable mutexes of `locks`, ksync's
/// and the peers' (the floor and broken locks are no peers), as a summary
/// row compares them.
pub fn usable<'a>(points: &'a [Measured], locks: &[&MutexEntry]) -> Vec<&'a Measured> {
    points
        .iter()
        .filter(|p| {
            locks.iter().any(|l| {
                l.name == p.record.lock && matches!(l.origin, Origin::Ksync | Origin::Peer)
            })
        })
        .collect()
}
