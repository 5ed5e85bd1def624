//! Where a blocked call's [`Sleeper`] node lives: in a slot of one
//! process-wide pool, one slot per thread, rather than in the caller's stack
//! frame.
//!
//! The kernel keeps its `struct sem_queue` on the sleeper's stack, and so
//! did ksync. In user space that puts every sleeper's node, and the futex
//! word inside it, on a page of its own: the waker of a big post or a
//! `SETALL` touches one page per sleeper, and on a virtual machine each of
//! those is a TLB miss that walks two sets of page tables. Measured on a
//! 2-core KVM guest, a thread waking 4096 sleepers one `FUTEX_WAKE` each
//! took 8.6 to 9.1 us per sleeper when each futex word sat in its
//! sleeper's stack, and 4.7 to 5.9 us when the words sat side by side in
//! one array. Here the nodes of all the threads of the process sit side by
//! side, two cache lines apart (x86's adjacent-line prefetch would
//! otherwise pair two sleepers' status words), in chunks that are never
//! freed.
//!
//! A thread blocks in one call at a time, so one slot per thread is enough;
//! a thread claims its slot on its first call that may block, before it
//! takes any lock, and gives it back to the pool when it exits. A call uses
//! a node in its own frame, as before, when the thread's slot is in use
//! (a call from a signal handler that interrupted a blocked call), when its
//! thread-local storage is gone (a destructor at thread exit), or when the
//! pool's free list is busy: it is only ever tried, never waited for, so
//! neither a signal handler nor the child of a `fork` made while another
//! thread held it can deadlock on it.
//!
//! Reuse is safe for the same reason a node in a dead frame was: once a
//! waker has delivered the result it never reads or writes the node again,
//! and the futex wake it may still issue only uses the word's address as a
//! key. Such a late wake of the slot's next call is spurious, and every
//! futex sleeper in ksync tolerates spurious wake-ups. The owner writes a
//! new node into its slot only after it has read its last result, and a
//! waker reads the node only while it is queued, under the lock that
//! queued it: the lock orders the owner's writes before the waker's reads.
//!
//! Under loom every node lives in its frame (the pool is a process-wide
//! static, which loom cannot reset between executions); the protocol the
//! loom models check is the same either way.

use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::sync::atomic::{compiler_fence, Ordering};

use super::queue::Sleeper;

/// One slot: a node and the padding that keeps it off its neighbours' lines.
#[repr(align(128))]
struct Slot(UnsafeCell<MaybeUninit<Sleeper>>);

// SAFETY: a slot is written only by the thread that claimed it, before it
// queues the node (`Claim::place`), and read by wakers only while the node is
// queued, under the lock that queued it; its shared fields are atomics.
unsafe impl Sync for Slot {}

/// Slots per chunk: 8 KiB of nodes per allocation.
const CHUNK: usize = 64;

/// Slots no thread holds, and the chunks they come from (never freed: a
/// late futex wake may still name a slot's word).
struct Free {
    slots: Vec<&'static Slot>,
}

static FREE: std::sync::Mutex<Free> = std::sync::Mutex::new(Free { slots: Vec::new() });

/// This thread's slot, once it has one; handed back when the thread exits.
struct Mine {
    slot: core::cell::Cell<Option<&'static Slot>>,
    /// A call of this thread holds the slot now.
    busy: core::cell::Cell<bool>,
}

impl Drop for Mine {
    fn drop(&mut self) {
        // A slot still claimed (its call left by `siglongjmp`, say) may
        // still be queued: it is leaked, never handed to another thread.
        if self.busy.get() {
            return;
        }
        let Some(slot) = self.slot.take() else {
            return;
        };
        // Tried, not waited for: a list held when this process was forked
        // is never released, and an exiting thread must not hang on it. Any
        // other holder lets go within a few instructions; if it does not,
        // the slot is leaked (128 bytes), which is harmless.
        for _ in 0..64 {
            match FREE.try_lock() {
                Ok(mut free) => return free.slots.push(slot),
                // Another thread panicked while it pushed or popped: the
                // vector itself is whole.
                Err(std::sync::TryLockError::Poisoned(e)) => {
                    return e.into_inner().slots.push(slot)
                }
                Err(std::sync::TryLockError::WouldBlock) => std::thread::yield_now(),
            }
        }
    }
}

std::thread_local! {
    static MINE: Mine = const {
        Mine {
            slot: core::cell::Cell::new(None),
            busy: core::cell::Cell::new(false),
        }
    };
}

/// A slot from the pool, a new chunk's worth if none is free; `None` if
/// another thread holds the free list now (or held it when this process was
/// forked from it).
fn take_free() -> Option<&'static Slot> {
    let mut free = match FREE.try_lock() {
        Ok(free) => free,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    if free.slots.is_empty() {
        let chunk: &'static [Slot] = Box::leak(
            (0..CHUNK)
                .map(|_| Slot(UnsafeCell::new(MaybeUninit::uninit())))
                .collect::<Box<[Slot]>>(),
        );
        // Handed out from the front, so that the first sleepers share pages.
        free.slots.extend(chunk.iter().rev());
    }
    free.slots.pop()
}

/// The calling thread's slot, held until the claim is dropped.
pub(super) struct Claim {
    slot: &'static Slot,
    /// Only the claiming thread may use and release it.
    _not_send: PhantomData<*const ()>,
}

impl Claim {
    /// The thread's slot, unless it is in use (a call from a signal handler
    /// that interrupted a blocked call) or the thread is exiting: then
    /// `None`, and the caller keeps its node in its own frame.
    pub(super) fn take() -> Option<Claim> {
        if cfg!(loom) {
            return None;
        }
        MINE.try_with(|mine| {
            if mine.busy.get() {
                return None;
            }
            // Busy before anything else, so that a signal handler's call
            // arriving from here on keeps its node in its frame. The fence
            // keeps the compiler from moving the store past what follows;
            // the handler runs on this thread, so nothing more is needed.
            mine.busy.set(true);
            compiler_fence(Ordering::SeqCst);
            let slot = match mine.slot.get().or_else(take_free) {
                Some(slot) => slot,
                None => {
                    mine.busy.set(false);
                    return None;
                }
            };
            mine.slot.set(Some(slot));
            Some(Claim {
                slot,
                _not_send: PhantomData,
            })
        })
        .ok()
        .flatten()
    }

    /// Puts `node` in the slot and returns it, for as long as the claim is
    /// held.
    pub(super) fn place(&mut self, node: Sleeper) -> &Sleeper {
        let cell = self.slot.0.get();
        // SAFETY: the slot is this thread's and this claim is its only user
        // (`busy`). Whoever still holds its address from an earlier call is
        // a waker that delivered that call's result and will at most use the
        // address as a futex key (see the module documentation), so nobody
        // reads or writes the node while it is replaced.
        unsafe {
            (*cell).write(node);
            (*cell).assume_init_ref()
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        // `try_with`: at thread exit the slot is given back by `Mine`'s own
        // destructor, which may already have run.
        let _ = MINE.try_with(|mine| {
            compiler_fence(Ordering::SeqCst);
            mine.busy.set(false);
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sem::SemBuf;

    fn node() -> Sleeper {
        Sleeper::new(&[SemBuf::new(0, -1, 0)], None, 0, false)
    }

    /// A claim for this thread, once the free list is not busy (tests in
    /// this binary run at once, and one of them holds it on purpose).
    fn claim() -> Claim {
        loop {
            if let Some(claim) = Claim::take() {
                return claim;
            }
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_thread_keeps_one_slot_and_a_nested_call_gets_none() {
        std::thread::spawn(|| {
            let mut first = claim();
            let at = first.place(node()) as *const Sleeper;
            // While the slot is held (a signal handler's call), no second one.
            assert!(Claim::take().is_none());
            drop(first);
            let mut again = Claim::take().expect("the slot again");
            assert_eq!(again.place(node()) as *const Sleeper, at);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_busy_free_list_is_not_waited_for() {
        // As in a signal handler, or a fork child, while another thread
        // holds the free list: a thread without a slot gets none, at once.
        let held = FREE.lock().unwrap();
        let got = std::thread::spawn(|| Claim::take().is_some())
            .join()
            .unwrap();
        drop(held);
        assert!(!got);
        // Free again: the next thread gets one.
        std::thread::spawn(|| drop(claim())).join().unwrap();
    }

    #[test]
    fn a_slot_still_claimed_at_thread_exit_is_never_reused() {
        let at = std::thread::spawn(|| {
            let mut claim = claim();
            let at = claim.place(node()) as *const Sleeper as usize;
            // Its call never ended (left by `siglongjmp`, say).
            std::mem::forget(claim);
            at
        })
        .join()
        .unwrap();
        let free = FREE.lock().unwrap();
        assert!(!free
            .slots
            .iter()
            .any(|&slot| slot as *const Slot as usize == at));
    }

    #[test]
    fn threads_alive_at_once_hold_distinct_slots_two_lines_apart() {
        let slot_of = || {
            std::thread::spawn(|| {
                let mut claim = claim();
                claim.place(node()) as *const Sleeper as usize
            })
        };
        // Two threads alive at once hold different slots.
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let mut claim = claim();
            tx.send(claim.place(node()) as *const Sleeper as usize)
                .unwrap();
            go_rx.recv().unwrap();
        });
        let held = rx.recv().unwrap();
        let other = slot_of().join().unwrap();
        assert_ne!(held, other);
        go_tx.send(()).unwrap();
        holder.join().unwrap();
        // Slots are two lines apart, so neighbours share no line pair.
        assert_eq!(held % 128, 0);
        assert_eq!(other % 128, 0);
    }
}
