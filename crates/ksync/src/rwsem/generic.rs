//! The 2001 "generic" rwsem: counters under a spinlock and a FIFO wait list.
//!
//! This is the design David Howells posted as `lib/rwsem-spinlock.c` in
//! "\[PATCH\] rw_semaphores, optimisations" (LKML, 22 April 2001; "simpler
//! since it does not have to use atomic operations on the counters as all
//! accesses to them are governed by a blanket spinlock"), which the kernel
//! kept as its portable rwsem until 2019.
//!
//! # State
//!
//! Everything sits behind one [`RawTasLock`](crate::spin::RawTasLock), on
//! one cache line (Andrea Arcangeli measured that moving the spinlock away
//! from the count "hurted a lot"):
//!
//! * `readers`: how many readers hold the lock;
//! * `writer`: whether a writer holds it;
//! * the FIFO [`List`] of waiter nodes, each on its thread's stack.
//!
//! `writer` implies `readers == 0`.
//!
//! # Transitions (all under the spinlock)
//!
//! * read lock (`__down_read`): if no writer holds the lock and nobody is
//!   queued, `readers += 1`. Otherwise queue a read node and sleep until
//!   granted; the waker has already counted us.
//! * write lock (`__down_write`): if the lock is free and nobody is queued,
//!   `writer = true`; otherwise queue a write node and sleep until granted.
//! * read unlock: `readers -= 1`; if that was the last reader, grant.
//! * write unlock: `writer = false`; grant.
//! * downgrade (`__downgrade_write`): `writer = false, readers = 1`; grant
//!   (only readers can be let in beside it).
//! * grant (`__rwsem_do_wake`): a writer first and the lock free: dequeue it
//!   and set `writer` for it. A reader first and no writer: dequeue the readers
//!   at the front, up to the first writer, and add them to `readers`. Writers
//!   are thus woken one at a time and readers at the front together.
//!
//! Invariant, at every release of the spinlock: the first waiter could not be
//! granted now. Arrivals queue only if they cannot take the lock; every
//! transition that could make the first waiter eligible ends with a grant. So
//! nobody passes a queued waiter, and readers do not starve writers or the
//! other way round.
//!
//! A waiter whose deadline passes takes the spinlock. If it is still queued it
//! unlinks itself and grants (its leaving may let the waiters behind it in);
//! if a waker already dequeued it, the grant is on its way and it waits for it
//! (see [`super::wait_list`] for the handshake).
//!
//! # Memory ordering
//!
//! The counters are plain data ordered by the spinlock's acquire and release.
//! A granted waiter synchronizes with its waker through the release store and
//! acquire load of its node's grant word, and the waker acquired the spinlock
//! after the previous holder released it, so the previous holder's critical
//! section happens before the granted waiter's.

use core::fmt;
use std::time::{Duration, Instant};

use lock_api::GuardSend;

use super::wait_list::{Kind, List, WaitGuard, WaitLock, Waiter, Wakeups};
use crate::futex::Wake;
use crate::spin::RawTasLock;

struct State {
    readers: usize,
    writer: bool,
    waiters: List<()>,
}

impl State {
    const fn new() -> Self {
        State {
            readers: 0,
            writer: false,
            waiters: List::new(),
        }
    }

    /// The kernel's `__rwsem_do_wake`; see the module documentation.
    fn grant(&mut self, wakeups: &mut Wakeups<()>) {
        let Some(first) = self.waiters.front() else {
            return;
        };
        match first.kind() {
            Kind::Write => {
                if !self.writer && self.readers == 0 {
                    self.writer = true;
                    self.waiters.grant_front(wakeups);
                }
            }
            Kind::Read => {
                if !self.writer {
                    self.readers += self.waiters.grant_readers(usize::MAX, false, wakeups);
                }
            }
        }
    }
}

#[cfg(not(loom))]
type Guard<'a> = WaitGuard<'a, RawTasLock, State>;
#[cfg(loom)]
type Guard<'a> = WaitGuard<'a, State>;

/// The 2001 generic reader-writer semaphore: reader and writer counts under a
/// spinlock, and a strict FIFO wait list; a `lock_api::RawRwLock`.
///
/// Every operation takes the internal spinlock once, so it is simple and
/// strictly fair: nobody passes a queued waiter, readers at the front of the
/// queue are let in together and writers one at a time. Sleeping waiters park
/// on futexes.
///
/// ```
/// use ksync::rwsem::SpinRwSem;
///
/// static HITS: SpinRwSem<[u64; 4]> = SpinRwSem::new([0; 4]);
///
/// std::thread::scope(|s| {
///     for i in 0..4 {
///         s.spawn(move || HITS.write()[i] += 1);
///         s.spawn(|| assert!(HITS.read().iter().sum::<u64>() <= 4));
///     }
/// });
/// assert_eq!(*HITS.read(), [1; 4]);
/// ```
pub struct RawSpinRwSem {
    state: WaitLock<RawTasLock, State>,
}

/// A [`lock_api::RwLock`] guarded by a [`RawSpinRwSem`].
pub type SpinRwSem<T> = lock_api::RwLock<RawSpinRwSem, T>;
/// The shared guard of a [`SpinRwSem`].
pub type SpinRwSemReadGuard<'a, T> = lock_api::RwLockReadGuard<'a, RawSpinRwSem, T>;
/// The exclusive guard of a [`SpinRwSem`].
pub type SpinRwSemWriteGuard<'a, T> = lock_api::RwLockWriteGuard<'a, RawSpinRwSem, T>;

impl RawSpinRwSem {
    /// A new, unlocked semaphore.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RawSpinRwSem {
            state: WaitLock::new(RawTasLock::new(), State::new()),
        }
    }

    /// A new, unlocked semaphore (loom's atomics have no `const` constructor).
    #[cfg(loom)]
    pub fn new() -> Self {
        RawSpinRwSem {
            state: WaitLock::new(State::new()),
        }
    }

    fn read_deadline(&self, deadline: Option<Instant>) -> bool {
        let mut state = self.state.lock();
        if !state.writer && state.waiters.is_empty() {
            state.readers += 1;
            return true;
        }
        self.wait(state, Kind::Read, deadline)
    }

    fn write_deadline(&self, deadline: Option<Instant>) -> bool {
        let mut state = self.state.lock();
        if !state.writer && state.readers == 0 && state.waiters.is_empty() {
            state.writer = true;
            return true;
        }
        self.wait(state, Kind::Write, deadline)
    }

    /// Queues, releases the spinlock and sleeps until granted or `deadline`.
    #[cold]
    fn wait(&self, mut state: Guard<'_>, kind: Kind, deadline: Option<Instant>) -> bool {
        let node = Waiter::new(kind, ());
        // SAFETY: `node` lives on this frame and is used with this list only.
        // We return only once it is off the list: granted (a waker dequeued it
        // and we saw the grant) or removed by us below.
        unsafe { state.waiters.push_back(&node) };
        drop(state);
        loop {
            if node.is_granted() {
                return true;
            }
            if node.sleep(deadline) == Wake::TimedOut {
                let mut state = self.state.lock();
                if !state.waiters.remove(&node) {
                    // Dequeued by a waker: the grant beats the deadline.
                    drop(state);
                    node.wait_for_grant();
                    return true;
                }
                let mut wakeups = Wakeups::new();
                state.grant(&mut wakeups);
                drop(state);
                wakeups.deliver();
                return false;
            }
        }
    }

    /// Runs `release` on the state under the spinlock, then grants.
    #[inline]
    fn release(&self, release: impl FnOnce(&mut State)) {
        let mut wakeups = Wakeups::new();
        let mut state = self.state.lock();
        release(&mut state);
        state.grant(&mut wakeups);
        drop(state);
        wakeups.deliver();
    }
}

impl Default for RawSpinRwSem {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for RawSpinRwSem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (readers, writer, waiters) = {
            let state = self.state.lock();
            (state.readers, state.writer, !state.waiters.is_empty())
        };
        f.debug_struct("RawSpinRwSem")
            .field("writer", &writer)
            .field("readers", &readers)
            .field("waiters", &waiters)
            .finish()
    }
}

// SAFETY: `readers` and `writer` change only under the spinlock, a reader is
// counted only while `writer` is clear and a writer is set only while
// `readers == 0`, whether the thread itself or its waker did the counting.
// The spinlock's acquire / release, and the grant word's release / acquire,
// order the critical sections (see the module documentation).
unsafe impl lock_api::RawRwLock for RawSpinRwSem {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[cfg(loom)]
    const INIT: Self = panic!("use RawSpinRwSem::new() under loom");

    type SharedGuard = GuardSend;
    type ExclusiveGuard = GuardSend;

    fn lock_shared(&self) -> GuardSend {
        let acquired = self.read_deadline(None);
        debug_assert!(acquired);
        GuardSend::new()
    }

    fn try_lock_shared(&self) -> Option<GuardSend> {
        let mut state = self.state.lock();
        if !state.writer && state.waiters.is_empty() {
            state.readers += 1;
            Some(GuardSend::new())
        } else {
            None
        }
    }

    unsafe fn unlock_shared(&self, _guard: GuardSend) {
        self.release(|state| state.readers -= 1);
    }

    fn lock_exclusive(&self) -> GuardSend {
        let acquired = self.write_deadline(None);
        debug_assert!(acquired);
        GuardSend::new()
    }

    fn try_lock_exclusive(&self) -> Option<GuardSend> {
        let mut state = self.state.lock();
        if !state.writer && state.readers == 0 && state.waiters.is_empty() {
            state.writer = true;
            Some(GuardSend::new())
        } else {
            None
        }
    }

    unsafe fn unlock_exclusive(&self, _guard: GuardSend) {
        self.release(|state| state.writer = false);
    }

    fn is_locked(&self) -> bool {
        let state = self.state.lock();
        state.writer || state.readers != 0
    }

    fn is_locked_exclusive(&self) -> bool {
        self.state.lock().writer
    }
}

// SAFETY: the writer becomes a reader in one critical section of the
// spinlock, so no writer can get in between.
unsafe impl lock_api::RawRwLockDowngrade for RawSpinRwSem {
    unsafe fn downgrade(&self, _guard: GuardSend) -> GuardSend {
        self.release(|state| {
            state.writer = false;
            state.readers = 1;
        });
        GuardSend::new()
    }
}

// SAFETY: the timed variants acquire exactly as the untimed ones do; a waiter
// that gives up unlinks itself and re-runs the grant its presence may have held
// back.
unsafe impl lock_api::RawRwLockTimed for RawSpinRwSem {
    type Duration = Duration;
    type Instant = Instant;

    fn try_lock_shared_for(&self, timeout: Duration) -> Option<GuardSend> {
        self.read_deadline(Instant::now().checked_add(timeout))
            .then(GuardSend::new)
    }

    fn try_lock_shared_until(&self, timeout: Instant) -> Option<GuardSend> {
        self.read_deadline(Some(timeout)).then(GuardSend::new)
    }

    fn try_lock_exclusive_for(&self, timeout: Duration) -> Option<GuardSend> {
        self.write_deadline(Instant::now().checked_add(timeout))
            .then(GuardSend::new)
    }

    fn try_lock_exclusive_until(&self, timeout: Instant) -> Option<GuardSend> {
        self.write_deadline(Some(timeout)).then(GuardSend::new)
    }
}
