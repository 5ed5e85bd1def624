//! loom models of both reader-writer semaphores: the fast paths, the slow
//! paths with their wake / grant handshake, downgrade, and timed waiters that
//! give up (under loom a timed wait that would sleep times out after the
//! other threads take a step, unless a wake chose it first; and
//! the kernel design treats every waiter as handoff-eligible and every spin
//! budget as spent: see `src/rwsem/kernel/mod.rs`).
//!
//! What is checked, in every interleaving loom explores:
//!
//! * exclusion: the protected value is a `loom::cell::UnsafeCell`, written by
//!   writers and read by readers, so a reader admitted beside a writer (or two
//!   writers together), or an acquisition not ordered after the previous
//!   release, is a causality violation that loom reports;
//! * no lost wake-up: the futex stand-in blocks a sleeper until a wake-up
//!   arrives, so a protocol that forgets one deadlocks and loom reports it;
//! * the semaphore ends clean: after every thread is done, `try_lock_exclusive`
//!   succeeds (it fails while the waiters or handoff flag is left set).
//!
//! Critical sections yield to loom once, so other threads can run inside them
//! without spending a preemption. The main thread of the `*_while_*` /
//! `release_*` / `readers_drain_*` models takes the lock before it spawns the
//! others, which also saves preemptions.
//!
//! Every model runs with the preemption bound from `LOOM_MAX_PREEMPTIONS` (3
//! in CI) except the kernel design's three-thread models that start from an
//! unlocked semaphore, which are bounded to 2 in code (`bounded`): at 3 they
//! take from half a minute to over two minutes each on two cores. At 2 they
//! still catch, for instance, a reader granted beside a writer that stole the
//! lock (`two_writers_one_reader`).

use crate::exclusion::Shared;
use ksync::rwsem::{RawRwSem, RawSpinRwSem};
use lock_api::{RawRwLock, RawRwLockDowngrade, RawRwLockTimed};
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub(crate) trait Sem:
    RawRwLock + RawRwLockDowngrade + RawRwLockTimed<Duration = Duration> + Send + Sync + 'static
{
    fn create() -> Self;
}

impl Sem for RawRwSem {
    fn create() -> Self {
        RawRwSem::new()
    }
}

impl Sem for RawSpinRwSem {
    fn create() -> Self {
        RawSpinRwSem::new()
    }
}

/// The reader-writer models' operations on the shared counter.
impl<R: Sem> Shared<R> {
    fn with_new_lock() -> Arc<Self> {
        Shared::new(R::create())
    }

    fn write(&self) {
        let guard = self.lock.lock_exclusive();
        // A hold: others may run here without spending a preemption.
        thread::yield_now();
        self.bump_locked(1);
        // SAFETY: `guard` came from `lock_exclusive` just above.
        unsafe { self.lock.unlock_exclusive(guard) };
    }

    fn read(&self) -> u32 {
        let guard = self.lock.lock_shared();
        thread::yield_now();
        let value = self.read_locked();
        // SAFETY: `guard` came from `lock_shared` just above.
        unsafe { self.lock.unlock_shared(guard) };
        value
    }

    /// Write, downgrade, read what we wrote, release.
    fn write_then_downgrade(&self) {
        let guard = self.lock.lock_exclusive();
        let mine = self.bump_locked(1);
        // SAFETY: `guard` is our exclusive acquisition.
        let shared = unsafe { self.lock.downgrade(guard) };
        // Still no writer: we hold a read lock.
        let seen = self.read_locked();
        assert_eq!(seen, mine, "a writer got in during or after the downgrade");
        // SAFETY: `shared` is our shared acquisition.
        unsafe { self.lock.unlock_shared(shared) };
    }

    /// A timed read attempt; whether it got the lock. Under loom one that
    /// sleeps gives up once the other threads have taken a step, unless a
    /// wake chose it.
    fn timed_read(&self) -> bool {
        match self.lock.try_lock_shared_for(Duration::from_secs(1)) {
            Some(guard) => {
                self.read_locked();
                // SAFETY: `guard` is our shared acquisition.
                unsafe { self.lock.unlock_shared(guard) };
                true
            }
            None => false,
        }
    }

    /// A timed write attempt; whether it got the lock.
    fn timed_write(&self) -> bool {
        match self.lock.try_lock_exclusive_for(Duration::from_secs(1)) {
            Some(guard) => {
                self.bump_locked(1);
                // SAFETY: `guard` is our exclusive acquisition.
                unsafe { self.lock.unlock_exclusive(guard) };
                true
            }
            None => false,
        }
    }

    /// Everyone is gone: the semaphore must be free, flags and all.
    fn assert_clean(&self) -> u32 {
        assert!(
            !self.lock.is_locked(),
            "still locked after every thread left"
        );
        let guard = self
            .lock
            .try_lock_exclusive()
            .expect("flags left set after every thread left");
        let value = self.read_locked();
        // SAFETY: `guard` is our exclusive acquisition.
        unsafe { self.lock.unlock_exclusive(guard) };
        value
    }
}

fn spawn<R: Sem, T: Send + 'static>(
    shared: &Arc<Shared<R>>,
    f: fn(&Shared<R>) -> T,
) -> thread::JoinHandle<T> {
    let shared = Arc::clone(shared);
    thread::spawn(move || f(&shared))
}

/// Runs `model` with the preemption bound from `LOOM_MAX_PREEMPTIONS`.
fn full(model: impl Fn() + Sync + Send + 'static) {
    loom::model(model);
}

/// Runs `model` with at most two preemptions, for three-thread models.
fn bounded(model: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(model);
}

/// Runs `model`, which returns whether its timed waiter gave up, with
/// `run`, and fails unless some explored execution gave up: the give-up
/// models pass just as well if their waiter is always served in time, and
/// then they check nothing of the give-up they are named after.
fn gives_up(run: impl FnOnce(Box<dyn Fn() + Sync + Send>), model: fn() -> bool) {
    let gave_up = std::sync::Arc::new(AtomicUsize::new(0));
    let count = std::sync::Arc::clone(&gave_up);
    run(Box::new(move || {
        if model() {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }));
    assert!(
        gave_up.load(Ordering::Relaxed) > 0,
        "no explored execution had the timed waiter give up"
    );
}

// ----- the models, generic over the design -----

fn two_writers<R: Sem>() {
    let shared = Shared::<R>::with_new_lock();
    let other = spawn(&shared, |s| s.write());
    shared.write();
    other.join().unwrap();
    assert_eq!(shared.assert_clean(), 2);
}

fn reader_and_writer<R: Sem>() {
    let shared = Shared::<R>::with_new_lock();
    let writer = spawn(&shared, |s| s.write());
    let seen = shared.read();
    writer.join().unwrap();
    assert!(seen <= 1);
    assert_eq!(shared.assert_clean(), 1);
}

fn downgrade_beside_reader<R: Sem>() {
    let shared = Shared::<R>::with_new_lock();
    let reader = spawn(&shared, |s| {
        s.read();
    });
    shared.write_then_downgrade();
    reader.join().unwrap();
    assert_eq!(shared.assert_clean(), 1);
}

fn timed_reader_gives_up<R: Sem>() -> bool {
    let shared = Shared::<R>::with_new_lock();
    let timed = spawn(&shared, |s| s.timed_read());
    shared.write();
    let read = timed.join().unwrap();
    assert_eq!(shared.assert_clean(), 1);
    !read
}

fn timed_writer_gives_up<R: Sem>() -> bool {
    let shared = Shared::<R>::with_new_lock();
    let timed = spawn(&shared, |s| s.timed_write());
    shared.read();
    let wrote = timed.join().unwrap();
    assert_eq!(shared.assert_clean(), u32::from(wrote));
    !wrote
}

fn two_readers_one_writer<R: Sem>() {
    let shared = Shared::<R>::with_new_lock();
    let a = spawn(&shared, |s| {
        s.read();
    });
    let b = spawn(&shared, |s| {
        s.read();
    });
    shared.write();
    a.join().unwrap();
    b.join().unwrap();
    assert_eq!(shared.assert_clean(), 1);
}

fn two_writers_one_reader<R: Sem>() {
    let shared = Shared::<R>::with_new_lock();
    let a = spawn(&shared, |s| s.write());
    let b = spawn(&shared, |s| s.write());
    let seen = shared.read();
    a.join().unwrap();
    b.join().unwrap();
    assert!(seen <= 2);
    assert_eq!(shared.assert_clean(), 2);
}

fn downgrade_with_reader_and_writer<R: Sem>() {
    let shared = Shared::<R>::with_new_lock();
    let reader = spawn(&shared, |s| {
        s.read();
    });
    let writer = spawn(&shared, |s| s.write());
    shared.write_then_downgrade();
    reader.join().unwrap();
    writer.join().unwrap();
    assert_eq!(shared.assert_clean(), 2);
}

/// A timed reader gives up between a writer and a reader: the waiters around
/// it must still be served and the flags fixed.
fn timed_reader_between_waiters<R: Sem>() -> bool {
    let shared = Shared::<R>::with_new_lock();
    let timed = spawn(&shared, |s| s.timed_read());
    let reader = spawn(&shared, |s| {
        s.read();
    });
    shared.write();
    let read = timed.join().unwrap();
    reader.join().unwrap();
    assert_eq!(shared.assert_clean(), 1);
    !read
}

/// A timed writer gives up while a writer and a reader contend.
fn timed_writer_between_waiters<R: Sem>() -> bool {
    let shared = Shared::<R>::with_new_lock();
    let timed = spawn(&shared, |s| s.timed_write());
    let reader = spawn(&shared, |s| {
        s.read();
    });
    shared.write();
    let wrote = timed.join().unwrap();
    reader.join().unwrap();
    assert_eq!(shared.assert_clean(), 1 + u32::from(wrote));
    !wrote
}

/// Two operations per thread, so the second ones meet whatever flags and
/// queue state the first ones left behind.
fn two_rounds<R: Sem>() {
    let shared = Shared::<R>::with_new_lock();
    let other = spawn(&shared, |s| {
        s.write();
        s.read();
    });
    shared.read();
    shared.write();
    other.join().unwrap();
    assert_eq!(shared.assert_clean(), 2);
}

/// Timed attempts of both kinds against plain ones.
fn timed_rounds<R: Sem>() {
    let shared = Shared::<R>::with_new_lock();
    let timed = {
        let shared = Arc::clone(&shared);
        thread::spawn(move || {
            let wrote = shared.timed_write();
            shared.timed_read();
            wrote
        })
    };
    shared.write();
    shared.read();
    let wrote = timed.join().unwrap();
    assert_eq!(shared.assert_clean(), 1 + u32::from(wrote));
}

/// The main thread holds the write lock while a reader and a writer arrive,
/// then releases it: the arriving writer may spin and take the lock between
/// the release and the wake-up it triggers, which must then back off the
/// reader's grant (and, under loom, request handoff for it).
fn release_races_spinner<R: Sem>() {
    let shared = Shared::<R>::with_new_lock();
    let guard = shared.lock.lock_exclusive();
    let reader = spawn(&shared, |s| {
        s.read();
    });
    let writer = spawn(&shared, |s| s.write());
    shared.bump_locked(1);
    // SAFETY: `guard` is our exclusive acquisition.
    unsafe { shared.lock.unlock_exclusive(guard) };
    reader.join().unwrap();
    writer.join().unwrap();
    assert_eq!(shared.assert_clean(), 2);
}

/// The main thread holds a read lock while a writer and then a reader arrive;
/// the last reader out must wake the writer, and the late reader must neither
/// get in beside the writer nor be forgotten.
fn readers_drain_to_writer<R: Sem>() {
    let shared = Shared::<R>::with_new_lock();
    let guard = shared.lock.lock_shared();
    let writer = spawn(&shared, |s| s.write());
    let reader = spawn(&shared, |s| {
        s.read();
    });
    shared.read_locked();
    // SAFETY: `guard` is our shared acquisition.
    unsafe { shared.lock.unlock_shared(guard) };
    writer.join().unwrap();
    reader.join().unwrap();
    assert_eq!(shared.assert_clean(), 1);
}

/// The main thread holds the write lock; a timed writer queues (and, under
/// loom, may give up before the release reaches it) while a reader waits
/// too. Whether the timed writer leaves first in the queue or behind the
/// reader, the reader must be served and the flags fixed.
fn timed_waiter_leaves_while_held<R: Sem>() -> bool {
    let shared = Shared::<R>::with_new_lock();
    let guard = shared.lock.lock_exclusive();
    let timed = spawn(&shared, |s| s.timed_write());
    let reader = spawn(&shared, |s| {
        s.read();
    });
    // SAFETY: `guard` is our exclusive acquisition.
    unsafe { shared.lock.unlock_exclusive(guard) };
    let wrote = timed.join().unwrap();
    reader.join().unwrap();
    assert_eq!(shared.assert_clean(), u32::from(wrote));
    !wrote
}

/// The main thread holds the write lock while a reader and a writer queue,
/// then downgrades: the reader may join it, the writer must wait for both.
fn downgrade_while_queued<R: Sem>() {
    let shared = Shared::<R>::with_new_lock();
    let guard = shared.lock.lock_exclusive();
    let reader = spawn(&shared, |s| {
        s.read();
    });
    let writer = spawn(&shared, |s| s.write());
    shared.bump_locked(1);
    // SAFETY: `guard` is our exclusive acquisition.
    let shared_guard = unsafe { shared.lock.downgrade(guard) };
    let seen = shared.read_locked();
    assert_eq!(seen, 1, "a writer got in during or after the downgrade");
    // SAFETY: `shared_guard` is our shared acquisition.
    unsafe { shared.lock.unlock_shared(shared_guard) };
    reader.join().unwrap();
    writer.join().unwrap();
    assert_eq!(shared.assert_clean(), 2);
}

// ----- the kernel design's steal / woken-waiter transitions -----
//
// In every schedule explored, the semaphore itself asserts (under loom only)
// that `WOKEN` is set exactly when the front waiter's `woken` flag is.

/// The main thread releases with a writer queued, which kicks it (`WOKEN`),
/// and writes again at once: it may steal the lock before the woken writer
/// runs, or find `HANDOFF` set by that writer (under loom every waiter is
/// handoff-eligible at its first failed look) and queue behind it. Its
/// second release finds `WOKEN` set or not. Either way the woken writer must
/// get in, the invariant that `WOKEN` names exactly the kicked front waiter
/// holds (asserted inside the semaphore under loom), and the flags end clean.
fn steal_races_woken_writer() {
    let shared = Shared::<RawRwSem>::with_new_lock();
    let guard = shared.lock.lock_exclusive();
    let writer = spawn(&shared, |s| s.write());
    shared.bump_locked(1);
    // SAFETY: `guard` is our exclusive acquisition.
    unsafe { shared.lock.unlock_exclusive(guard) };
    shared.write();
    writer.join().unwrap();
    assert_eq!(shared.assert_clean(), 3);
}

/// As above, but the main thread takes the lock back and downgrades it while
/// the writer is queued and perhaps woken: the downgrade must leave the writer
/// alone, and the last read unlock must not leave it asleep although `WOKEN`
/// may make it skip the wake-up.
fn steal_then_downgrade_beside_woken_writer() {
    let shared = Shared::<RawRwSem>::with_new_lock();
    let guard = shared.lock.lock_exclusive();
    let writer = spawn(&shared, |s| s.write());
    // SAFETY: `guard` is our exclusive acquisition.
    unsafe { shared.lock.unlock_exclusive(guard) };
    shared.write_then_downgrade();
    writer.join().unwrap();
    assert_eq!(shared.assert_clean(), 2);
}

/// A reader arrives while the writer queued before it may have just been
/// woken. Under loom that writer has always requested handoff by then (its
/// first failed look makes it eligible), so the reader must not steal: it
/// queues behind the woken writer and is granted when that writer leaves.
/// (Natively, where handoff waits 4 ms, readers do steal past a woken writer;
/// the liveness tests in `tests/rwsem.rs` cover that.)
fn reader_arrives_behind_woken_writer() {
    let shared = Shared::<RawRwSem>::with_new_lock();
    let guard = shared.lock.lock_exclusive();
    let writer = spawn(&shared, |s| s.write());
    // SAFETY: `guard` is our exclusive acquisition.
    unsafe { shared.lock.unlock_exclusive(guard) };
    shared.read();
    writer.join().unwrap();
    assert_eq!(shared.assert_clean(), 1);
}

mod kernel_steals {
    use super::*;
    use ksync::rwsem::{reset_rwsem_stats, rwsem_stats, RwSemStats};

    /// Runs `model` and returns the lock events its explorations counted
    /// (under loom they count per test; see `ksync::rwsem::rwsem_stats`).
    fn events_of(model: fn()) -> RwSemStats {
        reset_rwsem_stats();
        full(model);
        rwsem_stats()
    }

    #[test]
    fn steal_races_woken_writer() {
        let e = events_of(super::steal_races_woken_writer);
        // The model reaches writers that took a free lock in the slow path
        // and kicks of the queued writer. No schedule explored at
        // `LOOM_MAX_PREEMPTIONS=3` or 4 releases or queues again while the
        // kicked writer has not looked, so `wake_skipped` stays 0 here
        // (natively it is most releases under writer contention: see
        // `ksync-lab rwsem`; the unit test `a_release_skips_the_wake_up_...`
        // in `src/rwsem/kernel/mod.rs` forces it).
        assert!(e.wlock_steal > 0 && e.wake_writer > 0, "{e:?}");
    }

    #[test]
    fn steal_then_downgrade_beside_woken_writer() {
        let e = events_of(super::steal_then_downgrade_beside_woken_writer);
        assert!(e.wlock_steal > 0 && e.wake_writer > 0, "{e:?}");
    }

    #[test]
    fn reader_arrives_behind_woken_writer() {
        let e = events_of(super::reader_arrives_behind_woken_writer);
        assert!(e.rlock > 0 && e.wake_writer > 0, "{e:?}");
    }
}

macro_rules! models {
    ($module:ident, $raw:ty, $held:ident, $three:ident) => {
        mod $module {
            use super::*;

            #[test]
            fn two_writers() {
                loom::model(super::two_writers::<$raw>);
            }

            #[test]
            fn reader_and_writer() {
                loom::model(super::reader_and_writer::<$raw>);
            }

            #[test]
            fn downgrade_beside_reader() {
                loom::model(super::downgrade_beside_reader::<$raw>);
            }

            #[test]
            fn timed_reader_gives_up() {
                gives_up(full, super::timed_reader_gives_up::<$raw>);
            }

            #[test]
            fn timed_writer_gives_up() {
                gives_up(full, super::timed_writer_gives_up::<$raw>);
            }

            #[test]
            fn two_rounds() {
                loom::model(super::two_rounds::<$raw>);
            }

            #[test]
            fn timed_rounds() {
                loom::model(super::timed_rounds::<$raw>);
            }

            #[test]
            fn release_races_spinner() {
                $held(super::release_races_spinner::<$raw>);
            }

            #[test]
            fn readers_drain_to_writer() {
                $held(super::readers_drain_to_writer::<$raw>);
            }

            #[test]
            fn timed_waiter_leaves_while_held() {
                gives_up($held, super::timed_waiter_leaves_while_held::<$raw>);
            }

            #[test]
            fn downgrade_while_queued() {
                $held(super::downgrade_while_queued::<$raw>);
            }

            #[test]
            fn two_readers_one_writer() {
                $three(super::two_readers_one_writer::<$raw>);
            }

            #[test]
            fn two_writers_one_reader() {
                $three(super::two_writers_one_reader::<$raw>);
            }

            #[test]
            fn downgrade_with_reader_and_writer() {
                $three(super::downgrade_with_reader_and_writer::<$raw>);
            }

            #[test]
            fn timed_reader_between_waiters() {
                gives_up($three, super::timed_reader_between_waiters::<$raw>);
            }

            #[test]
            fn timed_writer_between_waiters() {
                gives_up($three, super::timed_writer_between_waiters::<$raw>);
            }
        }
    };
}

models!(kernel, RawRwSem, full, bounded);
models!(generic, RawSpinRwSem, full, full);
