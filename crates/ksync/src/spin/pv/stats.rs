//! [`RawPvQSpinLock`](super::RawPvQSpinLock)'s slow-path events and their
//! public snapshot [`PvStats`].

use super::super::events::{event_set, EventCounter, PV_EVENTS};

#[repr(align(128))]
pub(super) struct Events {
    pub(super) slowpath: EventCounter,
    pub(super) pending: EventCounter,
    pub(super) pending_gave_up: EventCounter,
    pub(super) steals: EventCounter,
    pub(super) queued: EventCounter,
    pub(super) no_node: EventCounter,
    pub(super) sleeps: EventCounter,
    pub(super) handoffs: EventCounter,
    pub(super) early_wakes: EventCounter,
    pub(super) unlock_wakes: EventCounter,
    pub(super) head_yields: EventCounter,
    pub(super) streak_yields: EventCounter,
}

impl Events {
    const fn new() -> Self {
        Events {
            slowpath: EventCounter::new(PV_EVENTS),
            pending: EventCounter::new(PV_EVENTS + 1),
            pending_gave_up: EventCounter::new(PV_EVENTS + 2),
            steals: EventCounter::new(PV_EVENTS + 3),
            queued: EventCounter::new(PV_EVENTS + 4),
            no_node: EventCounter::new(PV_EVENTS + 5),
            sleeps: EventCounter::new(PV_EVENTS + 6),
            handoffs: EventCounter::new(PV_EVENTS + 7),
            early_wakes: EventCounter::new(PV_EVENTS + 8),
            unlock_wakes: EventCounter::new(PV_EVENTS + 9),
            head_yields: EventCounter::new(PV_EVENTS + 10),
            streak_yields: EventCounter::new(PV_EVENTS + 11),
        }
    }

    fn all(&self) -> [&EventCounter; 12] {
        [
            &self.slowpath,
            &self.pending,
            &self.pending_gave_up,
            &self.steals,
            &self.queued,
            &self.no_node,
            &self.sleeps,
            &self.handoffs,
            &self.early_wakes,
            &self.unlock_wakes,
            &self.head_yields,
            &self.streak_yields,
        ]
    }
}

event_set!(pub(super) Events);

/// A snapshot of [`RawPvQSpinLock`](super::RawPvQSpinLock)'s slow-path
/// events, summed over every lock and thread since start (or
/// [`reset_pv_stats`]). The fast paths never touch them. Under loom each
/// test thread has its own.
///
/// ```
/// use ksync::spin::{pv_stats, PvQSpinMutex};
///
/// let lock = PvQSpinMutex::new(0);
/// *lock.lock() += 1; // uncontended: counts nothing
/// let s = pv_stats();
/// println!("{} steals, {} halts, {} wakes", s.steals(), s.halts(), s.wakes());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PvStats {
    /// Acquisitions that went past the fast path.
    pub slowpath: u64,
    /// Taken by the pending waiter (the second contender, no queue).
    pub pending: u64,
    /// Pending waiters that gave up after a context switch's worth of
    /// waiting (the owner was likely preempted) and queued.
    pub pending_gave_up: u64,
    /// Taken by an arriving thread while a queue existed (bounded barging).
    pub steals: u64,
    /// Acquisitions that joined the queue.
    pub queued: u64,
    /// Acquisitions without a queue node: no thread slot, or nested deeper
    /// than four.
    pub no_node: u64,
    /// Times a queued waiter went to sleep.
    pub sleeps: u64,
    /// Times a queue head raised `HANDOFF` (stealing stopped for it).
    pub handoffs: u64,
    /// Successors woken by their head as it raised `HANDOFF`.
    pub early_wakes: u64,
    /// Successors made queue head while asleep, woken by the new owner's
    /// unlock.
    pub unlock_wakes: u64,
    /// Times a queue head yielded its CPU while it waited.
    pub head_yields: u64,
    /// Times a thread yielded its CPU after a streak of steals.
    pub streak_yields: u64,
}

impl PvStats {
    /// Locks stolen from a queue.
    pub fn steals(&self) -> u64 {
        self.steals
    }

    /// Times a waiter went to sleep.
    pub fn halts(&self) -> u64 {
        self.sleeps
    }

    /// Wake-ups issued.
    pub fn wakes(&self) -> u64 {
        self.early_wakes + self.unlock_wakes
    }

    /// The events counted since `earlier`, an older snapshot.
    pub fn since(&self, earlier: &PvStats) -> PvStats {
        PvStats {
            slowpath: self.slowpath - earlier.slowpath,
            pending: self.pending - earlier.pending,
            pending_gave_up: self.pending_gave_up - earlier.pending_gave_up,
            steals: self.steals - earlier.steals,
            queued: self.queued - earlier.queued,
            no_node: self.no_node - earlier.no_node,
            sleeps: self.sleeps - earlier.sleeps,
            handoffs: self.handoffs - earlier.handoffs,
            early_wakes: self.early_wakes - earlier.early_wakes,
            unlock_wakes: self.unlock_wakes - earlier.unlock_wakes,
            head_yields: self.head_yields - earlier.head_yields,
            streak_yields: self.streak_yields - earlier.streak_yields,
        }
    }
}

/// Reads [`RawPvQSpinLock`](super::RawPvQSpinLock)'s event counters.
pub fn pv_stats() -> PvStats {
    let e = events();
    PvStats {
        slowpath: e.slowpath.get(),
        pending: e.pending.get(),
        pending_gave_up: e.pending_gave_up.get(),
        steals: e.steals.get(),
        queued: e.queued.get(),
        no_node: e.no_node.get(),
        sleeps: e.sleeps.get(),
        handoffs: e.handoffs.get(),
        early_wakes: e.early_wakes.get(),
        unlock_wakes: e.unlock_wakes.get(),
        head_yields: e.head_yields.get(),
        streak_yields: e.streak_yields.get(),
    }
}

/// Sets [`RawPvQSpinLock`](super::RawPvQSpinLock)'s event counters back to
/// zero.
pub fn reset_pv_stats() {
    events().all().into_iter().for_each(EventCounter::reset);
}
