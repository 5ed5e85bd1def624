//! Blocking semantics of `ksync::sem`, as LTP's semop01-05 and
//! semctl01/05/06/07 check them, adapted to threads; plus the kernel-code
//! cases of the reference's §5 (bypass, complex-op FIFO after the merge,
//! GETNCNT counting only the blocking sop, EIDRM to every kind of sleeper,
//! undo application and clamping, dupsop sleepers) and of the kernel's
//! completion scans (wait-for-zero sleepers before alter sleepers, rescans
//! that serve an older skipped sleeper first, cascades, EAGAIN and ERANGE
//! delivered to a sleeper by its waker).
//!
//! Every scenario that the kernel can express runs twice with the same
//! assertions, on a `SemSet` and on a real kernel set (threads of one process
//! block in the real semop just as well), so the expected outcome is the
//! kernel's and not a guess. Undo *application* has no thread-level kernel
//! counterpart (the kernel applies a process's adjustments at process exit),
//! so the kernel side of those checks forks a child that does the SEM_UNDO
//! op and exits.
//!
//! No timing thresholds: sleepers are detected by polling GETNCNT/GETZCNT,
//! completions by polling a flag, each under a generous deadline
//! (`common::PATIENCE`) that fails the test instead of hanging; a
//! per-test watchdog aborts the process (after removing every kernel set) if
//! something hangs anyway. A failing assertion removes the set first, so the
//! sleepers of that scenario wake (EIDRM) and the scope can be joined.
//!
//! If SysV IPC is unavailable the kernel half of each test is skipped with a
//! loud message on stderr (`KSYNC_REQUIRE_SYSV=1` makes that a failure); the
//! ksync half always runs.
#![cfg(not(loom))]

mod common;
mod sem_common;

use common::wait_until;
use ksync::sem::{SemBuf, SemSet, SemUndo, IPC_NOWAIT, SEMVMX, SEM_UNDO};
use sem_common::{
    allowed_cpus, finish, my_pid, pin, sb, sysv_available, KernelSet, RmOnPanic, Sems, UndoChild,
    Watchdog,
};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

const NW: i16 = IPC_NOWAIT;
const U: i16 = SEM_UNDO;
/// A timeout long enough never to expire in a passing run, for sleepers
/// that must be woken by someone.
const LONG: Option<Duration> = Some(Duration::from_secs(60));

fn wait_ncnt<S: Sems>(s: &S, num: usize, n: usize) {
    wait_until(&format!("{}: ncnt({num}) == {n}", S::NAME), || {
        s.ncnt(num) == Ok(n)
    });
}

fn wait_zcnt<S: Sems>(s: &S, num: usize, n: usize) {
    wait_until(&format!("{}: zcnt({num}) == {n}", S::NAME), || {
        s.zcnt(num) == Ok(n)
    });
}

// ---------------------------------------------------------------------------
// semop01: values after a multi-sop SEM_UNDO call, semop and semtimedop
// ---------------------------------------------------------------------------

#[test]
fn semop01_squares_with_undo() {
    fn case<S: Sems>(s: &S, u: &SemUndo) {
        let sops: Vec<SemBuf> = (0..4u16).map(|i| sb(i, (i * i) as i16, U)).collect();
        for timeout in [None, Some(Duration::from_micros(10))] {
            assert_eq!(s.op_undo(&sops, u, timeout), Ok(()), "{}", S::NAME);
            assert_eq!(s.all(), Ok(vec![0, 1, 4, 9, 0]), "{}", S::NAME);
            for i in 0..4 {
                assert_eq!(s.setval(i, 0), Ok(()));
            }
        }
    }
    on_both!("sem_blocking::semop01_squares_with_undo", 5, case);
}

// ---------------------------------------------------------------------------
// semop02 (the blocking part): timeouts
// ---------------------------------------------------------------------------

#[test]
fn semop02_timeouts_are_again() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        s.setval(1, 1).unwrap();
        let short = Some(Duration::from_millis(5));
        // -1 on 0 and wait-for-zero on 1 time out.
        assert_eq!(s.op(&[sb(0, -1, 0)], short), Err(libc::EAGAIN), "{n}");
        assert_eq!(s.op(&[sb(1, 0, 0)], short), Err(libc::EAGAIN), "{n}");
        // A complex op times out too and leaves nothing applied.
        assert_eq!(
            s.op(&[sb(1, -1, 0), sb(0, -1, 0)], short),
            Err(libc::EAGAIN),
            "{n}"
        );
        // Zero timeout: EAGAIN at once if it would block, success otherwise.
        assert_eq!(
            s.op(&[sb(0, -1, 0)], Some(Duration::ZERO)),
            Err(libc::EAGAIN),
            "{n}"
        );
        assert_eq!(
            s.op(&[sb(1, 0, 0)], Some(Duration::ZERO)),
            Err(libc::EAGAIN),
            "{n}"
        );
        assert_eq!(s.op(&[sb(1, -1, 0)], Some(Duration::ZERO)), Ok(()), "{n}");
        assert_eq!(s.op(&[sb(1, 0, 0)], Some(Duration::ZERO)), Ok(()), "{n}");
        // IPC_NOWAIT on the blocking sop wins over any timeout.
        assert_eq!(s.op(&[sb(0, -1, NW)], LONG), Err(libc::EAGAIN), "{n}");
        // A timed-out sleeper leaves the counts as they were.
        assert_eq!((s.ncnt(0), s.zcnt(1)), (Ok(0), Ok(0)), "{n}");
        assert_eq!(s.all(), Ok(vec![0, 0]), "{n}");
        assert_eq!(s.pid(0), Ok(0), "{n}");
    }
    on_both!("sem_blocking::semop02_timeouts_are_again", 2, case);
}

#[test]
fn timed_sleeper_woken_before_its_timeout_succeeds() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let h = sc.spawn(|| s.op(&[sb(0, -2, 0)], LONG));
            wait_ncnt(s, 0, 1);
            s.op(&[sb(0, 3, 0)], None).unwrap();
            assert_eq!(finish("timed sleeper", h), Ok(()), "{}", S::NAME);
            assert_eq!(s.val(0), Ok(1), "{}", S::NAME);
            assert_eq!(s.ncnt(0), Ok(0), "{}", S::NAME);
        });
    }
    on_both!(
        "sem_blocking::timed_sleeper_woken_before_its_timeout_succeeds",
        1,
        case
    );
}

// ---------------------------------------------------------------------------
// semop03: EIDRM to every kind of sleeper, then every call fails
// ---------------------------------------------------------------------------

#[test]
fn semop03_remove_wakes_every_sleeper_with_eidrm() {
    fn case<S: Sems>(s: &S, u: &SemUndo) {
        let n = S::NAME;
        s.setval(0, 1).unwrap();
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            // Per-semaphore: wait-for-zero on 1, decrement of 0 (also timed,
            // also with SEM_UNDO).
            let zero = sc.spawn(|| s.op(&[sb(0, 0, 0)], None));
            let dec = sc.spawn(|| s.op(&[sb(1, -1, 0)], None));
            let timed = sc.spawn(|| s.op(&[sb(1, -1, 0)], LONG));
            let undo = sc.spawn(|| s.op_undo(&[sb(1, -1, U)], u, None));
            // Complex: blocks at sop 1 (a decrement of sem 1), and a complex
            // wait-for-zero.
            let cplx = sc.spawn(|| s.op(&[sb(0, -1, 0), sb(1, -1, 0)], None));
            let cplx_zero = sc.spawn(|| s.op(&[sb(2, 0, 0), sb(0, 0, 0)], None));
            wait_ncnt(s, 1, 4);
            wait_zcnt(s, 0, 2);
            assert_eq!(s.ncnt(0), Ok(0), "{n}");
            assert_eq!(s.rm(), Ok(()), "{n}");
            for (what, h) in [
                ("zero", zero),
                ("dec", dec),
                ("timed", timed),
                ("undo", undo),
                ("complex", cplx),
                ("complex zero", cplx_zero),
            ] {
                assert_eq!(finish(what, h), Err(libc::EIDRM), "{what} sleeper on {n}");
            }
        });
        let stale = S::stale_errno();
        assert_eq!(s.op(&[sb(0, 1, 0)], None), Err(stale), "{n}");
        assert_eq!(s.op(&[sb(0, -1, 0)], LONG), Err(stale), "{n}");
        assert_eq!(s.ncnt(0), Err(stale), "{n}");
        assert_eq!(s.rm(), Err(stale), "{n}");
    }
    on_both!(
        "sem_blocking::semop03_remove_wakes_every_sleeper_with_eidrm",
        3,
        case
    );
}

/// ksync's documented difference: later calls on a removed set say EIDRM
/// (the kernel says EINVAL for the stale id), `counters()` still works, and
/// a SemUndo that recorded adjustments for it drops without effect.
#[test]
fn removed_set_later_calls_are_removed() {
    use ksync::sem::SemError;
    let s = SemSet::new(2).unwrap();
    let u = SemUndo::new();
    s.semop_undo(&[sb(0, 3, U)], &u, None).unwrap();
    s.remove().unwrap();
    assert_eq!(s.semop(&[sb(0, 1, 0)]), Err(SemError::Removed));
    assert_eq!(s.semtimedop(&[sb(0, -1, 0)], LONG), Err(SemError::Removed));
    assert_eq!(
        s.semop_undo(&[sb(0, 1, U)], &u, None),
        Err(SemError::Removed)
    );
    assert_eq!(s.get_value(0), Err(SemError::Removed));
    assert_eq!(s.set_value(0, 1), Err(SemError::Removed));
    assert_eq!(s.get_all(), Err(SemError::Removed));
    assert_eq!(s.set_all(&[0, 0]), Err(SemError::Removed));
    assert_eq!(s.ncnt(0), Err(SemError::Removed));
    assert_eq!(s.zcnt(0), Err(SemError::Removed));
    assert_eq!(s.pid(0), Err(SemError::Removed));
    assert_eq!(s.stat().err(), Some(SemError::Removed));
    assert_eq!(s.remove(), Err(SemError::Removed));
    let _ = s.counters();
    drop(u);
    assert_eq!(s.get_value(0), Err(SemError::Removed));
}

// ---------------------------------------------------------------------------
// Wake order, bypass, complex FIFO
// ---------------------------------------------------------------------------

/// Starts `sops` in a sleeper thread that pushes `id` to `order` when its
/// call returns; waits until the sleeper is counted by `counted`.
fn sleeper<'s, 'e, S: Sems>(
    sc: &'s thread::Scope<'s, 'e>,
    s: &'e S,
    order: &'e Mutex<Vec<usize>>,
    id: usize,
    sops: Vec<SemBuf>,
) -> thread::ScopedJoinHandle<'s, Result<(), i32>> {
    sc.spawn(move || {
        let r = s.op(&sops, None);
        order.lock().unwrap().push(id);
        r
    })
}

/// Waits until `order` holds `n` entries.
fn wait_done(order: &Mutex<Vec<usize>>, n: usize) {
    wait_until(&format!("{n} sleepers completed"), || {
        order.lock().unwrap().len() >= n
    });
}

#[test]
fn fifo_wake_order_among_per_semaphore_sleepers() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let order = Mutex::new(Vec::new());
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let mut hs = Vec::new();
            for id in 0..5 {
                hs.push(sleeper(sc, s, &order, id, vec![sb(0, -1, 0)]));
                wait_ncnt(s, 0, id + 1);
            }
            for k in 1..=5 {
                s.op(&[sb(0, 1, 0)], None).unwrap();
                wait_done(&order, k);
                assert_eq!(s.ncnt(0), Ok(5 - k), "{}", S::NAME);
            }
            for h in hs {
                assert_eq!(finish("sleeper", h), Ok(()));
            }
            assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4], "{}", S::NAME);
            assert_eq!(s.val(0), Ok(0));
        });
    }
    on_both!(
        "sem_blocking::fifo_wake_order_among_per_semaphore_sleepers",
        1,
        case
    );
}

#[test]
fn one_post_of_three_wakes_the_three_oldest() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let order = Mutex::new(Vec::new());
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let mut hs = Vec::new();
            for id in 0..5 {
                hs.push(sleeper(sc, s, &order, id, vec![sb(0, -1, 0)]));
                wait_ncnt(s, 0, id + 1);
            }
            s.op(&[sb(0, 3, 0)], None).unwrap();
            wait_done(&order, 3);
            wait_ncnt(s, 0, 2);
            let mut first: Vec<usize> = order.lock().unwrap().clone();
            first.sort_unstable();
            assert_eq!(first, vec![0, 1, 2], "{}", S::NAME);
            s.op(&[sb(0, 2, 0)], None).unwrap();
            for h in hs {
                assert_eq!(finish("sleeper", h), Ok(()));
            }
        });
    }
    on_both!(
        "sem_blocking::one_post_of_three_wakes_the_three_oldest",
        1,
        case
    );
}

#[test]
fn blocked_large_decrement_is_bypassed() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let order = Mutex::new(Vec::new());
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let big = sleeper(sc, s, &order, 0, vec![sb(0, -2, 0)]);
            wait_ncnt(s, 0, 1);
            let small = sleeper(sc, s, &order, 1, vec![sb(0, -1, 0)]);
            wait_ncnt(s, 0, 2);
            // Value 1: the older -2 cannot run, the younger -1 can.
            s.op(&[sb(0, 1, 0)], None).unwrap();
            assert_eq!(finish("small", small), Ok(()), "{}", S::NAME);
            assert_eq!(*order.lock().unwrap(), vec![1], "{}", S::NAME);
            assert_eq!(s.ncnt(0), Ok(1), "{}", S::NAME);
            assert_eq!(s.val(0), Ok(0), "{}", S::NAME);
            // A new arrival overtakes the sleeper too (no queue-aware admission).
            s.setval(0, 1).unwrap();
            assert_eq!(s.op(&[sb(0, -1, NW)], None), Ok(()), "{}", S::NAME);
            assert_eq!(s.ncnt(0), Ok(1), "{}", S::NAME);
            s.op(&[sb(0, 2, 0)], None).unwrap();
            assert_eq!(finish("big", big), Ok(()), "{}", S::NAME);
            assert_eq!(s.val(0), Ok(0), "{}", S::NAME);
        });
    }
    on_both!("sem_blocking::blocked_large_decrement_is_bypassed", 1, case);
}

/// A simple sleeper A, then a complex sleeper C (the per-semaphore list is
/// merged into the global one), then a simple sleeper B (queued globally
/// while a complex op sleeps): each post of one wakes A, then C, then B.
#[test]
fn complex_ops_keep_fifo_after_the_merge() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let order = Mutex::new(Vec::new());
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let a = sleeper(sc, s, &order, 0, vec![sb(0, -1, 0)]);
            wait_ncnt(s, 0, 1);
            let c = sleeper(sc, s, &order, 1, vec![sb(0, -1, 0), sb(1, -1, 0)]);
            wait_ncnt(s, 0, 2);
            let b = sleeper(sc, s, &order, 2, vec![sb(0, -1, 0)]);
            wait_ncnt(s, 0, 3);
            // Give C its second semaphore; it still waits for sem 0.
            s.setval(1, 5).unwrap();
            assert_eq!(s.ncnt(0), Ok(3), "{}", S::NAME);
            for k in 1..=3 {
                s.op(&[sb(0, 1, 0)], None).unwrap();
                wait_done(&order, k);
            }
            for h in [a, c, b] {
                assert_eq!(finish("sleeper", h), Ok(()));
            }
            assert_eq!(*order.lock().unwrap(), vec![0, 1, 2], "{}", S::NAME);
            assert_eq!(s.all(), Ok(vec![0, 4]), "{}", S::NAME);
        });
    }
    on_both!(
        "sem_blocking::complex_ops_keep_fifo_after_the_merge",
        2,
        case
    );
}

/// Two complex sleepers needing different semaphores: the older one that
/// can run wins; one that cannot is bypassed, and completes later.
#[test]
fn complex_sleepers_bypass_and_complete() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let order = Mutex::new(Vec::new());
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let x = sleeper(sc, s, &order, 0, vec![sb(0, -1, 0), sb(1, -1, 0)]);
            wait_ncnt(s, 0, 1);
            let y = sleeper(sc, s, &order, 1, vec![sb(0, -1, 0), sb(2, -1, 0)]);
            wait_ncnt(s, 0, 2);
            // sem 2 and sem 0 available: x still lacks sem 1, y runs.
            s.op(&[sb(2, 1, 0), sb(0, 1, 0)], None).unwrap();
            assert_eq!(finish("y", y), Ok(()), "{}", S::NAME);
            assert_eq!(*order.lock().unwrap(), vec![1], "{}", S::NAME);
            s.op(&[sb(1, 1, 0)], None).unwrap();
            assert_eq!(s.ncnt(0), Ok(1), "x now waits for sem 0 on {}", S::NAME);
            assert_eq!(s.ncnt(1), Ok(0), "{}", S::NAME);
            s.op(&[sb(0, 1, 0)], None).unwrap();
            assert_eq!(finish("x", x), Ok(()), "{}", S::NAME);
            assert_eq!(s.all(), Ok(vec![0, 0, 0]), "{}", S::NAME);
        });
    }
    on_both!(
        "sem_blocking::complex_sleepers_bypass_and_complete",
        3,
        case
    );
}

#[test]
fn wait_for_zero_sleepers_all_wake_on_zero() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let order = Mutex::new(Vec::new());
        s.setval(0, 2).unwrap();
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let mut hs = Vec::new();
            for id in 0..4 {
                hs.push(sleeper(sc, s, &order, id, vec![sb(0, 0, 0)]));
            }
            // A complex one too: waits for sem 0 zero, then increments sem 1.
            hs.push(sleeper(sc, s, &order, 4, vec![sb(0, 0, 0), sb(1, 1, 0)]));
            wait_zcnt(s, 0, 5);
            // Decrements wake zero-waiters; -1 is not enough yet.
            s.op(&[sb(0, -1, 0)], None).unwrap();
            assert_eq!(s.zcnt(0), Ok(5), "{}", S::NAME);
            s.op(&[sb(0, -1, 0)], None).unwrap();
            for h in hs {
                assert_eq!(finish("zero waiter", h), Ok(()), "{}", S::NAME);
            }
            assert_eq!(s.zcnt(0), Ok(0), "{}", S::NAME);
            assert_eq!(s.all(), Ok(vec![0, 1]), "{}", S::NAME);
        });
    }
    on_both!(
        "sem_blocking::wait_for_zero_sleepers_all_wake_on_zero",
        2,
        case
    );
}

/// SETVAL and SETALL complete sleepers (and a completed sleeper sets otime,
/// although SETVAL alone does not).
#[test]
fn setval_and_setall_wake_sleepers() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let order = Mutex::new(Vec::new());
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let a = sleeper(sc, s, &order, 0, vec![sb(0, -3, 0)]);
            wait_ncnt(s, 0, 1);
            assert_eq!(s.otime_set(), Ok(false), "{}", S::NAME);
            s.setval(0, 3).unwrap();
            assert_eq!(finish("a", a), Ok(()), "{}", S::NAME);
            assert_eq!(s.otime_set(), Ok(true), "{}", S::NAME);
            let b = sleeper(sc, s, &order, 1, vec![sb(0, -1, 0), sb(1, -1, 0)]);
            wait_ncnt(s, 0, 1);
            s.setall(&[1, 1]).unwrap();
            assert_eq!(finish("b", b), Ok(()), "{}", S::NAME);
            assert_eq!(s.all(), Ok(vec![0, 0]), "{}", S::NAME);
        });
    }
    on_both!("sem_blocking::setval_and_setall_wake_sleepers", 2, case);
}

/// A sleeper re-evaluated by a waker can fail: its first sop blocked, its
/// later sop would now exceed SEMVMX, so the waker delivers ERANGE.
#[test]
fn sleeper_gets_range_error_from_its_waker() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        s.setval(1, SEMVMX).unwrap();
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let h = sc.spawn(|| s.op(&[sb(0, -1, 0), sb(1, 1, 0)], None));
            wait_ncnt(s, 0, 1);
            s.op(&[sb(0, 1, 0)], None).unwrap();
            assert_eq!(finish("sleeper", h), Err(libc::ERANGE), "{}", S::NAME);
            assert_eq!(s.all(), Ok(vec![1, SEMVMX as u16]), "{}", S::NAME);
            assert_eq!(s.ncnt(0), Ok(0), "{}", S::NAME);
        });
    }
    on_both!(
        "sem_blocking::sleeper_gets_range_error_from_its_waker",
        2,
        case
    );
}

/// A sleeper re-evaluated by a waker that now blocks at a sop carrying
/// IPC_NOWAIT gets EAGAIN from the waker (it blocked first at a sop without
/// IPC_NOWAIT, so it slept).
#[test]
fn sleeper_gets_again_when_it_now_blocks_at_a_nowait_sop() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let h = sc.spawn(|| s.op(&[sb(0, -1, 0), sb(1, -1, NW)], None));
            wait_ncnt(s, 0, 1);
            s.op(&[sb(0, 1, 0)], None).unwrap();
            assert_eq!(finish("sleeper", h), Err(libc::EAGAIN), "{}", S::NAME);
            assert_eq!(s.all(), Ok(vec![1, 0]), "{}", S::NAME);
            assert_eq!(s.ncnt(0), Ok(0), "{}", S::NAME);
        });
    }
    on_both!(
        "sem_blocking::sleeper_gets_again_when_it_now_blocks_at_a_nowait_sop",
        2,
        case
    );
}

/// A SEM_UNDO sleeper whose adjustment would leave the range when a waker
/// completes it gets ERANGE from the waker.
#[test]
fn sleeper_gets_range_error_from_its_undo_adjustment() {
    fn case<S: Sems>(s: &S, u: &SemUndo) {
        // Pump sem 1's adjustment to -32768 (value unchanged at 0).
        for _ in 0..2 {
            let pump = [sb(1, 16384, U | NW), sb(1, -16384, NW)];
            assert_eq!(s.op_undo(&pump, u, None), Ok(()), "{}", S::NAME);
        }
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let h = sc.spawn(|| s.op_undo(&[sb(0, -1, U), sb(1, 1, U)], u, None));
            wait_ncnt(s, 0, 1);
            s.op(&[sb(0, 1, 0)], None).unwrap();
            assert_eq!(finish("sleeper", h), Err(libc::ERANGE), "{}", S::NAME);
            assert_eq!(s.all(), Ok(vec![1, 0]), "{}", S::NAME);
        });
        // Without SEM_UNDO on sem 1 the same op is fine.
        assert_eq!(
            s.op_undo(&[sb(0, -1, U), sb(1, 1, 0)], u, None),
            Ok(()),
            "{}",
            S::NAME
        );
    }
    on_both!(
        "sem_blocking::sleeper_gets_range_error_from_its_undo_adjustment",
        2,
        case
    );
}

/// Wait-for-zero sleepers of a semaphore that became 0 are completed before
/// the alter sleepers are scanned: here the alter sleeper's completion would
/// make the semaphore non-zero again, and the zero-waiter still completes.
#[test]
fn zero_waiters_are_completed_before_alter_sleepers() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        s.setval(0, 1).unwrap();
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let z = sc.spawn(|| s.op(&[sb(0, 0, 0)], None));
            wait_zcnt(s, 0, 1);
            let d = sc.spawn(|| s.op(&[sb(1, -1, 0), sb(0, 1, 0)], None));
            wait_ncnt(s, 1, 1);
            // sem 0 -> 0 and sem 1 -> 1 in one call: Z first, then D.
            s.op(&[sb(0, -1, 0), sb(1, 1, 0)], None).unwrap();
            assert_eq!(finish("d", d), Ok(()), "{}", S::NAME);
            assert_eq!(finish("z", z), Ok(()), "zero-waiter on {}", S::NAME);
            assert_eq!(s.all(), Ok(vec![1, 0]), "{}", S::NAME);
        });
    }
    on_both!(
        "sem_blocking::zero_waiters_are_completed_before_alter_sleepers",
        2,
        case
    );
}

/// Completions cascade: a completed sleeper's increment completes another
/// sleeper, whose decrement to 0 completes a wait-for-zero sleeper, in
/// either queueing order.
#[test]
fn completions_cascade() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        for d_first in [false, true] {
            s.setval(2, 1).unwrap();
            thread::scope(|sc| {
                let _rm = RmOnPanic(s);
                let spawn_d = || sc.spawn(|| s.op(&[sb(1, -1, 0), sb(2, -1, 0)], None));
                let mut d = None;
                if d_first {
                    d = Some(spawn_d());
                    wait_ncnt(s, 1, 1);
                }
                let c = sc.spawn(|| s.op(&[sb(0, -1, 0), sb(1, 1, 0)], None));
                wait_ncnt(s, 0, 1);
                if !d_first {
                    d = Some(spawn_d());
                    wait_ncnt(s, 1, 1);
                }
                let z = sc.spawn(|| s.op(&[sb(2, 0, 0)], None));
                wait_zcnt(s, 2, 1);
                s.op(&[sb(0, 1, 0)], None).unwrap();
                assert_eq!(finish("c", c), Ok(()), "{}", S::NAME);
                assert_eq!(finish("d", d.unwrap()), Ok(()), "{}", S::NAME);
                assert_eq!(finish("z", z), Ok(()), "{}", S::NAME);
                assert_eq!(s.all(), Ok(vec![0, 0, 0]), "{}", S::NAME);
            });
        }
    }
    on_both!("sem_blocking::completions_cascade", 3, case);
}

/// After a sleeper completes, an older skipped sleeper that can now run is
/// served before a younger one (the kernel rescans from the head): A (-1 on
/// sem 1, queued first) is skipped, B (complex: takes sem 0, gives sem 1)
/// completes, then A, not C (-1 on sem 1, queued last), gets sem 1.
#[test]
fn rescan_serves_an_older_skipped_sleeper_first() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let order = Mutex::new(Vec::new());
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let a = sleeper(sc, s, &order, 0, vec![sb(1, -1, 0)]);
            wait_ncnt(s, 1, 1);
            let b = sleeper(sc, s, &order, 1, vec![sb(0, -1, 0), sb(1, 1, 0)]);
            wait_ncnt(s, 0, 1);
            let c = sleeper(sc, s, &order, 2, vec![sb(1, -1, 0)]);
            wait_ncnt(s, 1, 2);
            s.op(&[sb(0, 1, 0)], None).unwrap();
            assert_eq!(finish("b", b), Ok(()), "{}", S::NAME);
            assert_eq!(finish("a", a), Ok(()), "{}", S::NAME);
            wait_done(&order, 2);
            assert_eq!(s.ncnt(1), Ok(1), "c still waits on {}", S::NAME);
            assert_eq!(s.all(), Ok(vec![0, 0]), "{}", S::NAME);
            s.op(&[sb(1, 1, 0)], None).unwrap();
            assert_eq!(finish("c", c), Ok(()), "{}", S::NAME);
        });
    }
    on_both!(
        "sem_blocking::rescan_serves_an_older_skipped_sleeper_first",
        2,
        case
    );
}

/// A skipped sleeper that needs a value to come *down* to exactly what it
/// wants ({0:-1},{0:0} needs sem 0 == 1) is completed when a later sleeper's
/// decrement gets it there.
#[test]
fn rescan_after_a_decrement_enables_a_skipped_sleeper() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        s.setval(0, 2).unwrap();
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let a = sc.spawn(|| s.op(&[sb(0, -1, 0), sb(0, 0, 0)], None));
            wait_zcnt(s, 0, 1);
            let b = sc.spawn(|| s.op(&[sb(0, -1, 0), sb(1, -1, 0)], None));
            wait_ncnt(s, 1, 1);
            s.op(&[sb(1, 1, 0)], None).unwrap();
            assert_eq!(finish("b", b), Ok(()), "{n}");
            assert_eq!(finish("a", a), Ok(()), "{n}");
            assert_eq!(s.all(), Ok(vec![0, 0]), "{n}");
        });
        // The same with a plain decrement as the waker: a decrement is
        // re-evaluated against the global list too.
        s.setval(0, 2).unwrap();
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let a = sc.spawn(|| s.op(&[sb(0, -1, 0), sb(0, 0, 0)], None));
            wait_zcnt(s, 0, 1);
            s.op(&[sb(0, -1, 0)], None).unwrap();
            assert_eq!(finish("a", a), Ok(()), "{n}");
            assert_eq!(s.all(), Ok(vec![0, 0]), "{n}");
        });
    }
    on_both!(
        "sem_blocking::rescan_after_a_decrement_enables_a_skipped_sleeper",
        2,
        case
    );
}

/// A zero-waiter passed over because the post did not touch its semaphore
/// is served in the same call when a completion it enabled brings that
/// semaphore to zero: Z waits for sem 1 to be 0 (it is 1), C takes sem 0
/// and sem 1; a post on sem 0 completes C, and with it Z, before it returns.
/// (The shared sets pass over Z on the summary in their queue index, which
/// must remember that Z waits for zero.)
#[test]
fn a_zero_waiter_passed_over_is_served_when_a_completion_zeroes_its_semaphore() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        s.setval(1, 1).unwrap();
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let z = sc.spawn(|| s.op(&[sb(1, 0, 0)], None));
            wait_zcnt(s, 1, 1);
            let c = sc.spawn(|| s.op(&[sb(0, -1, 0), sb(1, -1, 0)], None));
            wait_ncnt(s, 0, 1);
            s.op(&[sb(0, 1, 0)], None).unwrap();
            assert_eq!((s.ncnt(0), s.zcnt(1)), (Ok(0), Ok(0)), "{n}");
            assert_eq!(finish("c", c), Ok(()), "{n}");
            assert_eq!(finish("z", z), Ok(()), "{n}");
            assert_eq!(s.all(), Ok(vec![0, 0]), "{n}");
        });
    }
    on_both!(
        "sem_blocking::a_zero_waiter_passed_over_is_served_when_a_completion_zeroes_its_semaphore",
        2,
        case
    );
}

/// The kernel looks at its complex wait-for-zero sleepers again whenever a
/// call leaves any semaphore it changed at zero, named by them or not, and
/// only then: GETZCNT counts such a sleeper on the operation it blocked on
/// at that look. Z waits for sems 0 and 1 to be zero; a SETALL leaves it
/// blocked on sem 1; raising sem 0 does not move it (no semaphore reached
/// zero); a plain decrement of sem 2 to zero does, to sem 0. (A shared set's
/// lock-free path would change sem 2 without that look, so while such a
/// sleeper exists every call there takes the lock.)
#[test]
fn a_complex_zero_waiter_is_recounted_when_any_semaphore_reaches_zero() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        s.setval(0, 1).unwrap();
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let z = sc.spawn(|| s.op(&[sb(0, 0, 0), sb(1, 0, 0)], None));
            wait_zcnt(s, 0, 1);
            s.setall(&[0, 1, 0]).unwrap();
            assert_eq!((s.zcnt(0), s.zcnt(1)), (Ok(0), Ok(1)), "{n}");
            s.op(&[sb(2, 1, 0)], None).unwrap();
            s.op(&[sb(0, 1, 0)], None).unwrap();
            assert_eq!((s.zcnt(0), s.zcnt(1)), (Ok(0), Ok(1)), "{n}: not looked at");
            s.op(&[sb(2, -1, 0)], None).unwrap();
            assert_eq!((s.zcnt(0), s.zcnt(1)), (Ok(1), Ok(0)), "{n}: looked at");
            s.setall(&[0, 0, 0]).unwrap();
            assert_eq!(finish("z", z), Ok(()), "{n}");
        });
    }
    on_both!(
        "sem_blocking::a_complex_zero_waiter_is_recounted_when_any_semaphore_reaches_zero",
        3,
        case
    );
}

/// After a completion the kernel looks at the sleepers it passed again
/// before it goes on, and one of them may now fail: E (`[a -1 IPC_NOWAIT,
/// b -1]`) blocks on b while a is 1; C1 takes a, which makes E's first
/// operation fail (EAGAIN), and only then does C2 give a back. A set that
/// looked at E only after C2 would find it blocked on b again.
#[test]
fn a_passed_sleeper_fails_before_a_later_completion_raises_its_value() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        let (a, b, x, y) = (0u16, 1u16, 2u16, 3u16);
        s.setval(usize::from(a), 1).unwrap();
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let e = sc.spawn(|| s.op(&[sb(a, -1, NW), sb(b, -1, 0)], None));
            wait_ncnt(s, usize::from(b), 1);
            let c1 = sc.spawn(|| s.op(&[sb(a, -1, 0), sb(x, -1, 0)], None));
            wait_ncnt(s, usize::from(x), 1);
            let c2 = sc.spawn(|| s.op(&[sb(a, 1, 0), sb(y, -1, 0)], None));
            wait_ncnt(s, usize::from(y), 1);
            s.op(&[sb(x, 1, 0), sb(y, 1, 0)], None).unwrap();
            assert_eq!(finish("e", e), Err(libc::EAGAIN), "{n}");
            assert_eq!(finish("c1", c1), Ok(()), "{n}");
            assert_eq!(finish("c2", c2), Ok(()), "{n}");
            assert_eq!(s.all(), Ok(vec![1, 0, 0, 0]), "{n}");
        });
    }
    on_both!(
        "sem_blocking::a_passed_sleeper_fails_before_a_later_completion_raises_its_value",
        4,
        case
    );
}

/// A sleeper that times out must not take the other sleepers of its
/// semaphore off the wakers' radar: the remaining one is still woken by a
/// plain single increment / decrement (ksync: the lock-free path must see
/// that sleepers remain).
#[test]
fn timed_out_sleeper_leaves_the_others_wakeable() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let b = sc.spawn(|| s.op(&[sb(0, -1, 0)], None));
            wait_ncnt(s, 0, 1);
            let a = sc.spawn(|| s.op(&[sb(0, -1, 0)], Some(Duration::from_millis(20))));
            wait_ncnt(s, 0, 2);
            assert_eq!(finish("a", a), Err(libc::EAGAIN), "{n}");
            assert_eq!(s.ncnt(0), Ok(1), "{n}");
            s.op(&[sb(0, 1, 0)], None).unwrap();
            assert_eq!(finish("b", b), Ok(()), "{n}");
            // Zero-waiters the same way.
            s.setval(1, 1).unwrap();
            let z2 = sc.spawn(|| s.op(&[sb(1, 0, 0)], None));
            wait_zcnt(s, 1, 1);
            let z1 = sc.spawn(|| s.op(&[sb(1, 0, 0)], Some(Duration::from_millis(20))));
            wait_zcnt(s, 1, 2);
            assert_eq!(finish("z1", z1), Err(libc::EAGAIN), "{n}");
            s.op(&[sb(1, -1, 0)], None).unwrap();
            assert_eq!(finish("z2", z2), Ok(()), "{n}");
            assert_eq!(s.all(), Ok(vec![0, 0]), "{n}");
        });
    }
    on_both!(
        "sem_blocking::timed_out_sleeper_leaves_the_others_wakeable",
        2,
        case
    );
}

/// A simple sleeper moved to the global list by a complex sleeper (merge)
/// and back when that one times out (unmerge) is still woken by a plain
/// single increment after the set went back to per-semaphore mode (many
/// control calls later).
#[test]
fn sleeper_survives_merge_unmerge_and_mode_switch() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let a = sc.spawn(|| s.op(&[sb(0, -1, 0)], None));
            wait_ncnt(s, 0, 1);
            let c = sc.spawn(|| {
                s.op(
                    &[sb(1, -1, 0), sb(2, -1, 0)],
                    Some(Duration::from_millis(20)),
                )
            });
            wait_ncnt(s, 1, 1);
            assert_eq!(finish("c", c), Err(libc::EAGAIN), "{n}");
            // Plenty of global-lock calls: the hysteresis runs out.
            for _ in 0..50 {
                assert_eq!(s.ncnt(0), Ok(1), "{n}");
            }
            // Single operations on other semaphores and on this one.
            for _ in 0..20 {
                s.op(&[sb(1, 1, 0)], None).unwrap();
                s.op(&[sb(1, -1, 0)], None).unwrap();
            }
            s.op(&[sb(0, 1, 0)], None).unwrap();
            assert_eq!(finish("a", a), Ok(()), "{n}");
            assert_eq!(s.all(), Ok(vec![0, 0, 0]), "{n}");
        });
    }
    on_both!(
        "sem_blocking::sleeper_survives_merge_unmerge_and_mode_switch",
        3,
        case
    );
}

/// Same, but the complex sleeper completes instead of timing out, and the
/// simple sleeper is a wait-for-zero one, woken by a plain decrement.
#[test]
fn zero_waiter_survives_a_completed_complex_sleeper() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        s.setval(0, 1).unwrap();
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let z = sc.spawn(|| s.op(&[sb(0, 0, 0)], None));
            wait_zcnt(s, 0, 1);
            let c = sc.spawn(|| s.op(&[sb(1, -1, 0), sb(2, -1, 0)], None));
            wait_ncnt(s, 1, 1);
            s.op(&[sb(1, 1, 0), sb(2, 1, 0)], None).unwrap();
            assert_eq!(finish("c", c), Ok(()), "{n}");
            for _ in 0..50 {
                assert_eq!(s.zcnt(0), Ok(1), "{n}");
            }
            for _ in 0..20 {
                s.op(&[sb(1, 1, 0)], None).unwrap();
                s.op(&[sb(1, -1, 0)], None).unwrap();
            }
            s.op(&[sb(0, -1, 0)], None).unwrap();
            assert_eq!(finish("z", z), Ok(()), "{n}");
            // A fresh sleeper, woken by a plain increment.
            let e = sc.spawn(|| s.op(&[sb(0, -1, 0)], None));
            wait_ncnt(s, 0, 1);
            s.op(&[sb(0, 1, 0)], None).unwrap();
            assert_eq!(finish("e", e), Ok(()), "{n}");
            assert_eq!(s.all(), Ok(vec![0, 0, 0]), "{n}");
        });
    }
    on_both!(
        "sem_blocking::zero_waiter_survives_a_completed_complex_sleeper",
        3,
        case
    );
}

// ---------------------------------------------------------------------------
// GETNCNT / GETZCNT (semctl01, semctl07)
// ---------------------------------------------------------------------------

#[test]
fn semctl01_ncnt_and_zcnt_with_five_sleepers() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        // semctl07: all zero on a fresh set.
        for i in 0..10 {
            assert_eq!((s.ncnt(i), s.zcnt(i)), (Ok(0), Ok(0)), "{n}");
        }
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let dec: Vec<_> = (0..5)
                .map(|_| sc.spawn(|| s.op(&[sb(4, -1, 0)], None)))
                .collect();
            wait_ncnt(s, 4, 5);
            assert_eq!(s.zcnt(4), Ok(0), "{n}");
            s.op(&[sb(4, 5, 0)], None).unwrap();
            for h in dec {
                assert_eq!(finish("dec", h), Ok(()), "{n}");
            }
            assert_eq!(s.ncnt(4), Ok(0), "{n}");
            s.setval(4, 1).unwrap();
            let zero: Vec<_> = (0..5)
                .map(|_| sc.spawn(|| s.op(&[sb(4, 0, 0)], None)))
                .collect();
            wait_zcnt(s, 4, 5);
            assert_eq!(s.ncnt(4), Ok(0), "{n}");
            s.setval(4, 0).unwrap();
            for h in zero {
                assert_eq!(finish("zero", h), Ok(()), "{n}");
            }
            assert_eq!(s.zcnt(4), Ok(0), "{n}");
        });
    }
    on_both!(
        "sem_blocking::semctl01_ncnt_and_zcnt_with_five_sleepers",
        10,
        case
    );
}

/// GETNCNT/GETZCNT count a multi-sop sleeper only on the semaphore of the
/// sop it is blocked at, and follow it when a re-evaluation blocks it
/// elsewhere.
#[test]
fn ncnt_counts_only_the_blocking_sop() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        s.setval(0, 1).unwrap();
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            // Blocks at sop 1 (sem 1 is 0): counted on sem 1 only.
            let x = sc.spawn(|| s.op(&[sb(0, -1, 0), sb(1, -1, 0), sb(2, 0, 0)], None));
            wait_ncnt(s, 1, 1);
            assert_eq!((s.ncnt(0), s.zcnt(2)), (Ok(0), Ok(0)), "{n}");
            // Blocks at sop 1 (sem 0: 1 - 5 < 0) after a passing sop on sem 2.
            let y = sc.spawn(|| s.op(&[sb(2, 0, 0), sb(0, -5, 0)], None));
            wait_ncnt(s, 0, 1);
            // Blocks at its wait-for-zero on sem 0 (value 1).
            let z = sc.spawn(|| s.op(&[sb(0, 0, 0), sb(1, -1, 0)], None));
            wait_zcnt(s, 0, 1);
            assert_eq!(
                (s.ncnt(1), s.zcnt(1), s.zcnt(2)),
                (Ok(1), Ok(0), Ok(0)),
                "{n}"
            );
            // Take sem 0 to 0, then post sem 1: x is re-evaluated and now
            // blocks at sem 0 (no longer at sem 1); z runs.
            assert_eq!(s.op(&[sb(0, -1, NW)], None), Ok(()), "{n}");
            s.op(&[sb(1, 1, 0)], None).unwrap();
            assert_eq!(finish("z", z), Ok(()), "{n}");
            assert_eq!(s.ncnt(1), Ok(0), "{n}");
            assert_eq!(s.ncnt(0), Ok(2), "x and y on sem 0 on {n}");
            assert_eq!(s.zcnt(0), Ok(0), "{n}");
            // Remove: both remaining sleepers get EIDRM.
            s.rm().unwrap();
            assert_eq!(finish("x", x), Err(libc::EIDRM), "{n}");
            assert_eq!(finish("y", y), Err(libc::EIDRM), "{n}");
        });
    }
    on_both!("sem_blocking::ncnt_counts_only_the_blocking_sop", 3, case);
}

// ---------------------------------------------------------------------------
// dupsop sleepers
// ---------------------------------------------------------------------------

#[test]
fn dupsop_sleepers() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            // {0:-1},{0:-1} needs 2.
            let two = sc.spawn(|| s.op(&[sb(0, -1, 0), sb(0, -1, 0)], None));
            wait_ncnt(s, 0, 1);
            s.op(&[sb(0, 1, 0)], None).unwrap();
            assert_eq!(s.val(0), Ok(1), "one is not enough on {n}");
            assert_eq!(s.ncnt(0), Ok(1), "{n}");
            s.op(&[sb(0, 1, 0)], None).unwrap();
            assert_eq!(finish("two", two), Ok(()), "{n}");
            assert_eq!(s.val(0), Ok(0), "{n}");
            // {1:+1},{1:-2} on 0 needs 1; it blocks at the -2.
            let inc_dec = sc.spawn(|| s.op(&[sb(1, 1, 0), sb(1, -2, 0)], None));
            wait_ncnt(s, 1, 1);
            assert_eq!(s.val(1), Ok(0), "nothing applied while asleep on {n}");
            s.op(&[sb(1, 1, 0)], None).unwrap();
            assert_eq!(finish("inc_dec", inc_dec), Ok(()), "{n}");
            assert_eq!(s.val(1), Ok(0), "{n}");
            // {2:+1},{2:0} on 0 blocks at the wait-for-zero, forever.
            let inc_zero = sc.spawn(|| s.op(&[sb(2, 1, 0), sb(2, 0, 0)], None));
            wait_zcnt(s, 2, 1);
            s.setval(2, 0).unwrap();
            assert_eq!(s.zcnt(2), Ok(1), "still blocked on {n}");
            s.rm().unwrap();
            assert_eq!(finish("inc_zero", inc_zero), Err(libc::EIDRM), "{n}");
        });
    }
    on_both!("sem_blocking::dupsop_sleepers", 3, case);
}

// ---------------------------------------------------------------------------
// pid and otime (semctl01 GETPID, semctl07)
// ---------------------------------------------------------------------------

#[test]
fn pid_and_otime() {
    fn case<S: Sems>(s: &S, _u: &SemUndo) {
        let n = S::NAME;
        assert_eq!(s.otime_set(), Ok(false), "{n}");
        assert_eq!(s.pid(2), Ok(0), "{n}");
        // An increment from another thread: the pid is still the process's.
        thread::scope(|sc| {
            sc.spawn(|| s.op(&[sb(2, 1, 0)], None).unwrap());
        });
        assert_eq!(s.pid(2), Ok(my_pid()), "{n}");
        assert_eq!(s.val(2), Ok(1), "{n}");
        assert_eq!(s.otime_set(), Ok(true), "{n}");
        assert_eq!(s.pid(0), Ok(0), "untouched semaphore on {n}");
    }
    on_both!("sem_blocking::pid_and_otime", 3, case);
}

#[test]
fn stat_fields() {
    // The times have one-second resolution (truncated, from a coarse clock
    // that may lag by a tick), so compare with a two-second margin: this
    // checks "a time of this run", not a latency.
    let slack = Duration::from_secs(2);
    let before = std::time::SystemTime::now();
    let s = SemSet::new(4).unwrap();
    let st = s.stat().unwrap();
    assert_eq!(st.nsems, 4);
    assert_eq!(st.otime, None);
    assert!(st.ctime >= before - slack, "{st:?} vs {before:?}");
    s.semop(&[sb(0, 1, 0)]).unwrap();
    let st2 = s.stat().unwrap();
    let after = std::time::SystemTime::now();
    let otime = st2.otime.expect("otime set by semop");
    assert!(otime >= before - slack && otime <= after + slack, "{st2:?}");
    assert_eq!(st2.ctime, st.ctime, "semop does not change ctime");
    assert_eq!(s.pid(0).unwrap(), std::process::id() as i32);
}

// ---------------------------------------------------------------------------
// Undo application (ksync: SemUndo drop; kernel: process exit via fork)
// ---------------------------------------------------------------------------

#[test]
fn undo_applied_when_context_drops() {
    let _dog = Watchdog::arm("undo_applied_when_context_drops", Duration::from_secs(60));
    let s = SemSet::new(3).unwrap();
    let u = SemUndo::new();
    s.semop_undo(&[sb(0, 5, U)], &u, None).unwrap();
    s.set_value(1, 5).unwrap();
    s.semop_undo(&[sb(1, -2, U), sb(2, 4, 0)], &u, None)
        .unwrap();
    assert_eq!(s.get_all(), Ok(vec![5, 3, 4]));
    drop(u);
    assert_eq!(s.get_all(), Ok(vec![0, 5, 4]));
    // A context used only without SEM_UNDO changes nothing.
    let u = SemUndo::new();
    s.semop_undo(&[sb(2, -4, 0)], &u, None).unwrap();
    drop(u);
    assert_eq!(s.get_all(), Ok(vec![0, 5, 0]));
}

#[test]
fn undo_drop_clamps_to_the_value_range() {
    let s = SemSet::new(2).unwrap();
    let u = SemUndo::new();
    // Sem 0: +5 undone later, but 3 were taken meanwhile: 2 - 5 -> 0.
    s.semop_undo(&[sb(0, 5, U)], &u, None).unwrap();
    s.semop(&[sb(0, -3, 0)]).unwrap();
    // Sem 1: -5 undone later, but the value went to SEMVMX: clamp there.
    s.set_value(1, 5).unwrap();
    s.semop_undo(&[sb(1, -5, U)], &u, None).unwrap();
    s.semop(&[sb(1, SEMVMX as i16, 0)]).unwrap();
    assert_eq!(s.get_all(), Ok(vec![2, SEMVMX as u16]));
    drop(u);
    assert_eq!(s.get_all(), Ok(vec![0, SEMVMX as u16]));
}

#[test]
fn setval_and_setall_clear_adjustments() {
    let s = SemSet::new(3).unwrap();
    let u1 = SemUndo::new();
    let u2 = SemUndo::new();
    s.semop_undo(&[sb(0, 5, U), sb(1, 5, U)], &u1, None)
        .unwrap();
    s.semop_undo(&[sb(0, 2, U), sb(1, 2, U), sb(2, 2, U)], &u2, None)
        .unwrap();
    // SETVAL clears sem 0's adjustment in both contexts.
    s.set_value(0, 7).unwrap();
    drop(u1);
    assert_eq!(s.get_all(), Ok(vec![7, 2, 2]), "u1: only sem 1 undone");
    s.set_all(&[9, 9, 9]).unwrap();
    drop(u2);
    assert_eq!(
        s.get_all(),
        Ok(vec![9, 9, 9]),
        "SETALL cleared everything of u2"
    );
}

#[test]
fn undo_drop_completes_sleepers() {
    let _dog = Watchdog::arm("undo_drop_completes_sleepers", Duration::from_secs(60));
    let s = SemSet::new(2).unwrap();
    s.set_value(0, 2).unwrap();
    let u = SemUndo::new();
    s.semop_undo(&[sb(0, -2, U), sb(1, 1, U)], &u, None)
        .unwrap();
    thread::scope(|sc| {
        let _rm = RmOnPanic(&s);
        let dec = sc.spawn(|| s.semop(&[sb(0, -2, 0)]));
        let zero = sc.spawn(|| s.semop(&[sb(1, 0, 0)]));
        wait_ncnt(&s, 0, 1);
        wait_zcnt(&s, 1, 1);
        drop(u);
        assert_eq!(finish("dec", dec), Ok(()));
        assert_eq!(finish("zero", zero), Ok(()));
    });
    assert_eq!(s.get_all(), Ok(vec![0, 0]));
}

#[test]
fn undo_context_outliving_its_set_or_used_after_remove() {
    let u = SemUndo::new();
    {
        let s = SemSet::new(1).unwrap();
        s.semop_undo(&[sb(0, 1, U)], &u, None).unwrap();
    }
    let s = SemSet::new(1).unwrap();
    s.semop_undo(&[sb(0, 1, U)], &u, None).unwrap();
    s.remove().unwrap();
    drop(u); // neither set is touched; no panic
    assert_eq!(s.get_value(0).err(), Some(ksync::sem::SemError::Removed));
}

/// One context used on two sets: its drop restores both.
#[test]
fn one_context_on_two_sets() {
    let a = SemSet::new(2).unwrap();
    let b = SemSet::new(1).unwrap();
    let u = SemUndo::new();
    a.semop_undo(&[sb(1, 4, U)], &u, None).unwrap();
    b.semop_undo(&[sb(0, 6, U)], &u, None).unwrap();
    a.semop_undo(&[sb(1, -1, U), sb(0, 2, 0)], &u, None)
        .unwrap();
    assert_eq!((a.get_all(), b.get_all()), (Ok(vec![2, 3]), Ok(vec![6])));
    drop(u);
    assert_eq!((a.get_all(), b.get_all()), (Ok(vec![2, 0]), Ok(vec![0])));
}

/// A timeout too large for a deadline is no timeout (ksync only: the kernel
/// rejects such a timespec).
#[test]
fn huge_timeout_means_no_timeout() {
    let _dog = Watchdog::arm("huge_timeout_means_no_timeout", Duration::from_secs(60));
    let s = SemSet::new(1).unwrap();
    thread::scope(|sc| {
        let _rm = RmOnPanic(&s);
        let h = sc.spawn(|| s.semtimedop(&[sb(0, -1, 0)], Some(Duration::MAX)));
        wait_ncnt(&s, 0, 1);
        s.semop(&[sb(0, 1, 0)]).unwrap();
        assert_eq!(finish("sleeper", h), Ok(()));
    });
    // And one that is never woken still waits (removal ends it).
    thread::scope(|sc| {
        let _rm = RmOnPanic(&s);
        let h = sc.spawn(|| s.semtimedop(&[sb(0, -1, 0)], Some(Duration::MAX)));
        wait_ncnt(&s, 0, 1);
        s.remove().unwrap();
        assert_eq!(finish("sleeper", h), Err(ksync::sem::SemError::Removed));
    });
}

/// A sleeper with SEM_UNDO completed by a waker records its adjustment in
/// its own context (the waker applies the op on the sleeper's behalf).
#[test]
fn sleeper_undo_recorded_by_the_waker() {
    let _dog = Watchdog::arm(
        "sleeper_undo_recorded_by_the_waker",
        Duration::from_secs(60),
    );
    let s = SemSet::new(1).unwrap();
    let u = SemUndo::new();
    thread::scope(|sc| {
        let _rm = RmOnPanic(&s);
        let h = sc.spawn(|| s.semop_undo(&[sb(0, -2, U)], &u, None));
        wait_ncnt(&s, 0, 1);
        s.semop(&[sb(0, 3, 0)]).unwrap();
        assert_eq!(finish("sleeper", h), Ok(()));
    });
    assert_eq!(s.get_value(0), Ok(1));
    drop(u);
    assert_eq!(s.get_value(0), Ok(3));
}

/// semop05: an undo context shared by two threads. The poster's V is not
/// undone when the poster thread exits, only when the last user of the
/// context is gone. The kernel side (threads share the process's undo list)
/// shows the first half: the value stays 1 after the poster thread exits.
#[test]
fn semop05_thread_exit_does_not_apply_undo() {
    fn case<S: Sems>(s: &S, u: &SemUndo) {
        let n = S::NAME;
        thread::scope(|sc| {
            let _rm = RmOnPanic(s);
            let poster = sc.spawn(|| s.op_undo(&[sb(0, 1, U)], u, None));
            assert_eq!(finish("poster", poster), Ok(()), "{n}");
            assert_eq!(s.val(0), Ok(1), "not undone at thread exit on {n}");
            let waiter = sc.spawn(|| s.op_undo(&[sb(0, -1, U)], u, None));
            assert_eq!(finish("waiter", waiter), Ok(()), "{n}");
            assert_eq!(s.val(0), Ok(0), "{n}");
        });
    }
    on_both!(
        "sem_blocking::semop05_thread_exit_does_not_apply_undo",
        1,
        case
    );

    // ksync: the context shared through an Arc; the poster thread drops its
    // clone at exit, which applies nothing; the last drop applies it.
    let s = SemSet::new(1).unwrap();
    let u = Arc::new(SemUndo::new());
    let s = Arc::new(s);
    let (s2, u2) = (Arc::clone(&s), Arc::clone(&u));
    thread::spawn(move || s2.semop_undo(&[sb(0, 1, U)], &u2, None).unwrap())
        .join()
        .unwrap();
    assert_eq!(s.get_value(0), Ok(1));
    drop(u);
    assert_eq!(s.get_value(0), Ok(0));
}

// ----- kernel: the same undo expectations, via a child process's exit -----

/// The kernel side of the undo tests above: adjustments are applied at
/// exit, clamped to [0, SEMVMX]; SETVAL/SETALL clear them; they complete
/// sleepers. Confirms the expectations of the ksync-only tests.
#[test]
fn kernel_exit_undo_matches_the_ksync_expectations() {
    if !sysv_available("sem_blocking::kernel_exit_undo_matches_the_ksync_expectations") {
        return;
    }
    let _dog = Watchdog::arm("kernel_exit_undo", Duration::from_secs(60));
    // undo_applied_when_context_drops
    let k = KernelSet::create(3);
    let (c, r) = UndoChild::spawn(&k, &[sb(0, 5, U)]);
    assert_eq!(r, 0);
    k.set_value(1, 5).unwrap();
    c.exit();
    assert_eq!(k.get_all(), Ok(vec![0, 5, 0]));
    let (c, r) = UndoChild::spawn(&k, &[sb(1, -2, U), sb(2, 4, 0)]);
    assert_eq!(r, 0);
    assert_eq!(k.get_all(), Ok(vec![0, 3, 4]));
    c.exit();
    assert_eq!(k.get_all(), Ok(vec![0, 5, 4]));

    // undo_drop_clamps_to_the_value_range
    let k = KernelSet::create(2);
    k.set_value(1, 5).unwrap();
    let (c, r) = UndoChild::spawn(&k, &[sb(0, 5, U), sb(1, -5, U)]);
    assert_eq!(r, 0);
    k.semop(&[sb(0, -3, 0)]).unwrap();
    k.semop(&[sb(1, SEMVMX as i16, 0)]).unwrap();
    assert_eq!(k.get_all(), Ok(vec![2, SEMVMX as u16]));
    c.exit();
    assert_eq!(k.get_all(), Ok(vec![0, SEMVMX as u16]));

    // setval_and_setall_clear_adjustments
    let k = KernelSet::create(3);
    let (c1, r1) = UndoChild::spawn(&k, &[sb(0, 5, U), sb(1, 5, U)]);
    let (c2, r2) = UndoChild::spawn(&k, &[sb(0, 2, U), sb(1, 2, U), sb(2, 2, U)]);
    assert_eq!((r1, r2), (0, 0));
    k.set_value(0, 7).unwrap();
    c1.exit();
    assert_eq!(k.get_all(), Ok(vec![7, 2, 2]));
    k.set_all(&[9, 9, 9]).unwrap();
    c2.exit();
    assert_eq!(k.get_all(), Ok(vec![9, 9, 9]));

    // undo_drop_completes_sleepers
    let k = KernelSet::create(2);
    k.set_value(0, 2).unwrap();
    let (c, r) = UndoChild::spawn(&k, &[sb(0, -2, U), sb(1, 1, U)]);
    assert_eq!(r, 0);
    thread::scope(|sc| {
        let _rm = RmOnPanic(&k);
        let dec = sc.spawn(|| k.semop(&[sb(0, -2, 0)]));
        let zero = sc.spawn(|| k.semop(&[sb(1, 0, 0)]));
        wait_ncnt(&k, 0, 1);
        wait_zcnt(&k, 1, 1);
        c.exit();
        assert_eq!(finish("dec", dec), Ok(()));
        assert_eq!(finish("zero", zero), Ok(()));
    });
    assert_eq!(k.get_all(), Ok(vec![0, 0]));
    assert_eq!(k.otime_set(), Ok(true));

    // Undo overflow is checked at semop time in the child too.
    let k = KernelSet::create(1);
    let (c, r) = UndoChild::spawn(&k, &[sb(0, 20000, U), sb(0, -20000, 0), sb(0, 20000, U)]);
    assert_eq!(r, libc::ERANGE);
    c.exit();
    assert_eq!(k.get_all(), Ok(vec![0]));
}

// ---------------------------------------------------------------------------
// Counters
// ---------------------------------------------------------------------------

#[test]
fn counters_count_wakeups() {
    let _dog = Watchdog::arm("counters_count_wakeups", Duration::from_secs(60));
    let s = SemSet::new(1).unwrap();
    let c0 = s.counters();
    let done = AtomicUsize::new(0);
    thread::scope(|sc| {
        let _rm = RmOnPanic(&s);
        let hs: Vec<_> = (0..3)
            .map(|_| {
                sc.spawn(|| {
                    let r = s.semop(&[sb(0, -1, 0)]);
                    done.fetch_add(1, SeqCst);
                    r
                })
            })
            .collect();
        wait_ncnt(&s, 0, 3);
        s.semop(&[sb(0, 3, 0)]).unwrap();
        for h in hs {
            assert_eq!(finish("sleeper", h), Ok(()));
        }
    });
    let c1 = s.counters();
    assert!(c1.wakeups >= c0.wakeups + 3, "{c0:?} -> {c1:?}");
    assert!(c1.futex_wakes <= c1.wakeups, "{c1:?}");
    assert!(c1.attempts >= c0.attempts + 4, "{c0:?} -> {c1:?}");
    s.remove().unwrap();
    let _ = s.counters();
}

/// A post that completes many parked sleepers shares its wake-ups out among
/// the woken, in both ways sharing has (by default `Any` only with 4 or
/// more CPUs and `Local` with 2 or 3; forced here, for this whole test
/// binary, so that every machine runs both). The sleepers are pinned round
/// robin over the CPUs, so that `Local` sends a leader to each other CPU;
/// on up to 3 CPUs each CPU holds 16 or more of them, so that both modes
/// also leave the post's board open to the sleepers returning there.
/// Every sleeper must return, round after round: a wake that the poster and
/// its helpers both left to the other would leave one asleep, and the
/// watchdog fires.
#[test]
fn a_post_shares_its_wake_ups_out_and_every_sleeper_returns() {
    use ksync::futex_batch::{set_sharing_mode, SharingMode};
    let _dog = Watchdog::arm(
        "a_post_shares_its_wake_ups_out_and_every_sleeper_returns",
        Duration::from_secs(60),
    );
    const SLEEPERS: usize = 48;
    let cpus = allowed_cpus();
    let s = SemSet::new(SLEEPERS).unwrap();
    thread::scope(|sc| {
        let _rm = RmOnPanic(&s);
        for round in 0..20 {
            set_sharing_mode(if round % 2 == 0 {
                SharingMode::Any
            } else {
                SharingMode::Local
            });
            let hs: Vec<_> = (0..SLEEPERS)
                .map(|k| {
                    let (s, cpu) = (&s, cpus[k % cpus.len()]);
                    sc.spawn(move || {
                        pin(cpu);
                        s.semop(&[sb(k as u16, -1, 0)])
                    })
                })
                .collect();
            for k in 0..SLEEPERS {
                wait_ncnt(&s, k, 1);
            }
            let post: Vec<SemBuf> = (0..SLEEPERS).map(|k| sb(k as u16, 1, 0)).collect();
            s.semop(&post).unwrap();
            for h in hs {
                assert_eq!(finish("sleeper", h), Ok(()));
            }
        }
    });
    assert_eq!(s.get_all().unwrap(), vec![0; SLEEPERS]);
    s.remove().unwrap();
}
