//! Ticket lock torture: every waiting policy through the exclusion check with
//! 2, 8 and 64 threads, `try_lock` under contention, and release on panic.
//!
//! 64 threads on a 2-core machine is the oversubscribed case: a FIFO lock
//! hands over only when the one thread holding the next ticket is running, so
//! each handover may wait for a scheduler time slice. The contended runs are
//! the short, forced ones of `exclusion` ([`FIFO_EIGHT`],
//! [`FIFO_OVERSUBSCRIBED`]).

use crate::exclusion::{assert_excludes_fifo, hammer, FIFO_EIGHT, FIFO_OVERSUBSCRIBED, FIFO_TWO};
use ksync::spin::{
    AutoTunedBackoff, AutoTunedBackoffGuest, AutoTunedPerLock, AutoTunedPerLockGuest,
    DefaultDelayStorage, FixedBackoff, NoDelayStorage, RawTicketLock, Spin, TicketMutex, DELAY_ONE,
    NATIVE_MAX_DELAY,
};
use lock_api::{Mutex, RawMutex};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::Duration;

/// With `lock` held by one thread and another queued behind it, `try_lock`
/// fails from every thread; once both are done it succeeds. Then half of 4
/// threads take the lock with `try_lock` retries and half with `lock`, and
/// the count comes out exact.
pub(crate) fn try_lock_under_contention<R>(lock: R)
where
    R: RawMutex + Send + Sync + 'static,
{
    let mutex = Arc::new(Mutex::<R, u64>::from_raw(lock, 0));

    let (held_tx, held_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let holder = {
        let mutex = Arc::clone(&mutex);
        thread::spawn(move || {
            let mut guard = mutex.lock();
            held_tx.send(()).unwrap();
            release_rx.recv().unwrap();
            *guard += 1;
        })
    };
    held_rx.recv().unwrap();
    let waiter = {
        let mutex = Arc::clone(&mutex);
        thread::spawn(move || *mutex.lock() += 1)
    };
    // Give the waiter time to queue; `try_lock` must fail either way.
    thread::sleep(Duration::from_millis(20));
    let tries: Vec<_> = (0..3)
        .map(|_| {
            let mutex = Arc::clone(&mutex);
            thread::spawn(move || (0..1_000).all(|_| mutex.try_lock().is_none()))
        })
        .collect();
    for t in tries {
        assert!(
            t.join().unwrap(),
            "try_lock succeeded while the lock was held"
        );
    }
    assert!(mutex.is_locked());
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    waiter.join().unwrap();
    assert_eq!(*mutex.try_lock().expect("free lock after contention"), 2);

    // Mixed `lock` and `try_lock` contention.
    const PER_THREAD: u64 = 200;
    let inside = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(4));
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let (mutex, inside, start) =
                (Arc::clone(&mutex), Arc::clone(&inside), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                for _ in 0..PER_THREAD {
                    let mut guard = if t % 2 == 0 {
                        mutex.lock()
                    } else {
                        loop {
                            if let Some(guard) = mutex.try_lock() {
                                break guard;
                            }
                            thread::yield_now();
                        }
                    };
                    assert_eq!(
                        inside.fetch_add(1, Ordering::Relaxed),
                        0,
                        "two threads inside"
                    );
                    *guard += 1;
                    inside.fetch_sub(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(*mutex.lock(), 2 + 4 * PER_THREAD);
}

/// A thread that panics while holding the lock releases it on unwinding, also
/// when another thread is queued behind it.
pub(crate) fn panic_in_critical_section_releases<R>(lock: R)
where
    R: RawMutex + Send + Sync + 'static,
{
    let mutex = Arc::new(Mutex::<R, u32>::from_raw(lock, 0));
    let (held_tx, held_rx) = mpsc::channel();
    let queued = Arc::new(AtomicBool::new(false));
    let panicker = {
        let (mutex, queued) = (Arc::clone(&mutex), Arc::clone(&queued));
        thread::spawn(move || {
            let mut guard = mutex.lock();
            *guard = 1;
            held_tx.send(()).unwrap();
            while !queued.load(Ordering::Acquire) {
                thread::yield_now();
            }
            thread::sleep(Duration::from_millis(10));
            panic!("deliberate panic while holding the lock");
        })
    };
    held_rx.recv().unwrap();
    let waiter = {
        let (mutex, queued) = (Arc::clone(&mutex), Arc::clone(&queued));
        thread::spawn(move || {
            queued.store(true, Ordering::Release);
            let mut guard = mutex.lock();
            *guard += 1;
        })
    };
    assert!(panicker.join().is_err(), "the holder was meant to panic");
    waiter
        .join()
        .expect("the queued waiter got the lock after the panic");
    assert!(
        !mutex.is_locked(),
        "lock still held after the panicking holder unwound"
    );
    assert_eq!(*mutex.try_lock().expect("free lock"), 2);
}

macro_rules! ticket_flavour {
    ($name:ident, $policy:ty) => {
        mod $name {
            use super::*;

            type Lock = RawTicketLock<$policy>;

            #[test]
            fn two_threads() {
                let (threads, iters) = FIFO_TWO;
                assert_excludes_fifo(
                    concat!("ticket/", stringify!($name)),
                    Lock::INIT,
                    threads,
                    iters,
                );
            }

            #[test]
            fn eight_threads() {
                let (threads, iters) = FIFO_EIGHT;
                assert_excludes_fifo(
                    concat!("ticket/", stringify!($name)),
                    Lock::INIT,
                    threads,
                    iters,
                );
            }

            #[test]
            fn sixty_four_threads_oversubscribed() {
                let (threads, iters) = FIFO_OVERSUBSCRIBED;
                assert_excludes_fifo(
                    concat!("ticket/", stringify!($name)),
                    Lock::INIT,
                    threads,
                    iters,
                );
            }

            #[test]
            fn try_lock_under_contention() {
                super::try_lock_under_contention(Lock::INIT);
            }

            #[test]
            fn panic_in_critical_section_releases() {
                super::panic_in_critical_section_releases(Lock::INIT);
            }
        }
    };
}

ticket_flavour!(plain, Spin);
ticket_flavour!(fixed_backoff, FixedBackoff);
ticket_flavour!(auto_tuned, AutoTunedBackoff);
ticket_flavour!(auto_tuned_guest, AutoTunedBackoffGuest);
ticket_flavour!(auto_tuned_per_lock, AutoTunedPerLock);
ticket_flavour!(auto_tuned_per_lock_guest, AutoTunedPerLockGuest);
// Michel Lespinasse's refinements (his review of Rik van Riel's auto-tuned
// backoff, LKML, January 2013): a raised floor and the condition-free decay.
ticket_flavour!(
    auto_tuned_per_lock_refined,
    AutoTunedPerLock<NATIVE_MAX_DELAY, DefaultDelayStorage, { 32 * DELAY_ONE }, true>
);
// The `no_std` default: nothing remembered between waits.
ticket_flavour!(
    auto_tuned_no_storage,
    AutoTunedPerLock<NATIVE_MAX_DELAY, NoDelayStorage>
);

/// 16-bit tickets wrap: more acquisitions than tickets, handed around threads.
#[test]
fn tickets_wrap_under_contention() {
    let report = hammer(<RawTicketLock as RawMutex>::INIT, 2, 34_000);
    assert!(report.is_exact(), "{report:?}");
    // 68 000 > 65 536 tickets: both halves wrapped at least once.
    let single = TicketMutex::new(0u32);
    for _ in 0..70_000 {
        *single.lock() += 1;
    }
    assert_eq!(*single.lock(), 70_000);
    assert!(!single.is_locked());
}
