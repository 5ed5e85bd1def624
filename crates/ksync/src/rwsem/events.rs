//! [`RawRwSem`](super::RawRwSem)'s slow-path events, after the kernel's
//! rwsem lock events (`kernel/locking/lock_events_list.h`), and their public
//! snapshot [`RwSemStats`].
//!
//! Under writer contention a semaphore's slow path runs on nearly every
//! acquisition, so one shared counter per event would add a contended cache
//! line to exactly the path being measured. Each thread therefore counts in
//! a block of its own (one relaxed load and store of a line nobody else
//! writes), registered on its first event; [`rwsem_stats`] sums the live
//! blocks and what exited threads left behind. A thread that counts while its
//! thread-locals are being torn down loses that count.
//!
//! Under loom the models' threads share their test's OS thread, and
//! [`rwsem_stats`] and [`reset_rwsem_stats`] see only the calling thread's
//! block, so each test counts on its own while the harness runs tests side
//! by side: that is how a model can show that it reached a path.

use std::sync::{Arc, Mutex, PoisonError};

use crate::sync::{unmodelled::AtomicU64, Ordering};

/// One slow-path event. The names are the kernel's `rwsem_*` lock events
/// where it has one; see [`RwSemStats`] for each.
#[derive(Debug, Clone, Copy)]
pub(super) enum Event {
    RlockSteal,
    RlockFast,
    Rlock,
    RlockFail,
    RlockHandoff,
    WlockSteal,
    OptLock,
    OptFail,
    OptNospin,
    Wlock,
    WlockFail,
    WlockHandoff,
    WokenLost,
    SleepReader,
    SleepWriter,
    WakeReader,
    WakeWriter,
    WakeSkipped,
}

const EVENTS: usize = Event::WakeSkipped as usize + 1;

/// One thread's counters. Only the owning thread writes them.
struct Block([AtomicU64; EVENTS]);

impl Block {
    fn new() -> Self {
        Block(core::array::from_fn(|_| AtomicU64::new(0)))
    }

    fn read(&self) -> [u64; EVENTS] {
        core::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }
}

/// Every thread's block, and the sums of the threads that exited.
struct Registry {
    live: Vec<Arc<Block>>,
    retired: [u64; EVENTS],
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    live: Vec::new(),
    retired: [0; EVENTS],
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// This thread's block; leaving the thread retires it into the registry.
struct Mine(Arc<Block>);

impl Mine {
    fn register() -> Self {
        let block = Arc::new(Block::new());
        registry().live.push(Arc::clone(&block));
        Mine(block)
    }
}

impl Drop for Mine {
    fn drop(&mut self) {
        let mut reg = registry();
        let counts = self.0.read();
        for (sum, n) in reg.retired.iter_mut().zip(counts) {
            *sum += n;
        }
        reg.live.retain(|b| !Arc::ptr_eq(b, &self.0));
    }
}

std::thread_local! {
    static MINE: Mine = Mine::register();
}

/// Counts one `event` for this thread.
#[inline]
pub(super) fn bump(event: Event) {
    add(event, 1);
}

/// Counts `n` of `event` for this thread.
#[inline]
pub(super) fn add(event: Event, n: u64) {
    let _ = MINE.try_with(|mine| {
        let counter = &mine.0 .0[event as usize];
        // The owning thread is the only writer: no read-modify-write needed.
        counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    });
}

/// A snapshot of [`RawRwSem`](super::RawRwSem)'s slow-path events, summed
/// over every semaphore and thread since start (or [`reset_rwsem_stats`]).
/// Names follow the kernel's `rwsem_*` lock events; `wlock_steal`,
/// `woken_lost` and `wake_skipped` are ksync's own.
///
/// The fast paths (an uncontended read or write lock, an unlock with nobody
/// queued) never count. Every futex call the semaphore makes is counted:
/// `sleep_*` are `FUTEX_WAIT`s, `wake_*` are `FUTEX_WAKE`s.
///
/// ```
/// use ksync::rwsem::{rwsem_stats, RwSem};
///
/// let sem = RwSem::new(0);
/// *sem.write() += 1; // uncontended: counts nothing
/// let s = rwsem_stats();
/// println!("{} futex wakes, {} sleeps", s.futex_wakes(), s.sleeps());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwSemStats {
    /// Readers past the fast path that took the lock without queueing
    /// (`rwsem_rlock_steal`).
    pub rlock_steal: u64,
    /// Readers that found the queue empty and no writer once they held the
    /// wait-list lock, and kept their bias (`rwsem_rlock_fast`).
    pub rlock_fast: u64,
    /// Queued readers granted the lock by a waker (`rwsem_rlock`).
    pub rlock: u64,
    /// Timed readers that gave up (`rwsem_rlock_fail`).
    pub rlock_fail: u64,
    /// Handoffs requested for a queued reader (`rwsem_rlock_handoff`).
    pub rlock_handoff: u64,
    /// Writers past the fast path (the lock was held, or waiters were
    /// queued) that found the lock free and took it before spinning or
    /// queueing, ahead of any queued waiter.
    pub wlock_steal: u64,
    /// Optimistic spins that took the lock (`rwsem_opt_lock`).
    pub opt_lock: u64,
    /// Optimistic spins that gave up and queued (`rwsem_opt_fail`).
    pub opt_fail: u64,
    /// Writers that queued without spinning: another writer was spinning, or
    /// readers had made the lock non-spinnable (`rwsem_opt_nospin`).
    pub opt_nospin: u64,
    /// Queued writers that took the lock (`rwsem_wlock`).
    pub wlock: u64,
    /// Timed writers that gave up (`rwsem_wlock_fail`).
    pub wlock_fail: u64,
    /// Handoffs requested by a queued writer (`rwsem_wlock_handoff`).
    pub wlock_handoff: u64,
    /// Woken writers that found the lock taken again and went back to sleep.
    pub woken_lost: u64,
    /// `FUTEX_WAIT`s of queued readers (`rwsem_sleep_reader`).
    pub sleep_reader: u64,
    /// `FUTEX_WAIT`s of queued writers (`rwsem_sleep_writer`).
    pub sleep_writer: u64,
    /// `FUTEX_WAKE`s of granted readers (`rwsem_wake_reader`).
    pub wake_reader: u64,
    /// `FUTEX_WAKE`s of queued writers, told to retry (`rwsem_wake_writer`).
    pub wake_writer: u64,
    /// Releases that found waiters but woke nobody, because a waiter woken
    /// earlier had not yet looked at the lock.
    pub wake_skipped: u64,
}

impl RwSemStats {
    /// `FUTEX_WAKE` calls.
    pub fn futex_wakes(&self) -> u64 {
        self.wake_reader + self.wake_writer
    }

    /// `FUTEX_WAIT` calls.
    pub fn sleeps(&self) -> u64 {
        self.sleep_reader + self.sleep_writer
    }

    /// Locks taken past a queue without waiting in it.
    pub fn steals(&self) -> u64 {
        self.rlock_steal + self.wlock_steal
    }

    /// Handoffs requested.
    pub fn handoffs(&self) -> u64 {
        self.rlock_handoff + self.wlock_handoff
    }

    /// Optimistic spins, whatever their outcome.
    pub fn spins(&self) -> u64 {
        self.opt_lock + self.opt_fail
    }
}

impl From<[u64; EVENTS]> for RwSemStats {
    fn from(c: [u64; EVENTS]) -> Self {
        use Event::*;
        RwSemStats {
            rlock_steal: c[RlockSteal as usize],
            rlock_fast: c[RlockFast as usize],
            rlock: c[Rlock as usize],
            rlock_fail: c[RlockFail as usize],
            rlock_handoff: c[RlockHandoff as usize],
            wlock_steal: c[WlockSteal as usize],
            opt_lock: c[OptLock as usize],
            opt_fail: c[OptFail as usize],
            opt_nospin: c[OptNospin as usize],
            wlock: c[Wlock as usize],
            wlock_fail: c[WlockFail as usize],
            wlock_handoff: c[WlockHandoff as usize],
            woken_lost: c[WokenLost as usize],
            sleep_reader: c[SleepReader as usize],
            sleep_writer: c[SleepWriter as usize],
            wake_reader: c[WakeReader as usize],
            wake_writer: c[WakeWriter as usize],
            wake_skipped: c[WakeSkipped as usize],
        }
    }
}

/// Reads [`RawRwSem`](super::RawRwSem)'s event counters: every thread's,
/// live or exited.
pub fn rwsem_stats() -> RwSemStats {
    #[cfg(not(loom))]
    let counts = {
        let reg = registry();
        let mut sums = reg.retired;
        for block in &reg.live {
            for (sum, n) in sums.iter_mut().zip(block.read()) {
                *sum += n;
            }
        }
        sums
    };
    #[cfg(loom)]
    let counts = MINE.with(|mine| mine.0.read());
    RwSemStats::from(counts)
}

/// Sets [`RawRwSem`](super::RawRwSem)'s event counters back to zero. Call
/// it while no semaphore is in use: a thread that counts meanwhile may keep
/// a count from before the reset.
pub fn reset_rwsem_stats() {
    let clear = |block: &Block| {
        for counter in &block.0 {
            counter.store(0, Ordering::Relaxed);
        }
    };
    #[cfg(not(loom))]
    {
        let mut reg = registry();
        reg.retired = [0; EVENTS];
        reg.live.iter().for_each(|block| clear(block));
    }
    #[cfg(loom)]
    MINE.with(|mine| clear(&mine.0));
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The counters are global, so one test checks them all in sequence.
    #[test]
    fn counts_survive_their_thread_and_reset_clears_them() {
        reset_rwsem_stats();
        bump(Event::WakeWriter);
        std::thread::spawn(|| {
            bump(Event::WakeWriter);
            bump(Event::SleepReader);
        })
        .join()
        .unwrap();
        let s = rwsem_stats();
        assert!(s.wake_writer >= 2 && s.sleep_reader >= 1, "{s:?}");
        assert_eq!(s.futex_wakes(), s.wake_reader + s.wake_writer);
        reset_rwsem_stats();
        bump(Event::OptLock);
        assert!(rwsem_stats().opt_lock >= 1);
    }
}
