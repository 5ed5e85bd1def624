//! The kernel's locktorture (`kernel/locking/locktorture.c`) for user
//! space: writer threads (and reader threads, for reader-writer locks)
//! hammer one lock for a fixed time and count every exclusion violation
//! they see. See the `torture` command for the whole story.

use crate::harness::clock::busy;
use crate::peers::mutex::{LabLock, LockKind, MutexVisitor};
use crate::peers::rwlock::{LabRwLock, RwVisitor};
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

/// [`exclusive`] as a visitor, for a registry entry's mutex.
pub struct ExclusiveTorture<'a>(pub &'a TortureConfig);

impl MutexVisitor for ExclusiveTorture<'_> {
    type Out = TortureResult;
    fn visit<K: LockKind>(self) -> TortureResult {
        exclusive::<K>(self.0)
    }
}

/// [`rw`] as a visitor, for a registry entry's reader-writer lock.
pub struct RwTorture<'a>(pub &'a TortureConfig);

impl RwVisitor for RwTorture<'_> {
    type Out = TortureResult;
    fn visit<L: LabRwLock>(self) -> TortureResult {
        rw::<L>(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::mutex::{Api, Busted};

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
}
