//! [`RawSemLock`]: the set's global lock (each semaphore's own lock is a bit
//! of its word, `sem_lock.rs`, built the same way).
//!
//! The kernel uses spinlocks here because its lock holders are never
//! preempted. In user space a set is typically used by far more threads than
//! there are cores (sembench runs 250 workers), and a spinlock whose holder was
//! preempted makes every waiter burn its time slice. So this is a sleeping
//! lock, with a short spin first because the critical sections are short:
//! Drepper's three-state futex mutex ("Futexes Are Tricky", mutex 2).
//!
//! | word | meaning |
//! |---|---|
//! | 0 | unlocked |
//! | 1 | locked, nobody asleep |
//! | 2 | locked, somebody may be asleep on the word |
//!
//! * lock: CAS 0 → 1 (acquire). Else spin a little on the word, trying the
//!   same CAS when it reads 0. Else swap in 2 (acquire) and, unless the swap
//!   returned 0 (we got it), sleep while the word is 2; repeat the swap after
//!   every wake-up. A thread that ever slept takes the lock as 2, because it
//!   cannot know whether others still sleep.
//! * unlock: swap 0 (release); if the old value was 2, wake one sleeper.
//!
//! No wake-up is lost: a sleeper only sleeps while the word is 2, so an
//! unlock after its swap either sees 2 and wakes it, or the futex compare
//! fails because the word changed. The cost of the scheme is an occasional
//! unneeded wake-up, never a missed one. It is unfair, which is what an
//! oversubscribed machine wants: the running thread takes a free lock instead
//! of waiting for a sleeper to be scheduled.

use crate::futex;
use crate::relax::cpu_relax;
use crate::sync::{AtomicU32, Ordering};

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

/// How many times a contended lock polls the word before it sleeps. About a
/// microsecond: longer than the set's typical critical section, much shorter
/// than a time slice. Under loom a waiter sleeps at once (the futex model
/// needs no spinning, and spinning only multiplies the schedules).
const SPINS: u32 = if cfg!(loom) { 0 } else { 100 };

/// A futex-based mutex: three states, a short spin, then sleep.
///
/// It is a [`lock_api::RawMutex`], so it can be used on its own
/// (`lock_api::Mutex<RawSemLock, T>`) and wrapped like any other lock.
pub struct RawSemLock {
    word: AtomicU32,
}

impl RawSemLock {
    /// A new, unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RawSemLock {
            word: AtomicU32::new(UNLOCKED),
        }
    }

    /// A new, unlocked lock (loom's atomics have no `const` constructor).
    #[cfg(loom)]
    pub fn new() -> Self {
        RawSemLock {
            word: AtomicU32::new(UNLOCKED),
        }
    }

    #[inline(always)]
    fn try_acquire(&self) -> bool {
        // Pairs with the release swap in `unlock`.
        self.word
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[cold]
    // Under loom `SPINS` is 0 (the model explores the futex path, and a spin
    // would only multiply its interleavings), which clippy reads as a range
    // written by mistake.
    #[cfg_attr(loom, allow(clippy::reversed_empty_ranges))]
    fn lock_contended(&self) {
        for _ in 0..SPINS {
            if self.word.load(Ordering::Relaxed) == UNLOCKED && self.try_acquire() {
                return;
            }
            cpu_relax();
        }
        // Pairs with the release swap in `unlock`.
        while self.word.swap(CONTENDED, Ordering::Acquire) != UNLOCKED {
            futex::wait(&self.word, CONTENDED, None);
        }
    }

    #[cold]
    fn wake_one(&self) {
        futex::wake(&self.word, 1);
    }
}

impl Default for RawSemLock {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the word leaves 0 only by an acquire CAS or swap that saw 0, so at
// most one thread holds the lock; unlock is a release swap.
unsafe impl lock_api::RawMutex for RawSemLock {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(loom)]
    const INIT: Self = panic!("use RawSemLock::new() under loom");

    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        if !self.try_acquire() {
            self.lock_contended();
        }
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        self.try_acquire().then(lock_api::GuardSend::new)
    }

    #[inline]
    unsafe fn unlock(&self, _guard: Self::Guard) {
        // Pairs with the acquire of the next holder: the compare-and-swap in
        // `try_acquire` or the swap in `lock_contended`.
        if self.word.swap(UNLOCKED, Ordering::Release) == CONTENDED {
            self.wake_one();
        }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.word.load(Ordering::Relaxed) != UNLOCKED
    }
}

/// A set's global (array) lock, instrumented: Spraul's 2010 ipc/sem.c series
/// found its answer by counting this lock's free and contended acquisitions.
/// Per-semaphore locks stay bare, because a statistics block (about 0.7 KiB)
/// per semaphore would push a large set out of the cache.
#[cfg(not(loom))]
pub(super) type GlobalLock = crate::stat::Stat<RawSemLock>;
/// Under loom the bare lock: the statistics are not part of the protocol.
#[cfg(loom)]
pub(super) type GlobalLock = RawSemLock;

/// A new global lock, its statistics window started.
pub(super) fn new_global_lock() -> GlobalLock {
    #[cfg(not(loom))]
    {
        let lock = crate::stat::Stat::new(RawSemLock::new());
        lock.mark_start();
        lock
    }
    #[cfg(loom)]
    RawSemLock::new()
}
