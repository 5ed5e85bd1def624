//! `backoff`: Rik van Riel's proportional backoff for ticket locks ("[PATCH
//! 3/5] x86,smp: auto tune spinlock backoff delay factor", LKML, January
//! 2013, with Michel Lespinasse's review).
//!
//! Rik van Riel's 2012-13 series made a ticket-lock waiter with `k` threads
//! ahead spin about `k` times the expected hold time before looking at the
//! lock again: first with a fixed factor (50, and 250 in his tables), then
//! auto-tuned per CPU, then auto-tuned per CPU *and* hashed lock address
//! (patch 4/5, after Eric Dumazet's and Michel Lespinasse's worry that one
//! delay tuned on a long-held lock oversleeps on a short one). Two
//! workloads:
//!
//! * `embedded`: N threads on one lock that sits on the same cache line as
//!   the data its critical section writes, so every poll by a waiter steals
//!   the line from the holder;
//! * `two-lock`: each thread takes a hot, long-held lock and then a cold,
//!   short-held one (the UDP qdisc lock beside the busylock, and Michel's
//!   open risk: a per-thread delay learned on the hot lock oversleeps on the
//!   cold one; the per-lock table should not).
//!
//! Backoff only acts when a waiter has someone ahead of it besides the
//! holder, so it needs at least three threads contending; with fewer cores
//! than that, preemption of the holder or of the next waiter dominates.

use super::spin::{best_peer, measure_locks, spin_table};
use super::{options, usable, ComparePart, Quick};
use crate::harness::affinity::Pin;
use crate::harness::clock::relax_ns;
use crate::output::lab::Lab;
use crate::output::record::{peer_ratio_key, ratios_to_peers, Measured, Record};
use crate::output::summary::SummaryRow;
use crate::output::table::Table;
use crate::peers::mutex::registry::{self as mutexes, MutexEntry};
use crate::workloads::share_range;
use crate::workloads::spin::{Layout, Mode, SpinConfig};
use crate::workloads::two_lock::{TwoLockConfig, TwoLockLoop};

/// The locks `backoff` measures unless told otherwise: every ticket-lock
/// policy (the columns of Rik van Riel's tables: vanilla, fixed 50, fixed 250, auto-tuned,
/// auto-tuned + hash, plus the guest cap), the `spin` crate's ticket lock,
/// and parking_lot as the everyday reference.
pub const DEFAULT_LOCKS: [&str; 8] = [
    "ticket",
    "ticket-fixed",
    "ticket-fixed-250",
    "ticket-auto",
    "ticket-auto-lock",
    "ticket-auto-lock-guest",
    "spin-ticket",
    "parking_lot",
];

/// `--workloads` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    Embedded,
    TwoLock,
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Workload::Embedded => "embedded",
            Workload::TwoLock => "two-lock",
        })
    }
}

/// `backoff`'s options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Comma-separated locks (see `list`); default: the ticket-lock policies,
    /// spin-ticket and parking_lot.
    #[arg(long, value_delimiter = ',')]
    pub locks: Vec<String>,
    /// Comma-separated thread counts; default 1, cores, cores + 1, 2 x cores, 4 x cores.
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Which workloads: embedded, two-lock.
    #[arg(long, value_delimiter = ',', default_values_t = [Workload::Embedded, Workload::TwoLock])]
    pub workloads: Vec<Workload>,
    /// Seconds per lock and thread count.
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Embedded workload: relaxes inside the critical section, after writing the data.
    #[arg(long, default_value_t = 10)]
    pub cs_work: u32,
    /// Two-lock mix: relaxes inside the hot lock.
    #[arg(long, default_value_t = 200)]
    pub hot_work: u32,
    /// Two-lock mix: relaxes inside the cold lock.
    #[arg(long, default_value_t = 5)]
    pub cold_work: u32,
    /// Thread placement, as for `spin`.
    #[arg(long, default_value = "none")]
    pub pin: Pin,
}

/// The default thread counts: one, the cores, one more, twice and four times.
pub fn default_threads(cores: usize) -> Vec<usize> {
    let mut t = vec![1, cores, cores + 1, 2 * cores, 4 * cores];
    t.sort_unstable();
    t.dedup();
    t
}

/// Measures the two-lock mix at `cfg` on every lock of `locks`, in rounds
/// (`Lab::measure_rounds`), with each run's ratio to every peer of its
/// round, as `spin::measure_locks` does.
pub fn measure_two_locks(
    lab: &mut Lab,
    locks: &[&MutexEntry],
    cfg: &TwoLockConfig,
    workload: &str,
) -> Vec<Measured> {
    let labels: Vec<String> = locks
        .iter()
        .map(|l| format!("two-lock {} threads: {}", cfg.threads, l.name))
        .collect();
    lab.measure_rounds(
        &labels,
        |p| {
            let lock = locks[p];
            let r = lock.dispatch(TwoLockLoop(cfg));
            let (min_share, max_share) = share_range(&r.per_thread);
            Record::new("backoff", workload, lock.name, lock.is_ksync(), cfg.threads)
                .param("hot_work", cfg.hot_work)
                .param("cold_work", cfg.cold_work)
                .param("seconds", cfg.duration.as_secs_f64())
                .metric("ops_per_s", r.rounds_per_sec())
                .metric("rounds", r.rounds as f64)
                .metric("min_share", min_share)
                .metric("max_share", max_share)
                .metric("hot_longest_us", r.hot_longest.as_secs_f64() * 1e6)
                .metric("cold_mean_ns", r.cold_mean_ns)
                .metric("cold_longest_us", r.cold_longest.as_secs_f64() * 1e6)
                .metric("exact", f64::from(u8::from(r.exact)))
        },
        |round| ratios_to_peers(round, "ops_per_s"),
    )
}

/// Runs `backoff`.
pub fn run(lab: &mut Lab, args: Args) -> Result<(), String> {
    let duration = options::seconds("--seconds", args.seconds)?;
    let names: Vec<String> = if args.locks.is_empty() {
        DEFAULT_LOCKS.iter().map(|s| s.to_string()).collect()
    } else {
        args.locks.clone()
    };
    let locks = mutexes::chosen(&names)?;
    let threads = if args.threads.is_empty() {
        default_threads(lab.machine().cores)
    } else {
        options::thread_counts(&args.threads)?
    };
    if args.workloads.is_empty() {
        return Err("--workloads needs embedded, two-lock or both".into());
    }
    let pins: Vec<Option<Vec<usize>>> = threads
        .iter()
        .map(|&n| args.pin.plan(n))
        .collect::<Result<_, _>>()?;
    let relax = relax_ns();
    lab.print(&format!(
        "machine: {}\n\nOne relax (PAUSE) takes {relax:.1} ns here: the fixed factor 50 waits {:.2} us \
         per waiter ahead, 250 waits {:.2} us; the guest cap of 16 is {:.0} ns per waiter ahead.\n",
        lab.machine(),
        50.0 * relax / 1e3,
        250.0 * relax / 1e3,
        16.0 * relax
    ));
    lab.set_param("relax_ns", format!("{relax:.2}"));
    lab.plan(
        (args.workloads.len() * threads.len() * locks.len()) as u64,
        duration,
    );
    for workload in &args.workloads {
        let (title, label) = match workload {
            Workload::Embedded => (
                format!(
                    "embedded lock: the critical section writes the lock's cache line, then {} relaxes",
                    args.cs_work
                ),
                format!("embedded lock, cs {}", args.cs_work),
            ),
            Workload::TwoLock => (
                format!(
                    "two-lock mix: a hot lock held {} relaxes, then a cold lock held {}",
                    args.hot_work, args.cold_work
                ),
                format!(
                    "two-lock mix, hot {} cold {}",
                    args.hot_work, args.cold_work
                ),
            ),
        };
        let mut by_threads: Vec<(usize, Vec<Measured>)> = Vec::new();
        for (n, pin) in threads.iter().zip(&pins) {
            let points = match workload {
                Workload::Embedded => {
                    let cfg = SpinConfig {
                        threads: *n,
                        mode: Mode::Timed(duration),
                        cs_work: args.cs_work,
                        layout: Layout::Embedded,
                        pin: pin.clone(),
                        wait_clock: true,
                    };
                    measure_locks(lab, "backoff", &locks, &cfg, &label)
                }
                Workload::TwoLock => {
                    let cfg = TwoLockConfig {
                        threads: *n,
                        duration,
                        hot_work: args.hot_work,
                        cold_work: args.cold_work,
                        pin: pin.clone(),
                    };
                    measure_two_locks(lab, &locks, &cfg, &label)
                }
            };
            by_threads.push((*n, points));
        }
        lab.print(&format!(
            "\n## backoff, {title}, {} s per point: Mops/s by threads\n\n{}",
            args.seconds,
            throughput_table(&locks, &by_threads).render()
        ));
        lab.print(&format!(
            "\n### Fairness and waits\n\n{}",
            detail_table(*workload, &by_threads).render()
        ));
    }
    Ok(())
}

/// Rik van Riel's table shape: one row per thread count, one column per lock.
fn throughput_table(locks: &[&MutexEntry], by_threads: &[(usize, Vec<Measured>)]) -> Table {
    let mut t = Table::new(
        std::iter::once("threads".to_string()).chain(locks.iter().map(|l| l.name.to_string())),
    );
    for (n, points) in by_threads {
        let mut row = vec![n.to_string()];
        row.extend(points.iter().map(|p| p.show_sig("ops_per_s", 1e-6)));
        t.row(row);
    }
    t
}

fn detail_table(workload: Workload, by_threads: &[(usize, Vec<Measured>)]) -> Table {
    let mut header = vec![
        "threads".to_string(),
        "lock".into(),
        "min share".into(),
        "max share".into(),
    ];
    match workload {
        Workload::Embedded => header.push("longest wait us".into()),
        Workload::TwoLock => header.extend([
            "hot longest us".into(),
            "cold mean ns".into(),
            "cold longest us".into(),
        ]),
    }
    header.push("exact".into());
    let mut t = Table::new(header);
    for (n, points) in by_threads {
        for p in points {
            let mut row = vec![
                n.to_string(),
                p.record.lock.clone(),
                format!("{:.2}", p.get("min_share")),
                format!("{:.2}", p.get("max_share")),
            ];
            match workload {
                Workload::Embedded => row.push(p.show("longest_wait_us", 1)),
                Workload::TwoLock => {
                    row.push(p.show("hot_longest_us", 1));
                    row.push(p.show("cold_mean_ns", 0));
                    row.push(p.show("cold_longest_us", 1));
                }
            }
            row.push(if p.in_every_run("exact") {
                "yes".into()
            } else {
                "NO".into()
            });
            t.row(row);
        }
    }
    t
}

/// The two-lock mix at one thread count, one row per lock.
fn two_lock_table(points: &[Measured]) -> Table {
    let best = best_peer(points);
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
                p.show_ratio(&peer_ratio_key(&b.record.lock))
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

/// `compare`'s backoff part: both workloads with one thread past the cores
/// (backoff needs a waiter with another waiter ahead of it).
pub struct InCompare;

impl ComparePart for InCompare {
    fn plan(&self, lab: &mut Lab, quick: &Quick) {
        lab.plan(2 * mutexes::core().len() as u64, quick.duration());
    }

    fn run(&self, lab: &mut Lab, quick: &Quick) -> Result<Vec<SummaryRow>, String> {
        let locks = mutexes::core();
        let duration = quick.duration();
        let mut rows = Vec::new();
        let n = quick.cores + 1;
        let cfg = SpinConfig {
            threads: n,
            mode: Mode::Timed(duration),
            cs_work: 10,
            layout: Layout::Embedded,
            pin: None,
            wait_clock: false,
        };
        let points = measure_locks(lab, "backoff", &locks, &cfg, "embedded lock, cs 10");
        lab.print(&format!(
            "\n## backoff, embedded lock: {n} threads, critical section writes the lock's line + 10 relaxes, {} s\n\n{}",
            quick.seconds,
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
        let points = measure_two_locks(lab, &locks, &two, "two-lock mix, hot 200 cold 5");
        lab.print(&format!(
            "\n## backoff, two-lock mix: {n} threads, hot lock held 200 relaxes then cold lock held 5, {} s\n\n{}",
            quick.seconds,
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
        Ok(rows)
    }
}
