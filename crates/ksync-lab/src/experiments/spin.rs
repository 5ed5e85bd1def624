//! `spin`: Waiman Long's N-task spinlock micro-benchmark ("[PATCH v10
//! 13/19] unfair qspinlock: Enable lock stealing in lock waiters", LKML,
//! May 2014).
//!
//! Long reports the execution time in ms of N tasks each doing a fixed
//! number of lock / critical section / unlock rounds on one lock, tasks
//! bound to CPUs of one node or one per node, the lock alone on its cache
//! line or embedded beside its data. `spin` reproduces that (`--loops`,
//! `--pin`, `--layout`) and also has a fixed-time mode (`--seconds`) that
//! reports throughput. Its [`InCompare`] part runs the timed mode at the
//! cores and oversubscribed.

use super::{options, usable, ComparePart, Quick};
use crate::harness::affinity::Pin;
use crate::output::lab::Lab;
use crate::output::lock_stats::{lock_stats_text, measure_locks_in_rounds, runs_covered};
use crate::output::record::{peer_ratio_key, Measured, Record};
use crate::output::summary::SummaryRow;
use crate::output::table::Table;
use crate::peers::mutex::registry::{self as mutexes, MutexEntry, MUTEXES};
use crate::peers::registry::with_lock_stats;
use crate::workloads::spin::{Layout, Mode, SpinConfig, SpinLoop};
use ksync::stat::LockStatSnapshot;
use std::collections::BTreeMap;
use std::time::Duration;

/// `spin`'s options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Comma-separated lock names (see `list`); default: every core lock.
    #[arg(long, value_delimiter = ',')]
    pub locks: Vec<String>,
    /// Comma-separated thread counts; more than the cores is the oversubscribed case.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 4, 8])]
    pub threads: Vec<usize>,
    /// Rounds per thread (Waiman Long's runs: 5,000,000); the metric is the time until the last thread is done.
    #[arg(long, default_value_t = 1_000_000)]
    pub loops: u64,
    /// Stop a --loops run after this many seconds and report it as not finished.
    /// FIFO locks (ticket, mcs, qspin) need a scheduler time slice per handover
    /// once threads outnumber cores.
    #[arg(long, default_value_t = 5.0)]
    pub time_limit: f64,
    /// Fixed-time mode instead of --loops: run each case this many seconds, report throughput.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// CPU relaxes inside the critical section, after the increment.
    #[arg(long, default_value_t = 0)]
    pub cs_work: u32,
    /// Where the lock sits: embedded beside the counter the critical section
    /// writes, standalone on its own cache line, or both.
    #[arg(long, value_delimiter = ',', default_values_t = [LayoutArg::Embedded])]
    pub layout: Vec<LayoutArg>,
    /// Thread placement: none, spread (thread k on the k-th allowed CPU, round robin),
    /// per-node (Waiman Long's one task per NUMA node), or a CPU list such as 0,1 or 0-3.
    #[arg(long, default_value = "none")]
    pub pin: Pin,
    /// Do not time each round: no longest wait, but a leaner loop (the one
    /// timestamp a round costs about 15 ns on an AMD EPYC KVM guest, which
    /// shows in uncontended and two-thread throughput).
    #[arg(long)]
    pub no_wait_clock: bool,
    /// Run each ksync lock wrapped in ksync::stat::Stat (its `+stat` entry)
    /// and print its lock statistics after each case; `+stat` entries named
    /// in --locks print theirs without it.
    #[arg(long)]
    pub lock_stats: bool,
}

/// `--layout` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LayoutArg {
    Embedded,
    Standalone,
    Both,
}

impl std::fmt::Display for LayoutArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LayoutArg::Embedded => "embedded",
            LayoutArg::Standalone => "standalone",
            LayoutArg::Both => "both",
        })
    }
}

/// Measures `locks` at `cfg`, in rounds (every lock once per round:
/// `Lab::measure_rounds`), each run's record with its ratio to every peer
/// of its round (`ratios_to_peers`), in the order of `locks`.
pub fn measure_locks(
    lab: &mut Lab,
    experiment: &str,
    locks: &[&MutexEntry],
    cfg: &SpinConfig,
    workload: &str,
) -> Vec<Measured> {
    measure_locks_stats(lab, experiment, locks, cfg, workload).0
}

/// [`measure_locks`], also returning the lock statistics of the last run
/// of each lock that keeps them (a `+stat` entry), by name.
pub fn measure_locks_stats(
    lab: &mut Lab,
    experiment: &str,
    locks: &[&MutexEntry],
    cfg: &SpinConfig,
    workload: &str,
) -> (Vec<Measured>, Vec<(String, LockStatSnapshot)>) {
    let labels: Vec<String> = locks
        .iter()
        .map(|l| format!("{experiment} {} threads: {}", cfg.threads, l.name))
        .collect();
    measure_locks_in_rounds(lab, &labels, locks.iter().map(|l| l.name), |p| {
        spin_run(experiment, locks[p], cfg, workload)
    })
}

/// One run of `lock` at `cfg` as a record, with its lock statistics where
/// it keeps them.
fn spin_run(
    experiment: &str,
    lock: &MutexEntry,
    cfg: &SpinConfig,
    workload: &str,
) -> (Record, Option<LockStatSnapshot>) {
    let r = lock.dispatch(SpinLoop(cfg));
    let (min_share, max_share) = r.share_range();
    let mut rec = Record::new(
        experiment,
        workload,
        lock.name,
        lock.is_ksync(),
        cfg.threads,
    )
    .param("layout", cfg.layout.name())
    .param("cs_work", cfg.cs_work)
    .param(
        "pin",
        cfg.pin
            .as_ref()
            .map_or("none".into(), |p| Pin::Cpus(p.clone()).to_string()),
    )
    .metric("ops", r.ops as f64)
    .metric("ops_per_s", r.ops_per_sec())
    .metric("elapsed_ms", r.elapsed.as_secs_f64() * 1e3)
    .metric("finished", f64::from(u8::from(r.finished)))
    .metric("exact", f64::from(u8::from(r.exact)))
    .metric("min_share", min_share)
    .metric("max_share", max_share);
    rec = match cfg.mode {
        Mode::Loops { loops, limit } => rec
            .param("mode", "loops")
            .param("loops", loops)
            .param("time_limit_s", limit.as_secs_f64())
            .metric(
                "done_fraction",
                r.ops as f64 / (loops as f64 * cfg.threads as f64),
            ),
        Mode::Timed(d) => rec.param("mode", "timed").param("seconds", d.as_secs_f64()),
    };
    if let Some(first) = r.first_done {
        rec = rec.metric("first_done_ms", first.as_secs_f64() * 1e3);
    }
    if let Some(w) = r.longest_wait {
        rec = rec.metric("longest_wait_us", w.as_secs_f64() * 1e6);
    }
    for (name, count) in &r.events {
        let per_kop = *count as f64 * 1000.0 / r.ops.max(1) as f64;
        rec = rec.metric(&format!("{EVENT_PREFIX}{name}"), per_kop);
    }
    if let Some(s) = &r.lock_stats {
        rec = rec.lock_stats(s);
    }
    (rec, r.lock_stats)
}

/// Prefix of the metrics that hold a lock's own events per 1000
/// acquisitions (`ev_steals`: steals per 1000 acquisitions).
pub const EVENT_PREFIX: &str = "ev_";

/// One line per lock that counts its own events: each event per 1000
/// acquisitions (the median over repeats).
pub fn event_lines(points: &[Measured]) -> Vec<String> {
    points
        .iter()
        .filter_map(|p| {
            let events: Vec<String> = p
                .record
                .metrics
                .keys()
                .filter_map(|k| k.strip_prefix(EVENT_PREFIX).map(|name| (k, name)))
                .map(|(k, name)| format!("{name} {:.1}", p.get(k)))
                .collect();
            (!events.is_empty()).then(|| {
                format!(
                    "{} events per 1000 acquisitions: {}",
                    p.record.lock,
                    events.join(", ")
                )
            })
        })
        .collect()
}

/// The best peer's point by `ops_per_s`.
pub fn best_peer(points: &[Measured]) -> Option<&Measured> {
    points
        .iter()
        .filter(|p| !p.record.ksync && p.record.lock != "cas-floor")
        .max_by(|a, b| a.get("ops_per_s").total_cmp(&b.get("ops_per_s")))
}

/// The table of one spin case.
pub fn spin_table(points: &[Measured], mode: Mode, wait_clock: bool) -> Table {
    let best = best_peer(points);
    let loops = matches!(mode, Mode::Loops { .. });
    let mut header = vec!["lock".to_string()];
    if loops {
        header.push("elapsed ms".into());
    }
    header.push("Mops/s".into());
    header.push(best.map_or("x best peer".into(), |b| format!("x {}", b.record.lock)));
    if loops {
        header.push("first done ms".into());
    }
    header.extend(["min share".into(), "max share".into()]);
    if wait_clock {
        header.push("longest wait us".into());
    }
    header.push("exact".into());
    let mut table = Table::new(header);
    for p in points {
        let mut row = vec![p.record.lock.clone()];
        let finished = p.in_every_run("finished");
        if loops {
            row.push(if finished {
                p.show("elapsed_ms", 1)
            } else {
                let limit = p
                    .record
                    .params
                    .get("time_limit_s")
                    .cloned()
                    .unwrap_or_default();
                let pct = p.get("done_fraction") * 100.0;
                let decimals = usize::from(pct < 10.0);
                format!("DNF in {limit} s ({pct:.decimals$}% done)")
            });
        }
        row.push(p.show_sig("ops_per_s", 1e-6));
        row.push(best.map_or("-".into(), |b| {
            p.show_ratio(&peer_ratio_key(&b.record.lock))
        }));
        if loops {
            row.push(if finished {
                p.show("first_done_ms", 1)
            } else {
                "-".into()
            });
        }
        row.push(format!("{:.2}", p.get("min_share")));
        row.push(format!("{:.2}", p.get("max_share")));
        if wait_clock {
            row.push(p.show("longest_wait_us", 1));
        }
        row.push(if p.in_every_run("exact") {
            "yes".into()
        } else {
            "NO: LOST UPDATES".into()
        });
        table.row(row);
    }
    for line in event_lines(points) {
        table.note(line);
    }
    table
}

/// Runs `spin`.
pub fn run(lab: &mut Lab, args: Args) -> Result<(), String> {
    let mut locks = mutexes::chosen(&args.locks)?;
    if args.lock_stats {
        locks = with_lock_stats(locks, MUTEXES);
    }
    let threads = options::thread_counts(&args.threads)?;
    let mode = match args.seconds {
        Some(s) => Mode::Timed(options::seconds("--seconds", s)?),
        None => {
            if args.loops == 0 || args.loops > 1_000_000_000_000 {
                return Err(format!(
                    "--loops must be from 1 to 10^12, not {}",
                    args.loops
                ));
            }
            Mode::Loops {
                loops: args.loops,
                limit: options::seconds("--time-limit", args.time_limit)?,
            }
        }
    };
    let mut layouts = Vec::new();
    for l in &args.layout {
        match l {
            LayoutArg::Embedded => layouts.push(Layout::Embedded),
            LayoutArg::Standalone => layouts.push(Layout::Standalone),
            LayoutArg::Both => layouts.extend([Layout::Embedded, Layout::Standalone]),
        }
    }
    layouts.dedup();
    let pins: Vec<Option<Vec<usize>>> = threads
        .iter()
        .map(|&n| args.pin.plan(n))
        .collect::<Result<_, _>>()?;
    let wait_clock = !args.no_wait_clock;
    lab.print(&format!("machine: {}\n", lab.machine()));
    if let Mode::Loops { limit, .. } = mode {
        if threads.iter().any(|&n| n > lab.machine().cores) {
            lab.note(&format!(
                "ksync-lab: more threads than cores: FIFO locks (ticket, mcs, qspin) may each run \
                 into the {} s --time-limit",
                limit.as_secs_f64()
            ));
        }
    }
    let each = match mode {
        Mode::Timed(d) => d,
        // A guess for the bar: fast locks take well under a second.
        Mode::Loops { limit, .. } => limit.min(Duration::from_millis(500)),
    };
    lab.plan((layouts.len() * threads.len() * locks.len()) as u64, each);
    // elapsed ms (or Mops/s) by lock and thread count, per layout, for the
    // table in Waiman Long's shape.
    let mut grid: BTreeMap<(usize, String, usize), String> = BTreeMap::new();
    for (li, &layout) in layouts.iter().enumerate() {
        let workload = format!("{} lock, cs {}", layout.name(), args.cs_work);
        for (n, pin) in threads.iter().zip(&pins) {
            let cfg = SpinConfig {
                threads: *n,
                mode,
                cs_work: args.cs_work,
                layout,
                pin: pin.clone(),
                wait_clock,
            };
            let (points, stats) = measure_locks_stats(lab, "spin", &locks, &cfg, &workload);
            let what = match mode {
                Mode::Loops { loops, .. } => format!("{loops} rounds each"),
                Mode::Timed(d) => format!("{} s", d.as_secs_f64()),
            };
            lab.print(&format!(
                "\n## {n} threads, {what}, lock {}, critical section: increment + {} relaxes, pin {}\n\n{}",
                layout.name(),
                args.cs_work,
                args.pin,
                spin_table(&points, mode, wait_clock).render()
            ));
            lab.print(&lock_stats_text(&stats, &runs_covered(lab.repeat())));
            for p in &points {
                let finished = p.in_every_run("finished");
                let cell = match mode {
                    Mode::Loops { .. } if finished => format!("{:.0}", p.get("elapsed_ms")),
                    Mode::Loops { .. } => "DNF".into(),
                    Mode::Timed(_) => format!("{:.3}", p.get("ops_per_s") * 1e-6),
                };
                grid.insert((li, p.record.lock.clone(), *n), cell);
            }
        }
    }
    if threads.len() > 1 {
        for (li, layout) in layouts.iter().enumerate() {
            let unit = match mode {
                Mode::Loops { loops, .. } => format!(
                    "execution time in ms for {loops} rounds per thread (lower is better; DNF = stopped at the time limit)"
                ),
                Mode::Timed(_) => "Mops/s (higher is better)".into(),
            };
            let mut t = Table::new(
                std::iter::once("lock".to_string())
                    .chain(threads.iter().map(|n| format!("{n} threads"))),
            );
            for lock in &locks {
                let mut row = vec![lock.name.to_string()];
                for n in &threads {
                    row.push(
                        grid.get(&(li, lock.name.to_string(), *n))
                            .cloned()
                            .unwrap_or_else(|| "-".into()),
                    );
                }
                t.row(row);
            }
            lab.print(&format!(
                "\n## Waiman Long's table (unfair qspinlock v10, LKML, May 2014), lock {}: {unit}\n\n{}",
                layout.name(),
                t.render()
            ));
        }
    }
    Ok(())
}

/// `compare`'s spin part: timed runs at the cores, then oversubscribed,
/// critical section one increment, the lean loop (throughput ratios).
pub struct InCompare;

impl ComparePart for InCompare {
    fn plan(&self, lab: &mut Lab, quick: &Quick) {
        let points = quick.threads.len() * mutexes::core().len();
        lab.plan(points as u64, quick.duration());
    }

    fn run(&self, lab: &mut Lab, quick: &Quick) -> Result<Vec<SummaryRow>, String> {
        let locks = mutexes::core();
        let mut rows = Vec::new();
        for &n in &quick.threads {
            let cfg = SpinConfig {
                threads: n,
                mode: Mode::Timed(quick.duration()),
                cs_work: 0,
                layout: Layout::Embedded,
                pin: None,
                // Throughput ratios: the lean loop (spin reports waits).
                wait_clock: false,
            };
            let points = measure_locks(lab, "spin", &locks, &cfg, "embedded lock, cs 0");
            lab.print(&format!(
                "\n## spin: {n} threads on one lock ({} per core), {} s, critical section: one increment\n\n{}",
                n.div_ceil(quick.cores),
                quick.seconds,
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
        Ok(rows)
    }
}
