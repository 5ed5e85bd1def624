//! Writer optimistic spinning (the kernel's `rwsem_optimistic_spin` and
//! `rwsem_spin_on_owner`): when a writer spins on the lock before it queues,
//! and when a waiter that the handoff names spins on a running owner.
//!
//! The kernel spins while the owning writer is on a CPU, which user space
//! cannot see. Our stand-in is time: one spin lasts at most one context
//! switch as measured on this machine ([`spin_budget::context_switch`]).
//! Past that, sleeping and being woken would have cost less than the
//! spinning, and on a machine with more threads than cores a longer spin
//! only keeps the owner (preempted, perhaps) off the CPU we hold. A
//! reader-owned lock is spun on for at most the kernel's `10 + min(readers,
//! 30) / 2` microseconds (`rwsem_rspin_threshold`), within that bound; a
//! spinner that times out there sets `OWNER_NONSPINNABLE`, so later writers
//! queue at once until a writer acquires or the readers drain. Spinning
//! never takes a lock marked `HANDOFF`. Only one writer spins at a time (the
//! kernel's OSQ, reduced to a flag); a writer that finds the flag taken
//! queues instead of spinning behind it, so spinners do not pile up on a
//! machine with more threads than cores. The clock is read every 16 polls.

use std::time::Duration;

use super::{
    RawRwSem, Stamp, HANDOFF, LOCK_MASK, OWNER_NONSPINNABLE, READER_MASK, READER_SHIFT, READ_FAIL,
    WRITER_LOCKED,
};
use crate::relax;
use crate::rwsem::events::{self, Event};
use crate::spin_budget;
use crate::sync::Ordering;

/// Whether a spinner's `polls`-th poll reads the clock: every 16th poll, to
/// keep clock reads off the critical path (the kernel does the same), and
/// under loom every poll after the first.
#[inline]
fn clock_due(polls: u32) -> bool {
    #[cfg(not(loom))]
    return polls.is_multiple_of(16);
    #[cfg(loom)]
    return polls > 1;
}

/// The kernel's `rwsem_rspin_threshold`: 10 µs plus half a µs per reader,
/// counting at most 30 readers.
fn reader_spin_limit(count: usize) -> Duration {
    let readers = ((count & !READ_FAIL) >> READER_SHIFT).min(30) as u64;
    Duration::from_micros(10 + readers / 2)
}

impl RawRwSem {
    /// The kernel's `rwsem_optimistic_spin`; see the module documentation.
    pub(super) fn optimistic_spin(&self) -> bool {
        if self.owner.load(Ordering::Relaxed) & OWNER_NONSPINNABLE != 0 {
            events::bump(Event::OptNospin);
            return false;
        }
        // Pairs with the previous spinner's release store of `false` below.
        if self.spinner.swap(true, Ordering::Acquire) {
            events::bump(Event::OptNospin);
            return false;
        }
        let mut budget = SpinBudget::new();
        let taken = loop {
            let count = self.count.load(Ordering::Relaxed);
            if self.try_steal_write(count) {
                break true;
            }
            if count & HANDOFF != 0 || !budget.keep_spinning(self, count) {
                break false;
            }
            relax::cpu_relax();
        };
        // Pairs with the next spinner's acquire swap above.
        self.spinner.store(false, Ordering::Release);
        events::bump(if taken {
            Event::OptLock
        } else {
            Event::OptFail
        });
        taken
    }

    /// For the waiter `HANDOFF` names: spins while a running writer holds the
    /// lock; returns whether it saw the lock free. Readers wake it when they
    /// drain, so it does not spin on them.
    pub(super) fn spin_on_owner(&self) -> bool {
        let mut budget = SpinBudget::new();
        loop {
            let count = self.count.load(Ordering::Relaxed);
            if count & LOCK_MASK == 0 {
                return true;
            }
            if count & WRITER_LOCKED == 0 || !budget.keep_spinning(self, count) {
                return false;
            }
            relax::cpu_relax();
        }
    }
}

/// Whether the spinner is watching a reader phase, and since when.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Other,
    Readers { since: Stamp, limit: Duration },
}

/// The time limits of one optimistic spin.
struct SpinBudget {
    start: Stamp,
    limit: Duration,
    polls: u32,
    phase: Phase,
}

impl SpinBudget {
    fn new() -> Self {
        SpinBudget {
            start: Stamp::now(),
            limit: spin_budget::context_switch(),
            polls: 0,
            phase: Phase::Other,
        }
    }

    /// Accounts one poll that found the lock unavailable as `count`; returns
    /// whether spinning may go on.
    fn keep_spinning(&mut self, sem: &RawRwSem, count: usize) -> bool {
        self.polls = self.polls.wrapping_add(1);
        let check = clock_due(self.polls);
        if count & WRITER_LOCKED == 0 && count & READER_MASK != 0 {
            match self.phase {
                Phase::Readers { since, limit } => {
                    if check && since.exceeded(limit) {
                        sem.set_nonspinnable();
                        return false;
                    }
                }
                Phase::Other => {
                    if sem.owner.load(Ordering::Relaxed) & OWNER_NONSPINNABLE != 0 {
                        return false;
                    }
                    self.phase = Phase::Readers {
                        since: Stamp::now(),
                        limit: reader_spin_limit(count),
                    }
                }
            }
        } else {
            self.phase = Phase::Other;
        }
        !(check && self.start.exceeded(self.limit))
    }
}
