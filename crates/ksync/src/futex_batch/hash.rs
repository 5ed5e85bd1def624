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
//! will wake, it counts itself ([`note_sleeping_thread`]), and when fewer
//! than four slots are left per counted thread (the ratio the kernel's own
//! sizing uses) the table grows to sixteen per thread, up to [`MAX_SLOTS`]:
//! it next grows once the threads have quadrupled, at most four resizes in a
//! process's life. A thread that counted itself never looks again (one
//! thread-local load per sleep). The table is left alone where the kernel
//! has no private hash (`prctl` fails), where the process uses the global
//! hash (0 slots: someone chose it), and once a resize failed.
//!
//! **No sleeper waits for a resize.** The kernel makes `PR_FUTEX_HASH_SET_SLOTS`
//! wait until no futex call still uses the old table, which takes one or two
//! RCU grace periods: 15 to 48 ms on an idle 2-core guest, over 200 ms on a
//! loaded one. A sleeper that resized in line was late for every wake-up
//! posted meanwhile, and every other sleeper that counted itself then queued behind
//! it. So the sleeper whose count calls for a look looks (a `prctl` that
//! does not wait) and, if the table is too small, starts a short-lived
//! thread, `ksync-futex-hash`, that resizes and exits; a kernel without a
//! private hash, or a table large enough, costs no thread. A sleeper that
//! finds a resizer at work leaves the growth to it, and the resizer looks at
//! the count again before it stops. Where no thread can be started the sleeper resizes in
//! line. A fork child starts counting afresh.

use core::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Once;

/// `prctl` option and its two operations (`include/uapi/linux/prctl.h`).
const PR_FUTEX_HASH: libc::c_int = 78;
const PR_FUTEX_HASH_SET_SLOTS: libc::c_ulong = 1;
const PR_FUTEX_HASH_GET_SLOTS: libc::c_ulong = 2;

/// The fewest slots kept per counted thread, the kernel's own ratio.
const SLOTS_PER_THREAD: usize = 4;
/// A resize gives each counted thread this many times [`SLOTS_PER_THREAD`],
/// so that the next is due once the threads have quadrupled: each resize
/// costs the process a thread start and a table swap whose grace periods
/// every futex call of the process sees.
const HEADROOM: usize = 4;
/// The smallest table the kernel gives a process (16 slots): no resize is
/// due before more threads than its quarter have counted themselves.
const FIRST_GROW_AT: usize = 16 / SLOTS_PER_THREAD + 1;
/// The largest table grown to: 16384 slots, about 1 MiB of kernel memory,
/// enough for 4096 sleeping threads at four slots each.
pub(crate) const MAX_SLOTS: usize = 1 << 14;
/// [`GROW_AT`] when the table is to be left alone.
const NEVER: usize = usize::MAX;
/// The resizer's stack: it makes two `prctl` calls.
const RESIZER_STACK: usize = 64 * 1024;

/// Threads that counted themselves.
static THREADS: AtomicUsize = AtomicUsize::new(0);
/// The thread count at which the table is looked at again.
static GROW_AT: AtomicUsize = AtomicUsize::new(FIRST_GROW_AT);
/// The process whose resizer thread is running, 0 if none: a child forked
/// while its parent's resizer ran has no resizer, and its pid differs.
static RESIZER_OF: AtomicU32 = AtomicU32::new(0);

std::thread_local! {
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

/// Counts the calling thread among those that sleep on futex words, once,
/// and has the process's private futex hash grown when the count calls for
/// it (see the module docs), without waiting for the resize. Call it before
/// a thread's sleep on a word that [`wake_each`](super::wake_each), a
/// [`Spread`](super::Spread) or many wakers will wake; calling it again
/// costs one thread-local load.
pub fn note_sleeping_thread() {
    if COUNTED.with(Cell::get) {
        return;
    }
    COUNTED.with(|c| c.set(true));
    watch_forks();
    // SeqCst, as the resizer's clearing of `RESIZER_OF` and its second look
    // at the count (`look_and_resize`): either this thread sees the
    // resizer still running, and the resizer then sees this count, or it
    // sees the resizer gone and starts another.
    let threads = THREADS.fetch_add(1, Ordering::SeqCst) + 1;
    if threads >= GROW_AT.load(Ordering::Relaxed) {
        start_resizer();
    }
}

/// Looks at the table for the count, unless a resizer of this process is
/// at it already (it will look again).
#[cold]
fn start_resizer() {
    let me = std::process::id();
    let running = RESIZER_OF.load(Ordering::SeqCst);
    if running == me
        || RESIZER_OF
            .compare_exchange(running, me, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
    {
        return;
    }
    look_and_resize(me, false);
}

/// Registers, once, the fork handler that gives a child fresh counts.
fn watch_forks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain function with no captured state; it
        // only stores to static atomics and a const-initialised thread-local
        // cell, which is async-signal-safe as the child side of fork requires.
        unsafe { libc::pthread_atfork(None, None, Some(forget_counts_in_child)) };
    });
}

/// A fork child's table is the kernel's default again and its one thread
/// is the one that forked: none of the parent's counts apply, and a parent's
/// resizer is not the child's (its pid could be the child's grandchild's).
extern "C" fn forget_counts_in_child() {
    COUNTED.with(|c| c.set(false));
    THREADS.store(0, Ordering::Relaxed);
    GROW_AT.store(FIRST_GROW_AT, Ordering::Relaxed);
    RESIZER_OF.store(0, Ordering::Relaxed);
}

/// The resizer's loop, run by the sleeper that claimed [`RESIZER_OF`]:
/// looks at the table for the count (a `prctl` that does not wait) until
/// the count calls for no more. A resize may wait for the kernel's grace
/// periods, so it goes to a thread of its own (`ksync-futex-hash`, which
/// takes the loop over), unless `on_own_thread` already, or none can be
/// started (a pids limit, say: then this sleeper waits for it, as every one
/// did before). A kernel without a private hash, or a table large enough,
/// costs no thread.
fn look_and_resize(me: u32, on_own_thread: bool) {
    loop {
        match plan(THREADS.load(Ordering::SeqCst)) {
            Plan::LookAgainAt(at) => GROW_AT.store(at, Ordering::Relaxed),
            Plan::Resize(slots) => {
                if !on_own_thread {
                    let started = std::thread::Builder::new()
                        .name("ksync-futex-hash".into())
                        .stack_size(RESIZER_STACK)
                        .spawn(move || {
                            resize(slots);
                            look_and_resize(me, true);
                        });
                    if started.is_ok() {
                        #[cfg(test)]
                        tests::RESIZER_THREADS.fetch_add(1, Ordering::SeqCst);
                        return; // `RESIZER_OF` stays ours, the thread's now
                    }
                }
                resize(slots);
            }
        }
        // Pairs with the SeqCst count and look in `note_sleeping_thread`.
        RESIZER_OF.store(0, Ordering::SeqCst);
        if THREADS.load(Ordering::SeqCst) < GROW_AT.load(Ordering::Relaxed)
            || RESIZER_OF
                .compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
        {
            return;
        }
    }
}

/// What the table calls for, for a count of threads.
enum Plan {
    /// Nothing now; look again at this count.
    LookAgainAt(usize),
    /// A resize to this many slots.
    Resize(usize),
}

/// What the table calls for with `threads` counted threads: a resize if it
/// has fewer than [`SLOTS_PER_THREAD`] slots each.
fn plan(threads: usize) -> Plan {
    let needed = threads.saturating_mul(SLOTS_PER_THREAD);
    match slots() {
        // No private hash (an older kernel), or the global one (0 slots).
        None | Some(0) => Plan::LookAgainAt(NEVER),
        Some(slots) if slots >= needed => Plan::LookAgainAt(look_again_at(slots)),
        Some(_) => Plan::Resize(
            needed
                .saturating_mul(HEADROOM)
                .min(MAX_SLOTS)
                .next_power_of_two(),
        ),
    }
}

/// Resizes the table to `slots` and sets the count at which to look again
/// (never, if the kernel refused). May wait for the kernel's grace periods.
fn resize(slots: usize) {
    #[cfg(test)]
    let _held_by_test = tests::RESIZE_GATE.lock().unwrap_or_else(|p| p.into_inner());
    let next = if set_slots(slots) {
        look_again_at(slots)
    } else {
        NEVER
    };
    GROW_AT.store(next, Ordering::Relaxed);
}

/// The count at which a table of `slots` is to grow: once the threads
/// outgrow it, never once it is the largest.
fn look_again_at(slots: usize) -> usize {
    if slots >= MAX_SLOTS {
        NEVER
    } else {
        slots / SLOTS_PER_THREAD + 1
    }
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
    use crate::test_common::wait_until;
    use std::sync::Mutex;

    /// Held by a test to stand in for a resize that takes long: `resize`
    /// takes it first.
    pub(super) static RESIZE_GATE: Mutex<()> = Mutex::new(());
    /// Resizer threads started.
    pub(super) static RESIZER_THREADS: AtomicUsize = AtomicUsize::new(0);
    /// One test at a time here: both look at the process-wide count.
    static SERIAL: Mutex<()> = Mutex::new(());

    /// Whether no resizer of this process runs.
    fn resizer_idle() -> bool {
        RESIZER_OF.load(Ordering::SeqCst) != std::process::id()
    }

    /// Whether the table is what the count calls for: no resizer runs, and
    /// none is about to (one that stopped between resizes looks again).
    fn settled() -> bool {
        resizer_idle() && THREADS.load(Ordering::SeqCst) < GROW_AT.load(Ordering::Relaxed)
    }

    #[test]
    fn sleeping_threads_grow_the_table_to_four_slots_each_or_more() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        // Runs in this test binary's process; other tests' threads may
        // count themselves too, so look at what the table reached.
        let before = slots();
        let threads: Vec<_> = (0..40)
            .map(|_| std::thread::spawn(note_sleeping_thread))
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        wait_until("the table grown for the count", settled);
        match before {
            // No private hash here, or the global one: left alone.
            None | Some(0) => assert_eq!(slots(), before),
            Some(_) => {
                let counted = THREADS.load(Ordering::SeqCst);
                assert!(counted >= 40);
                // The next look first: it is set after the resize it follows.
                let grow_at = GROW_AT.load(Ordering::Relaxed);
                let slots = slots().expect("a private hash");
                // Other tests' sleepers may have counted themselves after
                // the resizer's last look: it looks at the count it read.
                assert!(
                    grow_at == NEVER || slots >= (grow_at - 1) * SLOTS_PER_THREAD,
                    "{slots} slots, next look at {grow_at} threads"
                );
                assert!(
                    slots >= (40 * SLOTS_PER_THREAD).next_power_of_two() || grow_at == NEVER,
                    "{slots} slots for {counted} threads"
                );
            }
        }
        // A thread counts itself once.
        let counted = THREADS.load(Ordering::SeqCst);
        note_sleeping_thread();
        note_sleeping_thread();
        assert!(THREADS.load(Ordering::SeqCst) <= counted + 1);
    }

    /// Only a resize costs a thread: a look that finds the table large
    /// enough, or no private hash, is a `prctl` that does not wait.
    #[test]
    fn a_look_plans_a_resize_only_where_the_table_is_too_small() {
        assert!(matches!(plan(0), Plan::LookAgainAt(_)));
        match (slots(), plan(usize::MAX)) {
            (None | Some(0), Plan::LookAgainAt(at)) => assert_eq!(at, NEVER),
            (Some(_), Plan::Resize(slots)) => assert_eq!(slots, MAX_SLOTS),
            (slots, _) => panic!("a wrong plan for {slots:?} slots"),
        }
    }

    /// A fork child's table starts at the kernel's default: a count
    /// inherited from its parent would hold its growth back, for good once
    /// the parent's had stopped looking.
    #[test]
    fn a_fork_child_counts_its_sleepers_afresh() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        note_sleeping_thread();
        wait_until("no resizer running", resizer_idle);
        let grow_at = GROW_AT.swap(NEVER, Ordering::Relaxed);
        // SAFETY: the child only reads atomics and a thread-local cell, then
        // `_exit`s: nothing that another thread's lock could block.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let fresh = THREADS.load(Ordering::Relaxed) == 0
                && GROW_AT.load(Ordering::Relaxed) == FIRST_GROW_AT
                && RESIZER_OF.load(Ordering::Relaxed) == 0
                && !COUNTED.with(Cell::get);
            // SAFETY: ends the child without running the parent's exit code.
            unsafe { libc::_exit(i32::from(!fresh)) };
        }
        GROW_AT.store(grow_at, Ordering::Relaxed);
        assert!(pid > 0, "fork failed");
        let mut status = 0;
        // SAFETY: waits for the child just forked; `status` is ours.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child inherited its parent's counts"
        );
    }

    #[test]
    fn a_sleeper_counts_itself_without_waiting_for_a_resize() {
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        wait_until("no resizer running", resizer_idle);
        // The kernel's resize may take hundreds of milliseconds; this one
        // takes until the gate opens. Every sleeper that counts itself
        // meanwhile, the one that calls for the resize included, must
        // go on to sleep.
        let Some(slots) = slots().filter(|&s| s > 0) else {
            eprintln!("SKIPPED: no private futex hash here, nothing to resize");
            return;
        };
        let gate = RESIZE_GATE.lock().unwrap();
        // Enough threads counted that the table calls for a resize, and a
        // look at the next count.
        THREADS.fetch_add(slots, Ordering::SeqCst);
        let started = RESIZER_THREADS.load(Ordering::SeqCst);
        GROW_AT.store(0, Ordering::Relaxed);
        let done = std::sync::Arc::new(AtomicUsize::new(0));
        let sleepers: Vec<_> = (0..4)
            .map(|_| {
                let done = std::sync::Arc::clone(&done);
                std::thread::spawn(move || {
                    note_sleeping_thread();
                    done.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        wait_until("every sleeper past its count", || {
            done.load(Ordering::SeqCst) == 4
        });
        assert!(!resizer_idle(), "a resize was called for and is held");
        assert_eq!(
            RESIZER_THREADS.load(Ordering::SeqCst),
            started + 1,
            "one resizer thread"
        );
        drop(gate);
        for s in sleepers {
            s.join().unwrap();
        }
        wait_until("the resizer done", resizer_idle);
        // The resizer set the next look from the table it left.
        assert_ne!(GROW_AT.load(Ordering::Relaxed), 0);
    }
}
