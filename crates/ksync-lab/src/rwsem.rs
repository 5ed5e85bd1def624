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

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// One of seed 002's modes.
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    pub name: &'static str,
    pub readers: usize,
    pub writers: usize,
    /// Busy time inside the lock per acquisition, microseconds.
    pub load_us: u32,
    /// Busy time outside the lock between acquisitions, microseconds.
    pub interval_us: u32,
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
    },
    Mix {
        name: "r1",
        readers: 1,
        writers: 0,
        load_us: 0,
        interval_us: 0,
    },
    Mix {
        name: "r2",
        readers: 2,
        writers: 0,
        load_us: 0,
        interval_us: 0,
    },
    Mix {
        name: "ro",
        readers: 16,
        writers: 0,
        load_us: 2,
        interval_us: 2,
    },
    Mix {
        name: "w1",
        readers: 0,
        writers: 1,
        load_us: 0,
        interval_us: 0,
    },
    Mix {
        name: "wo",
        readers: 0,
        writers: 16,
        load_us: 2,
        interval_us: 2,
    },
];

/// A reader-writer lock protecting one `u64`, as the mixes use it.
pub trait LabRwLock: Send + Sync + 'static {
    fn new() -> Self;
    fn read<R>(&self, f: impl FnOnce(&u64) -> R) -> R;
    fn write<R>(&self, f: impl FnOnce(&mut u64) -> R) -> R;
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
    /// Each thread's acquisitions, readers first.
    pub per_thread: Vec<u64>,
    pub longest_read_wait: Duration,
    pub longest_write_wait: Duration,
    /// Writers' increments all survived and no reader saw a writer inside.
    pub exact: bool,
}

impl MixResult {
    /// The smallest per-thread count over the largest, per class that ran:
    /// near 1 is fair, near 0 is a starved thread.
    pub fn min_over_max(&self) -> f64 {
        let min = self.per_thread.iter().copied().min().unwrap_or(0) as f64;
        let max = self.per_thread.iter().copied().max().unwrap_or(0) as f64;
        if max == 0.0 {
            0.0
        } else {
            min / max
        }
    }
}

fn busy(micros: u32) {
    if micros == 0 {
        return;
    }
    let until = Instant::now() + Duration::from_micros(u64::from(micros));
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Runs `mix` on a fresh `L` for `duration`.
pub fn run<L: LabRwLock>(mix: Mix, duration: Duration) -> MixResult {
    let lock = L::new();
    // Set while a writer is inside: a reader that sees it, or a writer that
    // finds it already set, caught the lock failing to exclude.
    let writer_inside = AtomicBool::new(false);
    let torn = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let threads = mix.readers + mix.writers;
    let start_line = Barrier::new(threads + 1);
    let results: Vec<(bool, u64, Duration)> = std::thread::scope(|s| {
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
                                busy(mix.load_us);
                                writer_inside.store(false, Ordering::Relaxed);
                            });
                        } else {
                            lock.read(|_| {
                                longest = longest.max(asked.elapsed());
                                if writer_inside.load(Ordering::Relaxed) {
                                    torn.store(true, Ordering::Relaxed);
                                }
                                busy(mix.load_us);
                            });
                        }
                        taken += 1;
                        busy(mix.interval_us);
                    }
                    (is_writer, taken, longest)
                })
            })
            .collect();
        start_line.wait();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .map(|w| w.join().expect("rwsem benchmark thread panicked"))
            .collect()
    });
    let sum = |writer: bool| -> u64 { results.iter().filter(|r| r.0 == writer).map(|r| r.1).sum() };
    let longest = |writer: bool| {
        results
            .iter()
            .filter(|r| r.0 == writer)
            .map(|r| r.2)
            .max()
            .unwrap_or_default()
    };
    let writes = sum(true);
    let counted = lock.read(|v| *v);
    MixResult {
        reads: sum(false),
        writes,
        per_thread: results.iter().map(|r| r.1).collect(),
        longest_read_wait: longest(false),
        longest_write_wait: longest(true),
        exact: counted == writes && !torn.load(Ordering::Relaxed),
    }
}

/// One reader-writer lock, with its mix loop monomorphised.
pub struct RwEntry {
    pub name: &'static str,
    pub ksync: bool,
    pub about: &'static str,
    pub run: fn(Mix, Duration) -> MixResult,
}

fn entry<L: LabRwLock>(name: &'static str, ksync: bool, about: &'static str) -> RwEntry {
    RwEntry {
        name,
        ksync,
        about,
        run: run::<L>,
    }
}

/// Every reader-writer lock, ksync's first.
pub fn registry() -> Vec<RwEntry> {
    use ksync::rwsem::{RawRwSem, RawSpinRwSem};
    vec![
        entry::<lock_api::RwLock<RawRwSem, u64>>("rwsem", true, "ksync kernel rwsem"),
        entry::<lock_api::RwLock<RawSpinRwSem, u64>>(
            "spin-rwsem",
            true,
            "ksync 2001 generic rwsem",
        ),
        entry::<parking_lot::RwLock<u64>>("parking_lot", false, "parking_lot::RwLock"),
        entry::<std::sync::RwLock<u64>>("std", false, "std::sync::RwLock"),
        entry::<PthreadRwLock>("pthread", false, "glibc pthread_rwlock_t"),
    ]
}
