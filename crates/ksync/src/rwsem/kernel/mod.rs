//! The modern kernel rwsem (`kernel/locking/rwsem.c`): one count word, one
//! FIFO wait list, readers granted in batches by the waker, writer optimistic
//! spinning and a time-based handoff.
//!
//! # State
//!
//! `count` (`usize`):
//!
//! ```text
//!  bit  N-1      N-2 ... 8      7..4      3       2        1        0
//!      READ_FAIL  reader count  reserved  WOKEN   HANDOFF  WAITERS  WRITER_LOCKED
//! ```
//!
//! * `WRITER_LOCKED`: a writer holds the lock.
//! * reader count, in steps of `READER_BIAS` = 256: readers holding the lock,
//!   plus readers that failed the fast path and have not yet taken their bias
//!   back out (they are on their way into the slow path).
//! * `WAITERS`: the wait list is not empty. Set by the first waiter to queue
//!   and cleared when the list empties, both under the wait-list lock, so
//!   under that lock `WAITERS` is exactly "the list is not empty".
//! * `HANDOFF`: the lock is promised to the first waiter, which has waited at
//!   least [`HANDOFF_AFTER`]; whenever it is set, the first waiter's
//!   `handoff_set` is set too. Set and cleared only under the wait-list lock.
//! * `WOKEN`: the writer at the front of the list was kicked and has not yet
//!   looked at the lock again; its `woken` flag is set too. While it is set,
//!   unlocks wake nobody: at most one woken-but-not-yet-running waiter exists
//!   at a time (ksync's own; the kernel's woken task is scheduled at once,
//!   ours may sit on a run queue behind others for a time slice). Set only
//!   under the wait-list lock; cleared by that writer in the compare-and-swap
//!   of its next look at the lock, or when it leaves the list.
//! * `READ_FAIL`: the guard bit (the kernel's "count is negative"): with
//!   `N-9` bits of reader count it is reached only by absurd numbers of leaked
//!   read guards; it fails every reader fast path and stops batch grants.
//!
//! `owner` is a hint, never needed for correctness: 0 after a writer
//! acquired (the kernel stores the owning task, which its spinners use to ask
//! whether the owner is on a CPU; user space cannot ask, so spinners here
//! only tell a writer from readers, and a writer hand-over stores nothing),
//! or `OWNER_READER` after a reader acquired, plus `OWNER_NONSPINNABLE` once
//! a writer gave up spinning on a reader-owned lock. `spinner` admits one optimistic spinner at a time.
//! `wait` is a [`RawSemLock`](crate::sem::RawSemLock) (a short spin, then a
//! futex sleep: see [`WaitLock`]) around the [`List`] of
//! waiter nodes, each on its thread's stack (see [`super::wait_list`] for the
//! grant handshake).
//!
//! # Transitions
//!
//! Fast paths, one atomic read-modify-write each:
//!
//! * read lock (`down_read`): `fetch_add(READER_BIAS)`; it holds the lock iff
//!   the result has none of `WRITER_LOCKED | WAITERS | HANDOFF | READ_FAIL`.
//!   So new readers do not barge past anyone queued. On failure the bias stays
//!   in and the slow path starts with it.
//! * write lock (`down_write`): compare-and-swap `0 -> WRITER_LOCKED`. On
//!   failure the slow path first *steals* a free lock (compare-and-swap in
//!   `WRITER_LOCKED` whatever `WAITERS` and `WOKEN` say, unless `HANDOFF` is
//!   set): running threads keep the lock busy while a woken waiter is still on
//!   its way to a CPU.
//! * read unlock (`up_read`): `fetch_sub(READER_BIAS)`; if that leaves no
//!   holder but `WAITERS`, wake the list, unless `WOKEN`.
//! * write unlock (`up_write`): `fetch_sub(WRITER_LOCKED)`; if `WAITERS` was
//!   set, wake the list, unless `WOKEN` was.
//! * downgrade (`downgrade_write`): `fetch_add(READER_BIAS - WRITER_LOCKED)`;
//!   if `WAITERS` and a reader is first, grant the queued readers (a batch, as
//!   in the wake engine below; a writer first is left alone).
//!
//! Reader slow path (`rwsem_down_read_slowpath`), holding a bias:
//!
//! 1. Unless the lock is very likely reader-owned (owner hint says reader and
//!    more than one reader counted), *steal* it if neither `WRITER_LOCKED` nor
//!    `HANDOFF` is set: keep the bias. The first reader of a new reader phase
//!    then grants the queued readers too.
//! 2. Otherwise queue a read node. If the list was empty and no writer holds
//!    the lock, keep the bias and return instead. Take the bias back out (and
//!    set `WAITERS` if first), then, since that bias may have made an unlocker
//!    skip its wake-up, wake the list if the lock is now free or reader-owned
//!    (`rwsem_cond_wake_waiter`).
//! 3. Sleep until granted. The waker did the accounting; there is no retry.
//!
//! Writer slow path (`rwsem_down_write_slowpath`):
//!
//! 1. Steal a free lock (above), else spin optimistically (below); success
//!    means it holds the lock.
//! 2. Queue a write node (set `WAITERS` if first, else wake readers at the head
//!    if the lock is free or reader-owned). Then, under the wait-list lock,
//!    loop (`rwsem_try_write_lock`): with `HANDOFF` set and someone else
//!    first, fail; if the lock is held, fail, but first set `HANDOFF` if this
//!    waiter has waited [`HANDOFF_AFTER`] (marking the first waiter); if it is
//!    free, compare-and-swap in `WRITER_LOCKED`, clearing `HANDOFF`, and
//!    `WAITERS` if it is the only waiter, and dequeue itself. A woken writer
//!    takes `WOKEN` out in that same compare-and-swap, whether it wins or
//!    fails, so an unlocker either saw `WOKEN` and skipped its wake-up (and
//!    this look sees its release) or comes later and wakes. On failure
//!    sleep until kicked; a waiter the handoff names spins on a running
//!    owner first and retries without sleeping if the lock comes free.
//!
//! Wake engine (`rwsem_mark_wake`, wait-list lock held), by what is first:
//!
//! * a writer: kick it, setting `WOKEN`, unless it was kicked already (it
//!   retries for itself; stealers may still beat it until it sets
//!   `HANDOFF`). Only for wake-ups of type *any*.
//! * a reader: unless the caller already holds a read lock, add one bias to
//!   grant it; if that finds `WRITER_LOCKED` (a writer stole the lock), take
//!   the bias out again, setting `HANDOFF` if the reader has waited long
//!   enough, and stop. Otherwise dequeue up to [`MAX_READERS_WAKEUP`] readers
//!   from the whole list, writers keeping their order; in one atomic add,
//!   add their biases (less the one already added), clear `HANDOFF` (it named
//!   the first reader, now granted) and clear `WAITERS` if the list emptied.
//!   After the wait-list lock is dropped each reader's grant is published and
//!   it is woken.
//!
//! A timed-out waiter takes the wait-list lock. If a waker already dequeued
//! it, the grant is on its way: it waits for it and succeeds. Otherwise it
//! unlinks itself (`rwsem_del_wake_waiter`): if the list emptied it clears
//! `WAITERS`, `HANDOFF` and `WOKEN`; if it was first, it clears `HANDOFF` and
//! `WOKEN` (both named it) and wakes the new first waiter, which may be able
//! to run now.
//!
//! # Writer optimistic spinning
//!
//! A writer spins on the lock before it queues for at most one context
//! switch, measured ([`crate::spin_budget::context_switch`]), which stands in
//! for the kernel's "owner is on a CPU" and `need_resched()` (`spin.rs`).
//!
//! # The wait-list lock
//!
//! Held for a few dozen instructions, but a holder can be preempted, so it is
//! a [`RawSemLock`]: a short spin, then a futex sleep. A spinlock here (the
//! 2001 design's) makes every thread that needs the list spin out the
//! preempted holder's time slice.
//!
//! # Handoff
//!
//! A waiter may request handoff once it has waited [`HANDOFF_AFTER`] (the
//! kernel's `RWSEM_WAIT_TIMEOUT`, at least 4 ms): a writer at its next failed
//! attempt, a reader when a wake-up finds a writer holding the lock. From then
//! on the reader fast path, reader stealing, the writer fast path, optimistic
//! spinners and the other queued writers all fail, so the first waiter is the
//! next owner. Unlike the kernel we also clear `HANDOFF` when the waiter it
//! names leaves on a time-out, so the bit always speaks for the current first
//! waiter.
//!
//! # Memory ordering
//!
//! Every acquisition is an acquire read-modify-write of `count` (fast paths,
//! stealing, the writers' compare-and-swaps), an acquire load of `count` that
//! finds no writer (a reader keeping its bias when nobody is queued) or, for a
//! granted reader, an acquire load of its grant, which the waker published
//! with a release store after an acquire read-modify-write of `count` that
//! found no writer (or while holding a read lock itself). Every release is a release read-modify-write of
//! `count`. `WAITERS` and `HANDOFF` change only under the wait-list lock, and
//! read-modify-writes of `count` are totally ordered, so an unlocker either
//! sees `WAITERS` and wakes the list, or comes before the waiter's
//! read-modify-write of `count`, which then sees the lock released. The
//! adjustments made under the wait-list lock are relaxed: the spinlock orders
//! them with each other and the grant's release store orders them before the
//! woken readers' own unlocks. `owner` is relaxed throughout: it is a hint.
//!
//! # Under loom
//!
//! There is no clock under loom, so time-based decisions are deterministic:
//! every time limit counts as already exceeded. A waiter is eligible for
//! handoff at its first failed attempt, and a spinner polls the lock twice
//! (once to see who owns it, once to find its budget spent) before it gives
//! up, setting `OWNER_NONSPINNABLE` if readers own the lock. The wait-list
//! lock is loom's `Mutex` there (see [`WaitLock`]).

use core::fmt;
use std::time::{Duration, Instant};

use lock_api::GuardSend;

mod spin;

use super::events::{self, Event};
use super::wait_list::{Kind, List, ListCell, WaitLock, Waiter, Wakeups};
use crate::futex::Wake;
use crate::relax;
use crate::sem::RawSemLock;
use crate::sync::{AtomicBool, AtomicUsize, Ordering};

const WRITER_LOCKED: usize = 1 << 0;
const WAITERS: usize = 1 << 1;
const HANDOFF: usize = 1 << 2;
const WOKEN: usize = 1 << 3;
const READER_SHIFT: u32 = 8;
const READER_BIAS: usize = 1 << READER_SHIFT;
const READ_FAIL: usize = 1 << (usize::BITS - 1);
const READER_MASK: usize = !(READER_BIAS - 1);
const LOCK_MASK: usize = WRITER_LOCKED | READER_MASK;
const READ_FAILED_MASK: usize = WRITER_LOCKED | WAITERS | HANDOFF | READ_FAIL;

const OWNER_READER: usize = 1 << 0;
const OWNER_NONSPINNABLE: usize = 1 << 1;

/// The most readers one wake-up grants (the kernel's `MAX_READERS_WAKEUP`).
const MAX_READERS_WAKEUP: usize = 256;

/// How long a waiter waits before it may request handoff (the kernel's
/// `RWSEM_WAIT_TIMEOUT`, `HZ / 250` jiffies rounded up: 4 ms).
const HANDOFF_AFTER: Duration = Duration::from_millis(4);

/// A moment, for the slow paths' time limits. Under loom there is no clock
/// and every limit counts as exceeded (see the module documentation).
#[derive(Debug, Clone, Copy)]
struct Stamp {
    #[cfg(not(loom))]
    at: Instant,
}

impl Stamp {
    #[inline]
    fn now() -> Self {
        Stamp {
            #[cfg(not(loom))]
            at: Instant::now(),
        }
    }

    #[inline]
    fn exceeded(self, limit: Duration) -> bool {
        #[cfg(not(loom))]
        return self.at.elapsed() >= limit;
        #[cfg(loom)]
        {
            let _ = limit;
            true
        }
    }
}

/// What the wait list keeps per waiter, beyond its kind.
struct WaitInfo {
    /// When it queued, for handoff eligibility.
    since: Stamp,
    /// Whether `HANDOFF` names this waiter.
    handoff_set: ListCell<bool>,
    /// Whether `WOKEN` names this waiter: it was kicked and has not yet
    /// looked at the lock again.
    woken: ListCell<bool>,
}

impl WaitInfo {
    fn new() -> Self {
        WaitInfo {
            since: Stamp::now(),
            handoff_set: ListCell::new(false),
            woken: ListCell::new(false),
        }
    }
}

type Node = Waiter<WaitInfo>;
type WaitList = List<WaitInfo>;

/// Delivers `wakeups` (after the wait-list lock is dropped) and counts the
/// futex wakes.
fn deliver(wakeups: Wakeups<WaitInfo>) {
    let delivered = wakeups.deliver();
    events::add(Event::WakeReader, delivered.grants);
    events::add(Event::WakeWriter, delivered.kicks);
}

/// What a wake-up may do (the kernel's `rwsem_wake_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WakeType {
    /// Whatever is first: kick a writer or grant readers.
    Any,
    /// Grant readers if a reader is first; leave a writer alone.
    Readers,
    /// As `Readers`, by a caller that holds a read lock already.
    ReadOwned,
}

/// The kernel's reader-writer semaphore: a `lock_api::RawRwLock` whose
/// waiters sleep on futexes.
///
/// Readers share, writers exclude. Queued waiters are served in FIFO order,
/// with every queued reader granted together (up to 256 per wake-up) when a
/// reader is first; new arrivals do not pass queued waiters on the fast path,
/// a writer spins briefly on a running owner before it queues, and a waiter
/// that has waited 4 ms gets the lock next. The [module
/// documentation](crate::rwsem) compares it with [`RawSpinRwSem`](crate::rwsem::RawSpinRwSem);
/// the algorithm is described at the top of `src/rwsem/kernel/mod.rs`.
///
/// ```
/// use ksync::rwsem::RwSem;
///
/// let config = RwSem::new(vec![1, 2, 3]);
/// std::thread::scope(|s| {
///     s.spawn(|| assert!(config.read().len() >= 3));
///     s.spawn(|| config.write().push(4));
/// });
/// let mut writer = config.write();
/// writer.push(5);
/// // Keep reading what we wrote, and let other readers in.
/// let reader = lock_api::RwLockWriteGuard::downgrade(writer);
/// assert_eq!(*reader, [1, 2, 3, 4, 5]);
/// ```
pub struct RawRwSem {
    count: AtomicUsize,
    owner: AtomicUsize,
    spinner: AtomicBool,
    wait: WaitLock<RawSemLock, WaitList>,
}

/// A [`lock_api::RwLock`] guarded by a [`RawRwSem`].
pub type RwSem<T> = lock_api::RwLock<RawRwSem, T>;
/// The shared guard of an [`RwSem`].
pub type RwSemReadGuard<'a, T> = lock_api::RwLockReadGuard<'a, RawRwSem, T>;
/// The exclusive guard of an [`RwSem`].
pub type RwSemWriteGuard<'a, T> = lock_api::RwLockWriteGuard<'a, RawRwSem, T>;

impl RawRwSem {
    /// A new, unlocked semaphore.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RawRwSem {
            count: AtomicUsize::new(0),
            owner: AtomicUsize::new(0),
            spinner: AtomicBool::new(false),
            wait: WaitLock::new(RawSemLock::new(), List::new()),
        }
    }

    /// A new, unlocked semaphore (loom's atomics have no `const` constructor).
    #[cfg(loom)]
    pub fn new() -> Self {
        RawRwSem {
            count: AtomicUsize::new(0),
            owner: AtomicUsize::new(0),
            spinner: AtomicBool::new(false),
            wait: WaitLock::new(List::new()),
        }
    }

    // ----- owner hint -----

    /// Marks the lock writer-owned, which the hint says with 0 (no reader
    /// phase, nothing non-spinnable). Spinners only need to tell a writer
    /// from readers, so a writer hand-over stores nothing when the hint is 0
    /// already: under writer contention the line is then only read.
    #[inline]
    fn set_writer_owned(&self) {
        if self.owner.load(Ordering::Relaxed) != 0 {
            self.owner.store(0, Ordering::Relaxed);
        }
    }

    /// Marks the lock reader-owned, keeping `OWNER_NONSPINNABLE`; skips the
    /// store when the hint already says so, to spare the cache line.
    #[inline]
    fn set_reader_owned(&self) {
        let owner = self.owner.load(Ordering::Relaxed);
        if owner & !OWNER_NONSPINNABLE != OWNER_READER {
            self.owner.store(
                OWNER_READER | (owner & OWNER_NONSPINNABLE),
                Ordering::Relaxed,
            );
        }
    }

    /// Stops writers from spinning on the current reader phase.
    fn set_nonspinnable(&self) {
        let _ = self
            .owner
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |owner| {
                (owner & (OWNER_READER | OWNER_NONSPINNABLE) == OWNER_READER)
                    .then_some(owner | OWNER_NONSPINNABLE)
            });
    }

    #[inline]
    fn clear_nonspinnable(&self) {
        if self.owner.load(Ordering::Relaxed) & OWNER_NONSPINNABLE != 0 {
            self.owner.fetch_and(!OWNER_NONSPINNABLE, Ordering::Relaxed);
        }
    }

    // ----- fast paths -----

    /// Takes a free lock for a running writer, whether or not others are
    /// queued, unless a handoff promised it to the first waiter. Returns
    /// whether it did.
    #[inline]
    fn try_steal_write(&self, mut count: usize) -> bool {
        while count & (LOCK_MASK | HANDOFF) == 0 {
            // Acquire pairs with the release read-modify-writes of `count`
            // in `up_read`, `up_write` and `downgrade`.
            match self.count.compare_exchange_weak(
                count,
                count | WRITER_LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.set_writer_owned();
                    return true;
                }
                Err(actual) => count = actual,
            }
        }
        false
    }

    /// A writer that missed the fast path steals the lock if it is free:
    /// running threads keep the lock busy while woken waiters are still on
    /// their way to a CPU.
    fn steal_write(&self) -> bool {
        let stolen = self.try_steal_write(self.count.load(Ordering::Relaxed));
        if stolen {
            events::bump(Event::WlockSteal);
        }
        stolen
    }

    /// One reader bias in; `Err` carries the new count when that is not a
    /// read lock (the bias stays in for the slow path).
    #[inline]
    fn read_fast(&self) -> Result<(), usize> {
        // Acquire pairs with the release read-modify-writes of `count` in
        // `up_read`, `up_write` and `downgrade`.
        let count = self
            .count
            .fetch_add(READER_BIAS, Ordering::Acquire)
            .wrapping_add(READER_BIAS);
        if count & READ_FAILED_MASK == 0 {
            self.set_reader_owned();
            Ok(())
        } else {
            Err(count)
        }
    }

    #[inline]
    fn write_fast(&self) -> bool {
        // Acquire pairs with the release read-modify-writes of `count` in
        // `up_read`, `up_write` and `downgrade`.
        let taken = self
            .count
            .compare_exchange(0, WRITER_LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        if taken {
            self.set_writer_owned();
        }
        taken
    }

    #[inline]
    fn up_read(&self) {
        // Release pairs with the next owner's acquire read-modify-write of
        // `count` (`read_fast`, `write_fast`, `try_lock_shared`,
        // `try_write_lock`, `try_steal_write` for stealers and spinners, the
        // grant in `mark_wake`) or its acquire load in `read_slow`.
        let count = self
            .count
            .fetch_sub(READER_BIAS, Ordering::Release)
            .wrapping_sub(READER_BIAS);
        if count & (LOCK_MASK | WAITERS) == WAITERS {
            self.clear_nonspinnable();
            self.wake_unless_woken(count);
        }
    }

    #[inline]
    fn up_write(&self) {
        // Release: as in `up_read`.
        let old = self.count.fetch_sub(WRITER_LOCKED, Ordering::Release);
        if old & WAITERS != 0 {
            self.wake_unless_woken(old);
        }
    }

    /// An unlock found `WAITERS` in `count`: wakes the list, unless a waiter
    /// woken earlier is still on its way to look at the lock (`WOKEN`); that
    /// one will see the lock as this unlock left it.
    #[inline]
    fn wake_unless_woken(&self, count: usize) {
        if count & WOKEN == 0 {
            self.wake();
        } else {
            events::bump(Event::WakeSkipped);
        }
    }

    // ----- wake engine (wait-list lock held) -----

    /// The kernel's `rwsem_wake`: the lock was released with waiters queued.
    #[cold]
    fn wake(&self) {
        let mut wakeups = Wakeups::new();
        let mut list = self.wait.lock();
        self.mark_wake(&mut list, WakeType::Any, &mut wakeups);
        drop(list);
        deliver(wakeups);
    }

    /// The kernel's `rwsem_mark_wake`; see the module documentation.
    fn mark_wake(&self, list: &mut WaitList, wake_type: WakeType, wakeups: &mut Wakeups<WaitInfo>) {
        let Some(first) = list.front() else {
            return;
        };
        if first.kind() == Kind::Write {
            if wake_type == WakeType::Any {
                self.kick_writer(list, first, wakeups);
            }
            return;
        }
        if self.count.load(Ordering::Relaxed) & READ_FAIL != 0 {
            return;
        }
        let mut counted = 0;
        if wake_type != WakeType::ReadOwned {
            // Grant the first reader speculatively: from here on no writer
            // can take the lock. Acquire pairs with the release
            // read-modify-writes of `count` in `up_read`, `up_write` and
            // `downgrade`; the granted readers inherit it through the
            // release grant in `Wakeups::deliver`.
            let old = self.count.fetch_add(READER_BIAS, Ordering::Acquire);
            if old & WRITER_LOCKED != 0 {
                // A writer got in first. Back out, and promise the lock to
                // this reader if it has waited long enough.
                let mut undo = READER_BIAS;
                if first.extra().since.exceeded(HANDOFF_AFTER) {
                    if old & HANDOFF == 0 {
                        undo -= HANDOFF;
                        events::bump(Event::RlockHandoff);
                    }
                    first.extra().handoff_set.set(list, true);
                }
                self.count.fetch_sub(undo, Ordering::Relaxed);
                return;
            }
            counted = READER_BIAS;
            self.set_reader_owned();
        }
        // At least the first waiter is a reader, so `granted >= 1`.
        let granted = list.grant_readers(MAX_READERS_WAKEUP, true, wakeups);
        let mut adjustment = (granted * READER_BIAS).wrapping_sub(counted);
        if list.is_empty() {
            adjustment = adjustment.wrapping_sub(WAITERS);
        }
        // A handoff, if any, named the first reader, which now has the lock.
        if self.count.load(Ordering::Relaxed) & HANDOFF != 0 {
            adjustment = adjustment.wrapping_sub(HANDOFF);
        }
        if adjustment != 0 {
            self.count.fetch_add(adjustment, Ordering::Relaxed);
        }
    }

    /// Kicks `first`, the writer at the front, unless it was kicked already
    /// and has not yet looked at the lock: at most one woken waiter is on its
    /// way at any time, so releases in a row do not each pay a futex wake
    /// for a thread that cannot run any sooner.
    fn kick_writer(&self, list: &WaitList, first: &Node, wakeups: &mut Wakeups<WaitInfo>) {
        self.check_woken(list);
        let woken = &first.extra().woken;
        if woken.get(list) {
            events::bump(Event::WakeSkipped);
            return;
        }
        // Relaxed: `WOKEN` changes only under the wait-list lock, which we
        // hold; an unlocker that reads it set only skips a wake-up that this
        // kick already covers.
        self.count.fetch_or(WOKEN, Ordering::Relaxed);
        woken.set(list, true);
        wakeups.kick(list, first);
    }

    /// Under loom, asserts `WOKEN`'s invariant (wait-list lock held): the bit
    /// is set exactly when the first waiter's `woken` flag is, so at most one
    /// kicked waiter is on its way. Natively it costs nothing.
    #[inline]
    fn check_woken(&self, list: &WaitList) {
        #[cfg(loom)]
        {
            let flagged = list.front().is_some_and(|f| f.extra().woken.get(list));
            let bit = self.count.load(Ordering::Relaxed) & WOKEN != 0;
            assert_eq!(bit, flagged, "WOKEN does not match the first waiter");
        }
        #[cfg(not(loom))]
        let _ = list;
    }

    /// The kernel's `rwsem_cond_wake_waiter`: after queueing, wake the list if
    /// no writer holds the lock (a transient reader bias may have made an
    /// unlocker skip its wake-up).
    fn cond_wake(&self, list: &mut WaitList, count: usize, wakeups: &mut Wakeups<WaitInfo>) {
        if count & WRITER_LOCKED != 0 {
            return;
        }
        let wake_type = if count & READER_MASK != 0 {
            WakeType::Readers
        } else {
            self.clear_nonspinnable();
            WakeType::Any
        };
        self.mark_wake(list, wake_type, wakeups);
    }

    /// The kernel's `rwsem_del_wake_waiter`, for a waiter that gives up.
    fn remove_waiter(&self, list: &mut WaitList, node: &Node) -> Wakeups<WaitInfo> {
        let mut wakeups = Wakeups::new();
        let was_first = list.is_front(node);
        list.remove(node);
        if list.is_empty() {
            self.count
                .fetch_and(!(WAITERS | HANDOFF | WOKEN), Ordering::Relaxed);
        } else if was_first {
            // `HANDOFF`, and `WOKEN` if set, named the waiter that is leaving.
            if self.count.load(Ordering::Relaxed) & (HANDOFF | WOKEN) != 0 {
                self.count.fetch_and(!(HANDOFF | WOKEN), Ordering::Relaxed);
            }
            node.extra().woken.set(list, false);
            self.mark_wake(list, WakeType::Any, &mut wakeups);
        }
        self.check_woken(list);
        wakeups
    }

    // ----- reader slow path -----

    /// Holding one reader bias that did not amount to a read lock (`count` is
    /// the count just after adding it), gets the read lock or gives up at
    /// `deadline`. Returns whether it holds the lock.
    #[cold]
    fn read_slow(&self, count: usize, deadline: Option<Instant>) -> bool {
        let readers = (count & !READ_FAIL) >> READER_SHIFT;
        let likely_reader_owned = self.owner.load(Ordering::Relaxed) & OWNER_READER != 0
            && readers > 1
            && count & WRITER_LOCKED == 0;
        if !likely_reader_owned && count & (WRITER_LOCKED | HANDOFF | READ_FAIL) == 0 {
            // Steal: our bias is a read lock already.
            events::bump(Event::RlockSteal);
            self.set_reader_owned();
            if readers == 1 && count & WAITERS != 0 {
                // First reader of a new reader phase: bring the queued ones.
                let mut wakeups = Wakeups::new();
                let mut list = self.wait.lock();
                self.mark_wake(&mut list, WakeType::ReadOwned, &mut wakeups);
                drop(list);
                deliver(wakeups);
            }
            return true;
        }

        let node = Node::new(Kind::Read, WaitInfo::new());
        let mut list = self.wait.lock();
        let mut adjustment = READER_BIAS.wrapping_neg();
        if list.is_empty() {
            // Acquire pairs with the release read-modify-writes of `count`
            // in `up_read`, `up_write` and `downgrade`.
            if self.count.load(Ordering::Acquire) & WRITER_LOCKED == 0 {
                // Nobody queued and no writer: our bias is a read lock.
                drop(list);
                events::bump(Event::RlockFast);
                self.set_reader_owned();
                return true;
            }
            adjustment = adjustment.wrapping_add(WAITERS);
        }
        // SAFETY: `node` lives on this frame and is used with this list only.
        // We return only once it is off the list: granted (a waker dequeued
        // it and we saw the grant) or removed by us in `remove_waiter`.
        unsafe { list.push_back(&node) };
        let count = self
            .count
            .fetch_add(adjustment, Ordering::Relaxed)
            .wrapping_add(adjustment);
        let mut wakeups = Wakeups::new();
        self.cond_wake(&mut list, count, &mut wakeups);
        drop(list);
        deliver(wakeups);

        loop {
            if node.is_granted() {
                events::bump(Event::Rlock);
                return true;
            }
            events::bump(Event::SleepReader);
            if node.sleep(deadline) == Wake::TimedOut {
                let mut list = self.wait.lock();
                if !list.is_queued(&node) {
                    // Dequeued by a waker: the grant beats the deadline.
                    drop(list);
                    node.wait_for_grant();
                    events::bump(Event::Rlock);
                    return true;
                }
                let wakeups = self.remove_waiter(&mut list, &node);
                drop(list);
                deliver(wakeups);
                events::bump(Event::RlockFail);
                return false;
            }
        }
    }

    // ----- writer slow path -----

    #[cold]
    fn write_slow(&self, deadline: Option<Instant>) -> bool {
        if self.steal_write() || self.optimistic_spin() {
            return true;
        }

        let node = Node::new(Kind::Write, WaitInfo::new());
        let mut list = self.wait.lock();
        // SAFETY: `node` lives on this frame and is used with this list only.
        // Wakers never dequeue writers; we return only after dequeuing it
        // ourselves, in `try_write_lock` or `remove_waiter`.
        unsafe { list.push_back(&node) };
        if list.is_front(&node) {
            self.count.fetch_or(WAITERS, Ordering::Relaxed);
        } else {
            let mut wakeups = Wakeups::new();
            let count = self.count.load(Ordering::Relaxed);
            self.cond_wake(&mut list, count, &mut wakeups);
            if !wakeups.is_empty() {
                drop(list);
                deliver(wakeups);
                list = self.wait.lock();
            }
        }

        let mut woken = false;
        loop {
            node.rearm(&list);
            if self.try_write_lock(&mut list, &node) {
                events::bump(Event::Wlock);
                return true;
            }
            if woken {
                events::bump(Event::WokenLost);
            }
            let handoff_set = node.extra().handoff_set.get(&list);
            drop(list);
            let free = handoff_set && self.spin_on_owner();
            woken = false;
            if !free {
                events::bump(Event::SleepWriter);
                if node.sleep(deadline) == Wake::TimedOut {
                    let mut list = self.wait.lock();
                    let wakeups = self.remove_waiter(&mut list, &node);
                    drop(list);
                    deliver(wakeups);
                    events::bump(Event::WlockFail);
                    return false;
                }
                woken = true;
            }
            list = self.wait.lock();
        }
    }

    /// The kernel's `rwsem_try_write_lock`, for the queued `node`. A woken
    /// `node` takes `WOKEN` out in the same compare-and-swap that finds the
    /// lock free or taken, so an unlocker either sees `WOKEN` and skips its
    /// wake-up, and this look sees its release, or comes after and wakes.
    fn try_write_lock(&self, list: &mut WaitList, node: &Node) -> bool {
        let is_first = list.is_front(node);
        let woken = node.extra().woken.get(list);
        let clear_woken = if woken { WOKEN } else { 0 };
        let mut count = self.count.load(Ordering::Relaxed);
        let (old, new, acquired) = loop {
            let handoff = count & HANDOFF != 0;
            let acquire = count & LOCK_MASK == 0 && (is_first || !handoff);
            let new = if !acquire {
                // Not ours this time. Promise it to the first waiter if this
                // one has waited long enough and nobody else asked yet.
                let mut new = count & !clear_woken;
                if !handoff && node.extra().since.exceeded(HANDOFF_AFTER) {
                    new |= HANDOFF;
                }
                if new == count {
                    return false;
                }
                new
            } else {
                let mut new = (count | WRITER_LOCKED) & !(HANDOFF | clear_woken);
                if list.is_singular() {
                    new &= !WAITERS;
                }
                new
            };
            // Acquire pairs with the release read-modify-writes of `count`
            // in `up_read`, `up_write` and `downgrade`.
            match self
                .count
                .compare_exchange(count, new, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(old) => break (old, new, acquire),
                Err(actual) => count = actual,
            }
        };
        node.extra().woken.set(list, false);
        self.check_woken(list);
        if !acquired {
            if new & HANDOFF != 0 && old & HANDOFF == 0 {
                events::bump(Event::WlockHandoff);
                if let Some(first) = list.front() {
                    first.extra().handoff_set.set(list, true);
                }
            }
            return false;
        }
        list.remove(node);
        self.check_woken(list);
        self.set_writer_owned();
        true
    }
}

impl Default for RawRwSem {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for RawRwSem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.count.load(Ordering::Relaxed);
        f.debug_struct("RawRwSem")
            .field("writer_locked", &(count & WRITER_LOCKED != 0))
            .field("readers", &((count & !READ_FAIL) >> READER_SHIFT))
            .field("waiters", &(count & WAITERS != 0))
            .field("handoff", &(count & HANDOFF != 0))
            .finish_non_exhaustive()
    }
}

// SAFETY: a writer holds the lock only after a successful acquire
// compare-and-swap that set `WRITER_LOCKED` on a count with no reader bias and
// no writer; a reader only while its bias is in the count with no
// `WRITER_LOCKED` (its own acquire read-modify-write saw none, or a waker that
// saw none granted it with a release store that the reader acquires). While
// `WRITER_LOCKED` is set every reader bias added is either taken back out or
// was added by a waker that found no writer; see the module documentation.
// Releases are release read-modify-writes of the count.
unsafe impl lock_api::RawRwLock for RawRwSem {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[cfg(loom)]
    const INIT: Self = panic!("use RawRwSem::new() under loom");

    type SharedGuard = GuardSend;
    type ExclusiveGuard = GuardSend;

    #[inline]
    fn lock_shared(&self) -> GuardSend {
        if let Err(count) = self.read_fast() {
            let acquired = self.read_slow(count, None);
            debug_assert!(acquired);
        }
        GuardSend::new()
    }

    #[inline]
    fn try_lock_shared(&self) -> Option<GuardSend> {
        let mut count = self.count.load(Ordering::Relaxed);
        loop {
            if count & READ_FAILED_MASK != 0 {
                return None;
            }
            // Acquire pairs with the release read-modify-writes of `count`
            // in `up_read`, `up_write` and `downgrade`.
            match self.count.compare_exchange_weak(
                count,
                count + READER_BIAS,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.set_reader_owned();
                    return Some(GuardSend::new());
                }
                Err(actual) => {
                    count = actual;
                    relax::cpu_relax();
                }
            }
        }
    }

    #[inline]
    unsafe fn unlock_shared(&self, _guard: GuardSend) {
        self.up_read();
    }

    #[inline]
    fn lock_exclusive(&self) -> GuardSend {
        if !self.write_fast() {
            let acquired = self.write_slow(None);
            debug_assert!(acquired);
        }
        GuardSend::new()
    }

    #[inline]
    fn try_lock_exclusive(&self) -> Option<GuardSend> {
        self.write_fast().then(GuardSend::new)
    }

    #[inline]
    unsafe fn unlock_exclusive(&self, _guard: GuardSend) {
        self.up_write();
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.count.load(Ordering::Relaxed) & LOCK_MASK != 0
    }

    #[inline]
    fn is_locked_exclusive(&self) -> bool {
        self.count.load(Ordering::Relaxed) & WRITER_LOCKED != 0
    }
}

// SAFETY: the downgrade swaps `WRITER_LOCKED` for one reader bias in a single
// release read-modify-write, so no writer can get in between; the readers it
// then grants join a lock that readers own.
unsafe impl lock_api::RawRwLockDowngrade for RawRwSem {
    unsafe fn downgrade(&self, _guard: GuardSend) -> GuardSend {
        // Release: as in `up_read` (what we wrote as the writer is visible
        // to the readers that join us).
        let old = self
            .count
            .fetch_add(READER_BIAS - WRITER_LOCKED, Ordering::Release);
        self.set_reader_owned();
        if old & WAITERS != 0 {
            let mut wakeups = Wakeups::new();
            let mut list = self.wait.lock();
            self.mark_wake(&mut list, WakeType::ReadOwned, &mut wakeups);
            drop(list);
            deliver(wakeups);
        }
        GuardSend::new()
    }
}

// SAFETY: the timed variants acquire exactly as the untimed ones do; a waiter
// that gives up leaves the lock's state as if it had never queued.
unsafe impl lock_api::RawRwLockTimed for RawRwSem {
    type Duration = Duration;
    type Instant = Instant;

    fn try_lock_shared_for(&self, timeout: Duration) -> Option<GuardSend> {
        self.try_lock_shared_deadline(Instant::now().checked_add(timeout))
    }

    fn try_lock_shared_until(&self, timeout: Instant) -> Option<GuardSend> {
        self.try_lock_shared_deadline(Some(timeout))
    }

    fn try_lock_exclusive_for(&self, timeout: Duration) -> Option<GuardSend> {
        self.try_lock_exclusive_deadline(Instant::now().checked_add(timeout))
    }

    fn try_lock_exclusive_until(&self, timeout: Instant) -> Option<GuardSend> {
        self.try_lock_exclusive_deadline(Some(timeout))
    }
}

impl RawRwSem {
    /// `deadline: None` (a timeout too large to represent) waits forever.
    fn try_lock_shared_deadline(&self, deadline: Option<Instant>) -> Option<GuardSend> {
        match self.read_fast() {
            Ok(()) => Some(GuardSend::new()),
            Err(count) => self.read_slow(count, deadline).then(GuardSend::new),
        }
    }

    fn try_lock_exclusive_deadline(&self, deadline: Option<Instant>) -> Option<GuardSend> {
        if self.write_fast() || self.write_slow(deadline) {
            Some(GuardSend::new())
        } else {
            None
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::test_common::wait_until;
    use lock_api::{RawRwLock, RawRwLockDowngrade, RawRwLockTimed};
    use std::sync::Arc;

    fn count(sem: &RawRwSem) -> usize {
        sem.count.load(Ordering::Relaxed)
    }

    fn wait_for(sem: &RawRwSem, bits: usize) {
        wait_until(&format!("{bits:#x} in the count"), || {
            count(sem) & bits == bits
        });
    }

    #[test]
    fn fast_paths_are_single_steps_on_the_count() {
        let sem = RawRwSem::new();
        let r = sem.lock_shared();
        assert_eq!(count(&sem), READER_BIAS);
        assert_eq!(sem.owner.load(Ordering::Relaxed), OWNER_READER);
        // SAFETY: `r` is ours.
        unsafe { sem.unlock_shared(r) };
        assert_eq!(count(&sem), 0);

        let w = sem.lock_exclusive();
        assert_eq!(count(&sem), WRITER_LOCKED);
        assert_eq!(sem.owner.load(Ordering::Relaxed), 0);
        // SAFETY: `w` is ours.
        let r = unsafe { sem.downgrade(w) };
        assert_eq!(count(&sem), READER_BIAS);
        // SAFETY: `r` is ours.
        unsafe { sem.unlock_shared(r) };
        assert_eq!(count(&sem), 0);
    }

    #[test]
    fn a_timed_out_waiter_clears_the_flags_it_set() {
        let sem = Arc::new(RawRwSem::new());
        let w = sem.lock_exclusive();
        for exclusive in [false, true] {
            let waiter = {
                let sem = Arc::clone(&sem);
                std::thread::spawn(move || {
                    let timeout = Duration::from_millis(20);
                    if exclusive {
                        sem.try_lock_exclusive_for(timeout).is_some()
                    } else {
                        sem.try_lock_shared_for(timeout).is_some()
                    }
                })
            };
            wait_for(&sem, WAITERS);
            assert!(!waiter.join().unwrap());
            assert_eq!(count(&sem), WRITER_LOCKED, "{sem:?}");
        }
        // SAFETY: `w` is ours.
        unsafe { sem.unlock_exclusive(w) };
        assert_eq!(count(&sem), 0);
    }

    /// Gets a writer queued long enough to be handoff-eligible, then has it
    /// fail once while we hold the lock: it must set `HANDOFF`, and when it
    /// gives up at its deadline it must take `HANDOFF` with it.
    #[test]
    fn handoff_is_set_after_the_delay_and_leaves_with_its_waiter() {
        for _attempt in 0..20 {
            let sem = Arc::new(RawRwSem::new());
            let first = sem.lock_exclusive();
            let head = {
                let sem = Arc::clone(&sem);
                std::thread::spawn(move || {
                    let got = sem.try_lock_exclusive_for(Duration::from_millis(300));
                    // SAFETY: ours, if acquired.
                    got.map(|g| unsafe { sem.unlock_exclusive(g) }).is_some()
                })
            };
            wait_for(&sem, WAITERS);
            std::thread::sleep(HANDOFF_AFTER * 2);
            // SAFETY: `first` is ours.
            unsafe { sem.unlock_exclusive(first) };
            // Steal it back before the kicked head runs, if we can.
            let again = sem.lock_exclusive();
            if count(&sem) & WAITERS == 0 {
                // The head got in first and left; try again.
                // SAFETY: `again` is ours.
                unsafe { sem.unlock_exclusive(again) };
                head.join().unwrap();
                continue;
            }
            wait_for(&sem, HANDOFF);
            // Every stealer now fails: the lock is promised to the head.
            assert!(sem.try_lock_shared().is_none());
            assert!(sem.first_waiter_has_handoff());
            assert!(!head.join().unwrap(), "the head got a lock we held");
            assert_eq!(count(&sem), WRITER_LOCKED, "{sem:?}");
            // SAFETY: `again` is ours.
            unsafe { sem.unlock_exclusive(again) };
            assert_eq!(count(&sem), 0);
            return;
        }
        panic!("never managed to take the lock back before the woken head");
    }

    /// A writer is kicked and, while it cannot look at the lock (we hold
    /// the wait-list lock), a running writer steals the lock and releases
    /// it: the release must skip the wake-up (`WOKEN`), and the woken
    /// writer must still get in afterwards. A release that tried to wake
    /// would block on the wait-list lock we hold, and the test would fail at
    /// its deadline.
    #[test]
    fn a_release_skips_the_wake_up_while_the_woken_writer_is_on_its_way() {
        for _attempt in 0..20 {
            let sem = Arc::new(RawRwSem::new());
            let held = sem.lock_exclusive();
            let waiter = {
                let sem = Arc::clone(&sem);
                std::thread::spawn(move || {
                    let g = sem.lock_exclusive();
                    // SAFETY: `g` is ours.
                    unsafe { sem.unlock_exclusive(g) };
                })
            };
            wait_for(&sem, WAITERS);
            std::thread::sleep(Duration::from_millis(1));
            // SAFETY: `held` is ours. The queued writer is kicked.
            unsafe { sem.unlock_exclusive(held) };
            let list = sem.wait.lock();
            if count(&sem) & (WOKEN | HANDOFF) != WOKEN {
                // It looked before we took the list lock, or waited long
                // enough for a handoff; try again.
                drop(list);
                waiter.join().unwrap();
                continue;
            }
            let (tx, rx) = std::sync::mpsc::channel();
            let stealer = {
                let sem = Arc::clone(&sem);
                std::thread::spawn(move || {
                    let g = sem.lock_exclusive();
                    // SAFETY: `g` is ours.
                    unsafe { sem.unlock_exclusive(g) };
                    tx.send(()).unwrap();
                })
            };
            let released = rx.recv_timeout(Duration::from_secs(10));
            assert_eq!(count(&sem), WAITERS | WOKEN, "{sem:?}");
            drop(list);
            released.expect("the release tried to wake the woken writer again");
            stealer.join().unwrap();
            waiter.join().unwrap();
            assert_eq!(count(&sem), 0);
            return;
        }
        panic!("the kicked writer always looked before we held the list lock");
    }

    impl RawRwSem {
        /// Whether `HANDOFF` names the first waiter (false with nobody queued).
        fn first_waiter_has_handoff(&self) -> bool {
            let list = self.wait.lock();
            list.front()
                .is_some_and(|first| first.extra().handoff_set.get(&list))
        }
    }
}
