//! Sizing the process's private futex hash for the threads that sleep on
//! futex words (Linux 6.16+, `PR_FUTEX_HASH`).
//!
//! Since Linux 6.16 a process's private futexes hash into a table of its
//! own, sized when threads are created for `min(threads, CPUs)`: 16 slots on
//! a 2-CPU machine however many threads sleep. Every `FUTEX_WAKE` walks its
//! slot's chain to find the sleeper, so with 4096 sleepers a wake walks about
//! 128 others, and waking them all is quadratic: on the machine BENCHMARKS.md
//! describes, half of a 4096-sleeper `SETALL`'s cost was `futex_wake`
//! itself, and ksync's waker paid 2.5x the kernel's per sleeper (the kernel's
//! SysV wake-ups use no hash).
//!
//! So the first time a thread is about to sleep on a word that batched wakes
//! will wake, it counts itself ([`note_sleeping_thread`]), and when the
//! count passes a quarter of the slots the table is grown to four slots per
//! counted thread, the ratio the kernel's own sizing uses, up to
//! [`MAX_SLOTS`]. Nothing else changes: growth is at most a handful of
//! `prctl` calls in a process's life, and a thread that counted itself never
//! looks again (one thread-local load per sleep). The table is left alone
//! where the kernel has no private hash (`prctl` fails), where the process
//! uses the global hash (0 slots: someone chose it), and once a resize
//! failed.

use core::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// `prctl` option and its two operations (`include/uapi/linux/prctl.h`).
const PR_FUTEX_HASH: libc::c_int = 78;
const PR_FUTEX_HASH_SET_SLOTS: libc::c_ulong = 1;
const PR_FUTEX_HASH_GET_SLOTS: libc::c_ulong = 2;

/// Slots per counted thread, as the kernel sizes the table per thread.
const SLOTS_PER_THREAD: usize = 4;
/// The largest table grown to: 16384 slots, about 1 MiB of kernel memory,
/// enough for 4096 sleeping threads at the ratio above.
pub(crate) const MAX_SLOTS: usize = 1 << 14;
/// [`GROW_AT`] when the table is to be left alone.
const NEVER: usize = usize::MAX;

/// Threads that counted themselves.
static THREADS: AtomicUsize = AtomicUsize::new(0);
/// The thread count at which to look again (0: not looked yet).
static GROW_AT: AtomicUsize = AtomicUsize::new(0);
/// Serializes the resizes.
static RESIZE: Mutex<()> = Mutex::new(());

std::thread_local! {
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

/// Counts the calling thread among those that sleep on futex words, once,
/// and grows the process's private futex hash when the count calls for it
/// (see the module docs). Call it before a thread's sleep on a word that
/// [`wake_each`](super::wake_each), a [`Spread`](super::Spread) or many
/// wakers will wake; calling it again
/// costs one thread-local load.
pub fn note_sleeping_thread() {
    if COUNTED.with(Cell::get) {
        return;
    }
    COUNTED.with(|c| c.set(true));
    let threads = THREADS.fetch_add(1, Ordering::Relaxed) + 1;
    if threads >= GROW_AT.load(Ordering::Relaxed) {
        grow(threads);
    }
}

#[cold]
fn grow(threads: usize) {
    let _serial = RESIZE.lock().unwrap_or_else(|p| p.into_inner());
    if threads < GROW_AT.load(Ordering::Relaxed) {
        return; // another thread grew it meanwhile
    }
    let next = match slots() {
        // No private hash (an older kernel), or the global one (0 slots).
        None | Some(0) => NEVER,
        Some(slots) => {
            let wanted = (threads * SLOTS_PER_THREAD)
                .next_power_of_two()
                .min(MAX_SLOTS);
            if wanted > slots && !set_slots(wanted) {
                NEVER
            } else {
                let slots = wanted.max(slots);
                if slots >= MAX_SLOTS {
                    NEVER
                } else {
                    // Look again once the threads outgrow this table.
                    slots / SLOTS_PER_THREAD + 1
                }
            }
        }
    };
    GROW_AT.store(next, Ordering::Relaxed);
}

/// The private hash's slots, `None` where the kernel has none.
fn slots() -> Option<usize> {
    // SAFETY: PR_FUTEX_HASH_GET_SLOTS reads no pointer argument.
    let rc = unsafe { libc::prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_GET_SLOTS, 0, 0, 0) };
    usize::try_from(rc).ok()
}

/// Resizes the private hash to `slots` (a power of two).
fn set_slots(slots: usize) -> bool {
    // SAFETY: PR_FUTEX_HASH_SET_SLOTS takes a count and flags (0), no pointer.
    let rc = unsafe {
        libc::prctl(
            PR_FUTEX_HASH,
            PR_FUTEX_HASH_SET_SLOTS,
            slots as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeping_threads_grow_the_table_four_slots_each() {
        // Runs in this test binary's process; other tests' threads may
        // count themselves too, so look at what the table reached.
        let before = slots();
        let threads: Vec<_> = (0..40)
            .map(|_| std::thread::spawn(note_sleeping_thread))
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        match before {
            // No private hash here, or the global one: left alone.
            None | Some(0) => assert_eq!(slots(), before),
            Some(_) => {
                let counted = THREADS.load(Ordering::Relaxed);
                assert!(counted >= 40);
                let slots = slots().expect("a private hash");
                assert!(
                    slots
                        >= (counted * SLOTS_PER_THREAD)
                            .next_power_of_two()
                            .min(MAX_SLOTS)
                        || GROW_AT.load(Ordering::Relaxed) == NEVER,
                    "{slots} slots for {counted} threads"
                );
            }
        }
        // A thread counts itself once.
        let counted = THREADS.load(Ordering::Relaxed);
        note_sleeping_thread();
        note_sleeping_thread();
        assert!(THREADS.load(Ordering::Relaxed) <= counted + 1);
    }
}
