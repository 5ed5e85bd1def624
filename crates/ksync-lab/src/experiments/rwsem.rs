//! `rwsem`: the reader-writer mixes of David Howells' "\[PATCH\]
//! rw_semaphores, optimisations" thread (LKML, April 2001), in which Andrea
//! Arcangeli compared rwsem designs: reads and writes taken in a fixed
//! time, per mix and lock (the mixes: `workloads::rw_mix`).

use super::{options, ComparePart, Quick};
use crate::output::lab::Lab;
use crate::output::lock_stats::{lock_stats_text, measure_locks_in_rounds, runs_covered};
use crate::output::record::{peer_ratio_key, Measured, Record};
use crate::output::summary::SummaryRow;
use crate::output::table::Table;
use crate::peers::names::{self, Named};
use crate::peers::registry::with_lock_stats;
use crate::peers::rwlock::registry::{self as rwlocks, RwEntry, RW_LOCKS};
use crate::workloads::rw_mix::{Mix, MixLoop, MIXES};
use crate::workloads::share_range;
use ksync::rwsem::RwSemStats;
use std::time::Duration;

impl Named for Mix {
    fn name(&self) -> &str {
        self.name
    }
}

/// The mixes as a table, for `rwsem --list-mixes` and `--help`.
pub fn mixes_table() -> Table {
    let mut t = Table::new([
        "mix",
        "readers",
        "writers",
        "load us",
        "interval us",
        "stands for",
    ]);
    for m in MIXES {
        t.row(vec![
            m.name.into(),
            m.readers.to_string(),
            m.writers.to_string(),
            m.load_us.to_string(),
            m.interval_us.to_string(),
            m.about.into(),
        ]);
    }
    t.note(
        "The April 2001 thread names the modes but not their thread counts; these are the \
         lab's reading (r-modes print only reads, w-modes only writes). wo0 and rw0 are the \
         lab's own."
            .into(),
    );
    t
}

/// Measures `mix` on every lock in `locks`, prints its table and returns the points.
pub fn mix_table(lab: &mut Lab, mix: Mix, locks: &[&RwEntry], duration: Duration) -> Vec<Measured> {
    let seconds = duration.as_secs_f64();
    // Every lock once per round (`Lab::measure_rounds`), each run with its
    // ratio to every peer of its round.
    let labels: Vec<String> = locks
        .iter()
        .map(|l| format!("rwsem {} {}", mix.name, l.name))
        .collect();
    let (points, stats) =
        measure_locks_in_rounds(lab, &labels, locks.iter().map(|l| l.name), |p| {
            let lock = locks[p];
            ksync::rwsem::reset_rwsem_stats();
            let r = lock.dispatch(MixLoop { mix, duration });
            let events = ksync::rwsem::rwsem_stats();
            let (rmin, rmax) = share_range(&r.per_reader);
            let (wmin, wmax) = share_range(&r.per_writer);
            let secs = r.elapsed.as_secs_f64();
            let rec = Record::new(
                "rwsem",
                &format!("mix {}", mix.name),
                lock.name,
                lock.is_ksync(),
                mix.readers + mix.writers,
            )
            .param("readers", mix.readers)
            .param("writers", mix.writers)
            .param("load_us", mix.load_us)
            .param("interval_us", mix.interval_us)
            .param("seconds", seconds)
            .metric("reads", r.reads as f64)
            .metric("writes", r.writes as f64)
            .metric("ops_per_s", (r.reads + r.writes) as f64 / secs)
            .metric("reader_min_share", rmin)
            .metric("reader_max_share", rmax)
            .metric("writer_min_share", wmin)
            .metric("writer_max_share", wmax)
            .metric(
                "longest_read_wait_us",
                r.longest_read_wait.as_secs_f64() * 1e6,
            )
            .metric(
                "longest_write_wait_us",
                r.longest_write_wait.as_secs_f64() * 1e6,
            )
            .metric("exact", f64::from(u8::from(r.exact)));
            let rec = if counts_rwsem_events(lock) {
                event_metrics(rec, &events, r.reads + r.writes)
            } else {
                rec
            };
            let rec = match &r.lock_stats {
                Some(s) => rec.lock_stats(s),
                None => rec,
            };
            (rec, r.lock_stats)
        });
    let best = points
        .iter()
        .filter(|p| !p.record.ksync)
        .max_by(|a, b| a.get("ops_per_s").total_cmp(&b.get("ops_per_s")));
    let mut table = Table::new([
        "lock".to_string(),
        "reads taken".into(),
        "writes taken".into(),
        best.map_or("x best peer".into(), |b| format!("x {}", b.record.lock)),
        "reader share min-max".into(),
        "writer share min-max".into(),
        "longest read wait ms".into(),
        "longest write wait ms".into(),
        "exact".into(),
    ]);
    let share = |p: &Measured, class: &str, n: usize| {
        if n == 0 {
            "-".to_string()
        } else {
            format!(
                "{:.2}-{:.2}",
                p.get(&format!("{class}_min_share")),
                p.get(&format!("{class}_max_share"))
            )
        }
    };
    for p in &points {
        table.row(vec![
            p.record.lock.clone(),
            p.show("reads", 0),
            p.show("writes", 0),
            best.map_or("-".into(), |b| {
                p.show_ratio(&peer_ratio_key(&b.record.lock))
            }),
            share(p, "reader", mix.readers),
            share(p, "writer", mix.writers),
            p.show_scaled("longest_read_wait_us", 1e-3, 3),
            p.show_scaled("longest_write_wait_us", 1e-3, 3),
            if p.in_every_run("exact") {
                "yes".into()
            } else {
                "NO: EXCLUSION FAILED".into()
            },
        ]);
    }
    for p in points.iter().filter(|p| !p.get("ev_sleeps").is_nan()) {
        table.note(events_note(p));
    }
    if mix.writers > 1 && points.iter().any(|p| is_spin_rwsem(&p.record.lock)) {
        table.note(SPIN_RWSEM_UNDER_PREEMPTION.into());
    }

    lab.print(&format!(
        "\n## rwsem mix {}: {} readers, {} writers, load {} us, interval {} us, {seconds:.1} s\n\n{}",
        mix.name,
        mix.readers,
        mix.writers,
        mix.load_us,
        mix.interval_us,
        table.render()
    ));
    lab.print(&lock_stats_text(&stats, &runs_covered(lab.repeat())));
    points
}

/// Why the 2001 design's writer mixes look as they do, printed under them.
const SPIN_RWSEM_UNDER_PREEMPTION: &str = "spin-rwsem is the 2001 generic rwsem: every \
    acquisition and release takes one spinlock, and every contended writer is granted the \
    lock directly, in FIFO order. With more threads than CPUs the scheduler preempts \
    spinlock holders and granted writers that have not run yet; every other thread then \
    spins or waits out that thread's time slice. The kernel never preempts a spinlock \
    holder, so there the design only pays for the hand-over; here its writer mixes run at \
    a small fraction of the others' rate.";

/// Whether `lock` is the 2001 design, bare or in `Stat`.
fn is_spin_rwsem(lock: &str) -> bool {
    matches!(lock, "spin-rwsem" | "spin-rwsem+stat")
}

/// Whether `lock` is a `RawRwSem`, bare or in `Stat`, whose lock events
/// (`ksync::rwsem::rwsem_stats`) the run counts.
fn counts_rwsem_events(lock: &RwEntry) -> bool {
    matches!(lock.name, "rwsem" | "rwsem+stat")
}

/// `RawRwSem`'s lock events over one run, per 1000 acquisitions.
fn event_metrics(rec: Record, e: &RwSemStats, acquisitions: u64) -> Record {
    let per_kop = |n: u64| n as f64 * 1000.0 / acquisitions.max(1) as f64;
    rec.metric("ev_rlock_steals", per_kop(e.rlock_steal))
        .metric("ev_wlock_steals", per_kop(e.wlock_steal))
        .metric("ev_spin_won", per_kop(e.opt_lock))
        .metric("ev_spin_lost", per_kop(e.opt_fail))
        .metric("ev_spin_none", per_kop(e.opt_nospin))
        .metric("ev_sleeps", per_kop(e.sleeps()))
        .metric("ev_wake_reader", per_kop(e.wake_reader))
        .metric("ev_wake_writer", per_kop(e.wake_writer))
        .metric("ev_woken_lost", per_kop(e.woken_lost))
        .metric("ev_wake_skipped", per_kop(e.wake_skipped))
        .metric("ev_handoffs", per_kop(e.handoffs()))
}

/// The table note that shows one point's lock events.
fn events_note(p: &Measured) -> String {
    format!(
        "{} lock events per 1000 acquisitions: steals {:.1} by readers, {:.1} by writers; \
         writer spins {:.1} won, {:.1} lost, {:.1} not spun; sleeps {:.1}; futex wakes {:.1} \
         of readers, {:.1} of writers; woken writers that lost {:.1}; wakes skipped {:.1}; \
         handoffs {:.2}",
        p.record.lock,
        p.get("ev_rlock_steals"),
        p.get("ev_wlock_steals"),
        p.get("ev_spin_won"),
        p.get("ev_spin_lost"),
        p.get("ev_spin_none"),
        p.get("ev_sleeps"),
        p.get("ev_wake_reader"),
        p.get("ev_wake_writer"),
        p.get("ev_woken_lost"),
        p.get("ev_wake_skipped"),
        p.get("ev_handoffs"),
    )
}

/// `rwsem`'s options.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Mixes (Howells and Arcangeli, rw_semaphores, optimisations, LKML, April 2001; \
    see --list-mixes):\n  \
    rw  8 readers + 4 writers, load 2 us, interval 2 us\n  \
    r1  1 reader\n  r2  2 readers\n  ro  16 readers, load 2 us, interval 2 us\n  \
    w1  1 writer\n  wo  16 writers, load 2 us, interval 2 us\n\
    The lab's zero-load twins, which show what the lock word and wake-ups cost:\n  \
    wo0 16 writers, no load\n  rw0 8 readers + 4 writers, no load"
)]
pub struct Args {
    /// Comma-separated mixes: rw, r1, r2, ro, w1, wo, wo0, rw0; default: all.
    #[arg(long, value_delimiter = ',')]
    pub mixes: Vec<String>,
    /// Comma-separated reader-writer locks (see `list`); default: all.
    #[arg(long, value_delimiter = ',')]
    pub locks: Vec<String>,
    /// Seconds per mix and lock (Andrea's 2001 runs: 50; synchro-test: 5).
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Print the mixes (threads, hold and interval times) and exit.
    #[arg(long)]
    pub list_mixes: bool,
    /// Run one custom mix with this many readers instead (with --writers, --load-us, --interval-us).
    #[arg(long)]
    pub readers: Option<usize>,
    /// Writers of the custom mix.
    #[arg(long)]
    pub writers: Option<usize>,
    /// Busy microseconds inside the lock, custom mix.
    #[arg(long, default_value_t = 2)]
    pub load_us: u32,
    /// Busy microseconds between acquisitions, custom mix.
    #[arg(long, default_value_t = 2)]
    pub interval_us: u32,
    /// Run each ksync lock wrapped in ksync::stat::Stat (`rwsem+stat`,
    /// `spin-rwsem+stat`) and print its lock statistics after each mix;
    /// `+stat` entries named in --locks print theirs without it.
    #[arg(long)]
    pub lock_stats: bool,
}

/// Runs `rwsem`.
pub fn run(lab: &mut Lab, args: Args) -> Result<(), String> {
    if args.list_mixes {
        lab.print(&mixes_table().render());
        return Ok(());
    }
    let duration = options::seconds("--seconds", args.seconds)?;
    let mixes = if args.readers.is_some() || args.writers.is_some() {
        if !args.mixes.is_empty() {
            return Err("--mixes and a custom mix (--readers/--writers) exclude each other".into());
        }
        let (readers, writers) = (args.readers.unwrap_or(0), args.writers.unwrap_or(0));
        if readers + writers == 0 || readers + writers > 4096 {
            return Err(format!(
                "a custom mix needs 1 to 4096 threads, not {readers} readers + {writers} writers"
            ));
        }
        if args.load_us > 1_000_000 || args.interval_us > 1_000_000 {
            return Err("--load-us and --interval-us must be at most 1000000".into());
        }
        vec![Mix {
            name: "custom",
            readers,
            writers,
            load_us: args.load_us,
            interval_us: args.interval_us,
            about: "custom",
        }]
    } else {
        names::pick(&MIXES, &args.mixes, "mix", |_| true)?
            .into_iter()
            .copied()
            .collect()
    };
    let mut rw_locks = rwlocks::chosen(&args.locks, |e| e.core)?;
    if args.lock_stats {
        rw_locks = with_lock_stats(rw_locks, RW_LOCKS);
    }
    lab.print(&format!("machine: {}\n", lab.machine()));
    lab.plan((mixes.len() * rw_locks.len()) as u64, duration);
    for mix in mixes {
        mix_table(lab, mix, &rw_locks, duration);
    }
    Ok(())
}

/// `compare`'s rwsem part: every mix on every core reader-writer lock.
pub struct InCompare;

impl ComparePart for InCompare {
    fn plan(&self, lab: &mut Lab, quick: &Quick) {
        let points = MIXES.len() * rwlocks::core().len();
        lab.plan(points as u64, quick.duration());
    }

    fn run(&self, lab: &mut Lab, quick: &Quick) -> Result<Vec<SummaryRow>, String> {
        let rw_locks = rwlocks::core();
        let mut rows = Vec::new();
        for mix in MIXES {
            let points = mix_table(lab, mix, &rw_locks, quick.duration());
            rows.push(SummaryRow::from_measured(
                &format!("rwsem {}", mix.name),
                "Macq/s",
                "ops_per_s",
                1e-6,
                true,
                &points.iter().collect::<Vec<_>>(),
            ));
        }
        Ok(rows)
    }
}
