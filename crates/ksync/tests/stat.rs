//! `ksync::stat`: contention forced deterministically (a holder sleeps while
//! a waiter is known to be waiting), counted exactly, waits at least the
//! enforced delay; histograms sum to the counts; reset, merge, registry, and
//! the report's table, one-line summaries and JSON.
//!
//! A test knows a thread is waiting because the raw lock under `Stat` is a
//! `Probe`, which counts entries into its blocking calls: `Stat` only calls
//! them after its try failed and after it read the clock, so once the count
//! moves the wait has begun and lasts at least until the holder lets go.

#![cfg(not(loom))]

mod common;

use common::wait_until;
use ksync::rwsem::RawRwSem;
use ksync::spin::{RawQSpinLock, RawTasLock, RawTicketLock};
use ksync::stat::{self, Histogram, LockStatSnapshot, LockStats, Registry, Report, Stat, BUCKETS};
use lock_api::{
    GuardSend, RawMutex, RawMutexFair, RawMutexTimed, RawRwLock, RawRwLockDowngrade, RawRwLockTimed,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// How long holders hold while others wait.
const DELAY: Duration = Duration::from_millis(20);
const DELAY_NS: u64 = 20_000_000;

/// A raw lock that counts the calls that may block.
struct Probe<R> {
    inner: R,
    blocking: AtomicUsize,
}

impl<R> Probe<R> {
    fn entered(&self) {
        self.blocking.fetch_add(1, Ordering::SeqCst);
    }

    /// Waits until `n` calls have entered a blocking path.
    fn wait_for_waiters(&self, n: usize) {
        wait_until(&format!("{n} waiters"), || {
            self.blocking.load(Ordering::SeqCst) >= n
        });
    }
}

// SAFETY: every call is the inner lock's.
unsafe impl<R: RawMutex> RawMutex for Probe<R> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Probe {
        inner: R::INIT,
        blocking: AtomicUsize::new(0),
    };
    type Guard = R::Guard;

    fn lock(&self) -> R::Guard {
        self.entered();
        self.inner.lock()
    }

    fn try_lock(&self) -> Option<R::Guard> {
        self.inner.try_lock()
    }

    unsafe fn unlock(&self, guard: R::Guard) {
        // SAFETY: the caller's guard is the inner lock's.
        unsafe { self.inner.unlock(guard) }
    }

    fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }
}

// SAFETY: every call is the inner lock's.
unsafe impl<R: RawMutexTimed> RawMutexTimed for Probe<R> {
    type Duration = R::Duration;
    type Instant = R::Instant;

    fn try_lock_for(&self, timeout: R::Duration) -> Option<R::Guard> {
        self.entered();
        self.inner.try_lock_for(timeout)
    }

    fn try_lock_until(&self, timeout: R::Instant) -> Option<R::Guard> {
        self.entered();
        self.inner.try_lock_until(timeout)
    }
}

// SAFETY: the inner lock's.
unsafe impl<R: RawMutexFair> RawMutexFair for Probe<R> {
    unsafe fn unlock_fair(&self, guard: R::Guard) {
        // SAFETY: the caller's guard is the inner lock's.
        unsafe { self.inner.unlock_fair(guard) }
    }
}

// SAFETY: every call is the inner lock's.
unsafe impl<R: RawRwLock> RawRwLock for Probe<R> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Probe {
        inner: R::INIT,
        blocking: AtomicUsize::new(0),
    };
    type SharedGuard = R::SharedGuard;
    type ExclusiveGuard = R::ExclusiveGuard;

    fn lock_shared(&self) -> R::SharedGuard {
        self.entered();
        self.inner.lock_shared()
    }

    fn try_lock_shared(&self) -> Option<R::SharedGuard> {
        self.inner.try_lock_shared()
    }

    unsafe fn unlock_shared(&self, guard: R::SharedGuard) {
        // SAFETY: the caller's guard is the inner lock's.
        unsafe { self.inner.unlock_shared(guard) }
    }

    fn lock_exclusive(&self) -> R::ExclusiveGuard {
        self.entered();
        self.inner.lock_exclusive()
    }

    fn try_lock_exclusive(&self) -> Option<R::ExclusiveGuard> {
        self.inner.try_lock_exclusive()
    }

    unsafe fn unlock_exclusive(&self, guard: R::ExclusiveGuard) {
        // SAFETY: the caller's guard is the inner lock's.
        unsafe { self.inner.unlock_exclusive(guard) }
    }

    fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }

    fn is_locked_exclusive(&self) -> bool {
        self.inner.is_locked_exclusive()
    }
}

// SAFETY: the inner lock's.
unsafe impl<R: RawRwLockDowngrade> RawRwLockDowngrade for Probe<R> {
    unsafe fn downgrade(&self, guard: R::ExclusiveGuard) -> R::SharedGuard {
        // SAFETY: the caller's guard is the inner lock's.
        unsafe { self.inner.downgrade(guard) }
    }
}

// SAFETY: every call is the inner lock's.
unsafe impl<R: RawRwLockTimed> RawRwLockTimed for Probe<R> {
    type Duration = R::Duration;
    type Instant = R::Instant;

    fn try_lock_shared_for(&self, timeout: R::Duration) -> Option<R::SharedGuard> {
        self.entered();
        self.inner.try_lock_shared_for(timeout)
    }

    fn try_lock_shared_until(&self, timeout: R::Instant) -> Option<R::SharedGuard> {
        self.entered();
        self.inner.try_lock_shared_until(timeout)
    }

    fn try_lock_exclusive_for(&self, timeout: R::Duration) -> Option<R::ExclusiveGuard> {
        self.entered();
        self.inner.try_lock_exclusive_for(timeout)
    }

    fn try_lock_exclusive_until(&self, timeout: R::Instant) -> Option<R::ExclusiveGuard> {
        self.entered();
        self.inner.try_lock_exclusive_until(timeout)
    }
}

/// A new mutex (`Stat::INIT` alone is ambiguous: `Stat` is a `RawMutex` and
/// a `RawRwLock`).
fn mutex<R: RawMutex>() -> R {
    R::INIT
}

/// A new reader-writer lock.
fn rwlock<R: RawRwLock>() -> R {
    R::INIT
}

/// Checks what must hold of any quiescent snapshot.
fn check_consistent(s: &LockStatSnapshot) {
    assert_eq!(s.wait_histogram.count(), s.contended(), "{s:?}");
    assert_eq!(s.hold_histogram.count(), s.hold_samples(), "{s:?}");
    assert!(s.wait_max_ns() <= s.wait_total_ns());
    assert!(s.hold_max_ns() <= s.hold_total_ns());
    assert_eq!(s.acquisitions(), s.free() + s.contended());
}

/// The bucket of each wait is at least the bucket of `DELAY`.
fn all_in_or_above_delay_bucket(h: &Histogram) -> bool {
    let b = Histogram::bucket_of(DELAY_NS);
    h.buckets[..b].iter().all(|&n| n == 0)
}

#[test]
fn mutex_waiters_are_counted_and_wait_at_least_the_delay() {
    stat::calibrate();
    const WAITERS: usize = 3;
    let lock: Stat<Probe<RawQSpinLock>> = mutex();
    thread::scope(|s| {
        let g = lock.lock();
        for _ in 0..WAITERS {
            s.spawn(|| {
                let g = lock.lock();
                // SAFETY: `g` is this lock's guard.
                unsafe { lock.unlock(g) };
            });
        }
        lock.inner().wait_for_waiters(WAITERS);
        thread::sleep(DELAY);
        // SAFETY: as above.
        unsafe { lock.unlock(g) };
    });
    let s = lock.snapshot();
    check_consistent(&s);
    assert_eq!(s.locks, 1);
    assert_eq!(s.write.free, 1);
    assert_eq!(s.write.contended, WAITERS as u64);
    assert_eq!(s.read, Default::default());
    // Every waiter began waiting before the sleep and ended after it.
    assert!(s.write.wait_max_ns >= DELAY_NS, "{s:?}");
    assert!(s.write.wait_total_ns >= WAITERS as u64 * DELAY_NS, "{s:?}");
    assert!(s.wait_avg_ns() >= DELAY_NS);
    assert!(all_in_or_above_delay_bucket(&s.wait_histogram), "{s:?}");
    assert!(
        s.elapsed_ns > 0,
        "the first contended wait starts the window"
    );
    assert_eq!(s.cpus as usize, cpus_online());
}

fn cpus_online() -> usize {
    // SAFETY: sysconf only reads configuration.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n as usize
}

#[test]
fn uncontended_acquisitions_are_free_and_try_lock_failures_are_not_counted() {
    let lock: Stat<RawQSpinLock, 0> = mutex();
    for _ in 0..100 {
        let g = lock.lock();
        assert!(lock.try_lock().is_none());
        // SAFETY: `g` is this lock's guard.
        unsafe { lock.unlock(g) };
    }
    let g = lock.try_lock().unwrap();
    // SAFETY: as above.
    unsafe { lock.unlock(g) };
    let s = lock.snapshot();
    check_consistent(&s);
    assert_eq!((s.free(), s.contended()), (101, 0));
    assert_eq!(s.hold_samples(), 0);
    assert_eq!(s.elapsed_ns, 0, "never contended, registered or reset");
    assert_eq!(s.per_mille(), 0);
}

#[test]
fn every_hold_is_timed_with_hold_1() {
    stat::calibrate();
    let lock: Stat<RawQSpinLock, 1> = mutex();
    let g = lock.lock();
    thread::sleep(DELAY);
    // SAFETY: `g` is this lock's guard.
    unsafe { lock.unlock(g) };
    for _ in 0..10 {
        let g = lock.lock();
        // SAFETY: as above.
        unsafe { lock.unlock(g) };
    }
    let s = lock.snapshot();
    check_consistent(&s);
    assert_eq!(s.hold_samples(), 11);
    assert_eq!(s.hold_histogram.count(), s.acquisitions());
    assert!(s.write.hold_max_ns >= DELAY_NS);
    assert_eq!(s.write.hold_total_ns(), s.write.hold_sampled_ns);
    assert!(s.hold_total_ns() >= DELAY_NS);
}

#[test]
fn default_samples_one_hold_in_64() {
    stat::calibrate();
    let lock: Stat<RawQSpinLock> = mutex();
    for _ in 0..1000 {
        let g = lock.lock();
        // SAFETY: `g` is this lock's guard.
        unsafe { lock.unlock(g) };
    }
    let s = lock.snapshot();
    check_consistent(&s);
    assert_eq!(s.free(), 1000);
    // Acquisitions 0, 64, ..., 960.
    assert_eq!(s.hold_samples(), 16);
    assert!(s.hold_total_ns() >= s.write.hold_sampled_ns);
}

#[test]
fn contended_acquisitions_time_their_hold_from_the_end_of_the_wait() {
    stat::calibrate();
    let lock: Stat<Probe<RawQSpinLock>, 1> = mutex();
    thread::scope(|s| {
        let g = lock.lock();
        s.spawn(|| {
            let g = lock.lock();
            thread::sleep(DELAY);
            // SAFETY: `g` is this lock's guard.
            unsafe { lock.unlock(g) };
        });
        lock.inner().wait_for_waiters(1);
        thread::sleep(DELAY);
        // SAFETY: as above.
        unsafe { lock.unlock(g) };
    });
    let s = lock.snapshot();
    check_consistent(&s);
    assert_eq!((s.write.free, s.write.contended), (1, 1));
    assert_eq!(s.hold_samples(), 2);
    assert!(s.write.hold_total_ns() >= 2 * DELAY_NS);
    assert!(s.write.wait_total_ns >= DELAY_NS);
    assert!(all_in_or_above_delay_bucket(&s.hold_histogram));
}

#[test]
fn rwsem_readers_and_writers_are_counted_apart() {
    stat::calibrate();
    let lock: Stat<Probe<RawRwSem>, 1> = rwlock();
    thread::scope(|s| {
        // A reader waits for a writer.
        let w = lock.lock_exclusive();
        s.spawn(|| {
            let r = lock.lock_shared();
            // SAFETY: `r` is this lock's shared guard.
            unsafe { lock.unlock_shared(r) };
        });
        lock.inner().wait_for_waiters(1);
        thread::sleep(DELAY);
        // SAFETY: `w` is this lock's exclusive guard.
        unsafe { lock.unlock_exclusive(w) };
    });
    thread::scope(|s| {
        // A writer waits for two readers.
        let r1 = lock.lock_shared();
        let r2 = lock.try_lock_shared().unwrap();
        s.spawn(|| {
            let w = lock.lock_exclusive();
            // SAFETY: `w` is this lock's exclusive guard.
            unsafe { lock.unlock_exclusive(w) };
        });
        lock.inner().wait_for_waiters(2);
        thread::sleep(DELAY);
        // SAFETY: shared guards of this lock.
        unsafe {
            lock.unlock_shared(r1);
            lock.unlock_shared(r2);
        }
    });
    let s = lock.snapshot();
    check_consistent(&s);
    assert_eq!((s.write.free, s.write.contended), (1, 1));
    assert_eq!((s.read.free, s.read.contended), (2, 1));
    assert!(s.read.wait_total_ns >= DELAY_NS);
    assert!(s.write.wait_total_ns >= DELAY_NS);
    assert_eq!(s.hold_samples(), s.acquisitions());
    assert!(
        s.write.hold_max_ns >= DELAY_NS,
        "the first writer held for the delay"
    );
    assert!(
        s.read.hold_max_ns >= DELAY_NS,
        "the readers held for the delay"
    );
    assert!(all_in_or_above_delay_bucket(&s.wait_histogram));
}

#[test]
fn downgrade_ends_the_writers_hold() {
    stat::calibrate();
    let lock: lock_api::RwLock<Stat<RawRwSem, 1>, u32> = lock_api::RwLock::new(0);
    let mut w = lock.write();
    *w += 1;
    let r = lock_api::RwLockWriteGuard::downgrade(w);
    assert_eq!(*r, 1);
    assert_eq!(*lock.try_read().unwrap(), 1);
    drop(r);
    let s = LockStats::snapshot(&lock);
    check_consistent(&s);
    assert_eq!((s.write.free, s.read.free), (1, 1));
    assert_eq!((s.write.hold_samples, s.read.hold_samples), (1, 1));
}

#[test]
fn timeouts_are_counted_apart_from_waits() {
    stat::calibrate();
    let lock: Stat<Probe<parking_lot::RawMutex>, 1> = mutex();
    let g = lock.lock();
    thread::scope(|s| {
        s.spawn(|| assert!(lock.try_lock_for(DELAY).is_none()));
    });
    thread::scope(|s| {
        s.spawn(|| {
            let g = lock.try_lock_for(Duration::from_secs(60)).unwrap();
            // SAFETY: `g` is this lock's guard.
            unsafe { lock.unlock(g) };
        });
        lock.inner().wait_for_waiters(2);
        thread::sleep(DELAY);
        // SAFETY: as above.
        unsafe { lock.unlock_fair(g) };
    });
    let s = lock.snapshot();
    check_consistent(&s);
    assert_eq!(s.write.timeouts, 1);
    assert!(s.write.timeout_wait_ns >= DELAY_NS);
    assert_eq!((s.write.free, s.write.contended), (1, 1));
    assert!(s.write.wait_total_ns >= DELAY_NS);
    assert_eq!(s.hold_samples(), 2);
}

#[test]
fn rwsem_timeouts_on_both_sides() {
    stat::calibrate();
    let lock: Stat<RawRwSem> = rwlock();
    let w = lock.lock_exclusive();
    thread::scope(|s| {
        s.spawn(|| assert!(lock.try_lock_shared_for(DELAY).is_none()));
        s.spawn(|| assert!(lock.try_lock_exclusive_for(DELAY).is_none()));
    });
    // SAFETY: `w` is this lock's exclusive guard.
    unsafe { lock.unlock_exclusive(w) };
    let s = lock.snapshot();
    check_consistent(&s);
    assert_eq!((s.read.timeouts, s.write.timeouts), (1, 1));
    assert!(s.read.timeout_wait_ns >= DELAY_NS && s.write.timeout_wait_ns >= DELAY_NS);
    assert_eq!(s.contended(), 0);
}

#[test]
fn lock_api_mutex_just_works() {
    // A test-and-set lock: spinning waiters on a busy, oversubscribed test
    // machine do not stall it as a queue does.
    type Counter = lock_api::Mutex<Stat<RawTasLock>, u64>;
    let counter = Counter::new(0);
    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..2_000 {
                    *counter.lock() += 1;
                }
            });
        }
    });
    assert_eq!(*counter.lock(), 8_000);
    let s = LockStats::snapshot(&counter);
    check_consistent(&s);
    assert_eq!(s.acquisitions(), 8_001);
    assert_eq!(s.hold_histogram.count(), s.hold_samples());

    // Fair unlock and bump reach the ticket lock's own.
    let fair: lock_api::Mutex<Stat<RawTicketLock>, u32> = lock_api::Mutex::new(1);
    let mut g = fair.lock();
    lock_api::MutexGuard::bump(&mut g);
    lock_api::MutexGuard::unlock_fair(g);
    assert_eq!(LockStats::snapshot(&fair).acquisitions(), 2);

    // Guards keep the wrapped lock's Send-ness.
    fn is_send<T: Send>() {}
    is_send::<ksync::stat::StatGuard<GuardSend>>();
}

#[test]
fn reset_zeroes_everything_and_restarts_the_window() {
    stat::calibrate();
    let lock: Stat<Probe<RawQSpinLock>, 1> = mutex();
    thread::scope(|s| {
        let g = lock.lock();
        s.spawn(|| {
            let g = lock.lock();
            // SAFETY: `g` is this lock's guard.
            unsafe { lock.unlock(g) };
        });
        lock.inner().wait_for_waiters(1);
        thread::sleep(DELAY);
        // SAFETY: as above.
        unsafe { lock.unlock(g) };
    });
    let before = lock.snapshot();
    assert_eq!(before.contended(), 1);
    let t = Instant::now();
    lock.reset();
    let after = lock.snapshot();
    check_consistent(&after);
    assert_eq!(after.acquisitions(), 0);
    assert_eq!(after.wait_total_ns(), 0);
    assert_eq!(after.wait_max_ns(), 0);
    assert_eq!(after.hold_samples(), 0);
    assert_eq!(after.wait_histogram, Histogram::default());
    assert_eq!(after.hold_histogram, Histogram::default());
    // The window restarted: it is no longer than the time since `t`, just
    // before the reset (with room for the TSC's calibration error).
    let since_t = t.elapsed().as_nanos() as u64;
    assert!(
        after.elapsed_ns <= since_t + since_t / 100 + 1000,
        "window not restarted"
    );
    let g = lock.lock();
    // SAFETY: as above.
    unsafe { lock.unlock(g) };
    assert_eq!(lock.snapshot().free(), 1);
}

#[test]
fn per_mille_is_spraul_2010_formula() {
    stat::calibrate();
    let lock: Stat<Probe<RawQSpinLock>> = mutex();
    lock.mark_start();
    thread::scope(|s| {
        let g = lock.lock();
        s.spawn(|| {
            let g = lock.lock();
            // SAFETY: `g` is this lock's guard.
            unsafe { lock.unlock(g) };
        });
        lock.inner().wait_for_waiters(1);
        thread::sleep(DELAY);
        // SAFETY: as above.
        unsafe { lock.unlock(g) };
    });
    let s = lock.snapshot();
    assert!(
        s.elapsed_ns >= s.wait_total_ns(),
        "one waiter, inside the window"
    );
    let expect =
        u128::from(s.wait_total_ns()) * 1000 / (u128::from(s.elapsed_ns) * u128::from(s.cpus));
    assert_eq!(u128::from(s.per_mille()), expect);
    assert!(s.per_mille() <= 1000 / u64::from(s.cpus));
    let line = s.summary_line();
    assert_eq!(
        line,
        format!(
            "free 1 contended 1 wait {} avg {} 1/1000 cpu time {}",
            s.wait_total_ns(),
            s.wait_total_ns(),
            s.per_mille()
        )
    );
    assert_eq!(s.to_string(), line);
}

#[test]
fn snapshots_merge_and_collections_sum() {
    let locks: Vec<Stat<RawQSpinLock, 0>> = (0..3).map(|_| mutex()).collect();
    for (i, l) in locks.iter().enumerate() {
        for _ in 0..=i {
            let g = l.lock();
            // SAFETY: `g` is this lock's guard.
            unsafe { l.unlock(g) };
        }
    }
    let sum = LockStats::snapshot(&locks);
    assert_eq!(sum.locks, 3);
    assert_eq!(sum.free(), 6);
    let by_hand: LockStatSnapshot = locks.iter().map(Stat::snapshot).sum();
    assert_eq!(by_hand, sum);
    let mut a = locks[0].snapshot();
    a.merge(&locks[2].snapshot());
    assert_eq!((a.locks, a.free()), (2, 4));

    let mut x = LockStatSnapshot::default();
    x.write.wait_max_ns = 5;
    x.elapsed_ns = 100;
    x.wait_histogram.buckets[2] = 1;
    let mut y = LockStatSnapshot::default();
    y.write.wait_max_ns = 9;
    y.elapsed_ns = 50;
    y.wait_histogram.buckets[2] = 2;
    let m = x.merged(&y);
    assert_eq!(m.write.wait_max_ns, 9);
    assert_eq!(m.elapsed_ns, 100);
    assert_eq!(m.wait_histogram.buckets[2], 3);

    LockStats::reset(&locks[..]);
    assert_eq!(LockStats::snapshot(&locks[..]).acquisitions(), 0);
}

struct Shared {
    a: lock_api::Mutex<Stat<RawQSpinLock>, u32>,
    b: lock_api::RwLock<Stat<RawRwSem>, u32>,
}

#[test]
fn registry_names_statics_and_arcs_and_forgets_dropped_ones() {
    static GLOBAL_LOCK: lock_api::Mutex<Stat<RawQSpinLock>, ()> = lock_api::Mutex::new(());
    let reg = Registry::new();
    let id_static = reg.register_static("global", &GLOBAL_LOCK);
    let shared = Arc::new(Shared {
        a: lock_api::Mutex::new(0),
        b: lock_api::RwLock::new(0),
    });
    reg.register_in("shared.a", &shared, |s| &s.a);
    reg.register_in("shared.b", &shared, |s| &s.b);
    let lone: Arc<Stat<RawQSpinLock, 0>> = Arc::new(mutex());
    reg.register("shared.a", &lone); // same class: summed with shared.a
    assert_eq!(reg.len(), 4);

    drop(GLOBAL_LOCK.lock());
    *shared.a.lock() += 1;
    *shared.b.write() += 1;
    drop(shared.b.read());
    drop(shared.b.read());
    let g = lone.lock();
    // SAFETY: `g` is this lock's guard.
    unsafe { lone.unlock(g) };

    let report = reg.report();
    assert_eq!(report.rows.len(), 3);
    assert_eq!(report.get("global").unwrap().acquisitions(), 1);
    let a = report.get("shared.a").unwrap();
    assert_eq!((a.locks, a.acquisitions()), (2, 2));
    let b = report.get("shared.b").unwrap();
    assert_eq!((b.write.free, b.read.free), (1, 2));
    assert!(a.elapsed_ns > 0, "registration starts the window");

    reg.reset();
    assert!(reg
        .report()
        .rows
        .iter()
        .all(|r| r.stats.acquisitions() == 0));

    drop(shared);
    let report = reg.report();
    assert!(report.get("shared.b").is_none());
    assert_eq!(report.get("shared.a").unwrap().locks, 1);
    assert_eq!(reg.len(), 2);

    assert!(reg.unregister(id_static));
    assert!(!reg.unregister(id_static));
    drop(lone);
    assert!(reg.report().rows.is_empty());
    assert!(reg.is_empty());
}

#[test]
fn the_global_registry_is_shared() {
    static L: Stat<RawQSpinLock> = Stat::new(RawQSpinLock::new());
    let id = stat::registry().register_static("tests/stat.rs global", &L);
    let g = L.lock();
    // SAFETY: `g` is this lock's guard.
    unsafe { L.unlock(g) };
    let report = stat::registry().report();
    assert_eq!(report.get("tests/stat.rs global").unwrap().free(), 1);
    assert!(stat::registry().unregister(id));
}

/// A report with a mutex row and a reader-writer row, both contended.
fn contended_report() -> Report {
    stat::calibrate();
    let m: Arc<Stat<Probe<RawQSpinLock>, 1>> = Arc::new(mutex());
    let rw: Arc<Stat<Probe<RawRwSem>>> = Arc::new(rwlock());
    let reg = Registry::new();
    reg.register("mutex \"quoted\"\\name", &m);
    reg.register("rwsem", &rw);
    thread::scope(|s| {
        let g = m.lock();
        let w = rw.lock_exclusive();
        s.spawn(|| {
            let g = m.lock();
            // SAFETY: `g` is this lock's guard.
            unsafe { m.unlock(g) };
        });
        s.spawn(|| {
            let r = rw.lock_shared();
            // SAFETY: `r` is this lock's shared guard.
            unsafe { rw.unlock_shared(r) };
        });
        m.inner().wait_for_waiters(1);
        rw.inner().wait_for_waiters(1);
        thread::sleep(DELAY);
        // SAFETY: the guards are these locks'.
        unsafe {
            m.unlock(g);
            rw.unlock_exclusive(w);
        }
    });
    reg.report()
}

#[test]
fn the_table_looks_like_lock_stat() {
    let report = contended_report();
    let table = report.table();
    println!("{table}");
    for head in [
        "class name",
        "contentions",
        "waittime-max",
        "waittime-total",
        "waittime-avg",
        "acquisitions",
        "holdtime-max",
        "holdtime-total",
        "holdtime-avg",
        "1/1000 cpu",
    ] {
        assert!(table.contains(head), "{head} missing:\n{table}");
    }
    let row = |prefix: &str| -> Vec<String> {
        let line = table
            .lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} row:\n{table}"));
        line.trim_start()[prefix.len()..]
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let mutex = row("mutex \"quoted\"\\name:");
    assert_eq!(mutex.len(), 9);
    assert_eq!(mutex[0], "1");
    assert_eq!(mutex[4], "2");
    let wait_max_us: f64 = mutex[1].parse().unwrap();
    assert!(wait_max_us >= DELAY_NS as f64 / 1000.0);
    let w = row("rwsem-W:");
    let r = row("rwsem-R:");
    assert_eq!((w[0].as_str(), w[4].as_str()), ("0", "1"));
    assert_eq!((r[0].as_str(), r[4].as_str()), ("1", "1"));
    assert_eq!(report.to_string(), table);

    let lines = report.summary_lines();
    let line = lines.lines().find(|l| l.starts_with("rwsem: ")).unwrap();
    let words: Vec<&str> = line["rwsem: ".len()..].split(' ').collect();
    assert_eq!(words.len(), 12);
    assert_eq!(
        [words[0], words[2], words[4], words[6], words[8], words[9], words[10]],
        ["free", "contended", "wait", "avg", "1/1000", "cpu", "time"]
    );
    assert_eq!((words[1], words[3]), ("1", "1"));
    assert!(words[5].parse::<u64>().unwrap() >= DELAY_NS);
}

#[test]
fn the_json_parses_back() {
    let report = contended_report();
    let json = report.to_json();
    let v: serde_json::Value = serde_json::from_str(&json).expect(&json);
    assert_eq!(v["cpus"].as_u64().unwrap(), u64::from(report.cpus));
    assert_eq!(v["clock"]["source"], report.clock.name());
    assert_eq!(v["clock"]["hz"].as_u64().unwrap(), report.clock.hz());
    let locks = v["locks"].as_array().unwrap();
    assert_eq!(locks.len(), report.rows.len());
    for (j, row) in locks.iter().zip(&report.rows) {
        let s = &row.stats;
        assert_eq!(j["name"].as_str().unwrap(), row.name);
        let u = |k: &str| j[k].as_u64().unwrap_or_else(|| panic!("{k} in {j}"));
        assert_eq!(u("locks"), s.locks);
        assert_eq!(u("elapsed_ns"), s.elapsed_ns);
        assert_eq!(u("free"), s.free());
        assert_eq!(u("contended"), s.contended());
        assert_eq!(u("wait_total_ns"), s.wait_total_ns());
        assert_eq!(u("per_mille"), s.per_mille());
        for (key, side) in [("write", &s.write), ("read", &s.read)] {
            let js = &j[key];
            let u = |k: &str| js[k].as_u64().unwrap_or_else(|| panic!("{key}.{k}"));
            assert_eq!(u("free"), side.free);
            assert_eq!(u("contended"), side.contended);
            assert_eq!(u("wait_total_ns"), side.wait_total_ns);
            assert_eq!(u("wait_max_ns"), side.wait_max_ns);
            assert_eq!(u("hold_samples"), side.hold_samples);
            assert_eq!(u("hold_sampled_ns"), side.hold_sampled_ns);
            assert_eq!(u("hold_max_ns"), side.hold_max_ns);
            assert_eq!(u("timeouts"), side.timeouts);
            assert_eq!(u("timeout_wait_ns"), side.timeout_wait_ns);
        }
        for (key, h) in [
            ("wait_histogram", &s.wait_histogram),
            ("hold_histogram", &s.hold_histogram),
        ] {
            let arr: Vec<u64> = j[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_u64().unwrap())
                .collect();
            assert_eq!(arr.len(), BUCKETS);
            assert_eq!(arr, h.buckets);
        }
        assert_eq!(
            j["wait_histogram"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_u64().unwrap())
                .sum::<u64>(),
            s.contended()
        );
    }
}
