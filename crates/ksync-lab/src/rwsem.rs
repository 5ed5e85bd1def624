//! Seed 002's reader-writer semaphore mixes (rw, r1, r2, ro, w1, wo).
//!
//! The 2001 test programs are not public; their descendant, Howells'
//! `synchro-test` module, runs `rd` reader and `wr` writer threads for a fixed
//! time, each looping `down; hold for load µs; up; wait interval µs`, and
//! reports acquisitions per class ("reads taken", "writes taken"). The seed's
//! output shows which modes have readers only (r1, r2, ro) and writers only
//! (w1, wo); the thread counts below are the reading in
//! `shared/reference/benchmarks.md` §3.2 (r1/w1 one thread, r2 two, ro/wo
//! many, rw many of both), kept in one table so exact definitions can be
//! dropped in when the programs turn up.

use crate::bench::share_range;
use crate::harness::clock::busy;
use crate::locks;
use crate::output::lab::Lab;
use crate::output::lock_stats::lock_stats_text;
use crate::output::record::{Measured, Record};
use crate::output::table::Table;
use crate::torture::{self, TortureConfig, TortureResult};
use ksync::stat::{LockStatSnapshot, LockStats, Stat};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// One of seed 002's modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mix {
    pub name: &'static str,
    pub readers: usize,
    pub writers: usize,
    /// Busy time inside the lock per acquisition, microseconds.
    pub load_us: u32,
    /// Busy time outside the lock between acquisitions, microseconds.
    pub interval_us: u32,
    /// What the mix stands for.
    pub about: &'static str,
}

/// The six mixes. Load and interval follow synchro-test's defaults (2 µs)
/// for the contended modes and are zero for the single-thread fast-path ones.
pub const MIXES: [Mix; 6] = [
    Mix {
        name: "rw",
        readers: 8,
        writers: 4,
        load_us: 2,
        interval_us: 2,
        about: "many readers and writers together (the only mixed mode; Andrea ran it 50 s)",
    },
    Mix {
        name: "r1",
        readers: 1,
        writers: 0,
        load_us: 0,
        interval_us: 0,
        about: "one reader: the uncontended read fast path",
    },
    Mix {
        name: "r2",
        readers: 2,
        writers: 0,
        load_us: 0,
        interval_us: 0,
        about: "two readers, one per CPU of the 2001 two-way box: the count word bouncing",
    },
    Mix {
        name: "ro",
        readers: 16,
        writers: 0,
        load_us: 2,
        interval_us: 2,
        about: "many readers only",
    },
    Mix {
        name: "w1",
        readers: 0,
        writers: 1,
        load_us: 0,
        interval_us: 0,
        about: "one writer: the uncontended write fast path",
    },
    Mix {
        name: "wo",
        readers: 0,
        writers: 16,
        load_us: 2,
        interval_us: 2,
        about: "many writers only",
    },
];

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
        "Seed 002 names the modes but not their thread counts; this is the reading of \
         shared/reference/benchmarks.md 3.2 (r-modes print only reads, w-modes only writes)."
            .into(),
    );
    t
}

/// A reader-writer lock protecting one `u64`, as the mixes use it.
pub trait LabRwLock: Send + Sync + 'static {
    fn new() -> Self;
    fn read<R>(&self, f: impl FnOnce(&u64) -> R) -> R;
    fn write<R>(&self, f: impl FnOnce(&mut u64) -> R) -> R;
    /// The lock's statistics, for a lock that keeps them ([`StatRwLock`]).
    fn lock_stats(&self) -> Option<LockStatSnapshot> {
        None
    }
    /// Zeroes the statistics and restarts their window (while idle).
    fn reset_lock_stats(&self) {}
}

/// `lock_api::RwLock<Stat<R, HOLD>, u64>`: a raw reader-writer lock wrapped
/// in `ksync::stat::Stat`, which keeps lock statistics (`rwsem+stat`). A
/// newtype only so that [`LabRwLock::lock_stats`] can read them.
pub struct StatRwLock<R, const HOLD: u32 = { ksync::stat::DEFAULT_HOLD_SAMPLING }>(
    lock_api::RwLock<Stat<R, HOLD>, u64>,
);

impl<R, const HOLD: u32> LabRwLock for StatRwLock<R, HOLD>
where
    R: lock_api::RawRwLock + Send + Sync + 'static,
{
    fn new() -> Self {
        StatRwLock(lock_api::RwLock::new(0))
    }
    #[inline(always)]
    fn read<T>(&self, f: impl FnOnce(&u64) -> T) -> T {
        f(&self.0.read())
    }
    #[inline(always)]
    fn write<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        f(&mut self.0.write())
    }
    fn lock_stats(&self) -> Option<LockStatSnapshot> {
        Some(LockStats::snapshot(&self.0))
    }
    fn reset_lock_stats(&self) {
        LockStats::reset(&self.0)
    }
}

impl<R> LabRwLock for lock_api::RwLock<R, u64>
where
    R: lock_api::RawRwLock + Send + Sync + 'static,
{
    fn new() -> Self {
        lock_api::RwLock::new(0)
    }
    #[inline(always)]
    fn read<T>(&self, f: impl FnOnce(&u64) -> T) -> T {
        f(&self.read())
    }
    #[inline(always)]
    fn write<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        f(&mut self.write())
    }
}

impl LabRwLock for std::sync::RwLock<u64> {
    fn new() -> Self {
        std::sync::RwLock::new(0)
    }
    #[inline(always)]
    fn read<T>(&self, f: impl FnOnce(&u64) -> T) -> T {
        f(&self
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
    #[inline(always)]
    fn write<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        f(&mut self
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// `spin::rwlock::RwLock`: the `spin` crate's reader-preferring spinning
/// reader-writer lock.
impl LabRwLock for spin::rwlock::RwLock<u64> {
    fn new() -> Self {
        spin::rwlock::RwLock::new(0)
    }
    #[inline(always)]
    fn read<T>(&self, f: impl FnOnce(&u64) -> T) -> T {
        f(&self.read())
    }
    #[inline(always)]
    fn write<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        f(&mut self.write())
    }
}

/// glibc's `pthread_rwlock_t` (default attributes: readers preferred).
pub struct PthreadRwLock {
    raw: Box<UnsafeCell<libc::pthread_rwlock_t>>,
    value: UnsafeCell<u64>,
}

// SAFETY: the rwlock serialises writers against everyone; readers only read.
unsafe impl Sync for PthreadRwLock {}
// SAFETY: an unlocked pthread rwlock may be destroyed from any thread.
unsafe impl Send for PthreadRwLock {}

impl LabRwLock for PthreadRwLock {
    fn new() -> Self {
        PthreadRwLock {
            raw: Box::new(UnsafeCell::new(libc::PTHREAD_RWLOCK_INITIALIZER)),
            value: UnsafeCell::new(0),
        }
    }
    #[inline(always)]
    fn read<T>(&self, f: impl FnOnce(&u64) -> T) -> T {
        // SAFETY: initialised rwlock at a stable address; lock and unlock
        // pair on this thread; `value` is only read while the read lock is held.
        unsafe {
            libc::pthread_rwlock_rdlock(self.raw.get());
            let out = f(&*self.value.get());
            libc::pthread_rwlock_unlock(self.raw.get());
            out
        }
    }
    #[inline(always)]
    fn write<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        // SAFETY: as above, with the write lock held for the mutable access.
        unsafe {
            libc::pthread_rwlock_wrlock(self.raw.get());
            let out = f(&mut *self.value.get());
            libc::pthread_rwlock_unlock(self.raw.get());
            out
        }
    }
}

impl Drop for PthreadRwLock {
    fn drop(&mut self) {
        // SAFETY: we own the lock and nobody holds it.
        unsafe { libc::pthread_rwlock_destroy(self.raw.get()) };
    }
}

/// What one mix measured for one lock.
#[derive(Debug, Clone)]
pub struct MixResult {
    pub reads: u64,
    pub writes: u64,
    pub elapsed: Duration,
    /// Each reader's acquisitions.
    pub per_reader: Vec<u64>,
    /// Each writer's acquisitions.
    pub per_writer: Vec<u64>,
    pub longest_read_wait: Duration,
    pub longest_write_wait: Duration,
    /// Writers' increments all survived and no reader saw a writer inside.
    pub exact: bool,
    /// The lock's statistics over the run, for a `+stat` lock.
    pub lock_stats: Option<LockStatSnapshot>,
}

/// Runs `mix` on a fresh `L` for `duration`.
pub fn run_mix<L: LabRwLock>(mix: Mix, duration: Duration) -> MixResult {
    let lock = L::new();
    // Set while a writer is inside: a reader that sees it, or a writer that
    // finds it already set, caught the lock failing to exclude.
    let writer_inside = AtomicBool::new(false);
    let torn = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let threads = mix.readers + mix.writers;
    let start_line = Barrier::new(threads + 1);
    let load = Duration::from_micros(u64::from(mix.load_us));
    let interval = Duration::from_micros(u64::from(mix.interval_us));
    let (results, elapsed): (Vec<(bool, u64, Duration)>, Duration) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let is_writer = t >= mix.readers;
                let (lock, writer_inside, torn, stop, start_line) =
                    (&lock, &writer_inside, &torn, &stop, &start_line);
                s.spawn(move || {
                    start_line.wait();
                    let mut taken = 0u64;
                    let mut longest = Duration::ZERO;
                    while !stop.load(Ordering::Relaxed) {
                        let asked = Instant::now();
                        if is_writer {
                            lock.write(|v| {
                                longest = longest.max(asked.elapsed());
                                if writer_inside.swap(true, Ordering::Relaxed) {
                                    torn.store(true, Ordering::Relaxed);
                                }
                                *v += 1;
                                busy(load);
                                writer_inside.store(false, Ordering::Relaxed);
                            });
                        } else {
                            lock.read(|_| {
                                longest = longest.max(asked.elapsed());
                                if writer_inside.load(Ordering::Relaxed) {
                                    torn.store(true, Ordering::Relaxed);
                                }
                                busy(load);
                            });
                        }
                        taken += 1;
                        busy(interval);
                    }
                    (is_writer, taken, longest)
                })
            })
            .collect();
        // The workers wait at the start line: the lock is idle.
        lock.reset_lock_stats();
        start_line.wait();
        let start = Instant::now();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        let results = workers
            .into_iter()
            .map(|w| w.join().expect("rwsem benchmark thread panicked"))
            .collect();
        (results, start.elapsed())
    });
    let counts = |writer: bool| -> Vec<u64> {
        results
            .iter()
            .filter(|r| r.0 == writer)
            .map(|r| r.1)
            .collect()
    };
    let longest = |writer: bool| {
        results
            .iter()
            .filter(|r| r.0 == writer)
            .map(|r| r.2)
            .max()
            .unwrap_or_default()
    };
    let (per_reader, per_writer) = (counts(false), counts(true));
    let writes = per_writer.iter().sum();
    // Before the check below takes the lock once more.
    let lock_stats = lock.lock_stats();
    let counted = lock.read(|v| *v);
    MixResult {
        reads: per_reader.iter().sum(),
        writes,
        elapsed,
        per_reader,
        per_writer,
        longest_read_wait: longest(false),
        longest_write_wait: longest(true),
        exact: counted == writes && !torn.load(Ordering::Relaxed),
        lock_stats,
    }
}

/// One reader-writer lock, with its loops monomorphised.
pub struct RwEntry {
    pub name: &'static str,
    pub ksync: bool,
    /// Part of the default set (`rwsem`, `compare`, torture); `+stat`
    /// variants are measured when named or with `--lock-stats`.
    pub core: bool,
    pub about: &'static str,
    pub run: fn(Mix, Duration) -> MixResult,
    pub torture: fn(&TortureConfig) -> TortureResult,
}

fn entry<L: LabRwLock>(name: &'static str, ksync: bool, about: &'static str) -> RwEntry {
    RwEntry {
        name,
        ksync,
        core: true,
        about,
        run: run_mix::<L>,
        torture: torture::rw::<L>,
    }
}

/// The core reader-writer locks, ksync's first: the default set.
pub fn registry() -> Vec<RwEntry> {
    all().into_iter().filter(|e| e.core).collect()
}

/// Every reader-writer lock, the `+stat` variants included.
pub fn all() -> Vec<RwEntry> {
    use ksync::rwsem::{RawRwSem, RawSpinRwSem};
    vec![
        entry::<lock_api::RwLock<RawRwSem, u64>>("rwsem", true, "ksync kernel rwsem"),
        entry::<lock_api::RwLock<RawSpinRwSem, u64>>(
            "spin-rwsem",
            true,
            "ksync 2001 generic rwsem",
        ),
        RwEntry {
            core: false,
            ..entry::<StatRwLock<RawRwSem>>(
                "rwsem+stat",
                true,
                "ksync kernel rwsem with lock statistics (Stat)",
            )
        },
        RwEntry {
            core: false,
            ..entry::<StatRwLock<RawSpinRwSem>>(
                "spin-rwsem+stat",
                true,
                "ksync 2001 generic rwsem with lock statistics (Stat)",
            )
        },
        entry::<parking_lot::RwLock<u64>>("parking_lot", false, "parking_lot::RwLock"),
        entry::<std::sync::RwLock<u64>>("std", false, "std::sync::RwLock"),
        entry::<spin::rwlock::RwLock<u64>>("spin", false, "spin::rwlock::RwLock (spins)"),
        entry::<PthreadRwLock>("pthread", false, "glibc pthread_rwlock_t"),
    ]
}

/// Measures `mix` on every lock in `locks`, prints its table and returns the points.
pub fn mix_table(lab: &mut Lab, mix: Mix, locks: &[RwEntry], duration: Duration) -> Vec<Measured> {
    let seconds = duration.as_secs_f64();
    let mut points = Vec::with_capacity(locks.len());
    let mut stats = Vec::new();
    for lock in locks {
        let mut last_stats = None;
        let m = lab.measure(&format!("rwsem {} {}", mix.name, lock.name), || {
            let r = (lock.run)(mix, duration);
            last_stats = r.lock_stats;
            let (rmin, rmax) = share_range(&r.per_reader);
            let (wmin, wmax) = share_range(&r.per_writer);
            let secs = r.elapsed.as_secs_f64();
            let rec = Record::new(
                "rwsem",
                &format!("mix {}", mix.name),
                lock.name,
                lock.ksync,
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
            match &r.lock_stats {
                Some(s) => rec.lock_stats(s),
                None => rec,
            }
        });
        points.push(m);
        if let Some(s) = last_stats {
            stats.push((lock.name.to_string(), s));
        }
    }
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
                crate::output::record::ratio_text(p.get("ops_per_s") / b.get("ops_per_s"))
            }),
            share(p, "reader", mix.readers),
            share(p, "writer", mix.writers),
            p.show_scaled("longest_read_wait_us", 1e-3, 3),
            p.show_scaled("longest_write_wait_us", 1e-3, 3),
            if p.min.get("exact").copied().unwrap_or(0.0) == 1.0 {
                "yes".into()
            } else {
                "NO: EXCLUSION FAILED".into()
            },
        ]);
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
    lab.print(&lock_stats_text(
        &stats,
        &crate::output::lock_stats::runs_covered(lab.repeat()),
    ));
    points
}

/// `rwsem`'s options.
#[derive(clap::Args, Debug)]
#[command(after_help = "Mixes (seed 002; see --list-mixes):\n  \
    rw  8 readers + 4 writers, load 2 us, interval 2 us\n  \
    r1  1 reader\n  r2  2 readers\n  ro  16 readers, load 2 us, interval 2 us\n  \
    w1  1 writer\n  wo  16 writers, load 2 us, interval 2 us")]
pub struct Args {
    /// Comma-separated mixes: rw, r1, r2, ro, w1, wo; default: all.
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

/// `--lock-stats`: each ksync lock replaced by its `+stat` entry where there
/// is one, without naming one twice.
fn with_lock_stats(entries: Vec<RwEntry>) -> Vec<RwEntry> {
    let mut out: Vec<RwEntry> = Vec::with_capacity(entries.len());
    for e in entries {
        let e = if e.ksync && locks::stat_base(e.name).is_none() {
            let wanted = format!("{}{}", e.name, locks::STAT_SUFFIX);
            all().into_iter().find(|s| s.name == wanted).unwrap_or(e)
        } else {
            e
        };
        if out.iter().all(|o| o.name != e.name) {
            out.push(e);
        }
    }
    out
}

/// Runs `rwsem`.
pub fn run(lab: &mut Lab, args: Args) -> Result<(), String> {
    if args.list_mixes {
        lab.print(&mixes_table().render());
        return Ok(());
    }
    let duration = crate::seconds_arg("--seconds", args.seconds)?;
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
        locks::pick(MIXES.to_vec(), &args.mixes, |m| m.name, "mix", |all| all)?
    };
    let mut rw_locks = locks::pick(
        all(),
        &args.locks,
        |e| e.name,
        "reader-writer lock",
        |all| all.into_iter().filter(|e| e.core).collect(),
    )?;
    if args.lock_stats {
        rw_locks = with_lock_stats(rw_locks);
    }
    lab.print(&format!("machine: {}\n", lab.machine()));
    lab.plan((mixes.len() * rw_locks.len()) as u64, duration);
    for mix in mixes {
        mix_table(lab, mix, &rw_locks, duration);
    }
    Ok(())
}
