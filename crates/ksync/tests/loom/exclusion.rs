//! The exclusion-and-progress model shared by the simple mutexes: N threads
//! (the model's main thread among them) each take the lock once and bump a
//! loom `UnsafeCell`, so loom reports any access the lock fails to order,
//! and every thread must finish.

use lock_api::RawMutex;
use loom::cell::UnsafeCell;
use loom::sync::Arc;

pub(crate) struct Shared<R> {
    pub(crate) lock: R,
    pub(crate) value: UnsafeCell<u32>,
}

// SAFETY: `value` is only accessed with `lock` held; loom's UnsafeCell
// reports any access the lock fails to order.
unsafe impl<R: Sync> Sync for Shared<R> {}

impl<R> Shared<R> {
    pub(crate) fn new(lock: R) -> Arc<Self> {
        Arc::new(Shared {
            lock,
            value: UnsafeCell::new(0),
        })
    }
}

fn increment<R: RawMutex>(shared: &Shared<R>) {
    let guard = shared.lock.lock();
    // SAFETY: the lock is held.
    shared.value.with_mut(|v| unsafe { *v += 1 });
    // SAFETY: `guard` came from `lock()` above.
    unsafe { shared.lock.unlock(guard) };
}

/// `threads` threads each take a lock made by `make` once. A lock whose
/// waiters spin passes `spins = true`: two waiters spinning at once can
/// yield to each other indefinitely in loom's schedule space (a yield is not
/// a preemption), so its three-thread model bounds preemptions to one.
pub(crate) fn increments<R>(make: fn() -> R, threads: usize, spins: bool)
where
    R: RawMutex + Send + Sync + 'static,
{
    // Each poll of a spin loop is a branch; three threads waiting on each
    // other need more than loom's default 1000.
    let mut model = loom::model::Builder::new();
    model.max_branches = 20_000;
    if spins && threads > 2 {
        model.preemption_bound = Some(1);
    }
    model.check(move || {
        let shared = Shared::new(make());
        let handles: Vec<_> = (1..threads)
            .map(|_| {
                let shared = Arc::clone(&shared);
                loom::thread::spawn(move || increment(&shared))
            })
            .collect();
        increment(&shared);
        handles.into_iter().for_each(|h| h.join().unwrap());
        // SAFETY: every thread has been joined.
        assert_eq!(shared.value.with(|v| unsafe { *v }), threads as u32);
        assert!(!shared.lock.is_locked());
    });
}
