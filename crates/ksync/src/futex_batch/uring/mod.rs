//! The io_uring path of [`wake_all`](super::wake_all): each thread's ring,
//! created on its first batch, and what to do when there is none.
//!
//! `abi.rs` is the kernel's ABI, `ring.rs` one ring's mechanics, and
//! `process.rs` what the whole process knows (io_uring usable or not, fork
//! generations). A failure that says io_uring or the opcode is missing turns
//! it off for the process; any other failure turns off this thread's ring;
//! either way the words left are woken one `FUTEX_WAKE` each.

mod abi;
mod process;
mod ring;

use core::cell::RefCell;

#[cfg(test)]
use self::process::USABLE;
use self::process::{state, STATE, UNUSABLE};
pub(super) use self::ring::RING_ENTRIES;
use self::ring::{Failure, Ring};
use super::Scope;
use crate::sync::{AtomicU32, Ordering};

/// A thread's ring, if it has (or can have) one.
enum Slot {
    /// Not created yet.
    Empty,
    Ready(Ring),
    /// Creating or using the ring failed on this thread: use the loop.
    Failed,
}

impl Slot {
    /// The ring, created on first use; `None` means use the loop.
    fn ring(&mut self) -> Option<&mut Ring> {
        if let Slot::Ready(ring) = self {
            if ring.inherited() {
                *self = Slot::Empty;
            }
        }
        if matches!(self, Slot::Empty) {
            if state() == UNUSABLE {
                return None;
            }
            *self = match Ring::new(RING_ENTRIES) {
                Ok(ring) => Slot::Ready(ring),
                Err(failure) => {
                    if failure == Failure::Unsupported {
                        STATE.store(UNUSABLE, Ordering::Relaxed);
                    }
                    Slot::Failed
                }
            };
        }
        match self {
            Slot::Ready(ring) if STATE.load(Ordering::Relaxed) != UNUSABLE => Some(ring),
            _ => None,
        }
    }

    /// Wakes all `words`, each through the ring where possible and by a
    /// plain FUTEX_WAKE otherwise. Returns how many the ring woke.
    ///
    /// # Safety
    ///
    /// As for [`super::wake_all`].
    unsafe fn wake(&mut self, words: &[*const AtomicU32], scope: Scope) -> usize {
        let mut by_ring = 0;
        let mut rest = words;
        while !rest.is_empty() {
            let Some(ring) = self.ring() else {
                // SAFETY: passed on from our caller.
                unsafe { super::wake_loop(rest, scope) };
                break;
            };
            let (batch, tail) = rest.split_at(rest.len().min(ring.batch as usize));
            rest = tail;
            let mut pending = u128::MAX >> (u128::BITS as usize - batch.len());
            let outcome = ring.wake_batch(batch, &mut pending, scope);
            by_ring += batch.len() - pending.count_ones() as usize;
            match outcome {
                Ok(()) => {}
                Err(Failure::Unsupported) => {
                    STATE.store(UNUSABLE, Ordering::Relaxed);
                    *self = Slot::Empty;
                }
                Err(Failure::Broken) => *self = Slot::Failed,
            }
            for (i, &word) in batch.iter().enumerate() {
                if pending & (1u128 << i) != 0 {
                    // SAFETY: passed on from our caller.
                    unsafe { super::wake_one(word, scope) };
                }
            }
        }
        by_ring
    }
}

thread_local! {
    static RING: RefCell<Slot> = const { RefCell::new(Slot::Empty) };
}

/// [`super::wake_all`] for two words or more. Returns how many the ring
/// woke (the rest took the loop).
///
/// # Safety
///
/// As for [`super::wake_all`].
pub(super) unsafe fn wake(words: &[*const AtomicU32], scope: Scope) -> usize {
    if state() == UNUSABLE {
        // SAFETY: passed on from our caller.
        unsafe { super::wake_loop(words, scope) };
        return 0;
    }
    let by_ring = RING.try_with(|slot| {
        slot.try_borrow_mut()
            // SAFETY: passed on from our caller.
            .map(|mut slot| unsafe { slot.wake(words, scope) })
            .ok()
    });
    match by_ring {
        Ok(Some(by_ring)) => by_ring,
        // The thread is exiting (its ring is gone) or, impossibly, we
        // re-entered: the loop needs no state.
        _ => {
            // SAFETY: passed on from our caller.
            unsafe { super::wake_loop(words, scope) };
            0
        }
    }
}

/// Runs `words` through a private ring of `entries` (tests chunking and
/// the ring itself without the thread's ring or the process state).
/// Returns how many the ring woke, or `None` if no ring could be made.
#[cfg(test)]
pub(super) unsafe fn wake_with_ring(entries: u32, words: &[*const AtomicU32]) -> Option<usize> {
    let ring = Ring::new(entries).ok()?;
    let mut slot = Slot::Ready(ring);
    // SAFETY: passed on from our caller.
    Some(unsafe { slot.wake(words, Scope::Private) })
}

/// Whether io_uring futex wakes work here: creates the calling thread's
/// ring if needed (for tests).
#[cfg(test)]
pub(super) fn supported() -> bool {
    // Waking no word with the ring set up tells us what the kernel said.
    let _ = RING.try_with(|slot| slot.try_borrow_mut().map(|mut s| s.ring().is_some()));
    state() == USABLE
}
