//! loom models of `ksync::sem`: the sleep / complete / wake handshake (no
//! lost wake-up, the result visible without a retry), a post whose wake-ups
//! the woken help finish, a time-out racing a waker, removal waking a
//! sleeper, calls on several semaphores taking their word locks against
//! each other (no deadlock, all or nothing), and the
//! switch between per-semaphore and global locking; plus `RawSemLock`, the
//! futex mutex of the set's global lock.
//!
//! Under loom sleepers park at once instead of polling, a locker that finds
//! a semaphore's lock taken sleeps after one poll, and a timed futex wait
//! sleeps while the other threads take a step, then times out unless a wake
//! chose it (`src/futex.rs`).

use crate::exclusion::increments;
use ksync::futex::with_spurious_wakeups;
use ksync::futex_batch::helpers_wake_calls;
use ksync::sem::{RawSemLock, SemBuf, SemError, SemSet};
use loom::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut model = loom::model::Builder::new();
    model.max_branches = 20_000;
    model.check(f);
}

#[test]
fn semlock_two_threads() {
    increments(RawSemLock::new, 2, false);
}

/// Three threads: the third makes the lock word reach "contended" while a
/// sleeper is already queued, which is where a lost wake-up would hide.
#[test]
fn semlock_three_threads() {
    increments(RawSemLock::new, 3, false);
}

fn op(num: u16, op: i16) -> [SemBuf; 1] {
    [SemBuf::new(num, op, 0)]
}

/// A sleeper's -1 is completed by the poster's +1: whether the post lands
/// before the sleeper queues, while it is queued but awake, or after it
/// parked, the sleeper returns success and the value is consumed exactly once.
#[test]
fn a_posted_sleeper_returns_the_wakers_result() {
    static PARKED_AND_WOKEN: AtomicUsize = AtomicUsize::new(0);
    model(|| {
        let set = Arc::new(SemSet::new(1).unwrap());
        let sleeper = {
            let set = Arc::clone(&set);
            loom::thread::spawn(move || set.semop(&op(0, -1)))
        };
        set.semop(&op(0, 1)).unwrap();
        assert_eq!(sleeper.join().unwrap(), Ok(()));
        assert_eq!(set.get_value(0), Ok(0));
        let counters = set.counters();
        assert!(counters.futex_wakes <= counters.wakeups);
        if counters.futex_wakes == 1 {
            PARKED_AND_WOKEN.fetch_add(1, Ordering::Relaxed);
        }
    });
    assert!(
        PARKED_AND_WOKEN.load(Ordering::Relaxed) > 0,
        "the model never reached a parked sleeper woken by the poster"
    );
}

/// One post completes two sleepers: the second delivery carries a handle to
/// the post's shared-out wake-ups (sharing is always on under loom), so the
/// second sleeper may claim and wake the other's word while the poster is
/// still at it, and the board may be freed by either. Both return success
/// and the value is consumed exactly once, whatever the interleaving. The
/// model's futex wakes only the sleepers a wake chooses, so a word claimed
/// but never woken leaves its sleeper asleep, which loom reports; and, as a
/// kernel futex may, one wait in each execution may return unwoken, so the
/// sleepers also survive spurious wake-ups. (A word woken twice would not
/// show here: the board's own model in `futex_batch/spread.rs` checks that
/// each word is woken exactly once.)
#[test]
fn a_post_of_two_shares_its_wake_ups_with_the_woken() {
    static A_SLEEPER_WOKE_ONE: AtomicUsize = AtomicUsize::new(0);
    let ((), spurious) = with_spurious_wakeups(1, || {
        model(|| {
            let helped_before = helpers_wake_calls();
            let set = Arc::new(SemSet::new(1).unwrap());
            let sleepers: Vec<_> = (0..2)
                .map(|_| {
                    let set = Arc::clone(&set);
                    loom::thread::spawn(move || set.semop(&op(0, -1)))
                })
                .collect();
            set.semop(&op(0, 2)).unwrap();
            for sleeper in sleepers {
                assert_eq!(sleeper.join().unwrap(), Ok(()));
            }
            assert_eq!(set.get_value(0), Ok(0));
            if helpers_wake_calls() > helped_before {
                A_SLEEPER_WOKE_ONE.fetch_add(1, Ordering::Relaxed);
            }
        })
    });
    assert!(
        A_SLEEPER_WOKE_ONE.load(Ordering::Relaxed) > 0,
        "the model never reached a woken sleeper waking the other"
    );
    assert!(spurious > 0, "no wait returned spuriously");
}

/// A time-out racing a post: either the sleeper got the unit (success, value
/// 0) or it timed out and the unit is still there (EAGAIN, value 1). Never
/// both, never neither.
#[test]
fn a_timeout_racing_a_post_settles_under_the_lock() {
    static TIMED_OUT: AtomicUsize = AtomicUsize::new(0);
    model(|| {
        let set = Arc::new(SemSet::new(1).unwrap());
        let sleeper = {
            let set = Arc::clone(&set);
            loom::thread::spawn(move || set.semtimedop(&op(0, -1), Some(Duration::from_millis(1))))
        };
        set.semop(&op(0, 1)).unwrap();
        let result = sleeper.join().unwrap();
        let value = set.get_value(0).unwrap();
        match result {
            Ok(()) => assert_eq!(value, 0),
            Err(SemError::Again) => {
                assert_eq!(value, 1);
                TIMED_OUT.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
        assert_eq!(set.ncnt(0), Ok(0));
    });
    assert!(
        TIMED_OUT.load(Ordering::Relaxed) > 0,
        "the model never reached a sleeper that timed out"
    );
}

/// Removal wakes a sleeper with EIDRM, and a call after removal gets EIDRM.
#[test]
fn removal_wakes_the_sleeper_with_eidrm() {
    static PARKED_AND_WOKEN: AtomicUsize = AtomicUsize::new(0);
    model(|| {
        let set = Arc::new(SemSet::new(1).unwrap());
        let sleeper = {
            let set = Arc::clone(&set);
            loom::thread::spawn(move || set.semop(&op(0, -1)))
        };
        set.remove().unwrap();
        assert_eq!(sleeper.join().unwrap(), Err(SemError::Removed));
        assert_eq!(set.semop(&op(0, 1)), Err(SemError::Removed));
        if set.counters().futex_wakes == 1 {
            PARKED_AND_WOKEN.fetch_add(1, Ordering::Relaxed);
        }
    });
    assert!(
        PARKED_AND_WOKEN.load(Ordering::Relaxed) > 0,
        "the model never reached a parked sleeper woken by the removal"
    );
}

/// A single operation in per-semaphore mode races a complex operation that
/// switches the set to global mode and may sleep on the global list until
/// the single operation's +1 lets it through. loom's UnsafeCell checks that
/// no wait list or value is touched under the wrong lock in any order.
#[test]
fn per_semaphore_and_global_locking_exclude_each_other() {
    static COMPLEX_SLEPT: AtomicUsize = AtomicUsize::new(0);
    model(|| {
        let set = Arc::new(SemSet::new(2).unwrap());
        let single = {
            let set = Arc::clone(&set);
            loom::thread::spawn(move || set.semop(&op(0, 1)))
        };
        set.semop(&[SemBuf::new(0, -1, 0), SemBuf::new(1, 1, 0)])
            .unwrap();
        single.join().unwrap().unwrap();
        assert_eq!(set.get_all(), Ok(vec![0, 1]));
        if set.counters().wakeups == 1 {
            COMPLEX_SLEPT.fetch_add(1, Ordering::Relaxed);
        }
    });
    assert!(
        COMPLEX_SLEPT.load(Ordering::Relaxed) > 0,
        "the model never reached a complex sleeper completed by a single operation"
    );
}

/// Two calls on the same two semaphores, naming them in opposite orders,
/// take the two word locks in ascending order either way: no deadlock, and
/// a lock waiter that sleeps is woken by the release. Neither call can block,
/// so both stay in per-semaphore mode.
#[test]
fn calls_on_two_semaphores_lock_them_in_order() {
    static WAITED: AtomicUsize = AtomicUsize::new(0);
    model(|| {
        let set = Arc::new(SemSet::new(2).unwrap());
        set.semop(&[SemBuf::new(0, 1, 0), SemBuf::new(1, 1, 0)])
            .unwrap();
        let other = {
            let set = Arc::clone(&set);
            loom::thread::spawn(move || {
                set.semop(&[SemBuf::new(1, -1, 0), SemBuf::new(0, -1, 0)])
                    .unwrap();
                set.semop(&[SemBuf::new(1, 1, 0), SemBuf::new(0, 1, 0)])
            })
        };
        set.semop(&[SemBuf::new(0, 1, 0), SemBuf::new(1, 1, 0)])
            .unwrap();
        other.join().unwrap().unwrap();
        assert_eq!(set.get_all(), Ok(vec![2, 2]));
        if set.counters().lock_waits > 0 {
            WAITED.fetch_add(1, Ordering::Relaxed);
        }
    });
    assert!(
        WAITED.load(Ordering::Relaxed) > 0,
        "the model never reached a call waiting for a semaphore's lock"
    );
}

/// Entering global mode (a SETALL) waits out a call that holds the
/// semaphores' word locks: the control call sees the call's two increments
/// both or neither, never one.
#[test]
fn global_mode_sees_a_call_on_two_semaphores_whole() {
    model(|| {
        let set = Arc::new(SemSet::new(2).unwrap());
        let call = {
            let set = Arc::clone(&set);
            loom::thread::spawn(move || set.semop(&[SemBuf::new(1, 1, 0), SemBuf::new(0, 1, 0)]))
        };
        let seen = set.get_all().unwrap();
        assert!(seen == [0, 0] || seen == [1, 1], "{seen:?}");
        call.join().unwrap().unwrap();
        assert_eq!(set.get_all(), Ok(vec![1, 1]));
    });
}

/// A call on two semaphores does the higher one's operation as a lock-free
/// compare-and-swap while it holds the lower one's lock, and writes the
/// lower one back with the release. Whoever sees the higher semaphore
/// changed must then see the lower one changed too (the call is one event):
/// here another thread tries to take the unit the call puts on semaphore 1,
/// then reads semaphore 0, and checks the two agree.
#[test]
fn a_call_on_two_semaphores_is_seen_whole_from_either_semaphore() {
    static TOOK_IT: AtomicUsize = AtomicUsize::new(0);
    model(|| {
        let set = Arc::new(SemSet::new(2).unwrap());
        set.set_value(0, 1).unwrap();
        let observer = {
            let set = Arc::clone(&set);
            loom::thread::spawn(move || {
                let take = [SemBuf::new(1, -1, ksync::sem::IPC_NOWAIT)];
                if set.semop(&take).is_ok() {
                    // The call happened: its decrement of semaphore 0 shows.
                    assert_eq!(set.get_value(0), Ok(0));
                    TOOK_IT.fetch_add(1, Ordering::Relaxed);
                } else if set.get_value(0) == Ok(0) {
                    // It happened after the failed take: its increment shows.
                    assert_eq!(set.semop(&take), Ok(()));
                }
            })
        };
        set.semop(&[SemBuf::new(0, -1, 0), SemBuf::new(1, 1, 0)])
            .unwrap();
        observer.join().unwrap();
    });
    assert!(
        TOOK_IT.load(Ordering::Relaxed) > 0,
        "the model never took the unit the call posted"
    );
}

/// A call on two quiet semaphores locks the lower one with `QUIET` and
/// releases it with a plain store that wakes nobody. A single operation that
/// finds that lock takes the locked path and must wait the hold out without
/// going to sleep for a wake-up the store never sends: a locker that slept
/// as on an ordinary holder would never wake, which loom reports as a
/// deadlock. Both calls happen, whole, in either order.
#[test]
fn a_locker_waits_out_a_quiet_hold_without_sleeping_for_a_wake_up() {
    static WAITED: AtomicUsize = AtomicUsize::new(0);
    model(|| {
        let set = Arc::new(SemSet::new(2).unwrap());
        set.set_value(0, 1).unwrap();
        let locker = {
            let set = Arc::clone(&set);
            loom::thread::spawn(move || set.semop(&op(0, 1)))
        };
        set.semop(&[SemBuf::new(0, -1, 0), SemBuf::new(1, 1, 0)])
            .unwrap();
        locker.join().unwrap().unwrap();
        assert_eq!(set.get_all(), Ok(vec![1, 1]));
        if set.counters().lock_waits > 0 {
            WAITED.fetch_add(1, Ordering::Relaxed);
        }
    });
    assert!(
        WAITED.load(Ordering::Relaxed) > 0,
        "the model never reached a locker waiting for the quiet hold"
    );
}
