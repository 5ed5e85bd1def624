//! Reader-writer semaphores: bounded torture with an exclusion check on every
//! acquisition (and deliberately broken locks proving the check can fail),
//! liveness with generous bounds, try / timed acquisition, downgrade, and
//! guards dropped by a panic.
//!
//! The check, after locktorture's `rwsem_lock` type: a writer must find no
//! other writer and no reader inside; a reader must find no writer inside.
//! Writers also do a non-atomic read-increment-write of one counter and then
//! copy it into a second, so two writers at once lose increments and a reader
//! beside a writer sees the two counters differ. Nothing here measures speed:
//! time bounds are watchdogs, seconds long.
#![cfg(not(loom))]

mod common;

use common::wait_until;
use ksync::rwsem::{RawRwSem, RawSpinRwSem, RwSem, SpinRwSem};
use lock_api::{GuardSend, RawRwLock, RawRwLockDowngrade, RawRwLockTimed};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

/// What the tests need from a semaphore.
trait Sem:
    RawRwLock<SharedGuard = GuardSend, ExclusiveGuard = GuardSend>
    + RawRwLockDowngrade
    + RawRwLockTimed<Duration = Duration, Instant = Instant>
    + Send
    + Sync
    + std::fmt::Debug
    + 'static
{
}

impl<R> Sem for R where
    R: RawRwLock<SharedGuard = GuardSend, ExclusiveGuard = GuardSend>
        + RawRwLockDowngrade
        + RawRwLockTimed<Duration = Duration, Instant = Instant>
        + Send
        + Sync
        + std::fmt::Debug
        + 'static
{
}

/// The bound after which a run counts as stuck.
const WATCHDOG: Duration = Duration::from_secs(30);
/// Generous bound for one liveness step.
const LIVENESS: Duration = Duration::from_secs(10);

/// Runs `f` on its own thread and fails the test if it does not finish within
/// `bound` (the thread is leaked; the test fails anyway).
fn within<T: Send + 'static>(
    bound: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(bound) {
        Ok(value) => {
            handle.join().expect("worker panicked after reporting");
            value
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the worker either sends or panics"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: not done after {bound:?}"),
    }
}

fn pause(n: u32) {
    for _ in 0..n {
        std::hint::spin_loop();
    }
}

// ---------------------------------------------------------------------------
// The torture check
// ---------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Report {
    /// A writer found another writer inside.
    writer_writer: u64,
    /// A writer found a reader inside, or a reader found a writer.
    reader_writer: u64,
    /// A reader saw the writers' two counters differ.
    torn_reads: u64,
    /// The writers' counter at the end; `writes` for a correct lock.
    counted: u64,
    writes: u64,
    /// Acquisitions that timed out first (then retried untimed).
    timeouts: u64,
}

impl Report {
    fn violations(&self) -> u64 {
        self.writer_writer + self.reader_writer + self.torn_reads + (self.writes - self.counted)
    }
}

struct Arena<R> {
    lock: Arc<R>,
    writers_in: AtomicUsize,
    readers_in: AtomicUsize,
    first: AtomicU64,
    second: AtomicU64,
    writer_writer: AtomicU64,
    reader_writer: AtomicU64,
    torn_reads: AtomicU64,
    timeouts: AtomicU64,
}

impl<R: Sem> Arena<R> {
    /// Now and then a long hold, as locktorture does, so queues build up.
    fn delay(i: u64, every: u64) {
        if i % every == every - 1 {
            thread::sleep(Duration::from_micros(100));
        }
    }

    /// 0, 20, 40, 60 or 80 µs: from "already expired" to long enough to queue.
    fn timeout(i: u64) -> Duration {
        Duration::from_micros(i / 8 % 5 * 20)
    }

    fn write_section(&self) {
        if self.writers_in.fetch_add(1, Relaxed) != 0 {
            self.writer_writer.fetch_add(1, Relaxed);
        }
        if self.readers_in.load(Relaxed) != 0 {
            self.reader_writer.fetch_add(1, Relaxed);
        }
        let seen = self.first.load(Relaxed);
        pause(8);
        self.first.store(seen + 1, Relaxed);
        pause(8);
        self.second.store(seen + 1, Relaxed);
    }

    fn read_section(&self) {
        self.readers_in.fetch_add(1, Relaxed);
        if self.writers_in.load(Relaxed) != 0 {
            self.reader_writer.fetch_add(1, Relaxed);
        }
        let second = self.second.load(Relaxed);
        pause(8);
        let first = self.first.load(Relaxed);
        if first != second {
            self.torn_reads.fetch_add(1, Relaxed);
        }
        self.readers_in.fetch_sub(1, Relaxed);
    }

    fn writer(&self, i: u64, timed: bool) {
        let guard = match i % 8 {
            3 if timed => self.lock.try_lock_exclusive_for(Self::timeout(i)),
            5 => self.lock.try_lock_exclusive(),
            _ => None,
        };
        let guard = guard.unwrap_or_else(|| {
            if i % 8 == 3 && timed {
                self.timeouts.fetch_add(1, Relaxed);
            }
            self.lock.lock_exclusive()
        });
        self.write_section();
        Self::delay(i, 97);
        if i % 4 == 1 {
            // Become a reader without letting a writer in.
            self.readers_in.fetch_add(1, Relaxed);
            self.writers_in.fetch_sub(1, Relaxed);
            // SAFETY: `guard` is our exclusive acquisition of `self.lock`.
            let shared = unsafe { self.lock.downgrade(guard) };
            self.readers_in.fetch_sub(1, Relaxed);
            self.read_section();
            // SAFETY: `shared` is our shared acquisition of `self.lock`.
            unsafe { self.lock.unlock_shared(shared) };
        } else {
            self.writers_in.fetch_sub(1, Relaxed);
            // SAFETY: `guard` is our exclusive acquisition of `self.lock`.
            unsafe { self.lock.unlock_exclusive(guard) };
        }
    }

    fn reader(&self, i: u64, timed: bool) {
        let guard = match i % 8 {
            2 if timed => self.lock.try_lock_shared_for(Self::timeout(i)),
            6 => self.lock.try_lock_shared(),
            _ => None,
        };
        let guard = guard.unwrap_or_else(|| {
            if i % 8 == 2 && timed {
                self.timeouts.fetch_add(1, Relaxed);
            }
            self.lock.lock_shared()
        });
        self.read_section();
        Self::delay(i, 89);
        // SAFETY: `guard` is our shared acquisition of `self.lock`.
        unsafe { self.lock.unlock_shared(guard) };
    }
}

/// `readers` and `writers` threads, `iters` acquisitions each (writers
/// downgrade every fourth time; some acquisitions go through `try_lock` and,
/// if `timed`, through a timed attempt of up to 80 µs first; now and then a
/// thread sleeps inside).
fn torture<R: Sem>(
    lock: Arc<R>,
    readers: usize,
    writers: usize,
    iters: u64,
    timed: bool,
) -> Report {
    let arena = Arc::new(Arena {
        lock,
        writers_in: AtomicUsize::new(0),
        readers_in: AtomicUsize::new(0),
        first: AtomicU64::new(0),
        second: AtomicU64::new(0),
        writer_writer: AtomicU64::new(0),
        reader_writer: AtomicU64::new(0),
        torn_reads: AtomicU64::new(0),
        timeouts: AtomicU64::new(0),
    });
    let start = Arc::new(Barrier::new(readers + writers));
    let threads: Vec<_> = (0..readers + writers)
        .map(|t| {
            let arena = Arc::clone(&arena);
            let start = Arc::clone(&start);
            thread::spawn(move || {
                start.wait();
                for i in 0..iters {
                    if t < writers {
                        arena.writer(i, timed);
                    } else {
                        arena.reader(i, timed);
                    }
                }
            })
        })
        .collect();
    within(WATCHDOG, "torture run", move || {
        for thread in threads {
            thread.join().expect("torture thread panicked");
        }
    });
    Report {
        writer_writer: arena.writer_writer.load(Relaxed),
        reader_writer: arena.reader_writer.load(Relaxed),
        torn_reads: arena.torn_reads.load(Relaxed),
        counted: arena.first.load(Relaxed),
        writes: writers as u64 * iters,
        timeouts: arena.timeouts.load(Relaxed),
    }
}

fn assert_excludes<R: Sem>(name: &str, readers: usize, writers: usize, iters: u64) {
    let lock = Arc::new(R::INIT);
    let report = torture(Arc::clone(&lock), readers, writers, iters, true);
    assert_eq!(
        report.violations(),
        0,
        "{name}: {readers} readers / {writers} writers: {report:?}"
    );
    assert_eq!(report.counted, report.writes, "{name}: {report:?}");
    // Everyone has left: the lock must be free, flags and all (both `try`
    // variants fail while waiters are flagged).
    assert!(!lock.is_locked(), "{name}: still locked after the run");
    let w = lock
        .try_lock_exclusive()
        .expect("idle lock refused a writer");
    // SAFETY: just acquired.
    unsafe { lock.unlock_exclusive(w) };
    let r = lock.try_lock_shared().expect("idle lock refused a reader");
    // SAFETY: just acquired.
    unsafe { lock.unlock_shared(r) };
    eprintln!(
        "{name}: {readers}r/{writers}w x {iters}: {} writes, {} timed attempts timed out",
        report.writes, report.timeouts
    );
}

macro_rules! torture_tests {
    ($module:ident, $raw:ty) => {
        mod $module {
            use super::*;

            #[test]
            fn two_readers_two_writers() {
                assert_excludes::<$raw>(stringify!($module), 2, 2, 4_000);
            }

            #[test]
            fn reader_heavy() {
                assert_excludes::<$raw>(stringify!($module), 6, 2, 2_000);
            }

            #[test]
            fn writer_heavy() {
                assert_excludes::<$raw>(stringify!($module), 2, 6, 2_000);
            }

            #[test]
            fn oversubscribed() {
                assert_excludes::<$raw>(stringify!($module), 16, 16, 300);
            }
        }
    };
}

torture_tests!(torture_kernel, RawRwSem);
torture_tests!(torture_generic, RawSpinRwSem);

// ---------------------------------------------------------------------------
// Broken locks: the check must catch them
// ---------------------------------------------------------------------------

/// `RawRwLockTimed` for a deliberately broken lock below: every timed
/// attempt is one `try_lock_*`, so the torture check can run it like the
/// real ones.
macro_rules! timed_by_trying {
    ($lock:ty) => {
        // SAFETY: deliberately broken, like the lock's `RawRwLock`; the
        // torture check never relies on its exclusion for memory safety.
        unsafe impl RawRwLockTimed for $lock {
            type Duration = Duration;
            type Instant = Instant;
            fn try_lock_shared_for(&self, _: Duration) -> Option<GuardSend> {
                self.try_lock_shared()
            }
            fn try_lock_shared_until(&self, _: Instant) -> Option<GuardSend> {
                self.try_lock_shared()
            }
            fn try_lock_exclusive_for(&self, _: Duration) -> Option<GuardSend> {
                self.try_lock_exclusive()
            }
            fn try_lock_exclusive_until(&self, _: Instant) -> Option<GuardSend> {
                self.try_lock_exclusive()
            }
        }
    };
}

/// Writers exclude each other correctly; readers take nothing at all. The
/// check must see readers beside writers.
#[derive(Debug)]
struct ReadersIgnoreWriters {
    writer: AtomicBool,
}

/// Readers and writers both use check-then-act on plain loads and stores, no
/// read-modify-write: two writers (or a reader and a writer) can both see the
/// lock free and both enter.
#[derive(Debug)]
struct RacyRwLock {
    writer: AtomicBool,
    readers: AtomicUsize,
}

// SAFETY: NOT a correct lock: it exists to be caught by the torture check,
// which keeps all shared state atomic and never relies on exclusion for
// memory safety.
unsafe impl RawRwLock for ReadersIgnoreWriters {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = ReadersIgnoreWriters {
        writer: AtomicBool::new(false),
    };
    type SharedGuard = GuardSend;
    type ExclusiveGuard = GuardSend;

    fn lock_shared(&self) -> GuardSend {
        GuardSend::new()
    }
    fn try_lock_shared(&self) -> Option<GuardSend> {
        Some(GuardSend::new())
    }
    unsafe fn unlock_shared(&self, _: GuardSend) {}
    fn lock_exclusive(&self) -> GuardSend {
        while self
            .writer
            .compare_exchange_weak(false, true, std::sync::atomic::Ordering::Acquire, Relaxed)
            .is_err()
        {
            thread::yield_now();
        }
        GuardSend::new()
    }
    fn try_lock_exclusive(&self) -> Option<GuardSend> {
        Some(self.lock_exclusive())
    }
    unsafe fn unlock_exclusive(&self, _: GuardSend) {
        self.writer
            .store(false, std::sync::atomic::Ordering::Release);
    }
    fn is_locked(&self) -> bool {
        self.writer.load(Relaxed)
    }
    fn is_locked_exclusive(&self) -> bool {
        self.writer.load(Relaxed)
    }
}

// SAFETY: see `RawRwLock for ReadersIgnoreWriters`: deliberately broken.
unsafe impl RawRwLockDowngrade for ReadersIgnoreWriters {
    unsafe fn downgrade(&self, _: GuardSend) -> GuardSend {
        self.writer
            .store(false, std::sync::atomic::Ordering::Release);
        GuardSend::new()
    }
}

timed_by_trying!(ReadersIgnoreWriters);

// SAFETY: NOT a correct lock; see `ReadersIgnoreWriters`.
unsafe impl RawRwLock for RacyRwLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RacyRwLock {
        writer: AtomicBool::new(false),
        readers: AtomicUsize::new(0),
    };
    type SharedGuard = GuardSend;
    type ExclusiveGuard = GuardSend;

    fn lock_shared(&self) -> GuardSend {
        while self.writer.load(Relaxed) {
            thread::yield_now();
        }
        // Widen the window between the check and the act.
        thread::yield_now();
        self.readers.fetch_add(1, Relaxed);
        GuardSend::new()
    }
    fn try_lock_shared(&self) -> Option<GuardSend> {
        Some(self.lock_shared())
    }
    unsafe fn unlock_shared(&self, _: GuardSend) {
        self.readers.fetch_sub(1, Relaxed);
    }
    fn lock_exclusive(&self) -> GuardSend {
        while self.writer.load(Relaxed) || self.readers.load(Relaxed) != 0 {
            thread::yield_now();
        }
        thread::yield_now();
        self.writer.store(true, Relaxed);
        GuardSend::new()
    }
    fn try_lock_exclusive(&self) -> Option<GuardSend> {
        Some(self.lock_exclusive())
    }
    unsafe fn unlock_exclusive(&self, _: GuardSend) {
        self.writer.store(false, Relaxed);
    }
    fn is_locked(&self) -> bool {
        self.writer.load(Relaxed) || self.readers.load(Relaxed) != 0
    }
    fn is_locked_exclusive(&self) -> bool {
        self.writer.load(Relaxed)
    }
}

// SAFETY: deliberately broken; see `RawRwLock for RacyRwLock`.
unsafe impl RawRwLockDowngrade for RacyRwLock {
    unsafe fn downgrade(&self, _: GuardSend) -> GuardSend {
        self.readers.fetch_add(1, Relaxed);
        self.writer.store(false, Relaxed);
        GuardSend::new()
    }
}

timed_by_trying!(RacyRwLock);

/// A single run could in principle interleave perfectly, so allow a few.
fn caught<R: Sem>(what: impl Fn(&Report) -> bool) -> Report {
    for _ in 0..10 {
        let report = torture(Arc::new(R::INIT), 4, 4, 20_000, false);
        if what(&report) {
            return report;
        }
    }
    panic!("the torture check never caught a broken lock: the check is broken");
}

#[test]
fn readers_beside_a_writer_are_caught() {
    let report = caught::<ReadersIgnoreWriters>(|r| r.reader_writer > 0 && r.torn_reads > 0);
    assert_eq!(report.writer_writer, 0, "{report:?}");
    eprintln!("readers beside writers caught: {report:?}");
}

#[test]
fn two_writers_are_caught() {
    let report = caught::<RacyRwLock>(|r| r.writer_writer > 0 || r.counted < r.writes);
    eprintln!("racy lock caught: {report:?}");
}

// ---------------------------------------------------------------------------
// Liveness (generous bounds; not performance)
// ---------------------------------------------------------------------------

/// A side of the lock.
#[derive(Debug, Clone, Copy)]
enum Side {
    Read,
    Write,
}

impl Side {
    /// Takes this side of `lock`, runs `inside`, releases it.
    fn take<R: Sem>(self, lock: &R, inside: impl FnOnce()) {
        match self {
            Side::Read => {
                let guard = lock.lock_shared();
                inside();
                // SAFETY: just acquired.
                unsafe { lock.unlock_shared(guard) };
            }
            Side::Write => {
                let guard = lock.lock_exclusive();
                inside();
                // SAFETY: just acquired.
                unsafe { lock.unlock_exclusive(guard) };
            }
        }
    }
}

/// `hogs` threads take the `hog` side back to back (holding it `hold` pauses
/// each time), overlapping each other so the lock is never free for long; a
/// thread taking the `newcomer` side must still get in, again and again.
fn gets_in_among<R: Sem>(newcomer: Side, hog: Side, hogs: usize, hold: u32) {
    let lock = Arc::new(R::INIT);
    let stop = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicU64::new(0));
    let hoggers: Vec<_> = (0..hogs)
        .map(|_| {
            let (lock, stop, taken) = (Arc::clone(&lock), Arc::clone(&stop), Arc::clone(&taken));
            thread::spawn(move || {
                while !stop.load(Relaxed) {
                    hog.take(&*lock, || {
                        taken.fetch_add(1, Relaxed);
                        pause(hold);
                    });
                }
            })
        })
        .collect();
    wait_until(&format!("1000 {hog:?} acquisitions"), || {
        taken.load(Relaxed) >= 1_000
    });
    for round in 0..20 {
        let lock = Arc::clone(&lock);
        within(
            LIVENESS,
            &format!("{newcomer:?} among {hog:?}, round {round}"),
            move || newcomer.take(&*lock, || {}),
        );
    }
    stop.store(true, Relaxed);
    for hogger in hoggers {
        hogger.join().unwrap();
    }
}

/// Polls `lock`'s `Debug` output until it contains `what`.
fn wait_for_debug(lock: &impl std::fmt::Debug, what: &str) {
    wait_until(&format!("{what} in the lock's Debug output"), || {
        format!("{lock:?}").contains(what)
    });
}

#[derive(Debug, Clone, Copy)]
enum Stealer {
    Reader,
    Writer,
}

/// How a design treats a holder that releases with a waiter queued and at
/// once asks for the lock again.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Release {
    /// It may take the lock back before the woken waiter runs (the kernel
    /// design), until the waiter has waited long enough to set handoff.
    MayStealBack,
    /// The release grants the lock to the first waiter (the generic design):
    /// the holder queues behind it.
    GrantsToFirstWaiter,
}

/// How many times [`head_waiter_not_overtaken`] plays its scenario through.
const HANDOFF_SCENARIOS: u32 = 5;

/// A writer `head` queues behind us for over the 4 ms handoff delay. We
/// release and at once take the lock again.
///
/// On a design that lets us steal it back (the head has been woken but is
/// not running yet), the head then finds the lock held after its long wait
/// and sets handoff; from then on nobody may take the lock before it: when we
/// release again and at once ask for the lock as `stealer`, the head must get
/// it first. The head may also win the first race, which proves nothing, so
/// the scenario is played until it has happened [`HANDOFF_SCENARIOS`] times
/// (at most 40 tries), and the count is returned.
///
/// On a design that grants the lock to the first waiter, the head must win
/// every first race: the 40 tries check that, and return 0.
fn head_waiter_not_overtaken<R: Sem>(release: Release, stealer: Stealer) -> u32 {
    let mut happened = 0;
    for _attempt in 0..40 {
        if happened == HANDOFF_SCENARIOS {
            break;
        }
        let lock = Arc::new(R::INIT);
        let head_in = Arc::new(AtomicBool::new(false));
        let first = lock.lock_exclusive();
        let head = {
            let (lock, head_in) = (Arc::clone(&lock), Arc::clone(&head_in));
            thread::spawn(move || {
                let guard = lock.lock_exclusive();
                head_in.store(true, Relaxed);
                // SAFETY: just acquired.
                unsafe { lock.unlock_exclusive(guard) };
            })
        };
        // Both designs' `Debug` show whether anyone is queued.
        wait_for_debug(&*lock, "waiters: true");
        thread::sleep(Duration::from_millis(10));
        // SAFETY: `first` is ours.
        unsafe { lock.unlock_exclusive(first) };
        let again = lock.lock_exclusive();
        if head_in.load(Relaxed) {
            // The head got in first: no steal, nothing to test this time.
            // SAFETY: `again` is ours.
            unsafe { lock.unlock_exclusive(again) };
            head.join().unwrap();
            continue;
        }
        assert_eq!(
            release,
            Release::MayStealBack,
            "the releasing holder took the lock back before the first waiter, which the release should have granted it"
        );
        // We overtook the woken head once. Wait until it has seen the lock
        // held and requested handoff (`RawRwSem`'s `Debug` shows the flag;
        // only it gets here), then release and compete again.
        wait_for_debug(&*lock, "handoff: true");
        let head_was_first = within(LIVENESS, "stealer after handoff", {
            let (lock, head_in) = (Arc::clone(&lock), Arc::clone(&head_in));
            move || {
                // Release and compete at once, on one thread, while the
                // head is still waking up. (Guards are `Send`.)
                // SAFETY: `again` is ours.
                unsafe { lock.unlock_exclusive(again) };
                match stealer {
                    Stealer::Reader => {
                        let guard = lock.lock_shared();
                        let head_was_first = head_in.load(Relaxed);
                        // SAFETY: just acquired.
                        unsafe { lock.unlock_shared(guard) };
                        head_was_first
                    }
                    Stealer::Writer => {
                        let guard = lock.lock_exclusive();
                        let head_was_first = head_in.load(Relaxed);
                        // SAFETY: just acquired.
                        unsafe { lock.unlock_exclusive(guard) };
                        head_was_first
                    }
                }
            }
        });
        head.join().unwrap();
        assert!(
            head_was_first,
            "a {stealer:?} overtook the head waiter after it had set handoff"
        );
        happened += 1;
    }
    happened
}

/// More queued readers than one wake-up grants (256): all get in.
fn more_readers_than_one_batch<R: Sem>() {
    let lock = Arc::new(R::INIT);
    let inside = Arc::new(AtomicUsize::new(0));
    let writer = lock.lock_exclusive();
    let readers: Vec<_> = (0..300)
        .map(|_| {
            let (lock, inside) = (Arc::clone(&lock), Arc::clone(&inside));
            thread::spawn(move || {
                let guard = lock.lock_shared();
                inside.fetch_add(1, Relaxed);
                // SAFETY: just acquired.
                unsafe { lock.unlock_shared(guard) };
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(50));
    assert_eq!(inside.load(Relaxed), 0, "a reader got in beside the writer");
    // SAFETY: `writer` is ours.
    unsafe { lock.unlock_exclusive(writer) };
    within(LIVENESS, "300 queued readers", move || {
        for reader in readers {
            reader.join().unwrap();
        }
    });
    assert_eq!(inside.load(Relaxed), 300);
}

macro_rules! liveness_tests {
    ($module:ident, $raw:ty) => {
        mod $module {
            use super::*;

            #[test]
            fn writer_gets_in_while_eight_readers_take_it_back_to_back() {
                // Eight readers, each holding for 200 pauses.
                gets_in_among::<$raw>(Side::Write, Side::Read, 8, 200);
            }

            #[test]
            fn reader_gets_in_while_writers_take_it_back_to_back() {
                // Four writers, each holding for 100 pauses.
                gets_in_among::<$raw>(Side::Read, Side::Write, 4, 100);
            }

            #[test]
            fn more_readers_than_one_wake_up_batch() {
                more_readers_than_one_batch::<$raw>();
            }
        }
    };
}

liveness_tests!(liveness_kernel, RawRwSem);
liveness_tests!(liveness_generic, RawSpinRwSem);

/// The kernel design's first race goes to the releasing holder nearly every
/// time (5 of the first 5 or 6 tries, measured), so each run must play the
/// whole scenario: a run where it never happened would have checked nothing.
fn kernel_head_waiter_not_overtaken(stealer: Stealer) {
    let happened = head_waiter_not_overtaken::<RawRwSem>(Release::MayStealBack, stealer);
    assert_eq!(
        happened, HANDOFF_SCENARIOS,
        "overtook a woken head waiter only {happened} times in 40 tries: the handoff went untested"
    );
}

#[test]
fn kernel_head_waiter_not_overtaken_by_a_reader_after_handoff() {
    kernel_head_waiter_not_overtaken(Stealer::Reader);
}

#[test]
fn kernel_head_waiter_not_overtaken_by_a_writer_after_handoff() {
    kernel_head_waiter_not_overtaken(Stealer::Writer);
}

/// The generic design grants a released lock to its first waiter, so there
/// is no handoff to test and no stealer ever runs: this checks, 40 times,
/// that the releasing holder never gets back in first, and that nothing
/// hangs.
#[test]
fn generic_head_waiter_gets_the_lock_before_its_releaser_again() {
    head_waiter_not_overtaken::<RawSpinRwSem>(Release::GrantsToFirstWaiter, Stealer::Writer);
}

// ---------------------------------------------------------------------------
// holders preempted while holding
// ---------------------------------------------------------------------------

/// The kernel's `RWSEM_WAIT_TIMEOUT`: a waiter that has waited this long gets
/// the lock next (the kernel design's handoff).
const HANDOFF_AFTER: Duration = Duration::from_millis(4);

/// A generous scheduler time slice: Linux's EEVDF gives a task 3 ms by
/// default (0.75 ms times 1 + log2(CPUs)), CFS's period shares out at least
/// 0.75 ms per task. Generous, because this is a bound on starvation, not a
/// timing threshold on speed.
const TIME_SLICE: Duration = Duration::from_millis(10);

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: an all-zero `cpu_set_t` is the empty set, `CPU_SET` writes
    // within it (`cpu` comes from `sched_getcpu`, below `CPU_SETSIZE`), and
    // pid 0 is the calling thread.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(
        rc,
        0,
        "sched_setaffinity: {}",
        std::io::Error::last_os_error()
    );
}

/// Readers and writers pinned to one CPU take `lock` back to back for
/// `run`, holding it for `hold` of busy work, so the scheduler preempts most
/// holders while they hold. Returns the most bypasses of any acquisition:
/// the acquisitions by other threads of the group between its asking and its
/// getting the lock, counting one still in progress at the end until it
/// succeeds.
///
/// Bypasses, not wall-clock waits: a thread of another process or of another
/// test that shares the CPU stretches every wait, but makes no acquisition of
/// the group's, and the CPU time it takes is time the group makes none either
/// (see [`preempted_bound`]).
fn most_bypasses_pinned<R>(
    lock: R,
    readers: usize,
    writers: usize,
    hold: Duration,
    run: Duration,
) -> u64
where
    R: RawRwLock<SharedGuard = GuardSend, ExclusiveGuard = GuardSend> + Send + Sync + 'static,
{
    // SAFETY: `sched_getcpu` has no preconditions.
    let cpu = usize::try_from(unsafe { libc::sched_getcpu() }).expect("sched_getcpu");
    let lock = Arc::new(lock);
    // Acquisitions so far, counted inside the critical section.
    let acquired = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(readers + writers + 1));
    let threads: Vec<_> = (0..readers + writers)
        .map(|i| {
            let (lock, acquired, stop, start) = (
                Arc::clone(&lock),
                Arc::clone(&acquired),
                Arc::clone(&stop),
                Arc::clone(&start),
            );
            thread::spawn(move || {
                pin_to(cpu);
                start.wait();
                let mut most = 0;
                while !stop.load(Relaxed) {
                    let before = acquired.load(Relaxed);
                    let guard = if i < writers {
                        lock.lock_exclusive()
                    } else {
                        lock.lock_shared()
                    };
                    // The count before this acquisition's own: everyone's
                    // since `before` got in first. A reader that held the
                    // lock when this one asked may count too (a few at most).
                    let bypasses = acquired.fetch_add(1, Relaxed) - before;
                    most = most.max(bypasses);
                    let held = Instant::now();
                    while held.elapsed() < hold {
                        std::hint::spin_loop();
                    }
                    // SAFETY: `guard` is the acquisition just above.
                    unsafe {
                        if i < writers {
                            lock.unlock_exclusive(guard);
                        } else {
                            lock.unlock_shared(guard);
                        }
                    }
                }
                most
            })
        })
        .collect();
    start.wait();
    thread::sleep(run);
    stop.store(true, Relaxed);
    threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .max()
        .unwrap_or_default()
}

/// The bound a lock with handoff keeps on one CPU, in acquisitions by others
/// while one thread waits: as many as the group can make, at full speed, in
/// the handoff delay plus one time slice for each thread (a woken waiter runs
/// only after every other runnable thread had its slice, the holder,
/// preempted, among them). Each acquisition holds for `hold` of busy work on
/// the group's one CPU, so the group makes at most one per `hold` of the CPU
/// time it gets (readers overlap their holds only when one is preempted
/// inside its own, a few times per time slice). The handoff is due after a
/// wall-clock delay, in which the group gets at most that much CPU time, and
/// less when something else shares the CPU, so other load cannot raise the
/// count past the bound.
fn preempted_bound(threads: usize, hold: Duration) -> u64 {
    let span = HANDOFF_AFTER + TIME_SLICE * threads as u32;
    u64::try_from(span.as_nanos() / hold.as_nanos()).expect("bound fits")
}

const PINNED_READERS: usize = 4;
const PINNED_WRITERS: usize = 8;
const PINNED_HOLD: Duration = Duration::from_micros(20);
const PINNED_RUN: Duration = Duration::from_millis(1500);

/// Runs the pinned workload on `lock` under the watchdog; returns its
/// most bypasses and [`preempted_bound`].
fn pinned_run<R>(lock: R) -> (u64, u64)
where
    R: RawRwLock<SharedGuard = GuardSend, ExclusiveGuard = GuardSend> + Send + Sync + 'static,
{
    let bound = preempted_bound(PINNED_READERS + PINNED_WRITERS, PINNED_HOLD);
    let most = within(WATCHDOG, "pinned run", move || {
        most_bypasses_pinned(
            lock,
            PINNED_READERS,
            PINNED_WRITERS,
            PINNED_HOLD,
            PINNED_RUN,
        )
    });
    eprintln!("most bypasses {most}, bound {bound}");
    (most, bound)
}

/// Writers preempted while they hold: no reader or writer waits while others
/// of its group take the lock more times than [`preempted_bound`]. A lock
/// that lets the running thread take it back every time, with no handoff and
/// no wake-up, makes the others wait for whole runs
/// (`a_lock_without_handoff_fails_the_preempted_holder_bound`). `RawRwSem`
/// has two ways out of that: the handoff, and the futex wake its release
/// issues while the lock is free, which on one CPU often lets the woken
/// waiter preempt the releaser in that gap. With the handoff delay raised to
/// 1000 s this test still passes (about 1400 to 2200 acquisitions by others
/// against a bound of 6200, where the handoff gives about 1500), so it
/// checks the bound, not the handoff alone.
#[test]
fn kernel_preempted_holders_starve_nobody() {
    let (most, bound) = pinned_run(RawRwSem::INIT);
    assert!(
        most <= bound,
        "a waiter saw {most} acquisitions by others, past {bound}"
    );
}

/// A correct reader-writer lock with no queue, no handoff and no wake-ups:
/// whoever runs takes it. It fails the preempted-holder bound, which shows
/// that the bound catches such a lock.
#[derive(Debug, Default)]
struct GreedyRwLock {
    /// `WRITER` or the number of readers.
    state: AtomicUsize,
}

const WRITER: usize = usize::MAX;

// SAFETY: a writer holds the lock only after an acquire CAS from 0 (no
// holder) to `WRITER`, a reader only after an acquire CAS that added one to a
// count that was not `WRITER`; unlocks are release operations.
unsafe impl RawRwLock for GreedyRwLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = GreedyRwLock {
        state: AtomicUsize::new(0),
    };
    type SharedGuard = GuardSend;
    type ExclusiveGuard = GuardSend;

    fn lock_shared(&self) -> GuardSend {
        while self.try_lock_shared().is_none() {
            thread::yield_now();
        }
        GuardSend::new()
    }
    fn try_lock_shared(&self) -> Option<GuardSend> {
        let n = self.state.load(Relaxed);
        (n < WRITER - 1
            && self
                .state
                .compare_exchange(n, n + 1, std::sync::atomic::Ordering::Acquire, Relaxed)
                .is_ok())
        .then(GuardSend::new)
    }
    unsafe fn unlock_shared(&self, _: GuardSend) {
        self.state
            .fetch_sub(1, std::sync::atomic::Ordering::Release);
    }
    fn lock_exclusive(&self) -> GuardSend {
        while self.try_lock_exclusive().is_none() {
            thread::yield_now();
        }
        GuardSend::new()
    }
    fn try_lock_exclusive(&self) -> Option<GuardSend> {
        self.state
            .compare_exchange(0, WRITER, std::sync::atomic::Ordering::Acquire, Relaxed)
            .is_ok()
            .then(GuardSend::new)
    }
    unsafe fn unlock_exclusive(&self, _: GuardSend) {
        self.state.store(0, std::sync::atomic::Ordering::Release);
    }
    fn is_locked(&self) -> bool {
        self.state.load(Relaxed) != 0
    }
    fn is_locked_exclusive(&self) -> bool {
        self.state.load(Relaxed) == WRITER
    }
}

#[test]
fn a_lock_without_handoff_fails_the_preempted_holder_bound() {
    let (most, bound) = pinned_run(GreedyRwLock::INIT);
    assert!(
        most > bound,
        "a lock without handoff kept the bound: {most} acquisitions by others"
    );
}

// ---------------------------------------------------------------------------
// try / timed
// ---------------------------------------------------------------------------

fn try_respects_holders<R: Sem>() {
    let lock = R::INIT;
    let w = lock.lock_exclusive();
    assert!(lock.is_locked() && lock.is_locked_exclusive());
    assert!(lock.try_lock_shared().is_none());
    assert!(lock.try_lock_exclusive().is_none());
    // SAFETY: `w` is ours.
    unsafe { lock.unlock_exclusive(w) };
    assert!(!lock.is_locked());

    let r = lock.lock_shared();
    assert!(lock.is_locked() && !lock.is_locked_exclusive());
    assert!(lock.try_lock_exclusive().is_none());
    let r2 = lock.try_lock_shared().expect("readers share");
    // SAFETY: both are ours.
    unsafe {
        lock.unlock_shared(r2);
        lock.unlock_shared(r);
    }
    let w = lock.try_lock_exclusive().expect("free again");
    // SAFETY: `w` is ours.
    unsafe { lock.unlock_exclusive(w) };
}

/// A timed-out waiter leaves the semaphore as if it had never queued: once
/// the holder is gone, both `try` variants succeed (they fail while the
/// waiters flag is set).
fn timed_out_waiter_leaves_clean<R: Sem>(hold_exclusive: bool, wait_exclusive: bool) {
    let lock = Arc::new(R::INIT);
    let held = if hold_exclusive {
        Ok(lock.lock_exclusive())
    } else {
        Err(lock.lock_shared())
    };
    let timeout = Duration::from_millis(30);
    let (got, waited) = {
        let lock = Arc::clone(&lock);
        within(LIVENESS, "timed waiter", move || {
            let start = Instant::now();
            let got = if wait_exclusive {
                lock.try_lock_exclusive_for(timeout).is_some()
            } else {
                lock.try_lock_shared_for(timeout).is_some()
            };
            (got, start.elapsed())
        })
    };
    assert!(!got, "acquired a lock that was held throughout");
    assert!(waited >= timeout, "gave up early, after {waited:?}");
    // SAFETY: `held` is ours.
    unsafe {
        match held {
            Ok(w) => lock.unlock_exclusive(w),
            Err(r) => lock.unlock_shared(r),
        }
    }
    assert!(!lock.is_locked());
    let w = lock
        .try_lock_exclusive()
        .expect("flags left behind by the timed-out waiter");
    // SAFETY: `w` is ours.
    unsafe { lock.unlock_exclusive(w) };
    let r = lock
        .try_lock_shared()
        .expect("flags left behind by the timed-out waiter");
    // SAFETY: `r` is ours.
    unsafe { lock.unlock_shared(r) };
}

/// Gives a thread just spawned time to queue on a held lock. (Nothing breaks
/// if it is late: the tests then check a shorter queue.)
fn let_queue() {
    thread::sleep(Duration::from_millis(20));
}

/// Queue: writer A, timed reader T, reader B. T times out in the middle; A
/// and then B must still get the lock, and the lock must end up clean.
fn timed_out_waiter_in_the_middle<R: Sem>() {
    let lock = Arc::new(R::INIT);
    let w = lock.lock_exclusive();
    let spawn = |exclusive: bool| {
        let lock = Arc::clone(&lock);
        thread::spawn(move || {
            if exclusive {
                let g = lock.lock_exclusive();
                // SAFETY: just acquired.
                unsafe { lock.unlock_exclusive(g) };
            } else {
                let g = lock.lock_shared();
                // SAFETY: just acquired.
                unsafe { lock.unlock_shared(g) };
            }
        })
    };
    let a = spawn(true);
    let_queue();
    let t = {
        let lock = Arc::clone(&lock);
        thread::spawn(move || {
            lock.try_lock_shared_for(Duration::from_millis(40))
                .is_some()
        })
    };
    let_queue();
    let b = spawn(false);
    assert!(!t.join().unwrap(), "the timed reader got a write-held lock");
    // SAFETY: `w` is ours.
    unsafe { lock.unlock_exclusive(w) };
    within(LIVENESS, "waiters around a timed-out one", move || {
        a.join().unwrap();
        b.join().unwrap();
    });
    let w = lock.try_lock_exclusive().expect("lock not clean");
    // SAFETY: `w` is ours.
    unsafe { lock.unlock_exclusive(w) };
}

/// Readers hold the lock; a timed writer queues first and a reader queues
/// behind it. When the writer gives up, the reader behind must be let in
/// while the first reader still holds the lock.
fn timed_out_head_lets_readers_in<R: Sem>() {
    let lock = Arc::new(R::INIT);
    let r = lock.lock_shared();
    let writer = {
        let lock = Arc::clone(&lock);
        thread::spawn(move || {
            lock.try_lock_exclusive_for(Duration::from_millis(40))
                .is_some()
        })
    };
    let_queue();
    let reader = {
        let lock = Arc::clone(&lock);
        thread::spawn(move || {
            let g = lock.lock_shared();
            // SAFETY: just acquired.
            unsafe { lock.unlock_shared(g) };
        })
    };
    assert!(!writer.join().unwrap(), "writer got in beside a reader");
    within(LIVENESS, "reader behind a timed-out writer", move || {
        reader.join().unwrap()
    });
    // SAFETY: `r` is ours, held throughout.
    unsafe { lock.unlock_shared(r) };
    let w = lock.try_lock_exclusive().expect("lock not clean");
    // SAFETY: `w` is ours.
    unsafe { lock.unlock_exclusive(w) };
}

fn timed_succeeds_when_released_in_time<R: Sem>() {
    let lock = Arc::new(R::INIT);
    let w = lock.lock_exclusive();
    let waiters: Vec<_> = [true, false]
        .into_iter()
        .map(|exclusive| {
            let lock = Arc::clone(&lock);
            thread::spawn(move || {
                if exclusive {
                    let Some(g) = lock.try_lock_exclusive_for(Duration::from_secs(20)) else {
                        return false;
                    };
                    // SAFETY: just acquired.
                    unsafe { lock.unlock_exclusive(g) };
                } else {
                    let deadline = Instant::now() + Duration::from_secs(20);
                    let Some(g) = lock.try_lock_shared_until(deadline) else {
                        return false;
                    };
                    // SAFETY: just acquired.
                    unsafe { lock.unlock_shared(g) };
                }
                true
            })
        })
        .collect();
    let_queue();
    // SAFETY: `w` is ours.
    unsafe { lock.unlock_exclusive(w) };
    within(LIVENESS, "timed waiters", move || {
        for waiter in waiters {
            assert!(waiter.join().unwrap(), "a timed waiter missed a release");
        }
    });
}

fn extreme_timeouts<R: Sem>() {
    let lock = Arc::new(R::INIT);
    // A deadline already passed: fails at once on a held lock, succeeds on a free one.
    let w = lock.lock_exclusive();
    assert!(lock.try_lock_shared_until(Instant::now()).is_none());
    assert!(lock.try_lock_exclusive_for(Duration::ZERO).is_none());
    // SAFETY: `w` is ours.
    unsafe { lock.unlock_exclusive(w) };
    let r = lock.try_lock_shared_for(Duration::ZERO).expect("free lock");
    // SAFETY: `r` is ours.
    unsafe { lock.unlock_shared(r) };
    // A timeout too large for `Instant` means "forever", not a panic.
    let w = lock.lock_exclusive();
    let waiter = {
        let lock = Arc::clone(&lock);
        thread::spawn(move || {
            let r = lock
                .try_lock_shared_for(Duration::MAX)
                .expect("waits forever");
            // SAFETY: just acquired.
            unsafe { lock.unlock_shared(r) };
            let w = lock.try_lock_exclusive_for(Duration::MAX).expect("free");
            // SAFETY: just acquired.
            unsafe { lock.unlock_exclusive(w) };
        })
    };
    let_queue();
    // SAFETY: `w` is ours.
    unsafe { lock.unlock_exclusive(w) };
    within(LIVENESS, "Duration::MAX waiter", move || {
        waiter.join().unwrap()
    });
}

// ---------------------------------------------------------------------------
// Downgrade
// ---------------------------------------------------------------------------

/// Readers queued behind a writer get in when it downgrades, while it still
/// holds its (now shared) lock; a writer queued behind them stays out until
/// every reader is gone.
fn downgrade_admits_readers<R: Sem>() {
    let lock = Arc::new(R::INIT);
    let readers_in = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(AtomicBool::new(false));
    let writer_in = Arc::new(AtomicBool::new(false));
    let w = lock.lock_exclusive();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (lock, readers_in, release) = (
                Arc::clone(&lock),
                Arc::clone(&readers_in),
                Arc::clone(&release),
            );
            thread::spawn(move || {
                let g = lock.lock_shared();
                readers_in.fetch_add(1, Relaxed);
                while !release.load(Relaxed) {
                    thread::sleep(Duration::from_millis(1));
                }
                // SAFETY: just acquired.
                unsafe { lock.unlock_shared(g) };
            })
        })
        .collect();
    let_queue();
    let writer = {
        let (lock, writer_in) = (Arc::clone(&lock), Arc::clone(&writer_in));
        thread::spawn(move || {
            let g = lock.lock_exclusive();
            writer_in.store(true, Relaxed);
            // SAFETY: just acquired.
            unsafe { lock.unlock_exclusive(g) };
        })
    };
    let_queue();
    assert_eq!(readers_in.load(Relaxed), 0);
    // SAFETY: `w` is ours.
    let r = unsafe { lock.downgrade(w) };
    assert!(!lock.is_locked_exclusive());
    wait_until("queued readers let in by downgrade", || {
        readers_in.load(Relaxed) >= 3
    });
    assert!(lock.try_lock_exclusive().is_none());
    assert!(!writer_in.load(Relaxed), "writer got in beside readers");
    // SAFETY: `r` is ours.
    unsafe { lock.unlock_shared(r) };
    thread::sleep(Duration::from_millis(10));
    assert!(!writer_in.load(Relaxed), "writer got in beside readers");
    release.store(true, Relaxed);
    within(LIVENESS, "downgrade waiters", move || {
        for reader in readers {
            reader.join().unwrap();
        }
        writer.join().unwrap();
    });
    assert!(writer_in.load(Relaxed));
}

// ---------------------------------------------------------------------------
// Guards and panics, through the lock_api wrappers
// ---------------------------------------------------------------------------

fn guards_released_by_panic<R: Sem>() {
    let lock = Arc::new(lock_api::RwLock::<R, Vec<u32>>::new(vec![1]));
    for exclusive in [true, false] {
        let panicker = {
            let lock = Arc::clone(&lock);
            thread::spawn(move || {
                if exclusive {
                    let mut guard = lock.write();
                    guard.push(2);
                    panic!("writer panics holding the lock");
                } else {
                    let _guard = lock.read();
                    panic!("reader panics holding the lock");
                }
            })
        };
        assert!(panicker.join().is_err());
        let w = lock
            .try_write()
            .expect("a panicking holder's guard released the lock");
        assert_eq!(*w, [1, 2]);
        drop(w);
    }
    // A waiter queued while the holder panics still gets the lock.
    let guard = lock.write();
    let waiter = {
        let lock = Arc::clone(&lock);
        thread::spawn(move || lock.read().len())
    };
    let_queue();
    let holder = {
        let lock = Arc::clone(&lock);
        thread::spawn(move || {
            let _mine = lock.write();
            panic!("second holder panics");
        })
    };
    drop(guard);
    assert!(holder.join().is_err());
    assert_eq!(
        within(LIVENESS, "waiter behind a panic", move || waiter
            .join()
            .unwrap()),
        2
    );
}

macro_rules! api_tests {
    ($module:ident, $raw:ty) => {
        mod $module {
            use super::*;

            #[test]
            fn try_respects_holders() {
                super::try_respects_holders::<$raw>();
            }

            #[test]
            fn timed_out_reader_behind_writer_leaves_clean() {
                timed_out_waiter_leaves_clean::<$raw>(true, false);
            }

            #[test]
            fn timed_out_writer_behind_writer_leaves_clean() {
                timed_out_waiter_leaves_clean::<$raw>(true, true);
            }

            #[test]
            fn timed_out_writer_behind_reader_leaves_clean() {
                timed_out_waiter_leaves_clean::<$raw>(false, true);
            }

            #[test]
            fn timed_out_waiter_in_the_middle_of_the_queue() {
                super::timed_out_waiter_in_the_middle::<$raw>();
            }

            #[test]
            fn timed_out_head_lets_the_readers_behind_it_in() {
                super::timed_out_head_lets_readers_in::<$raw>();
            }

            #[test]
            fn timed_succeeds_when_released_in_time() {
                super::timed_succeeds_when_released_in_time::<$raw>();
            }

            #[test]
            fn extreme_timeouts() {
                super::extreme_timeouts::<$raw>();
            }

            #[test]
            fn downgrade_admits_queued_readers_and_holds_writers() {
                downgrade_admits_readers::<$raw>();
            }

            #[test]
            fn guards_released_by_panic() {
                super::guards_released_by_panic::<$raw>();
            }
        }
    };
}

api_tests!(api_kernel, RawRwSem);
api_tests!(api_generic, RawSpinRwSem);

#[test]
fn const_init_in_statics() {
    static MODERN: RwSem<u32> = RwSem::new(1);
    static CLASSIC: SpinRwSem<u32> = SpinRwSem::new(2);
    *MODERN.write() += 1;
    *CLASSIC.write() += 1;
    assert_eq!(*MODERN.read() + *CLASSIC.read(), 5);
}

#[test]
fn debug_output() {
    let sem = RwSem::new(());
    let guard = sem.write();
    // SAFETY: we only format the raw lock; we do not lock or unlock it.
    let shown = format!("{:?}", unsafe { sem.raw() });
    assert!(shown.contains("writer_locked: true"), "{shown}");
    drop(guard);
    let _ = format!("{:?}", SpinRwSem::new(()));
}
