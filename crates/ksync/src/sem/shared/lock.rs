//! The set's lock: one word in the mapping that names its holder's process,
//! so a holder that dies is recognised and its lock taken over.
//!
//! The word is 0 when free, else `HELD | owner` (an
//! [`owner_word`](super::layout::owner_word): process slot and incarnation),
//! plus `WAITERS` once someone sleeps on it. Waiters sleep on the word as a
//! shared futex for at most [`PROBE_EVERY`] at a time; each time one wakes
//! with the lock still held it checks the holder: a slot whose incarnation
//! moved on, or whose liveness lock nobody holds (`procs.rs`), belongs to a
//! dead process, and the waiter takes the lock over with one compare-and-swap
//! and reports it, so the caller rolls back the dead holder's transaction
//! (`journal.rs`) before anything else.
//!
//! A holder can be preempted, as any thread can; the lock is held only
//! across the work of one call, and a waiter spins for about a context
//! switch before it sleeps.
//!
//! Barriers: the acquire compare-and-swaps in [`lock`] pair with the release
//! swap in [`unlock`].

use std::time::Duration;

use super::layout::{header, proc_slot, split_owner, NPROC};
use super::map::Mapping;
use super::procs::{is_alive, Me};
use crate::futex::{wait_shared, wake_shared, Wake};
use crate::sync::Ordering;

const HELD: u32 = 1 << 30;
const WAITERS: u32 = 1 << 31;

/// How long a waiter sleeps before it checks whether the holder died.
const PROBE_EVERY: Duration = Duration::from_millis(10);
/// Polls of the word before sleeping (about one context switch).
const SPINS: u32 = 100;

/// How the lock was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Taken {
    /// From a live holder, or free.
    Clean,
    /// From a dead holder: its transaction may be half done.
    FromDead,
}

/// Takes the set's lock for `me`.
pub(super) fn lock(map: &Mapping, me: Me) -> Taken {
    // Counted from before the attempt until `unlock`: while the word names
    // this process, the count is at least 1 for its holder.
    map.lockers_here.fetch_add(1, Ordering::SeqCst);
    let word = map.word(header::LOCK);
    let mine = HELD | me.owner();
    if word
        .compare_exchange(0, mine, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
    {
        return Taken::Clean;
    }
    for _ in 0..SPINS {
        core::hint::spin_loop();
        let w = word.load(Ordering::Relaxed);
        if w & HELD == 0
            && word
                .compare_exchange(
                    w,
                    mine | (w & WAITERS),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Taken::Clean;
        }
    }
    loop {
        let w = word.load(Ordering::Relaxed);
        if w & HELD == 0 {
            // Taken after sleeping: others may sleep too, so keep WAITERS.
            if word
                .compare_exchange(w, mine | WAITERS, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Taken::Clean;
            }
            continue;
        }
        if w & WAITERS == 0
            && word
                .compare_exchange(w, w | WAITERS, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        if wait_shared(word, w | WAITERS, PROBE_EVERY) == Wake::TimedOut
            && holder_is_dead(map, me, w)
            && word
                .compare_exchange(
                    w | WAITERS,
                    mine | WAITERS,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Taken::FromDead;
        }
    }
}

/// Whether the holder named by lock word `w` is dead. A word that names no
/// valid slot is a corrupt file's, and as good as dead: taking it over
/// beats waiting forever.
fn holder_is_dead(map: &Mapping, me: Me, w: u32) -> bool {
    let (slot, gen) = split_owner(w & !(HELD | WAITERS));
    if slot >= NPROC {
        return true;
    }
    if slot == me.slot {
        // Another thread of this process holds it, unless this thread is
        // the only one here: then the word is corrupt, and as good as dead.
        return gen != me.gen || map.lockers_here.load(Ordering::SeqCst) == 1;
    }
    let current = map.load(map.layout.proc(slot, proc_slot::GEN));
    current != gen || !is_alive(map, slot)
}

/// Releases the lock, waking one sleeper if any.
pub(super) fn unlock(map: &Mapping) {
    let word = map.word(header::LOCK);
    let waiters = word.swap(0, Ordering::Release) & WAITERS != 0;
    map.lockers_here.fetch_sub(1, Ordering::SeqCst);
    if waiters {
        wake_shared(word, 1);
    }
}
