//! The set's lock: an owner-naming lock word (`crate::sem::owner_lock`, which
//! has the algorithm and its loom model) whose owners are processes.
//!
//! The owner code is an [`owner_word`](super::layout::owner_word): process
//! slot and incarnation. Waiters nap on the word as a shared futex for at
//! most [`PROBE_EVERY`]; a holder is dead when its slot's incarnation moved
//! on or nobody holds the slot's liveness lock (`procs.rs`). A word naming
//! this process's own incarnation is judged by the count of its threads
//! holding or taking the lock, frozen while a waiter takes it over
//! (`owner_lock::LocalLockers`). The caller of a takeover rolls back the
//! dead holder's transaction (`journal.rs`) before anything else.

use std::time::Duration;

use super::layout::{header, proc_slot, split_owner, NPROC};
use super::map::Mapping;
use super::procs::{is_alive, Me};
use crate::futex::{wait_shared, wake_shared, Wake};
use crate::sem::counters::Counters;
use crate::sem::owner_lock::{self, LocalLockers, Owners};
use crate::sync::AtomicU32;

pub(super) use crate::sem::owner_lock::Taken;

/// How long a waiter sleeps before it checks whether the holder died.
const PROBE_EVERY: Duration = Duration::from_millis(10);

/// The processes of one set, as the lock sees them from process `me`.
struct Processes<'a> {
    map: &'a Mapping,
    me: Me,
}

impl Owners for Processes<'_> {
    /// A word that names no valid slot is a corrupt file's, and as good as
    /// dead: taking it over beats waiting forever.
    fn is_dead(&self, owner: u32) -> bool {
        let (slot, gen) = split_owner(owner);
        if slot >= NPROC {
            return true;
        }
        if slot == self.me.slot {
            // Another thread of this process holds it, unless this thread
            // is the only one here: then the word is corrupt (or an earlier
            // incarnation's), and as good as dead.
            return gen != self.me.gen || self.lockers().alone();
        }
        // The incarnation alone, not the slot's state: a claimer takes the
        // lock to adopt its slot before the state says live. Read again
        // after the probe, as `incarnation_alive` does: a claimer starts its
        // incarnation before it takes the write lock the probe may see.
        let current = || self.map.load(self.map.layout.proc(slot, proc_slot::GEN));
        current() != gen || !is_alive(self.map, slot) || current() != gen
    }

    fn nap(&self, word: &AtomicU32, expected: u32) -> Wake {
        wait_shared(word, expected, Some(PROBE_EVERY))
    }

    fn wake_one(&self, word: &AtomicU32) {
        wake_shared(word, 1);
    }

    fn found_taken(&self) {
        Counters::add(&self.map.counters.outside.lock_waits, 1);
    }

    /// A word naming this incarnation of this process is taken over only
    /// with the count of its lockers here frozen (`LocalLockers`): all its
    /// threads share one owner code.
    fn take_over(&self, owner: u32, take: impl FnOnce() -> bool) -> bool {
        if split_owner(owner) == (self.me.slot, self.me.gen) {
            return self.lockers().take_over_own(take);
        }
        self.is_dead(owner) && take()
    }
}

impl Processes<'_> {
    fn lockers(&self) -> LocalLockers<'_> {
        LocalLockers(&self.map.lockers_here)
    }
}

/// Takes the set's lock for `me`.
pub(super) fn lock(map: &Mapping, me: Me) -> Taken {
    // Counted from before the attempt until `unlock`: while the word names
    // this process, the count is at least 1 for its holder.
    LocalLockers(&map.lockers_here).enter();
    owner_lock::lock(map.word(header::LOCK), me.owner(), &Processes { map, me })
}

/// Releases the lock, waking one sleeper if any.
pub(super) fn unlock(map: &Mapping, me: Me) {
    owner_lock::unlock(map.word(header::LOCK), &Processes { map, me });
    LocalLockers(&map.lockers_here).leave();
}
