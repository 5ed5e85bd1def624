//! What every lock's loom model shares: [`Shared`], a lock and a counter
//! that only the lock protects, kept in a loom `UnsafeCell` so that loom
//! reports any access the lock fails to order; the scheduler bounds
//! ([`Bound`]); and the models every mutex runs: exclusion and progress
//! ([`increments`], [`contend`]), a queue of two built by the harness
//! ([`two_waiters_queued`], [`spawn_queued_waiters`]), and `try_lock`
//! against a holder.

use lock_api::RawMutex;
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

/// A lock and the counter it protects.
pub(crate) struct Shared<L> {
    pub(crate) lock: L,
    value: UnsafeCell<u32>,
}

// SAFETY: `value` is only accessed with `lock` held (or after every other
// thread was joined); loom's UnsafeCell reports any access the lock fails to
// order.
unsafe impl<L: Sync> Sync for Shared<L> {}

impl<L> Shared<L> {
    pub(crate) fn new(lock: L) -> Arc<Self> {
        Arc::new(Shared {
            lock,
            value: UnsafeCell::new(0),
        })
    }

    /// Adds `by` and returns the new value; the caller holds the lock
    /// exclusively.
    pub(crate) fn bump_locked(&self, by: u32) -> u32 {
        // SAFETY: the caller holds the lock, so this thread alone accesses
        // the value (loom checks it).
        self.value.with_mut(|v| unsafe {
            *v += by;
            *v
        })
    }

    /// The value; the caller holds the lock, shared or exclusive.
    pub(crate) fn read_locked(&self) -> u32 {
        // SAFETY: no writer while the caller holds the lock (loom checks it).
        self.value.with(|v| unsafe { *v })
    }

    /// The value once every other thread has been joined.
    pub(crate) fn total(&self) -> u32 {
        // SAFETY: all other threads have been joined.
        self.value.with(|v| unsafe { *v })
    }
}

impl<R: RawMutex> Shared<R> {
    /// Takes the lock, adds 1, releases it.
    pub(crate) fn increment(&self) {
        let guard = self.lock.lock();
        self.bump_locked(1);
        // SAFETY: `guard` came from `lock()` above.
        unsafe { self.lock.unlock(guard) };
    }
}

/// How hard loom may push the scheduler.
pub(crate) enum Bound {
    /// `LOOM_MAX_PREEMPTIONS` (two-thread models).
    Env,
    /// At most one forced preemption. A spinning waiter yields to loom on
    /// every poll, and a switch at a yield costs no preemption; with two
    /// waiters spinning, loom keeps finding a new backtrack point in their
    /// alternation before the holder's next store, and from two preemptions
    /// on the exploration does not end.
    One,
    /// No forced preemption: the harness fixes the schedule, loom explores
    /// the values loads may return along it.
    Scripted,
}

/// A model builder for `bound`. Every poll of a spin loop is a branch, so
/// waiting threads get 20 000 branches per execution instead of loom's
/// default 1000 (unless `LOOM_MAX_BRANCHES` says otherwise).
pub(crate) fn builder(bound: Bound) -> loom::model::Builder {
    let mut model = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_BRANCHES").is_none() {
        model.max_branches = 20_000;
    }
    match bound {
        Bound::Env => {}
        Bound::One => model.preemption_bound = Some(model.preemption_bound.map_or(1, |b| b.min(1))),
        Bound::Scripted => model.preemption_bound = Some(0),
    }
    model
}

/// `threads` threads (the model's main thread among them) each run
/// `increment` once on a lock made by `make`; every thread must finish (a
/// lost handover shows up as a deadlock or an endless spin), the count must
/// be exact, and `idle` must hold for the lock afterwards.
pub(crate) fn increments_with<L>(
    builder: loom::model::Builder,
    make: fn() -> L,
    threads: usize,
    increment: fn(&Shared<L>),
    idle: fn(&L) -> bool,
) where
    L: Send + Sync + 'static,
{
    builder.check(move || {
        let shared = Shared::new(make());
        let handles: Vec<_> = (1..threads)
            .map(|_| {
                let shared = Arc::clone(&shared);
                thread::spawn(move || increment(&shared))
            })
            .collect();
        increment(&shared);
        handles.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(shared.total(), threads as u32);
        assert!(
            idle(&shared.lock),
            "the lock is not idle after every thread left"
        );
    });
}

/// [`increments_with`] for a [`RawMutex`]. A lock whose waiters spin passes
/// `spins = true`: its three-thread model runs with [`Bound::One`].
pub(crate) fn increments<R>(make: fn() -> R, threads: usize, spins: bool)
where
    R: RawMutex + Send + Sync + 'static,
{
    let bound = if spins && threads > 2 {
        Bound::One
    } else {
        Bound::Env
    };
    increments_with(builder(bound), make, threads, Shared::increment, |lock| {
        !lock.is_locked()
    });
}

/// Spawns two threads that announce themselves and then `increment`; returns
/// once both have announced (blocking, so loom runs them meanwhile). With the
/// lock held by the caller, both then queue behind it.
pub(crate) fn spawn_queued_waiters<L: Send + Sync + 'static>(
    shared: &Arc<Shared<L>>,
    increment: fn(&Shared<L>),
) -> Vec<thread::JoinHandle<()>> {
    let (arriving, arrivals) = loom::sync::mpsc::channel();
    let waiters = (0..2)
        .map(|_| {
            let shared = Arc::clone(shared);
            let arriving = arriving.clone();
            thread::spawn(move || {
                arriving.send(()).unwrap();
                increment(&shared);
            })
        })
        .collect();
    arrivals.recv().unwrap();
    arrivals.recv().unwrap();
    waiters
}

/// The main thread holds a lock made by `make` until two other threads are
/// about to take it, so they queue behind it; the lock must then pass down
/// the queue, and every access to the counter must be ordered.
pub(crate) fn two_waiters_queued<R>(make: fn() -> R)
where
    R: RawMutex + Send + Sync + 'static,
{
    builder(Bound::Scripted).check(move || {
        let shared = Shared::new(make());
        let guard = shared.lock.lock();
        let waiters = spawn_queued_waiters(&shared, Shared::increment);
        shared.bump_locked(1);
        // SAFETY: `guard` came from `lock()` above, on this thread.
        unsafe { shared.lock.unlock(guard) };
        for waiter in waiters {
            waiter.join().unwrap();
        }
        assert_eq!(shared.total(), 3);
        assert!(!shared.lock.is_locked());
    });
}

/// How the model's main thread takes part in [`contend`].
#[derive(Clone, Copy)]
pub(crate) enum Main {
    /// Like every other thread.
    Contends,
    /// Takes the lock before spawning the others, spawns them one at a time,
    /// each once `waiting` returns (the one before is in the lock's slow
    /// path), and releases the lock after the last, so that loom spends its
    /// preemptions on the hand-overs rather than on the arrivals.
    Staged,
}

/// `threads` threads (the model's main thread among them) each take a lock
/// made by `make` `times` times; the count must come out exact and `idle`
/// must hold for the lock afterwards.
pub(crate) fn contend<R>(
    builder: loom::model::Builder,
    make: fn() -> R,
    threads: usize,
    times: u32,
    main: Main,
    waiting: fn(&R),
    idle: fn(&R) -> bool,
) where
    R: RawMutex + Send + Sync + 'static,
{
    builder.check(move || {
        let shared = Shared::new(make());
        let spawn = || {
            let shared = Arc::clone(&shared);
            thread::spawn(move || (0..times).for_each(|_| shared.increment()))
        };
        let others: Vec<_> = match main {
            Main::Contends => {
                let others: Vec<_> = (1..threads).map(|_| spawn()).collect();
                (0..times).for_each(|_| shared.increment());
                others
            }
            Main::Staged => {
                let guard = shared.lock.lock();
                let mut others = Vec::new();
                for _ in 1..threads {
                    others.push(spawn());
                    waiting(&shared.lock);
                }
                shared.bump_locked(times);
                // SAFETY: `guard` came from `lock()` on this lock.
                unsafe { shared.lock.unlock(guard) };
                others
            }
        };
        others.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(shared.total(), threads as u32 * times);
        assert!(
            idle(&shared.lock),
            "the lock is not idle after every thread left"
        );
    });
}

/// `try_lock` never succeeds while another thread holds the lock, and a
/// successful one is ordered after the holder's critical section.
pub(crate) fn try_lock_respects_holder<R>(make: fn() -> R)
where
    R: RawMutex + Send + Sync + 'static,
{
    builder(Bound::Env).check(move || {
        let shared = Shared::new(make());
        let other = Arc::clone(&shared);
        let trier = thread::spawn(move || {
            if let Some(guard) = other.lock.try_lock() {
                other.bump_locked(10);
                // SAFETY: from the successful try_lock above.
                unsafe { other.lock.unlock(guard) };
            }
        });
        shared.increment();
        trier.join().unwrap();
        let total = shared.total();
        assert!(total == 1 || total == 11, "total {total}");
        assert!(!shared.lock.is_locked());
    });
}

/// `try_lock` against `lock`: a thread that only ever tries (yielding
/// between attempts) is excluded like any other, and gets in eventually.
pub(crate) fn try_lock_against_lock<R>(make: fn() -> R)
where
    R: RawMutex + Send + Sync + 'static,
{
    loom::model(move || {
        let shared = Shared::new(make());
        let locker = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || shared.increment())
        };
        let guard = loop {
            match shared.lock.try_lock() {
                Some(guard) => break guard,
                None => thread::yield_now(),
            }
        };
        shared.bump_locked(1);
        // SAFETY: `guard` came from `try_lock()` on this lock.
        unsafe { shared.lock.unlock(guard) };
        locker.join().unwrap();
        assert_eq!(shared.total(), 2);
    });
}
