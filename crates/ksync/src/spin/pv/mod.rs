//! The paravirt queued spinlock, reworked for threads that outnumber cores.
//!
//! Needs `std` (per-thread queue nodes, futex sleeping), so it is not built
//! with `--no-default-features`.
//!
//! # The problem, and why the kernel's answer does not carry over
//!
//! A fair queue spinlock hands the lock to a particular thread; when that
//! thread is preempted everyone behind it waits (Waiman Long, "[PATCH v10
//! 13/19] unfair qspinlock: Enable lock stealing in lock waiters", LKML and
//! xen-devel, May 2014). The kernel's paravirt lock
//! (`kernel/locking/qspinlock_paravirt.h`) lets queued vCPUs halt and lets
//! arrivals steal while the queue head is not spinning. It assumes what a
//! guest kernel has and a thread does not: a head that is usually running, a
//! hypervisor that kicks a halted vCPU cheaply, and holders that are not
//! preempted. In user space the head is usually *not* running when threads
//! outnumber cores, so the kernel's steal loop (which stops only when the
//! head spins) never stops, every arrival spins like a test-and-set lock,
//! and an unlock that must wake a sleeping head pays a futex call inside
//! everyone's critical path. ksync's first port did exactly that and lost to
//! `parking_lot` 2-5x at 8 to 64 threads on 2 cores.
//!
//! # Departures from the kernel, and why
//!
//! What stays: the 4-byte word `(tail, pending, locked)` and its fast path
//! (one compare-and-swap to lock, one byte store to unlock), the native
//! pending path for the second contender, the MCS queue of per-thread nodes
//! (`queued.rs`), and queued waiters that halt after a bounded spin. What
//! changes, after what the best blocking locks do (parking_lot, WebKit's
//! `WTF::Lock`, Go's `sync.Mutex`, the kernel's own mutex, the ShflLock
//! paper's blocking variant):
//!
//! 1. **Bounded barging.** An arrival that finds a queue or a pending
//!    waiter may take a free lock (a *steal*) with one look, never while a
//!    hand-off is pending, and otherwise queues, as the kernel's pv lock did
//!    before its hybrid steal loop (`pv_queued_spin_steal_lock`, one
//!    attempt); the kernel's later loop is unbounded. And a thread that has
//!    stolen a thousand times in a row yields its CPU once, so the threads
//!    that barge take turns on the CPUs instead of each keeping one for a
//!    whole time slice (after the active-set rotation of Dice's Malthusian
//!    locks and of GCR).
//! 2. **Spinning bounded by time, measured.** A queued waiter spins for about
//!    one context switch (`crate::spin_budget`, measured on this machine),
//!    then sleeps. A pending waiter that has spun that long gives the pending
//!    bit up and queues. The kernel counts relaxes (`SPIN_THRESHOLD`).
//! 3. **The queue head never sleeps.** It spins and, past its budget, yields
//!    the CPU, but it never waits on a futex, so **unlock never wakes
//!    anyone**: it is the native byte store. The kernel's head halts and its
//!    unlock is a compare-and-swap with a slow path (`SLOW_VAL`, the hash
//!    table); neither exists here.
//! 4. **A time-bounded hand-off.** A head that has waited
//!    [`PV_HANDOFF_AFTER`] sets `HANDOFF` in the pending byte: arrivals stop
//!    stealing and stop taking the pending path, so the lock goes to the
//!    head at the next unlock. Like the kernel mutex's `MUTEX_FLAG_HANDOFF`
//!    and Go's starvation mode, this bounds how long barging can starve the
//!    queue.
//! 5. **At most one woken waiter in flight, woken early.** Only the head's
//!    successor is ever woken: when the head raises `HANDOFF` (its wake-up
//!    then overlaps the last critical sections before the hand-off), or, if
//!    it was asleep when it became head, by the new owner's unlock, after the
//!    lock is released, so no futex call lengthens a critical section.
//!
//! # State
//!
//! The word, little-endian, as in `queued.rs`:
//!
//! | bits | field |
//! |---|---|
//! | 0..8 | `locked`: 1 while held |
//! | 8 | `PENDING`: the second contender waits for the owner (native) |
//! | 9 | `HANDOFF`: the queue head waited too long; no stealing, no pending |
//! | 16..32 | `tail`: the last queued thread's node |
//!
//! Each queue node's `state` is also the futex word its thread sleeps on:
//! `RUNNING` (0) or `SLEEPING` (1). Only a non-head waiter ever sleeps.
//!
//! # Transitions
//!
//! * Fast path: `(0,0,0) -> (0,0,1)`. Unlock: `locked = 0`, a release byte
//!   store, plus a futex wake only for a successor the guard says was asleep
//!   when it was made head (point 5).
//! * Pending (no queue, no hand-off): as native, `fetch_or(PENDING)`, wait
//!   for `locked == 0`, take it with one halfword store `(*,1,0) -> (*,0,1)`.
//!   Past one context switch of waiting the waiter clears `PENDING` and
//!   queues. The halfword store also clears a `HANDOFF` that a head raised
//!   meanwhile; the head raises it again (it checks on every poll).
//! * Steal (a queue or a pending waiter exists): `(t,0,0) -> (t,0,1)` by a
//!   full-word compare-and-swap (a byte one could race a pending waiter's
//!   halfword store), only while `PENDING` and `HANDOFF` are clear, for a
//!   bounded window; then queue.
//! * Queue: swap our tail in, link behind the predecessor, spin on
//!   `node.locked`, then `state = SLEEPING` and sleep while it holds.
//! * Head: wait for `locked == 0` and `PENDING` clear, and claim with a
//!   compare-and-swap: `(n,*,0) -> (0,0,1)` if still the tail, else
//!   `(t,0,0) -> (t,0,1)` (clearing `HANDOFF`). After [`PV_HANDOFF_AFTER`],
//!   `fetch_or(HANDOFF)` and wake the successor if it sleeps. Having
//!   claimed, wait for the successor to link and hand it the head
//!   (`next.locked = 1`).
//!
//! # Sleeping, and why no wake-up is lost
//!
//! A waiter sleeps on its own node's `state`, never on the lock word (a lock
//! may be freed right after its unlock; nodes never are). Its `state =
//! SLEEPING; fence; read node.locked` and the hand-over's `next.locked = 1;
//! fence; read next.state` (SeqCst fences) are a store-buffering pair: at
//! least one side sees the other, so either the waiter does not sleep or the
//! new owner knows it sleeps and wakes it at its unlock (it still holds the
//! lock then, so the successor cannot have moved on to another lock). Every
//! waker swaps `state` to `RUNNING` before the futex wake, and the futex
//! compares `state` atomically with queueing the sleeper.
//!
//! # Memory ordering
//!
//! As the native lock: every load or RMW that ends a wait for the lock is
//! acquire and pairs with unlock's release store; the tail swap is
//! acquire-release (`xchg_tail`); `prev.next` and `next.locked` are release
//! stores read by acquire loads. The steal and claim compare-and-swaps are
//! acquire (they end a wait for the lock). `HANDOFF` and the counters order
//! nothing.

use core::ptr;
use core::time::Duration;

use super::queued::{
    decode_tail, node_ptr, while_queued, xchg_tail, NodeLease, LOCKED_MASK, LOCKED_VAL,
    PENDING_MASK, PENDING_VAL, TAIL_MASK,
};
use crate::futex;
use crate::relax::{cpu_relax, yield_now};
use crate::spin_budget::SpinTimer;
use crate::sync::{self, fence, AtomicU32, Ordering};
use crate::thread_slot::{QNode, NODES_PER_SLOT};

mod stats;

use stats::events;
pub use stats::{pv_stats, reset_pv_stats, PvStats};

/// Bit 9 of the word, in the pending byte: a queue head has waited past
/// [`PV_HANDOFF_AFTER`]; arrivals neither steal nor take the pending path.
const HANDOFF_VAL: u32 = 1 << 9;

/// How long a queue head lets running threads take the lock from under it
/// before it raises `HANDOFF` and the lock goes to it at the next unlock:
/// 1 ms, the bound of the kernel mutex's hand-off and of Go's starvation
/// mode. (Under loom: at once, so models reach the hand-off.)
pub const PV_HANDOFF_AFTER: Duration = Duration::from_millis(1);

/// Node states; `state` is also the node's futex word.
const RUNNING: u32 = 0;
const SLEEPING: u32 = 1;

/// Steals a thread may make in a row before it yields its CPU once (point 1
/// of the module docs). A thread that keeps stealing keeps its CPU for its
/// whole time slice, and a runnable waiter then waits out the time slices
/// of every thread ahead of it on that CPU (measured, 64 threads on 2
/// cores: a longest wait of 60 to 90 ms); giving the CPU away every thousand
/// or so steals makes the threads take turns (longest wait about 3 ms) at
/// the cost of one `sched_yield` per thousand acquisitions.
#[cfg_attr(loom, allow(dead_code))]
const STEAL_STREAK: u32 = 1024;

#[cfg(not(loom))]
std::thread_local! {
    /// This thread's steals since it last yielded for [`STEAL_STREAK`].
    static STREAK: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
}

#[inline]
fn handoff_after_ns() -> u64 {
    if cfg!(loom) {
        0
    } else {
        PV_HANDOFF_AFTER.as_nanos() as u64
    }
}

/// The paravirt queued spinlock, reworked for threads: the 4-byte word and
/// fast paths of [`RawQSpinLock`](super::RawQSpinLock), bounded barging,
/// queued waiters that sleep after about one measured context switch, a
/// queue head that never sleeps (so unlock is one byte store), and a
/// hand-off to the head after [`PV_HANDOFF_AFTER`]. See the module docs for
/// every departure from the kernel's and why. Needs `std`.
///
/// Use it when threads may outnumber cores; watch it with [`pv_stats`].
///
/// ```
/// use ksync::spin::{PvQSpinMutex, RawPvQSpinLock};
/// use lock_api::RawMutex;
///
/// let total = PvQSpinMutex::new(0u64);
/// std::thread::scope(|s| {
///     for _ in 0..8 {
///         s.spawn(|| {
///             for _ in 0..100 {
///                 *total.lock() += 1;
///             }
///         });
///     }
/// });
/// assert_eq!(*total.lock(), 800);
///
/// let raw = RawPvQSpinLock::new();
/// let guard = raw.try_lock().expect("free");
/// assert!(raw.is_locked() && !raw.is_contended());
/// // SAFETY: `guard` came from `raw.try_lock()`.
/// unsafe { raw.unlock(guard) };
/// ```
#[derive(Debug)]
pub struct RawPvQSpinLock {
    val: AtomicU32,
}

/// A [`lock_api::Mutex`] guarded by a [`RawPvQSpinLock`].
pub type PvQSpinMutex<T> = lock_api::Mutex<RawPvQSpinLock, T>;
/// The guard of a [`PvQSpinMutex`].
pub type PvQSpinMutexGuard<'a, T> = lock_api::MutexGuard<'a, RawPvQSpinLock, T>;

/// What [`RawPvQSpinLock`]'s unlock owes: the successor made queue head
/// while it slept, to be woken once the lock is free (point 5 of the module
/// docs), or nothing.
#[derive(Debug)]
pub struct PvGuard {
    wake: *const QNode,
}

impl PvGuard {
    #[inline]
    const fn none() -> PvGuard {
        PvGuard { wake: ptr::null() }
    }
}

// SAFETY: the pointer names a queue node, which lives forever and is woken
// by address; any thread may release the lock and issue the wake.
unsafe impl Send for PvGuard {}

impl RawPvQSpinLock {
    /// A new, unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RawPvQSpinLock {
            val: AtomicU32::new(0),
        }
    }

    /// A new, unlocked lock (loom's atomics have no `const` constructor).
    #[cfg(loom)]
    pub fn new() -> Self {
        RawPvQSpinLock {
            val: AtomicU32::new(0),
        }
    }

    /// Whether other threads wait (a pending, hand-off or tail bit set).
    #[inline]
    pub fn is_contended(&self) -> bool {
        self.val.load(Ordering::Relaxed) & !LOCKED_MASK != 0
    }

    /// The raw lock word, for tests.
    #[cfg(all(test, not(loom)))]
    fn word(&self) -> u32 {
        self.val.load(Ordering::Relaxed)
    }

    #[inline]
    fn try_lock_cas(&self) -> bool {
        // Pairs with the release store in `unlock`.
        self.val
            .compare_exchange(0, LOCKED_VAL, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// The slow path: the pending waiter if there is no queue and no
    /// hand-off, else a bounded steal and the queue. `val` is the word the
    /// fast path saw.
    #[cold]
    #[inline(never)]
    fn lock_slow(&self, mut val: u32) -> PvGuard {
        events().slowpath.bump();
        // (0,1,0): the pending waiter is taking the lock; a bounded moment.
        if val == PENDING_VAL {
            for _ in 0..super::qspin::PENDING_LOOPS {
                cpu_relax();
                val = self.val.load(Ordering::Relaxed);
                if val != PENDING_VAL {
                    break;
                }
            }
        }
        if val & !LOCKED_MASK == 0 {
            // (0,0,*) -> (0,1,*): trylock or become the pending waiter.
            // Acquire: pairs with unlock's release when `locked` was 0.
            val = self.val.fetch_or(PENDING_VAL, Ordering::Acquire);
            if val & !LOCKED_MASK == 0 {
                if self.wait_as_pending(val) {
                    // (*,1,0) -> (*,0,1): only the pending waiter writes these
                    // two bytes now (stealers and the head wait for PENDING
                    // to clear); a HANDOFF it clears is raised again.
                    sync::store_low_u16(&self.val, LOCKED_VAL as u16, Ordering::Relaxed);
                    events().pending.bump();
                    return PvGuard::none();
                }
            } else if val & PENDING_VAL == 0 {
                // We set PENDING but someone queued or raised HANDOFF first:
                // give the bit back (an RMW: the head may be setting HANDOFF).
                // Test PENDING_VAL, not the whole byte: HANDOFF lives there
                // too, and a bit we set and then failed to give back would
                // keep every head waiting forever.
                self.val.fetch_and(!PENDING_VAL, Ordering::Relaxed);
            }
        }
        self.lock_queued()
    }

    /// The pending waiter's wait for the owner, bounded by one context switch
    /// (the owner is likely off its CPU after that). True with `locked == 0`
    /// seen (acquire); false after giving `PENDING` back.
    fn wait_as_pending(&self, val: u32) -> bool {
        if val & LOCKED_MASK == 0 {
            return true;
        }
        let mut timer = SpinTimer::one_switch();
        loop {
            // Pairs with the release store in `unlock`.
            if self.val.load(Ordering::Acquire) & LOCKED_MASK == 0 {
                return true;
            }
            if timer.expired() {
                self.val.fetch_and(!PENDING_VAL, Ordering::Relaxed);
                events().pending_gave_up.bump();
                return false;
            }
            cpu_relax();
        }
    }

    /// Bounded barging: one look, and the lock is ours if it is free, no
    /// pending waiter is about to take it and no hand-off is due; else the
    /// caller queues. A thread that has stolen [`STEAL_STREAK`] times in a
    /// row first gives its CPU away once (see there). True if taken.
    fn steal(&self) -> bool {
        // Not under loom: the streak would carry over from one explored
        // execution to the next and make the model nondeterministic.
        #[cfg(not(loom))]
        if STREAK.with(|streak| {
            let n = streak.get() + 1;
            streak.set(if n >= STEAL_STREAK { 0 } else { n });
            n >= STEAL_STREAK
        }) {
            events().streak_yields.bump();
            yield_now();
        }
        loop {
            let val = self.val.load(Ordering::Relaxed);
            if val & (LOCKED_MASK | PENDING_MASK) != 0 {
                return false;
            }
            // A full-word compare-and-swap, so a pending waiter or a HANDOFF
            // that appears meanwhile makes it fail. Acquire: pairs with the
            // release store in `unlock`.
            if self
                .val
                .compare_exchange(val, val | LOCKED_VAL, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                if val & TAIL_MASK != 0 {
                    events().steals.bump();
                }
                return true;
            }
            // The tail moved: look again.
        }
    }

    /// The MCS queue: steal if we can, else queue, sleep if it takes long,
    /// and take the lock as head.
    fn lock_queued(&self) -> PvGuard {
        let Some(lease) = NodeLease::claim() else {
            self.lock_no_node();
            return PvGuard::none();
        };
        let node = lease.node();
        let tail = lease.tail();
        node.locked.store(0, Ordering::Relaxed);
        node.next.store(ptr::null_mut(), Ordering::Relaxed);
        node.state.store(RUNNING, Ordering::Relaxed);

        if self.steal() {
            return PvGuard::none();
        }
        events().queued.bump();

        let old = xchg_tail(&self.val, tail);
        let mut next = ptr::null_mut();
        if old & TAIL_MASK != 0 {
            let prev = decode_tail(old);
            // Pairs with the predecessor's acquire loads of `next` (in
            // `wait_head` and `wait_for_successor`).
            prev.next.store(node_ptr(node), Ordering::Release);
            self.wait_node(node, lease.depth());
            // Pairs with the successor's release store of `prev.next` above.
            next = node.next.load(Ordering::Acquire);
        }

        // Queue head; returns holding the lock.
        let (val, next) = self.wait_head(node, tail, next, lease.depth());
        if val & TAIL_MASK == tail {
            // The claim emptied the queue.
            return PvGuard::none();
        }
        let next = self.wait_for_successor(node, next, lease.depth());
        // Pairs with the successor's acquire loads of `node.locked` in
        // `wait_node`.
        next.locked.store(1, Ordering::Release);
        // Store-buffering pair with `wait_node`'s `state = SLEEPING; fence;
        // read locked`: either it sees `locked` and stays up, or we see
        // `SLEEPING` and owe it a wake, paid at unlock.
        fence(Ordering::SeqCst);
        if next.state.load(Ordering::Relaxed) == SLEEPING {
            PvGuard { wake: next }
        } else {
            PvGuard::none()
        }
    }

    /// A queued waiter's wait to become head (`node.locked != 0`, acquire):
    /// spin about one context switch, then sleep; spin again after each
    /// wake-up before sleeping again.
    fn wait_node(&self, node: &'static QNode, depth: u32) {
        loop {
            let mut timer = SpinTimer::one_switch();
            loop {
                // Pairs with the predecessor's release `next.locked = 1` in
                // `lock_queued`.
                if node.locked.load(Ordering::Acquire) != 0 {
                    return;
                }
                if timer.expired() {
                    break;
                }
                while_queued(depth);
                cpu_relax();
            }
            // Store-buffering pair with the hand-over in `lock_queued`.
            node.state.store(SLEEPING, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if node.locked.load(Ordering::Relaxed) == 0 {
                events().sleeps.bump();
                futex::wait(&node.state, SLEEPING, None);
            }
            node.state.store(RUNNING, Ordering::Relaxed);
        }
    }

    /// The queue head's wait: for `locked == 0` with no pending waiter, then
    /// the claim. Spins, yielding the CPU after each context switch's worth;
    /// raises `HANDOFF` (and wakes the successor early) after
    /// [`PV_HANDOFF_AFTER`]. Returns the word it claimed from and the
    /// successor, if it has seen one link in.
    fn wait_head(
        &self,
        node: &'static QNode,
        tail: u32,
        mut next: *mut QNode,
        depth: u32,
    ) -> (u32, *mut QNode) {
        let mut spin = SpinTimer::one_switch();
        let mut patience = SpinTimer::new(handoff_after_ns());
        let mut handoff = false;
        loop {
            // Pairs with the release store in `unlock`.
            let val = self.val.load(Ordering::Acquire);
            if val & (LOCKED_MASK | PENDING_VAL) == 0 {
                // Last in the queue: (n,*,0) -> (0,0,1) also empties it;
                // else keep the tail and clear HANDOFF.
                let claimed = if val & TAIL_MASK == tail {
                    LOCKED_VAL
                } else {
                    (val & TAIL_MASK) | LOCKED_VAL
                };
                // Acquire: stealers may have taken and released the lock
                // since the load; pairs with their unlock's release.
                if self
                    .val
                    .compare_exchange(val, claimed, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return (val, next);
                }
                continue;
            }
            if handoff {
                if val & HANDOFF_VAL == 0 {
                    // A pending waiter's halfword store cleared it.
                    self.val.fetch_or(HANDOFF_VAL, Ordering::Relaxed);
                }
            } else if patience.expired() {
                handoff = true;
                self.val.fetch_or(HANDOFF_VAL, Ordering::Relaxed);
                events().handoffs.bump();
                // Wake the successor now, so its wake-up overlaps the
                // critical sections before ours. Pairs with its release
                // store of `prev.next` in `lock_queued`.
                next = node.next.load(Ordering::Acquire);
                // SAFETY: a non-null `next` came from the successor's
                // `&'static QNode`.
                if let Some(successor) = unsafe { next.as_ref() } {
                    if wake_if_sleeping(successor) {
                        events().early_wakes.bump();
                    }
                }
            }
            while_queued(depth);
            if spin.expired() {
                // The owner or the pending waiter is probably off its CPU:
                // let it have ours.
                events().head_yields.bump();
                yield_now();
                spin = SpinTimer::one_switch();
            } else {
                cpu_relax();
            }
        }
    }

    /// Waits for the successor that swapped itself in behind `node` to link
    /// (it may be preempted between its swap and its link: spin a context
    /// switch, then yield between polls).
    fn wait_for_successor(&self, node: &QNode, mut next: *mut QNode, depth: u32) -> &'static QNode {
        let mut spin = SpinTimer::one_switch();
        while next.is_null() {
            while_queued(depth);
            if spin.expired() {
                yield_now();
            } else {
                cpu_relax();
            }
            // Pairs with the successor's release store of `prev.next` in
            // `lock_queued`.
            next = node.next.load(Ordering::Acquire);
        }
        // SAFETY: a non-null `next` was stored by a successor from its own
        // `&'static QNode` (see `node_ptr`); slot blocks are never freed.
        unsafe { &*next }
    }

    /// No node to queue with: steal whenever allowed, yielding between
    /// bounded spins.
    #[cold]
    fn lock_no_node(&self) {
        events().no_node.bump();
        while !self.steal() {
            while_queued(NODES_PER_SLOT as u32);
            yield_now();
        }
    }
}

/// Wakes a queued waiter if it sleeps: `SLEEPING -> RUNNING`, then the futex
/// wake. True if it was asleep.
#[inline]
fn wake_if_sleeping(node: &QNode) -> bool {
    if node.state.load(Ordering::Relaxed) == SLEEPING
        && node.state.swap(RUNNING, Ordering::Relaxed) == SLEEPING
    {
        futex::wake(&node.state, 1);
        true
    } else {
        false
    }
}

impl Default for RawPvQSpinLock {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: the lock is held from a successful fast-path compare-and-swap, a
// pending waiter's `(*,1,0) -> (*,0,1)`, a steal's or a head's
// compare-and-swap until the release store of 0 to `locked`. The pending bit
// admits one waiter, and only it writes `locked` while the bit is set
// (stealers and the head wait for it to clear, and their compare-and-swaps
// fail if it appears); the MCS queue admits one head. Every acquisition ends
// with an acquire load or RMW that reads the previous holder's release.
unsafe impl lock_api::RawMutex for RawPvQSpinLock {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[cfg(loom)]
    const INIT: Self = panic!("use RawPvQSpinLock::new() under loom");

    type Guard = PvGuard;

    #[inline]
    fn lock(&self) -> PvGuard {
        match self
            .val
            .compare_exchange(0, LOCKED_VAL, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => PvGuard::none(),
            Err(val) => self.lock_slow(val),
        }
    }

    #[inline]
    fn try_lock(&self) -> Option<PvGuard> {
        self.try_lock_cas().then(PvGuard::none)
    }

    #[inline]
    unsafe fn unlock(&self, guard: PvGuard) {
        // Pairs with the acquire of whoever takes the lock next: the fast
        // path, the pending waiter, a steal, the head's claim.
        sync::store_low_u8(&self.val, 0, Ordering::Release);
        // SAFETY: a non-null `wake` is a queue node (they live forever).
        if let Some(successor) = unsafe { guard.wake.as_ref() } {
            if wake_if_sleeping(successor) {
                events().unlock_wakes.bump();
            }
        }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.val.load(Ordering::Relaxed) & LOCKED_MASK != 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
