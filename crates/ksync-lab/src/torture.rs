//! `torture`: the kernel's locktorture (`kernel/locking/locktorture.c`) for
//! user space.
//!
//! Writer threads (and reader threads, for reader-writer locks) hammer one
//! lock for a fixed time. Inside, each writer sets a "write held" flag and
//! finds it already set if another writer is in too, and each side checks
//! for the other class: any such sighting is an exclusion violation and
//! fails the test (`Fail: N !!!`, exit status 1). Critical sections are
//! usually short with an occasional long hold (`--long-hold-ms`, with the
//! kernel's probabilities, which make the queue pile up), an occasional
//! yield inside, and a one-in-a-million sleep outside; every `--stutter`
//! seconds all threads pause for as long, so the lock keeps going from idle
//! to saturated. At the end it prints the kernel's lines,
//!
//! ```text
//! Writes:  Total: 1234  Max/Min: 400/200   Fail: 0
//! ```
//!
//! with `???` after Max/Min when `max / 2 > min` (a starved thread; flagged,
//! as in the kernel, not failed), and `<lock>-torture:--- End of test:
//! SUCCESS` or `FAILURE`. The writers also count their increments of the
//! protected counter: a lost update fails the test as well.
//!
//! Differences from the kernel: threads instead of kthreads, no RT boost,
//! no CPU hotplug or shuffling, no nested locks; sleeping reader-writer
//! locks use the kernel's rwlock delays (2 µs write, 10 µs read, occasional
//! long hold) rather than its rwsem delays of many milliseconds per
//! acquisition, so that a run of seconds makes millions of acquisitions.
//! The `busted` lock (the kernel's `lock_busted`) lets everyone in, to show
//! that the check fails when it must.

use crate::harness::clock::busy;
use crate::locks::{self, LockEntry, Origin};
use crate::output::lab::Lab;
use crate::output::record::Record;
use crate::output::table::Table;
use crate::peers::{LabLock, LockKind};
use crate::rwsem::{self, LabRwLock, RwEntry};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// One torture run.
#[derive(Debug, Clone)]
pub struct TortureConfig {
    pub writers: usize,
    /// Reader threads (reader-writer locks only).
    pub readers: usize,
    pub duration: Duration,
    /// The occasional long critical section; zero for none.
    pub long_hold: Duration,
    /// Run this long, then pause as long; zero for no stutter.
    pub stutter: Duration,
}

/// What one torture run saw.
#[derive(Debug, Clone, Default)]
pub struct TortureResult {
    /// Acquisitions of each writer thread.
    pub writes: Vec<u64>,
    /// Acquisitions of each reader thread.
    pub reads: Vec<u64>,
    /// Exclusion violations seen by writers (another writer or a reader inside).
    pub write_fails: u64,
    /// Exclusion violations seen by readers (a writer inside).
    pub read_fails: u64,
    /// The protected counter disagrees with the writers' count.
    pub lost_updates: bool,
    pub longest_write_wait: Duration,
    pub longest_read_wait: Duration,
}

impl TortureResult {
    pub fn failed(&self) -> bool {
        self.write_fails > 0 || self.read_fails > 0 || self.lost_updates
    }
}

/// xorshift64*: cheap per-thread randomness for the delay draws.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// True with probability 1/n (never for n == 0).
    fn one_in(&mut self, n: u64) -> bool {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        n != 0 && self.0.wrapping_mul(0x2545_F491_4F6C_DD1D).is_multiple_of(n)
    }
}

/// State every torture thread shares.
struct Shared {
    write_held: AtomicBool,
    readers_in: AtomicU32,
    stop: AtomicBool,
    paused: AtomicBool,
    start_line: Barrier,
}

impl Shared {
    /// The kernel's stutter_wait: sit out a pause.
    fn stutter_wait(&self) {
        while self.paused.load(Ordering::Relaxed) && !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The delays inside a critical section, with the kernel's probabilities.
struct Delays {
    /// 1 / probability of a long hold.
    long_every: u64,
    long_hold: Duration,
    /// 1 / probability of the short delay (0: always).
    short_every: u64,
    short: Duration,
    /// 1 / probability of a yield inside the critical section.
    yield_every: u64,
}

impl Delays {
    fn apply(&self, rng: &mut Rng) {
        if rng.one_in(self.long_every) {
            busy(self.long_hold);
        } else if self.short_every == 0 || rng.one_in(self.short_every) {
            busy(self.short);
        }
        if rng.one_in(self.yield_every) {
            std::thread::yield_now();
        }
    }
}

/// Per thread: acquisitions, violations seen, longest wait.
type ThreadStats = (bool, u64, u64, Duration);

fn run_threads(
    cfg: &TortureConfig,
    writer: &(dyn Fn(&Shared, &mut Rng) -> (bool, Duration) + Sync),
    reader: &(dyn Fn(&Shared, &mut Rng) -> (bool, Duration) + Sync),
) -> Vec<ThreadStats> {
    let threads = cfg.writers + cfg.readers;
    let shared = Shared {
        write_held: AtomicBool::new(false),
        readers_in: AtomicU32::new(0),
        stop: AtomicBool::new(false),
        paused: AtomicBool::new(false),
        start_line: Barrier::new(threads + 1),
    };
    let seed = Instant::now().elapsed().as_nanos() as u64 ^ u64::from(std::process::id());
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let is_writer = t < cfg.writers;
                let shared = &shared;
                s.spawn(move || {
                    let mut rng = Rng::new(seed ^ ((t as u64 + 1) * 0x1000_0001));
                    shared.start_line.wait();
                    let (mut taken, mut fails, mut longest) = (0u64, 0u64, Duration::ZERO);
                    while !shared.stop.load(Ordering::Relaxed) {
                        shared.stutter_wait();
                        // The kernel's one-in-2^20 jiffy sleep, outside the lock.
                        if rng.one_in(1 << 20) {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        let (bad, waited) = if is_writer {
                            writer(shared, &mut rng)
                        } else {
                            reader(shared, &mut rng)
                        };
                        taken += 1;
                        fails += u64::from(bad);
                        longest = longest.max(waited);
                    }
                    (is_writer, taken, fails, longest)
                })
            })
            .collect();
        shared.start_line.wait();
        let end = Instant::now() + cfg.duration;
        let mut running = true;
        loop {
            let now = Instant::now();
            if now >= end {
                break;
            }
            let phase = if cfg.stutter.is_zero() {
                end - now
            } else {
                cfg.stutter.min(end - now)
            };
            std::thread::sleep(phase);
            if !cfg.stutter.is_zero() {
                running = !running;
                shared.paused.store(!running, Ordering::Relaxed);
            }
        }
        shared.stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .map(|w| w.join().expect("torture thread panicked"))
            .collect()
    })
}

fn fold(stats: Vec<ThreadStats>, lost_updates: bool) -> TortureResult {
    let mut r = TortureResult {
        lost_updates,
        ..TortureResult::default()
    };
    for (is_writer, taken, fails, longest) in stats {
        if is_writer {
            r.writes.push(taken);
            r.write_fails += fails;
            r.longest_write_wait = r.longest_write_wait.max(longest);
        } else {
            r.reads.push(taken);
            r.read_fails += fails;
            r.longest_read_wait = r.longest_read_wait.max(longest);
        }
    }
    r
}

/// Tortures an exclusive lock of kind `K` (readers are ignored).
pub fn exclusive<K: LockKind>(cfg: &TortureConfig) -> TortureResult {
    let lock = K::Lock::<u64>::new();
    let n = cfg.writers.max(1) as u64;
    let long_ms = cfg.long_hold.as_millis() as u64;
    let delays = Delays {
        long_every: if long_ms == 0 { 0 } else { n * 2000 * long_ms },
        long_hold: cfg.long_hold,
        short_every: n * 400,
        short: Duration::from_micros(2),
        yield_every: n * 20_000,
    };
    let writer = |sh: &Shared, rng: &mut Rng| {
        let asked = Instant::now();
        lock.with(|v| {
            let waited = asked.elapsed();
            let mut bad = sh.write_held.swap(true, Ordering::Relaxed);
            bad |= sh.readers_in.load(Ordering::Relaxed) != 0;
            *v += 1;
            delays.apply(rng);
            sh.write_held.store(false, Ordering::Relaxed);
            (bad, waited)
        })
    };
    let no_reader = |_: &Shared, _: &mut Rng| (false, Duration::ZERO);
    let cfg = TortureConfig {
        readers: 0,
        ..cfg.clone()
    };
    let stats = run_threads(&cfg, &writer, &no_reader);
    let writes: u64 = stats.iter().map(|s| s.1).sum();
    fold(stats, lock.with(|v| *v) != writes)
}

/// Tortures a reader-writer lock with writers and readers.
pub fn rw<L: LabRwLock>(cfg: &TortureConfig) -> TortureResult {
    let lock = L::new();
    let long_ms = cfg.long_hold.as_millis() as u64;
    let every = |threads: usize| {
        if long_ms == 0 {
            0
        } else {
            threads.max(1) as u64 * 2000 * long_ms
        }
    };
    let write_delays = Delays {
        long_every: every(cfg.writers),
        long_hold: cfg.long_hold,
        short_every: 0,
        short: Duration::from_micros(2),
        yield_every: cfg.writers.max(1) as u64 * 20_000,
    };
    let read_delays = Delays {
        long_every: every(cfg.readers),
        long_hold: cfg.long_hold,
        short_every: 0,
        short: Duration::from_micros(10),
        yield_every: cfg.readers.max(1) as u64 * 20_000,
    };
    let writer = |sh: &Shared, rng: &mut Rng| {
        let asked = Instant::now();
        lock.write(|v| {
            let waited = asked.elapsed();
            let mut bad = sh.write_held.swap(true, Ordering::Relaxed);
            bad |= sh.readers_in.load(Ordering::Relaxed) != 0;
            *v += 1;
            write_delays.apply(rng);
            sh.write_held.store(false, Ordering::Relaxed);
            (bad, waited)
        })
    };
    let reader = |sh: &Shared, rng: &mut Rng| {
        let asked = Instant::now();
        lock.read(|_| {
            let waited = asked.elapsed();
            sh.readers_in.fetch_add(1, Ordering::Relaxed);
            let bad = sh.write_held.load(Ordering::Relaxed);
            read_delays.apply(rng);
            sh.readers_in.fetch_sub(1, Ordering::Relaxed);
            (bad, waited)
        })
    };
    let stats = run_threads(cfg, &writer, &reader);
    let writes: u64 = stats.iter().filter(|s| s.0).map(|s| s.1).sum();
    fold(stats, lock.read(|v| *v) != writes)
}

/// `torture`'s options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Comma-separated mutexes (see `list`; `busted` is the broken self-test
    /// lock). Default, with --rw-locks also empty: every ksync lock.
    #[arg(long, value_delimiter = ',')]
    pub locks: Vec<String>,
    /// Comma-separated reader-writer locks (see `list`).
    #[arg(long, value_delimiter = ',')]
    pub rw_locks: Vec<String>,
    /// Writer threads; default twice the cores (exclusive locks) or the
    /// cores (reader-writer locks), as the kernel's nwriters_stress.
    #[arg(long)]
    pub writers: Option<usize>,
    /// Reader threads for reader-writer locks; default the cores.
    #[arg(long)]
    pub readers: Option<usize>,
    /// Seconds per lock.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// The occasional long critical section, milliseconds (kernel: long_hold=100); 0 for none.
    #[arg(long, default_value_t = 100)]
    pub long_hold_ms: u64,
    /// Seconds of running between pauses of the same length (kernel: stutter); 0 for none.
    #[arg(long, default_value_t = 1.0)]
    pub stutter: f64,
}

enum Target {
    Mutex(LockEntry),
    Rw(RwEntry),
}

/// Runs `torture`; an exclusion violation marks the lab failed (exit 1).
pub fn run(lab: &mut Lab, args: Args) -> Result<(), String> {
    let duration = crate::seconds_arg("--seconds", args.seconds)?;
    if !(args.stutter.is_finite() && args.stutter >= 0.0 && args.stutter <= 3600.0) {
        return Err(format!(
            "--stutter must be in [0, 3600] seconds, not {}",
            args.stutter
        ));
    }
    if args.long_hold_ms > 10_000 {
        return Err(format!(
            "--long-hold-ms must be at most 10000, not {}",
            args.long_hold_ms
        ));
    }
    let stutter = Duration::from_secs_f64(args.stutter);
    let nothing_named = args.locks.is_empty() && args.rw_locks.is_empty();
    let mut targets = Vec::new();
    if nothing_named || !args.locks.is_empty() {
        let mutexes = locks::pick(
            locks::registry_with_busted(),
            &args.locks,
            |e| e.name,
            "lock",
            |all| {
                all.into_iter()
                    .filter(|e| e.core && e.origin == Origin::Ksync)
                    .collect()
            },
        )?;
        targets.extend(mutexes.into_iter().map(Target::Mutex));
    }
    if nothing_named || !args.rw_locks.is_empty() {
        let rws = locks::pick(
            rwsem::registry(),
            &args.rw_locks,
            |e| e.name,
            "reader-writer lock",
            |all| all.into_iter().filter(|e| e.ksync).collect(),
        )?;
        targets.extend(rws.into_iter().map(Target::Rw));
    }
    for (flag, n) in [("--writers", args.writers), ("--readers", args.readers)] {
        if let Some(n) = n {
            if n > 4096 {
                return Err(format!("{flag} must be at most 4096, not {n}"));
            }
        }
    }
    if args.writers == Some(0) {
        return Err("--writers must be at least 1".into());
    }
    let cores = lab.machine().cores;
    lab.print(&format!("machine: {}\n", lab.machine()));
    lab.plan(targets.len() as u64, duration);
    let mut summary = Table::new([
        "lock",
        "writers",
        "readers",
        "writes",
        "w max/min (??? starved)",
        "reads",
        "r max/min",
        "fail",
        "longest write wait ms",
        "result",
    ]);
    let mut failures = Vec::new();
    for target in &targets {
        let (name, is_rw, ksync) = match target {
            Target::Mutex(e) => (e.name, false, e.origin == Origin::Ksync),
            Target::Rw(e) => (e.name, true, e.ksync),
        };
        let writers = args
            .writers
            .unwrap_or(if is_rw { cores } else { 2 * cores });
        let readers = if is_rw {
            args.readers.unwrap_or(cores)
        } else {
            0
        };
        let cfg = TortureConfig {
            writers,
            readers,
            duration,
            long_hold: Duration::from_millis(args.long_hold_ms),
            stutter,
        };
        let params = format!(
            "nwriters_stress={writers} nreaders_stress={readers} long_hold={} stutter={} seconds={}",
            args.long_hold_ms, args.stutter, args.seconds
        );
        lab.print(&format!(
            "\n## {name}-torture: {writers} writers, {readers} readers, {} s, long hold {} ms, stutter {} s\n\n",
            args.seconds, args.long_hold_ms, args.stutter
        ));
        let mut outcomes = Vec::new();
        let measured = lab.measure(&format!("torture {name}"), || {
            let r = match target {
                Target::Mutex(e) => (e.torture)(&cfg),
                Target::Rw(e) => (e.torture)(&cfg),
            };
            let record = record(name, ksync, &cfg, &r, args.long_hold_ms, args.stutter);
            outcomes.push(r);
            record
        });
        let mut failed = false;
        for r in &outcomes {
            lab.print(&kernel_lines(r, is_rw));
            failed |= r.failed();
        }
        let verdict = if failed { "FAILURE" } else { "SUCCESS" };
        lab.print(&format!(
            "{name}-torture:--- End of test: {verdict}: {params}\n"
        ));
        if failed {
            failures.push(name);
        }
        let fails = measured.max.get("write_fail").copied().unwrap_or(0.0)
            + measured.max.get("read_fail").copied().unwrap_or(0.0);
        summary.row(vec![
            name.to_string(),
            writers.to_string(),
            readers.to_string(),
            measured.show("writes", 0),
            format!(
                "{}/{}{}",
                measured.get("write_max"),
                measured.get("write_min"),
                if measured.max.get("starved").copied().unwrap_or(0.0) > 0.0 {
                    " ???"
                } else {
                    ""
                }
            ),
            measured.show("reads", 0),
            if is_rw {
                format!("{}/{}", measured.get("read_max"), measured.get("read_min"))
            } else {
                "-".into()
            },
            format!("{fails}"),
            measured.show_scaled("longest_write_wait_us", 1e-3, 1),
            verdict.to_string(),
        ]);
    }
    if targets.len() > 1 || lab.repeat() > 1 {
        lab.print(&format!("\n## Torture summary\n\n{}", summary.render()));
    }
    if !failures.is_empty() {
        lab.fail(format!(
            "torture FAILED (exclusion violated or updates lost) for: {}",
            failures.join(", ")
        ));
    }
    Ok(())
}

fn record(
    name: &str,
    ksync: bool,
    cfg: &TortureConfig,
    r: &TortureResult,
    long_hold_ms: u64,
    stutter: f64,
) -> Record {
    let max = |v: &[u64]| v.iter().copied().max().unwrap_or(0) as f64;
    let min = |v: &[u64]| v.iter().copied().min().unwrap_or(0) as f64;
    Record::new(
        "torture",
        &format!("{} writers, {} readers", cfg.writers, cfg.readers),
        name,
        ksync,
        cfg.writers + cfg.readers,
    )
    .param("seconds", cfg.duration.as_secs_f64())
    .param("long_hold_ms", long_hold_ms)
    .param("stutter_s", stutter)
    .metric("writes", r.writes.iter().sum::<u64>() as f64)
    .metric("reads", r.reads.iter().sum::<u64>() as f64)
    .metric("write_max", max(&r.writes))
    .metric("write_min", min(&r.writes))
    .metric("read_max", max(&r.reads))
    .metric("read_min", min(&r.reads))
    .metric("write_fail", r.write_fails as f64)
    .metric("read_fail", r.read_fails as f64)
    .metric("lost_updates", f64::from(u8::from(r.lost_updates)))
    .metric(
        "starved",
        f64::from(u8::from(starved(&r.writes) || starved(&r.reads))),
    )
    .metric(
        "longest_write_wait_us",
        r.longest_write_wait.as_secs_f64() * 1e6,
    )
    .metric(
        "longest_read_wait_us",
        r.longest_read_wait.as_secs_f64() * 1e6,
    )
    .metric("success", f64::from(u8::from(!r.failed())))
}

/// The kernel's unfairness flag: the busiest thread took more than twice
/// what the least busy one did.
fn starved(counts: &[u64]) -> bool {
    let max = counts.iter().copied().max().unwrap_or(0);
    let min = counts.iter().copied().min().unwrap_or(0);
    max / 2 > min
}

/// locktorture's statistics lines.
fn kernel_lines(r: &TortureResult, is_rw: bool) -> String {
    let line = |label: &str, counts: &[u64], fails: u64| {
        let total: u64 = counts.iter().sum();
        let max = counts.iter().copied().max().unwrap_or(0);
        let min = counts.iter().copied().min().unwrap_or(0);
        format!(
            "{label}:  Total: {total}  Max/Min: {max}/{min} {}  Fail: {fails} {}\n",
            if starved(counts) { "???" } else { "   " },
            if fails > 0 { "!!!" } else { "" }
        )
    };
    let mut out = line("Writes", &r.writes, r.write_fails);
    if is_rw {
        out.push_str(&line("Reads ", &r.reads, r.read_fails));
    }
    if r.lost_updates {
        out.push_str("Lost updates: the protected counter disagrees with the writes counted !!!\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::{Api, Busted};

    fn quick() -> TortureConfig {
        TortureConfig {
            writers: 4,
            readers: 2,
            duration: Duration::from_millis(150),
            long_hold: Duration::from_millis(1),
            stutter: Duration::from_millis(40),
        }
    }

    #[test]
    fn a_real_lock_passes() {
        let r = exclusive::<Api<ksync::spin::RawQSpinLock>>(&quick());
        assert!(!r.failed(), "{r:?}");
        assert_eq!(r.writes.len(), 4);
        assert!(r.reads.is_empty());
        let r = rw::<lock_api::RwLock<ksync::rwsem::RawRwSem, u64>>(&quick());
        assert!(!r.failed(), "{r:?}");
        assert_eq!((r.writes.len(), r.reads.len()), (4, 2));
    }

    #[test]
    fn the_busted_lock_fails() {
        let r = exclusive::<Busted>(&quick());
        assert!(r.failed());
        assert!(r.lost_updates);
    }

    #[test]
    fn starvation_flag_follows_the_kernel() {
        assert!(starved(&[10, 4]));
        assert!(!starved(&[10, 5]));
        assert!(kernel_lines(
            &TortureResult {
                writes: vec![10, 1],
                write_fails: 2,
                ..Default::default()
            },
            false
        )
        .contains("Max/Min: 10/1 ???  Fail: 2 !!!"));
    }
}
