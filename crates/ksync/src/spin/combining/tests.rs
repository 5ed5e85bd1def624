//! Unit tests of the combining lock.

use super::*;
use lock_api::RawMutex;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

#[test]
fn uncontended_with_runs_here_and_leaves_it_free() {
    let m = CombiningMutex::new(1u32);
    assert_eq!(
        m.with(|v| {
            *v += 1;
            *v
        }),
        2
    );
    assert!(!m.is_locked());
    assert_eq!(unsafe { m.raw() }.word.load(Ordering::Relaxed), 0);
}

#[test]
fn a_held_lock_runs_published_closures_at_unlock() {
    let m = Arc::new(CombiningMutex::new(Vec::<u32>::new()));
    let guard = m.lock();
    let waiters: Vec<_> = (0..4u32)
        .map(|i| {
            let waiter = Arc::clone(&m);
            let t = std::thread::spawn(move || {
                waiter.with(|v| {
                    v.push(i);
                    std::thread::current().id()
                })
            });
            // Each publishes before the next starts: publication order is i.
            while unsafe { m.raw() }.word.load(Ordering::Relaxed) & !LOCKED == 0
                || count_published(&m) < i as usize + 1
            {
                std::thread::yield_now();
            }
            t
        })
        .collect();
    let holder = std::thread::current().id();
    drop(guard); // serves all four, in publication order, on this thread
    for w in waiters {
        assert_eq!(w.join().unwrap(), holder);
    }
    assert_eq!(m.with(|v| v.clone()), vec![0, 1, 2, 3]);
}

/// Requests on the stack; only meaningful while the caller holds the lock
/// and nobody serves.
fn count_published<T>(m: &CombiningMutex<T>) -> usize {
    let raw = unsafe { m.raw() };
    let mut p = (raw.word.load(Ordering::Acquire) & !LOCKED) as *const Request;
    let mut n = 0;
    while !p.is_null() {
        n += 1;
        p = unsafe { (*p).next() };
    }
    n
}

#[test]
fn a_panic_in_a_combined_closure_reaches_its_owner_and_the_lock_goes_on() {
    let m = Arc::new(CombiningMutex::new(0u32));
    let guard = m.lock();
    let panicker = {
        let m = Arc::clone(&m);
        std::thread::spawn(move || {
            m.with(|v| {
                *v += 1;
                panic!("boom in a combined closure");
            })
        })
    };
    while count_published(&m) == 0 {
        std::thread::yield_now();
    }
    let adder = {
        let m = Arc::clone(&m);
        std::thread::spawn(move || m.with(|v| *v += 10))
    };
    while count_published(&m) < 2 {
        std::thread::yield_now();
    }
    drop(guard); // runs both on this thread; this thread must not panic
    let err = panicker.join().expect_err("the owner sees the panic");
    assert_eq!(
        err.downcast_ref::<&str>(),
        Some(&"boom in a combined closure")
    );
    adder.join().unwrap();
    assert_eq!(m.with(|v| *v), 11);
    assert!(!m.is_locked());
}

#[test]
fn a_panic_in_the_holders_own_closure_releases_the_lock() {
    let m = CombiningMutex::new(0u32);
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| m.with(|_| panic!("own"))));
    assert!(r.is_err());
    assert!(!m.is_locked());
    assert_eq!(m.with(|v| *v + 1), 1);
}

#[test]
fn a_guard_request_gets_the_lock_in_its_turn() {
    let m = Arc::new(CombiningMutex::new(Vec::<&'static str>::new()));
    let guard = m.lock();
    let closure = {
        let m = Arc::clone(&m);
        std::thread::spawn(move || m.with(|v| v.push("closure")))
    };
    while count_published(&m) < 1 {
        std::thread::yield_now();
    }
    let locker = {
        let m = Arc::clone(&m);
        std::thread::spawn(move || m.lock().push("guard"))
    };
    while count_published(&m) < 2 {
        std::thread::yield_now();
    }
    drop(guard);
    closure.join().unwrap();
    locker.join().unwrap();
    assert_eq!(m.with(|v| v.clone()), vec!["closure", "guard"]);
}

#[test]
fn a_long_queue_is_handed_over_after_the_combine_limit() {
    let m = Arc::new(CombiningMutex::new(0u64));
    let guard = m.lock();
    let n = COMBINE_LIMIT as usize + 8;
    let served_by_first = Arc::new(AtomicBool::new(true));
    let holder = std::thread::current().id();
    let waiters: Vec<_> = (0..n)
        .map(|_| {
            let m = Arc::clone(&m);
            let flag = Arc::clone(&served_by_first);
            std::thread::spawn(move || {
                let ran_on = m.with(|v| {
                    *v += 1;
                    std::thread::current().id()
                });
                if ran_on != holder {
                    flag.store(false, std::sync::atomic::Ordering::Relaxed);
                }
            })
        })
        .collect();
    while count_published(&m) < n {
        std::thread::yield_now();
    }
    drop(guard); // serves COMBINE_LIMIT, then hands over to the next
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(m.with(|v| *v), n as u64);
    assert!(
        !served_by_first.load(std::sync::atomic::Ordering::Relaxed),
        "one holder served all {n}: the limit did not hand over"
    );
}

#[test]
fn raw_lock_try_lock_and_unlock() {
    let raw = RawCombiningLock::new();
    let guard = raw.try_lock().expect("free");
    assert!(raw.try_lock().is_none());
    assert!(raw.is_locked());
    unsafe { raw.unlock(guard) };
    assert!(!raw.is_locked());
}
