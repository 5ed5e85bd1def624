//! Torture for the combining lock: the exclusion check at 2, 8 and 64
//! threads through closures (which other threads run), through guards, and
//! both at once; closures that panic now and then while others are
//! combined with them; and the generic `try_lock`, panic and several-locks
//! checks of the guard path. `no_exclusion_is_caught` runs the same check
//! over a "combining lock" that runs every closure at once, unlocked, and
//! must fail.

use ksync::spin::{CombiningMutex, CombiningStats, RawCombiningLock};
use lock_api::RawMutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::common::{quiet_deliberate_panics, Deliberate};
use crate::exclusion::{self, assert_excludes, hammer_with, Exclusive};

/// The closure path: every critical section goes through `with`.
struct Closures(CombiningMutex<()>);

impl Exclusive for Closures {
    const OWNER_FREED_AT_RETURN: bool = false;

    fn critical(&self, section: impl FnOnce() + Send) {
        self.0.with(|_| section());
    }
}

/// Even threads use guards, odd ones closures; `critical` alternates per
/// call, so each thread does both.
struct Mixed {
    lock: CombiningMutex<()>,
    calls: AtomicU64,
}

impl Exclusive for Mixed {
    const OWNER_FREED_AT_RETURN: bool = false;

    fn critical(&self, section: impl FnOnce() + Send) {
        if self.calls.fetch_add(1, Ordering::Relaxed).is_multiple_of(2) {
            let _guard = self.lock.lock();
            section();
        } else {
            self.lock.with(|_| section());
        }
    }
}

/// A deliberately broken combining lock: it runs each closure at once, on
/// the caller's thread, holding nothing.
struct NoExclusion;

impl Exclusive for NoExclusion {
    fn critical(&self, section: impl FnOnce() + Send) {
        section();
    }
}

/// A combining lock under test, whose counters the test prints.
trait Counted: Exclusive {
    fn stats(&self) -> CombiningStats;
}

impl Counted for Closures {
    fn stats(&self) -> CombiningStats {
        self.0.stats()
    }
}

impl Counted for Mixed {
    fn stats(&self) -> CombiningStats {
        self.lock.stats()
    }
}

fn assert_exact<L: Counted>(name: &str, lock: L, threads: usize, iters: u64) {
    let lock = std::sync::Arc::new(lock);
    let report = hammer_with(std::sync::Arc::clone(&lock), threads, iters);
    assert!(report.is_exact(), "{name}, {threads} threads: {report:?}");
    eprintln!("{name}, {threads} threads: {:?}", lock.stats());
}

fn closures() -> Closures {
    Closures(CombiningMutex::new(()))
}

fn mixed() -> Mixed {
    Mixed {
        lock: CombiningMutex::new(()),
        calls: AtomicU64::new(0),
    }
}

#[test]
fn closures_two_threads() {
    assert_exact("combining closures", closures(), 2, 50_000);
}

#[test]
fn closures_eight_threads() {
    assert_exact("combining closures", closures(), 8, 20_000);
}

#[test]
fn closures_sixty_four_threads_oversubscribed() {
    assert_exact("combining closures", closures(), 64, 2_000);
}

#[test]
fn guards_two_eight_and_sixty_four_threads() {
    assert_excludes("RawCombiningLock", RawCombiningLock::INIT, 2, 50_000);
    assert_excludes("RawCombiningLock", RawCombiningLock::INIT, 8, 20_000);
    assert_excludes("RawCombiningLock", RawCombiningLock::INIT, 64, 2_000);
}

#[test]
fn guards_and_closures_together() {
    assert_exact("combining mixed", mixed(), 8, 20_000);
    assert_exact("combining mixed", mixed(), 64, 2_000);
}

#[test]
fn no_exclusion_is_caught() {
    for attempt in 1..=10 {
        let report = hammer_with(NoExclusion, 8, 20_000);
        if !report.is_exact() {
            eprintln!("no-exclusion combining caught on attempt {attempt}: {report:?}");
            return;
        }
    }
    panic!("the check never caught closures run without exclusion");
}

/// Every 7th closure panics (after its increment); its owner catches the
/// panic, the others' closures keep being combined, and the count is exact.
#[test]
fn panicking_closures_among_combined_ones() {
    const THREADS: u64 = 8;
    const ITERS: u64 = 5_000;
    let lock = Arc::new(CombiningMutex::new(0u64));
    let caught = Arc::new(AtomicU64::new(0));
    quiet_deliberate_panics();
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let lock = Arc::clone(&lock);
            let caught = Arc::clone(&caught);
            std::thread::spawn(move || {
                for i in 0..ITERS {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        lock.with(|v| {
                            *v += 1;
                            if (t * ITERS + i).is_multiple_of(7) {
                                std::panic::panic_any(Deliberate(0));
                            }
                        })
                    }));
                    if r.is_err() {
                        caught.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let joined: Vec<_> = threads.into_iter().map(|t| t.join()).collect();
    assert!(
        joined.iter().all(Result::is_ok),
        "a panic escaped its owner"
    );
    assert_eq!(lock.with(|v| *v), THREADS * ITERS);
    let expected = (0..THREADS * ITERS).filter(|k| k.is_multiple_of(7)).count() as u64;
    assert_eq!(caught.load(Ordering::Relaxed), expected);
    assert!(!lock.is_locked());
}

#[test]
fn try_lock_under_contention() {
    exclusion::try_lock_under_contention::<RawCombiningLock>(5_000);
}

#[test]
fn guard_drop_on_panic_unlocks() {
    exclusion::guard_drop_on_panic_unlocks::<RawCombiningLock>();
}

#[test]
fn threads_holding_several_locks() {
    exclusion::threads_holding_several_locks::<RawCombiningLock>(6, 2_000);
}
