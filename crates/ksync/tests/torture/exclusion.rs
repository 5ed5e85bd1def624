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
//! Both only see a broken lock when threads actually meet at it, and left
//! alone they rarely do in short runs: threads leave the start barrier one
//! by one, each finishes a few dozen acquisitions within its time slice, and
//! a run of 8 x 40 or 64 x 2 on two cores had no acquisition at all with a
//! thread waiting. So every run forces the meeting: a holder stays inside
//! (yielding its CPU) until another thread has come for the lock, unless no
//! other thread has acquisitions left. Every handover then goes to a
//! waiter, the path where queued locks break, and the run fails if fewer
//! handovers than that had a waiter. (Not for a combining lock's closures:
//! see [`Exclusive::OWNER_FREED_AT_RETURN`].)
//!
//! A FIFO spinlock hands over only to the one waiter at the head, and with
//! more spinning waiters than cores that waiter is often not running: every
//! handover costs scheduler time slices, more the longer the queue. The FIFO
//! locks' runs ([`assert_excludes_fifo`]) therefore let at most
//! [`FIFO_WAITERS`] threads wait at once; the rest yield until a place frees.
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
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
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
    /// Critical sections that ended with another thread waiting for the
    /// lock: a handover to a waiter followed each.
    pub contended: u64,
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
    /// Threads that have come for the lock and are not inside yet.
    waiting: AtomicUsize,
    /// Threads that have not finished their last acquisition.
    unfinished: AtomicUsize,
    contended: AtomicU64,
}

/// How long a torture run may take before the watchdog calls it stuck.
pub const WATCHDOG: Duration = Duration::from_secs(240);

/// A way to run a critical section under some lock: any raw mutex through
/// `lock`/`unlock`, or a lock that takes the section as a closure (the
/// combining lock). The closure must be `Send`: a combining lock may run it
/// on another thread.
pub trait Exclusive: Send + Sync + 'static {
    /// Whether a section's owner is free to come back for the lock as soon
    /// as the section returns. A combining lock frees the owners of a batch
    /// only after the whole batch: a section there must not wait for
    /// another thread to come, which may be one its own batch still holds,
    /// so such runs are not forced to hand over to a waiter.
    const OWNER_FREED_AT_RETURN: bool = true;

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
    const OWNER_FREED_AT_RETURN: bool = L::OWNER_FREED_AT_RETURN;

    fn critical(&self, section: impl FnOnce() + Send) {
        (**self).critical(section)
    }
}

/// How many threads a FIFO lock's run lets wait at once: two, so that a
/// queued lock sees a waiter behind the first one (the qspinlock's pending
/// waiter and a queued one, an MCS head and its successor) while handovers
/// stay cheap on two cores.
pub const FIFO_WAITERS: usize = 2;

/// The FIFO locks' (ticket, MCS, qspinlock) runs, as (threads,
/// iterations): small, because every forced handover may cost time slices,
/// and shown by `fifo_bug_is_caught_at_every_fifo_size` to catch a broken
/// lock at each size.
pub const FIFO_TWO: (usize, u64) = (2, 5_000);
pub const FIFO_EIGHT: (usize, u64) = (8, 40);
pub const FIFO_OVERSUBSCRIBED: (usize, u64) = (64, 2);

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
    hammer_waiting(lock, threads, iters, usize::MAX)
}

/// [`hammer_with`] with at most `max_waiting` threads waiting at once.
pub fn hammer_waiting<L: Exclusive>(
    lock: L,
    threads: usize,
    iters: u64,
    max_waiting: usize,
) -> Report {
    assert!(max_waiting > 0);
    let force_handovers = L::OWNER_FREED_AT_RETURN;
    let shared = Arc::new(Shared {
        lock,
        inside: AtomicUsize::new(0),
        violations: AtomicU64::new(0),
        counter: AtomicU64::new(0),
        waiting: AtomicUsize::new(0),
        unfinished: AtomicUsize::new(threads),
        contended: AtomicU64::new(0),
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
                    // The pacing counters order nothing, they only need to
                    // be seen eventually: relaxed throughout.
                    while inner
                        .waiting
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                            (w < max_waiting).then_some(w + 1)
                        })
                        .is_err()
                    {
                        std::thread::yield_now();
                    }
                    shared.lock.critical(|| {
                        inner.waiting.fetch_sub(1, Ordering::Relaxed);
                        if inner.inside.fetch_add(1, Ordering::Relaxed) != 0 {
                            inner.violations.fetch_add(1, Ordering::Relaxed);
                        }
                        let seen = inner.counter.load(Ordering::Relaxed);
                        // Widen the window a broken lock needs to show itself.
                        for _ in 0..4 {
                            std::hint::spin_loop();
                        }
                        // Hand over only to a waiter. Another thread with work
                        // left is between acquisitions (it comes), waiting (done)
                        // or, with a broken lock, inside: stop then, the
                        // violation is counted and two holders must not wait
                        // for each other.
                        while force_handovers
                            && inner.waiting.load(Ordering::Relaxed) == 0
                            && inner.inside.load(Ordering::Relaxed) == 1
                            && inner.unfinished.load(Ordering::Relaxed) > 1
                        {
                            std::thread::yield_now();
                        }
                        if inner.waiting.load(Ordering::Relaxed) > 0 {
                            inner.contended.fetch_add(1, Ordering::Relaxed);
                        }
                        inner.counter.store(seen + 1, Ordering::Relaxed);
                        inner.inside.fetch_sub(1, Ordering::Relaxed);
                    });
                }
                shared.unfinished.fetch_sub(1, Ordering::Relaxed);
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
    let report = Report {
        threads,
        iters,
        counted: shared.counter.load(Ordering::Relaxed),
        violations: shared.violations.load(Ordering::Relaxed),
        contended: shared.contended.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
    };
    // Only the last thread to finish may run alone. A broken lock can cut
    // the holders' waits short, but it has failed the run already.
    if force_handovers && report.is_exact() {
        assert!(
            report.contended >= report.expected() - iters,
            "torture: the run forced too few handovers to a waiter to catch a broken lock: {report:?}"
        );
    }
    report
}

/// Runs [`hammer`] and fails the test unless the result is exact.
pub fn assert_excludes<R>(name: &str, lock: R, threads: usize, iters: u64)
where
    R: RawMutex + Send + Sync + 'static,
{
    assert_exact(name, hammer(lock, threads, iters));
}

/// [`assert_excludes`] for a FIFO lock: at most [`FIFO_WAITERS`] waiting.
pub fn assert_excludes_fifo<R>(name: &str, lock: R, threads: usize, iters: u64)
where
    R: RawMutex + Send + Sync + 'static,
{
    assert_exact(
        name,
        hammer_waiting(Raw(lock), threads, iters, FIFO_WAITERS),
    );
}

fn assert_exact(name: &str, report: Report) {
    let threads = report.threads;
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

/// A ticket lock with an off-by-one in its wait: a waiter enters when its
/// ticket is the one after the owner's, so the holder's successor comes in
/// while the holder is still inside. It is the handover bug of a FIFO lock,
/// and unlike [`BrokenLock`]'s nanosecond race it shows whenever a handover
/// has a waiter, which is what short FIFO runs must be shown to catch.
pub struct OffByOneTicketLock {
    next: AtomicU32,
    owner: AtomicU32,
}

// SAFETY: it is NOT a correct mutex; see `BrokenLock`.
unsafe impl RawMutex for OffByOneTicketLock {
    const INIT: Self = OffByOneTicketLock {
        next: AtomicU32::new(0),
        owner: AtomicU32::new(0),
    };
    type Guard = GuardSend;

    fn lock(&self) -> GuardSend {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        // Signed: with two inside, the owner can pass a preempted waiter's
        // ticket, and that waiter must still come in rather than hang.
        while ticket.wrapping_sub(self.owner.load(Ordering::Acquire)) as i32 > 1 {
            std::hint::spin_loop();
        }
        GuardSend::new()
    }

    fn try_lock(&self) -> Option<GuardSend> {
        Some(self.lock())
    }

    unsafe fn unlock(&self, _guard: GuardSend) {
        self.owner.fetch_add(1, Ordering::Release);
    }

    fn is_locked(&self) -> bool {
        self.next.load(Ordering::Relaxed) != self.owner.load(Ordering::Relaxed)
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
