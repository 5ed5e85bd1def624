//! loom models of the combining lock.
//!
//! The protected value is a loom `UnsafeCell`, so loom reports any access
//! the lock fails to order, whichever thread runs the closure. Each closure
//! returns the count it saw, so the models check that every published
//! closure ran exactly once (the counts are a permutation of 0..n) and that
//! its result reached its owner. Waiters sleep after one poll under loom and
//! the combining limit is one, so the models reach the sleep/wake and the
//! hand-over paths; the crate's futex stand-in deadlocks the model if a
//! wake-up is ever lost.

use crate::exclusion::increments;
use ksync::spin::{CombiningMutex, CombiningStats, RawCombiningLock};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

use crate::common::{quiet_deliberate_panics, Deliberate};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex as StdMutex;

type Counter = CombiningMutex<UnsafeCell<usize>>;

/// Increments through `with`; returns the value before.
fn bump(m: &Counter) -> usize {
    m.with(|cell| {
        cell.with_mut(|v| {
            // SAFETY: the closure runs with the lock held; loom reports any
            // access the lock fails to order.
            unsafe {
                *v += 1;
                *v - 1
            }
        })
    })
}

/// Increments through a guard; returns the value before.
fn bump_guarded(m: &Counter) -> usize {
    let guard = m.lock();
    guard.with_mut(|v| {
        // SAFETY: as in `bump`.
        unsafe {
            *v += 1;
            *v - 1
        }
    })
}

/// What the main thread and the spawned ones do.
#[derive(Clone, Copy)]
enum Use {
    Closure,
    Guard,
}

/// The stats of every execution of a model, summed (each execution makes a
/// lock of its own).
fn run(threads: &'static [Use], builder: loom::model::Builder) -> CombiningStats {
    let total = std::sync::Arc::new(StdMutex::new(CombiningStats::default()));
    let sum = std::sync::Arc::clone(&total);
    builder.check(move || {
        let m: Arc<Counter> = Arc::new(CombiningMutex::new(UnsafeCell::new(0)));
        let call = |m: &Counter, how: Use| match how {
            Use::Closure => bump(m),
            Use::Guard => bump_guarded(m),
        };
        let others: Vec<_> = threads[1..]
            .iter()
            .map(|&how| {
                let m = Arc::clone(&m);
                thread::spawn(move || call(&m, how))
            })
            .collect();
        let mut seen = vec![call(&m, threads[0])];
        seen.extend(others.into_iter().map(|t| t.join().unwrap()));
        seen.sort_unstable();
        assert_eq!(seen, (0..threads.len()).collect::<Vec<_>>());
        assert!(!m.is_locked());
        let mut sum = sum.lock().unwrap();
        *sum = sum.plus(&m.stats());
    });
    let total = *total.lock().unwrap();
    total
}

/// Two closures: one runs the other's (combining) in some schedules, the
/// waiter sleeps and is woken in others.
#[test]
fn combining_two_closures() {
    let seen = run(&[Use::Closure, Use::Closure], loom::model::Builder::new());
    eprintln!("combining_two_closures: {seen:?}");
    assert!(seen.combined > 0, "no closure was combined: {seen:?}");
    assert!(seen.sleeps > 0 && seen.wakes > 0, "no sleep/wake: {seen:?}");
}

/// Three closures with a combining limit of one: the holder serves one
/// waiter and hands the lock to the next, which serves itself.
#[test]
fn combining_three_closures_hand_over() {
    let builder = loom::model::Builder::new();
    let seen = run(&[Use::Closure, Use::Closure, Use::Closure], builder);
    eprintln!("combining_three_closures_hand_over: {seen:?}");
    assert!(seen.combined > 0, "no closure was combined: {seen:?}");
    assert!(seen.handed_over > 0, "never handed over: {seen:?}");
}

/// A guard user among closure users: it gets the lock handed over in its
/// turn, and its unlock serves the closures published meanwhile.
#[test]
fn combining_guard_and_closures() {
    let builder = loom::model::Builder::new();
    let seen = run(&[Use::Guard, Use::Closure, Use::Closure], builder);
    eprintln!("combining_guard_and_closures: {seen:?}");
    assert!(seen.handed_over > 0, "never handed over: {seen:?}");
    assert!(seen.combined > 0, "no closure was combined: {seen:?}");
}

/// The guard path alone is a plain mutex: the shared exclusion model.
#[test]
fn combining_raw_lock_exclusion() {
    increments(RawCombiningLock::new, 2, false);
    increments(RawCombiningLock::new, 3, false);
}

/// A closure that panics while another thread runs it: the panic reaches
/// its owner, the runner carries on, and the lock stays usable.
#[test]
fn combining_panic_reaches_its_owner() {
    static RUN_BY_ANOTHER: AtomicUsize = AtomicUsize::new(0);
    quiet_deliberate_panics();
    loom::model(|| {
        let m: Arc<Counter> = Arc::new(CombiningMutex::new(UnsafeCell::new(0)));
        let panicker = {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                let owner = thread::current().id();
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    m.with(|cell| {
                        // SAFETY: as in `bump`.
                        cell.with_mut(|v| unsafe { *v += 10 });
                        if thread::current().id() != owner {
                            RUN_BY_ANOTHER.fetch_add(1, Ordering::Relaxed);
                        }
                        std::panic::panic_any(Deliberate(7));
                    })
                }))
            })
        };
        let mine = bump(&m);
        let payload = panicker
            .join()
            .unwrap()
            .expect_err("the owner sees its panic");
        assert_eq!(payload.downcast_ref::<Deliberate>().map(|d| d.0), Some(7));
        assert!(mine == 0 || mine == 10, "{mine}");
        assert_eq!(bump(&m), 11);
        assert!(!m.is_locked());
    });
    assert!(
        RUN_BY_ANOTHER.load(Ordering::Relaxed) > 0,
        "the model never reached the panicking closure run by another thread"
    );
}
