//! loom models of `RawPvQSpinLock`: mutual exclusion (a `loom::cell::UnsafeCell`
//! counter) and progress with 2 and 3 threads. Waiters sleep on crate's loom
//! futex stand-in, which deadlocks the model if a wake-up is ever lost, and
//! the spin threshold is one relax under loom, so every wait reaches the
//! halt / hash / kick race. After each model, the lock's event counters (per
//! test thread under loom, summed over the exploration) show which paths it
//! took.

use crate::exclusion::{contend, try_lock_against_lock, Main};
use ksync::spin::{pv_stats, PvStats, RawPvQSpinLock};
use lock_api::RawMutex;
use loom::thread;

/// Waits until the thread spawned last has entered the slow path, the
/// staged model's cue for the next arrival.
fn in_the_slow_path(_: &RawPvQSpinLock) {
    let queued = pv_stats().slowpath;
    while pv_stats().slowpath == queued {
        thread::yield_now();
    }
}

/// Runs `threads` threads (the model's main thread among them) that each take
/// the lock `times` times; returns the events counted over the exploration.
fn model(builder: loom::model::Builder, threads: usize, times: u32, main: Main) -> Seen {
    let before = pv_stats();
    contend(
        builder,
        RawPvQSpinLock::new,
        threads,
        times,
        main,
        in_the_slow_path,
        |lock| !lock.is_locked() && !lock.is_contended(),
    );
    Seen::between(&before, &pv_stats())
}

/// Events over one model's exploration.
#[derive(Debug)]
struct Seen {
    steals: u64,
    wait_node: u64,
    wait_head: u64,
    wait_again: u64,
    hash_next: u64,
    kicks: u64,
    spurious: u64,
}

impl Seen {
    fn between(before: &PvStats, after: &PvStats) -> Seen {
        Seen {
            steals: after.lock_stealing - before.lock_stealing,
            wait_node: after.wait_node - before.wait_node,
            wait_head: after.wait_head - before.wait_head,
            wait_again: after.wait_again - before.wait_again,
            hash_next: after.hash_next - before.hash_next,
            kicks: after.kick_unlock - before.kick_unlock,
            spurious: after.spurious_wakeup - before.spurious_wakeup,
        }
    }
}

/// The head halts, hashes itself and marks the lock slow while the owner
/// unlocks: every order of the hash, the `SLOW_VAL` swap, the unlock's
/// compare-and-swap, the unhash and the kick.
#[test]
fn pv_two_threads() {
    let seen = model(loom::model::Builder::new(), 2, 1, Main::Contends);
    eprintln!("pv_two_threads: {seen:?}");
    assert!(seen.wait_head > 0, "the head never halted: {seen:?}");
    assert!(seen.kicks > 0, "unlock never kicked: {seen:?}");
}

/// Each thread comes back for the lock: it steals from the sleeping head it
/// just kicked, and the head, having lost the lock, hashes itself again. That
/// last path needs four preemptions (the stealer must be preempted while it
/// holds the stolen lock, among others), so this model raises loom's bound to
/// 4 whatever `LOOM_MAX_PREEMPTIONS` says.
#[test]
fn pv_two_threads_twice() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(4);
    let seen = model(builder, 2, 2, Main::Contends);
    eprintln!("pv_two_threads_twice: {seen:?}");
    assert!(
        seen.wait_head > 0 && seen.kicks > 0,
        "no halt / kick: {seen:?}"
    );
    assert!(seen.steals > 0, "never stole: {seen:?}");
    assert!(seen.wait_again > 0, "the head never slept again: {seen:?}");
}

/// Three contenders at once: waiters behind a head halt, a new owner hashes
/// its halted successor instead of waking it and its unlock wakes it,
/// arrivals steal from sleeping heads, and since the futex stand-in wakes
/// every sleeper, waiters also see (and must survive) spurious wake-ups. The
/// waiters sleep after one spin, so unlike the native lock's three-thread
/// model this one stays tractable at `LOOM_MAX_PREEMPTIONS=3`.
#[test]
fn pv_three_threads() {
    let seen = model(loom::model::Builder::new(), 3, 1, Main::Contends);
    eprintln!("pv_three_threads: {seen:?}");
    assert!(seen.wait_node > 0, "no queued waiter halted: {seen:?}");
    assert!(
        seen.hash_next > 0,
        "no halted successor was hashed: {seen:?}"
    );
    assert!(seen.kicks > 0, "unlock never kicked: {seen:?}");
    assert!(seen.steals > 0, "never stole: {seen:?}");
    assert!(seen.spurious > 0, "no spurious wake-up: {seen:?}");
}

/// Three threads, each arriving once the previous one is in the slow path
/// while the main thread holds the lock, so the queue is two deep before the
/// first hand-over. Preemption bound 2 (at 3 it passes too, in minutes).
#[test]
fn pv_three_threads_staged() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    let seen = model(builder, 3, 1, Main::Staged);
    eprintln!("pv_three_threads_staged: {seen:?}");
    assert!(seen.wait_node > 0, "no queued waiter halted: {seen:?}");
    assert!(
        seen.hash_next > 0,
        "no halted successor was hashed: {seen:?}"
    );
    assert!(seen.kicks > 0, "unlock never kicked: {seen:?}");
}

/// `try_lock` against `lock`: a thread that only ever tries (yielding
/// between attempts) is excluded like any other, and gets in eventually.
#[test]
fn pv_try_lock_against_lock() {
    try_lock_against_lock(RawPvQSpinLock::new);
}
