//! `compare`, the default: every experiment with small parameters, every
//! ksync primitive beside its peers, and one summary table at the end.
//!
//! Each part prints its own table and returns [`SummaryRow`]s; the summary
//! has one row per workload: the best peer and its figure, then each ksync
//! primitive as a multiple of it (above 1 is better for ksync, whatever the
//! unit). Other modules add parts through [`Extra`] functions listed in
//! `main.rs`'s `COMPARE_EXTRAS`.

use crate::backoff::measure_two_lock;
use crate::bench::{Layout, Mode, SpinConfig, TwoLockConfig};
use crate::locks::{self, LockEntry, Origin};
use crate::output::lab::Lab;
use crate::output::record::Measured;
use crate::output::summary::{summary_table, SummaryRow};
use crate::output::table::Table;
use crate::rwsem;
use crate::spinbench::{measure_spin, spin_table, uncontended_table};
use std::time::Duration;

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

/// A part of `compare` contributed by another module: it measures, prints
/// its own table with `lab.print`, and returns one summary row per workload.
pub type Extra = fn(&mut Lab, &Quick) -> Result<Vec<SummaryRow>, String>;

/// `compare`'s options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Seconds per contended run (uncontended rounds are fixed).
    #[arg(long, default_value_t = 0.5)]
    pub seconds: f64,
}

/// The usable locks among `points` (the floor and broken locks are no peers).
fn usable<'a>(points: &'a [Measured], locks: &[LockEntry]) -> Vec<&'a Measured> {
    points
        .iter()
        .filter(|p| {
            locks.iter().any(|l| {
                l.name == p.record.lock && matches!(l.origin, Origin::Ksync | Origin::Peer)
            })
        })
        .collect()
}

/// Runs the suite and prints the summary.
pub fn run(lab: &mut Lab, args: Args, extras: &[Extra]) -> Result<(), String> {
    crate::seconds_arg("--seconds", args.seconds)?;
    let cores = lab.machine().cores;
    let quick = Quick {
        seconds: args.seconds,
        threads: vec![cores, (4 * cores).max(64)],
        cores,
    };
    let (duration, cores) = (quick.duration(), quick.cores);
    let locks = locks::core();
    let rw_locks = rwsem::registry();
    lab.print(&format!("machine: {}\n", lab.machine()));
    let contended_points =
        (quick.threads.len() + 2) * locks.len() + rwsem::MIXES.len() * rw_locks.len();
    lab.plan(locks.len() as u64, Duration::from_millis(60));
    lab.plan(contended_points as u64, duration);
    let mut rows = Vec::new();

    // 1. Uncontended cost.
    let (iters, rounds) = (1_000_000, 5);
    let (table, points) = uncontended_table(lab, &locks, iters, rounds);
    lab.print(&format!(
        "\n## Uncontended lock + unlock (best of {rounds} rounds of {iters})\n\n{}",
        table.render()
    ));
    rows.push(SummaryRow::from_measured(
        "uncontended lock + unlock",
        "ns",
        "ns",
        1.0,
        false,
        &usable(&points, &locks),
    ));

    // 2. Seed 001's micro-benchmark, timed: threads = cores, then oversubscribed.
    for &n in &quick.threads {
        let cfg = SpinConfig {
            threads: n,
            mode: Mode::Timed(duration),
            cs_work: 0,
            layout: Layout::Embedded,
            pin: None,
            // Throughput ratios: the lean loop (spin reports waits).
            wait_clock: false,
        };
        let points: Vec<Measured> = locks
            .iter()
            .map(|l| measure_spin(lab, "spin", l, &cfg, "embedded lock, cs 0"))
            .collect();
        lab.print(&format!(
            "\n## spin: {n} threads on one lock ({} per core), {} s, critical section: one increment\n\n{}",
            n.div_ceil(cores),
            args.seconds,
            spin_table(&points, cfg.mode, false).render()
        ));
        rows.push(SummaryRow::from_measured(
            &format!("spin, {n} threads"),
            "Mops/s",
            "ops_per_s",
            1e-6,
            true,
            &usable(&points, &locks),
        ));
    }

    // 3. Seed 004's backoff workloads, one thread past the cores (backoff
    // needs a waiter with another waiter ahead of it).
    let n = cores + 1;
    let cfg = SpinConfig {
        threads: n,
        mode: Mode::Timed(duration),
        cs_work: 10,
        layout: Layout::Embedded,
        pin: None,
        wait_clock: false,
    };
    let points: Vec<Measured> = locks
        .iter()
        .map(|l| measure_spin(lab, "backoff", l, &cfg, "embedded lock, cs 10"))
        .collect();
    lab.print(&format!(
        "\n## backoff, embedded lock: {n} threads, critical section writes the lock's line + 10 relaxes, {} s\n\n{}",
        args.seconds,
        spin_table(&points, cfg.mode, false).render()
    ));
    rows.push(SummaryRow::from_measured(
        &format!("backoff embedded, {n} threads"),
        "Mops/s",
        "ops_per_s",
        1e-6,
        true,
        &usable(&points, &locks),
    ));
    let two = TwoLockConfig {
        threads: n,
        duration,
        hot_work: 200,
        cold_work: 5,
        pin: None,
    };
    let points: Vec<Measured> = locks
        .iter()
        .map(|l| measure_two_lock(lab, l, &two, "two-lock mix, hot 200 cold 5"))
        .collect();
    lab.print(&format!(
        "\n## backoff, two-lock mix: {n} threads, hot lock held 200 relaxes then cold lock held 5, {} s\n\n{}",
        args.seconds,
        two_lock_table(&points).render()
    ));
    rows.push(SummaryRow::from_measured(
        &format!("backoff two-lock, {n} threads"),
        "Mops/s",
        "ops_per_s",
        1e-6,
        true,
        &usable(&points, &locks),
    ));

    // 4. Seed 002's rwsem mixes.
    for mix in rwsem::MIXES {
        let points = rwsem::mix_table(lab, mix, &rw_locks, duration);
        rows.push(SummaryRow::from_measured(
            &format!("rwsem {}", mix.name),
            "Macq/s",
            "ops_per_s",
            1e-6,
            true,
            &points.iter().collect::<Vec<_>>(),
        ));
    }

    // 5. Parts other modules contribute.
    for extra in extras {
        rows.extend(extra(lab, &quick)?);
    }

    lab.print(&format!(
        "\n## Summary: each ksync primitive as a multiple of the best peer (> 1: ksync is better)\n\n{}",
        summary_table(&rows).render()
    ));
    lab.add_summary(rows);
    Ok(())
}

fn two_lock_table(points: &[Measured]) -> Table {
    let best = crate::spinbench::best_peer(points);
    let mut t = Table::new([
        "lock".to_string(),
        "Mrounds/s".into(),
        best.map_or("x best peer".into(), |b| format!("x {}", b.record.lock)),
        "min share".into(),
        "max share".into(),
        "hot longest us".into(),
        "cold mean ns".into(),
        "cold longest us".into(),
    ]);
    for p in points {
        t.row(vec![
            p.record.lock.clone(),
            p.show_sig("ops_per_s", 1e-6),
            best.map_or("-".into(), |b| {
                crate::output::record::ratio_text(p.get("ops_per_s") / b.get("ops_per_s"))
            }),
            format!("{:.2}", p.get("min_share")),
            format!("{:.2}", p.get("max_share")),
            p.show("hot_longest_us", 1),
            p.show("cold_mean_ns", 0),
            p.show("cold_longest_us", 1),
        ]);
    }
    t
}
