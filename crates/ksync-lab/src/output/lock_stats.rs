//! Lock statistics (`ksync::stat`) in results: as `lockstat_*` metrics of
//! a record, and as the text `--lock-stats` prints.

use super::lab::Lab;
use super::record::{ratios_to_peers, Measured, Record};
use ksync::stat::LockStatSnapshot;
use std::fmt::Write as _;

impl Record {
    /// Adds a lock's statistics (`ksync::stat`) as `lockstat_*` metrics:
    /// acquisitions, contended count and fraction, wait total, mean and
    /// maximum in ns, Spraul's per-mille of CPU time, and the mean sampled
    /// hold when holds were timed.
    pub fn lock_stats(self, s: &LockStatSnapshot) -> Self {
        let acquisitions = s.acquisitions();
        let mut rec = self
            .metric("lockstat_acquisitions", acquisitions as f64)
            .metric("lockstat_contended", s.contended() as f64)
            .metric(
                "lockstat_contended_fraction",
                s.contended() as f64 / acquisitions.max(1) as f64,
            )
            .metric("lockstat_wait_total_ns", s.wait_total_ns() as f64)
            .metric("lockstat_wait_avg_ns", s.wait_avg_ns() as f64)
            .metric("lockstat_wait_max_ns", s.wait_max_ns() as f64)
            .metric("lockstat_per_mille", s.per_mille() as f64);
        if s.read.acquisitions() > 0 {
            rec = rec
                .metric("lockstat_read_acquisitions", s.read.acquisitions() as f64)
                .metric("lockstat_read_contended", s.read.contended as f64)
                .metric("lockstat_write_contended", s.write.contended as f64);
        }
        if s.hold_samples() > 0 {
            rec = rec.metric("lockstat_hold_avg_ns", s.hold_avg_ns() as f64);
        }
        rec
    }
}

/// Measures locks in rounds ([`Lab::measure_rounds`]): lock `i`, named
/// `names[i]`, is point `labels[i]`, and `run(i)` runs it once, returning
/// its record and, for a lock that keeps them, its statistics. Each run
/// carries its `ops_per_s` ratio to every peer of its round
/// ([`ratios_to_peers`]). Returns the points, and each lock's statistics
/// from its last run, by name, as [`lock_stats_text`] takes them.
pub fn measure_locks_in_rounds<'a>(
    lab: &mut Lab,
    labels: &[String],
    names: impl IntoIterator<Item = &'a str>,
    mut run: impl FnMut(usize) -> (Record, Option<LockStatSnapshot>),
) -> (Vec<Measured>, Vec<(String, LockStatSnapshot)>) {
    let mut last: Vec<Option<LockStatSnapshot>> = vec![None; labels.len()];
    let measured = lab.measure_rounds(
        labels,
        |p| {
            let (record, stats) = run(p);
            last[p] = stats;
            record
        },
        |round| ratios_to_peers(round, "ops_per_s"),
    );
    let stats = names
        .into_iter()
        .zip(last)
        .filter_map(|(name, s)| Some((name.to_string(), s?)))
        .collect();
    (measured, stats)
}

/// The lock statistics of some points, as `--lock-stats` prints them: per
/// lock a heading and Manfred Spraul's line (`free F contended C wait W avg A
/// 1/1000 cpu time P`, times in ns), then the lock_stat-like table of all.
/// `what` says what the figures cover ("the last of 3 runs").
pub fn lock_stats_text(stats: &[(String, LockStatSnapshot)], what: &str) -> String {
    if stats.is_empty() {
        return String::new();
    }
    let mut out = format!("\n### Lock statistics ({what})\n\n");
    for (name, s) in stats {
        let _ = writeln!(out, "{name}:\n{}", s.summary_line());
    }
    out.push('\n');
    out.push_str(&ksync::stat::Report::from_snapshots(stats.iter().cloned()).table());
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// What printed lock statistics cover, given `--repeat`.
pub fn runs_covered(repeat: u32) -> String {
    if repeat > 1 {
        format!("the last of {repeat} runs")
    } else {
        "the run".into()
    }
}
