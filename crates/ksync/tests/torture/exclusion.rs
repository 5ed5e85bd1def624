//! The exclusion check every lock's torture test runs through.
//!
//! N threads each take the lock `iters` times. Inside, they do two things a
//! broken lock cannot survive:
//!
//! * an occupancy count: `inside.fetch_add(1)` must return 0 (nobody else is
//!   in), else it is an exclusion violation, counted exactly;
//! * a non-atomic increment of a shared counter (a relaxed load, a short
//!   pause, a relaxed store: no read-modify-write instruction), so two
//!   threads inside at once lose increments and the total comes out short.
//!
//! The counter uses relaxed atomics rather than a plain `u64` so that a
//! broken lock produces lost updates, not undefined behaviour; on x86 and Arm
//! the loads and stores compile to the same plain moves.
//!
//! It also holds the generic `try_lock`, panic and several-locks checks
//! every mutex runs.
//!
//! Every run has a watchdog: a lock that deadlocks or starves a thread fails
//! the test after a generous bound instead of hanging CI.
#![allow(dead_code)]

use lock_api::{GuardSend, RawMutex};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

/// What one torture run saw.
#[derive(Debug, Clone)]
pub struct Report {
    pub threads: usize,
    pub iters: u64,
    /// The counter's final value; `threads * iters` for a correct lock.
    pub counted: u64,
    /// Times a thread entered while another was inside.
    pub violations: u64,
    pub elapsed: Duration,
}

impl Report {
    pub fn expected(&self) -> u64 {
        self.threads as u64 * self.iters
    }

    /// Exact count and no violation.
    pub fn is_exact(&self) -> bool {
        self.counted == self.expected() && self.violations == 0
    }
}

struct Shared<R> {
    lock: R,
    inside: AtomicUsize,
    violations: AtomicU64,
    counter: AtomicU64,
}

/// How long a torture run may take before the watchdog calls it stuck.
pub const WATCHDOG: Duration = Duration::from_secs(240);

/// A way to run a critical section under some lock: any raw mutex through
/// `lock`/`unlock`, or a lock that takes the section as a closure (the
/// combining lock). The closure must be `Send`: a combining lock may run it
/// on another thread.
pub trait Exclusive: Send + Sync + 'static {
    fn critical(&self, section: impl FnOnce() + Send);
}

/// Any raw mutex, through lock and unlock.
pub struct Raw<R>(pub R);

impl<R: RawMutex + Send + Sync + 'static> Exclusive for Raw<R> {
    fn critical(&self, section: impl FnOnce() + Send) {
        let guard = self.0.lock();
        section();
        // SAFETY: `guard` came from `lock()` on this same lock just above.
        unsafe { self.0.unlock(guard) };
    }
}

/// A shared lock is the lock.
impl<L: Exclusive> Exclusive for Arc<L> {
    fn critical(&self, section: impl FnOnce() + Send) {
        (**self).critical(section)
    }
}

/// Runs `threads` threads of `iters` acquisitions each on one `R`.
///
/// Panics if the run does not finish within [`WATCHDOG`].
pub fn hammer<R>(lock: R, threads: usize, iters: u64) -> Report
where
    R: RawMutex + Send + Sync + 'static,
{
    hammer_with(Raw(lock), threads, iters)
}

/// [`hammer`] for any [`Exclusive`].
pub fn hammer_with<L: Exclusive>(lock: L, threads: usize, iters: u64) -> Report {
    let shared = Arc::new(Shared {
        lock,
        inside: AtomicUsize::new(0),
        violations: AtomicU64::new(0),
        counter: AtomicU64::new(0),
    });
    let start_line = Arc::new(Barrier::new(threads + 1));
    let (done_tx, done_rx) = mpsc::channel();
    for t in 0..threads {
        let shared = Arc::clone(&shared);
        let start_line = Arc::clone(&start_line);
        let done_tx = done_tx.clone();
        std::thread::Builder::new()
            .name(format!("torture-{t}"))
            .spawn(move || {
                start_line.wait();
                for _ in 0..iters {
                    let inner = &*shared;
                    shared.lock.critical(|| {
                        if inner.inside.fetch_add(1, Ordering::Relaxed) != 0 {
                            inner.violations.fetch_add(1, Ordering::Relaxed);
                        }
                        let seen = inner.counter.load(Ordering::Relaxed);
                        // Widen the window a broken lock needs to show itself.
                        for _ in 0..4 {
                            std::hint::spin_loop();
                        }
                        inner.counter.store(seen + 1, Ordering::Relaxed);
                        inner.inside.fetch_sub(1, Ordering::Relaxed);
                    });
                }
                let _ = done_tx.send(t);
            })
            .expect("spawn torture thread");
    }
    drop(done_tx);
    start_line.wait();
    let started = Instant::now();
    let mut finished = vec![false; threads];
    for _ in 0..threads {
        let left = WATCHDOG.saturating_sub(started.elapsed());
        match done_rx.recv_timeout(left) {
            Ok(t) => finished[t] = true,
            Err(_) => panic!(
                "torture: {threads} threads x {iters}: stuck or a thread died after {:?}, finished: {finished:?}",
                started.elapsed()
            ),
        }
    }
    Report {
        threads,
        iters,
        counted: shared.counter.load(Ordering::Relaxed),
        violations: shared.violations.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
    }
}

/// Runs [`hammer`] and fails the test unless the result is exact.
pub fn assert_excludes<R>(name: &str, lock: R, threads: usize, iters: u64)
where
    R: RawMutex + Send + Sync + 'static,
{
    let report = hammer(lock, threads, iters);
    assert!(
        report.is_exact(),
        "{name}: exclusion check failed with {threads} threads: counted {} of {}, {} violations",
        report.counted,
        report.expected(),
        report.violations,
    );
}

/// A lock with the classic check-then-act race: it loads the flag and, if
/// clear, stores it set, with no atomic read-modify-write in between. Two
/// threads can both see it clear and both enter. The torture check must
/// report it; if it does not, the check proves nothing.
pub struct BrokenLock {
    held: AtomicBool,
}

// SAFETY: it is NOT a correct mutex; it exists only to be caught by the
// torture check, which never relies on its exclusion for memory safety (all
// shared state in `hammer` is atomic).
unsafe impl RawMutex for BrokenLock {
    const INIT: Self = BrokenLock {
        held: AtomicBool::new(false),
    };
    type Guard = GuardSend;

    fn lock(&self) -> GuardSend {
        while self.held.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
        std::hint::spin_loop();
        self.held.store(true, Ordering::Relaxed);
        GuardSend::new()
    }

    fn try_lock(&self) -> Option<GuardSend> {
        Some(self.lock())
    }

    unsafe fn unlock(&self, _guard: GuardSend) {
        self.held.store(false, Ordering::Relaxed);
    }

    fn is_locked(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }
}

/// Half of four threads only `try_lock`, half `lock`, `iters` rounds each;
/// the data under the lock stays consistent, and an uncontended `try_lock`
/// never fails.
pub fn try_lock_under_contention<R>(iters: u64)
where
    R: RawMutex + Send + Sync + 'static,
{
    let data = Arc::new(lock_api::Mutex::<R, _>::new((0u64, 0u64)));
    let tried = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let data = Arc::clone(&data);
            let tried = Arc::clone(&tried);
            std::thread::spawn(move || {
                for _ in 0..iters {
                    let guard = if t % 2 == 0 {
                        Some(data.lock())
                    } else {
                        data.try_lock()
                    };
                    if let Some(mut pair) = guard {
                        pair.0 += 1;
                        std::hint::spin_loop();
                        pair.1 += 1;
                        assert_eq!(pair.0, pair.1);
                        if t % 2 == 1 {
                            tried.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let pair = *data.lock();
    assert_eq!(pair.0, pair.1);
    assert_eq!(pair.0, 2 * iters + tried.load(Ordering::Relaxed));
    // Alone, try_lock succeeds.
    let guard = data.try_lock().expect("an uncontended try_lock");
    assert!(data.try_lock().is_none());
    drop(guard);
}

/// A panic inside the critical section drops the guard, which unlocks.
pub fn guard_drop_on_panic_unlocks<R>()
where
    R: RawMutex + Send + Sync + 'static,
{
    let data = Arc::new(lock_api::Mutex::<R, _>::new(0u32));
    let panicker = {
        let data = Arc::clone(&data);
        std::thread::spawn(move || {
            let mut guard = data.lock();
            *guard += 1;
            panic!("deliberate panic inside the critical section");
        })
    };
    assert!(panicker.join().is_err());
    assert!(!data.is_locked());
    *data.lock() += 1;
    assert_eq!(*data.lock(), 2);
}

/// Each of `threads` threads takes three of six locks in a fixed global
/// order (so no deadlock) and bumps all three counters, `iters` times, while
/// the others queue on the same locks: a thread waits in one queue while
/// holding other locks, and every lock sees holders and queues at once.
pub fn threads_holding_several_locks<R>(threads: usize, iters: u64)
where
    R: RawMutex + Send + Sync + 'static,
{
    const LOCKS: usize = 6;
    let locks: Arc<Vec<lock_api::Mutex<R, u64>>> =
        Arc::new((0..LOCKS).map(|_| lock_api::Mutex::new(0)).collect());
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let locks = Arc::clone(&locks);
            std::thread::spawn(move || {
                let mut mine = [t % LOCKS, (t + 2) % LOCKS, (t + 3) % LOCKS];
                mine.sort_unstable();
                for _ in 0..iters {
                    let mut guards: Vec<_> = mine.iter().map(|&i| locks[i].lock()).collect();
                    for g in &mut guards {
                        **g += 1;
                    }
                }
            })
        })
        .collect();
    handles.into_iter().for_each(|t| t.join().unwrap());
    let total: u64 = locks.iter().map(|l| *l.lock()).sum();
    assert_eq!(total, 3 * threads as u64 * iters);
    assert!(locks.iter().all(|l| !l.is_locked()));
}
