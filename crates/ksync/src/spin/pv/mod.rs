//! The kernel's paravirt queued spinlock, for threads that outnumber cores:
//! `kernel/locking/qspinlock_paravirt.h` (`pv_wait_node()`, `pv_kick_node()`,
//! `pv_wait_head_or_lock()`, `__pv_queued_spin_unlock_slowpath()`,
//! `pv_hybrid_queued_unfair_trylock()`) on top of the native slow path's
//! queue: the word and queue-node contract of `queued.rs`, which the native
//! lock (`qspin.rs`) uses too.
//!
//! Needs `std` (per-thread queue nodes, futex sleeping), so it is not built
//! with `--no-default-features`.
//!
//! # The problem
//!
//! A fair queue spinlock hands the lock to a particular thread. When that
//! thread is preempted everyone behind it spins until the scheduler runs it
//! again (Waiman Long, "[PATCH v10 13/19] unfair qspinlock: Enable lock
//! stealing in lock waiters", LKML and xen-devel, May 2014). The paravirt
//! lock fixes both halves: waiters stop spinning after a while and sleep, and
//! while the queue head sleeps newly arriving threads may take the lock from
//! under it.
//!
//! # State
//!
//! The word is the native one, `(tail, pending, locked)`, with two changes:
//!
//! * `locked` may be [`SLOW_VAL`] (3): held, and a sleeping queue head is in
//!   the hash table under this lock; unlock must wake it.
//! * `pending` is no longer the second contender's bit (arrivals skip that
//!   path): the queue head sets it while it spins, and it means "no stealing
//!   now".
//!
//! Each queue node has a `state`, which is also the futex word its thread
//! sleeps on: `RUNNING` (0), `HALTED` (1, a sleeping non-head waiter) or
//! `HASHED` (2, a queue head that is in the hash table, asleep or about to
//! be). A global hash table maps a lock's address to its hashed head.
//!
//! # Transitions
//!
//! * Fast path, unlock: as native, except that unlock is a compare-and-swap
//!   of `locked` from 1 to 0; if it finds [`SLOW_VAL`] it takes the slow path.
//! * Arrival: the *hybrid unfair trylock*. While a queue exists (tail set)
//!   and its head is not spinning (pending clear), take the lock whenever
//!   `locked` is 0: `(n,0,0) -> (n,0,1)` with a byte compare-and-swap (a
//!   steal). Once the queue is empty queue at once (to become its head); once
//!   the head spins (pending set) queue behind it, which bounds how long
//!   stealing can starve the queue. Unlike the kernel's, this loop also gives
//!   up after the spin threshold and queues: with far more threads than
//!   cores, an unbounded steal loop keeps every arrival spinning (a plain
//!   test-and-set lock) while the owner waits for a core; queued, they sleep
//!   (measured: 64 threads on 2 cores, almost no thread ever slept without
//!   the bound).
//! * Queued, not head (`pv_wait_node`): spin on `node.locked` up to the spin
//!   threshold ([`set_pv_spin_threshold`], the kernel's 1 << 15), checking
//!   every 256 spins whether the predecessor is still `RUNNING` (if it sleeps
//!   there is no point spinning behind it). Then `state = HALTED`, a full
//!   barrier, and unless `node.locked` is set meanwhile, sleep while
//!   `state == HALTED`. Afterwards `HALTED -> RUNNING` by compare-and-swap,
//!   so a `HASHED` set by the new owner stays.
//! * Handing over the queue head (`pv_kick_node`): the owner stores
//!   `next.locked = 1` as natively, then after a full barrier tries
//!   `next.state: HALTED -> HASHED`. If that works it does *not* wake `next`:
//!   it hashes `next` under the lock and sets `locked = SLOW_VAL` (it holds the
//!   lock, so a plain store), and the unlock will wake it. Waking it now
//!   would only have it find the lock held and go back to sleep.
//! * Queue head (`pv_wait_head_or_lock`): if `HASHED`, sleep until kicked.
//!   Then set pending and spin up to the threshold trying
//!   `(n,1,0) -> (n,0,1)` (`trylock_clear_pending`). If that fails, clear
//!   pending (stealing allowed again), set `state = HASHED`, hash itself, and
//!   swap `SLOW_VAL` into `locked`: if the old byte was 0 the lock was free
//!   and is ours (`locked = 1`, unhash, `RUNNING`); otherwise sleep until
//!   kicked, and start over.
//! * Unlock slow path: `locked` is `SLOW_VAL`. Remove the lock's entry from
//!   the hash table, store `locked = 0` (release; the lock's memory may be
//!   freed from here on), then set the head's `state = RUNNING` and wake its
//!   futex word. The head may well find the lock stolen by then: it spins,
//!   hashes itself and sleeps again.
//!
//! # Sleeping, and why it never loses a wake-up
//!
//! Threads sleep on a word in their own node, never on the lock word: the
//! lock may be freed right after its unlock, while queue nodes are never
//! freed (`crate::thread_slot`). Every futex wait compares a value that the
//! waker changes *before* it wakes:
//!
//! * A head sleeps while `state == HASHED`, and only the unlocker that
//!   removed its hash entry changes a hashed head's state (to `RUNNING`, after
//!   releasing the lock, then wakes). So the wait either sees `RUNNING` and
//!   returns, or is asleep when the wake comes.
//! * A waiter sleeps while `state == HALTED`. The new owner's `HALTED ->
//!   HASHED` does not wake it on purpose; the unlock's `HASHED -> RUNNING` and
//!   wake do. The owner's `next.locked = 1; barrier; read state` against the
//!   waiter's `state = HALTED; barrier; read next.locked` (SeqCst fences) is a
//!   store-buffering pair: at least one side sees the other, so either the
//!   waiter does not sleep or the owner hashes it.
//!
//! Unlike the kernel (whose `pv_kick_node()` may leave a hashed head spinning,
//! and whose head hashes itself at most once), a `HASHED` head here waits
//! for its kick before it does anything else. That is what makes the
//! unlocker's state write safe: the head cannot take the lock and move its
//! node on to another lock between the unlocker's release and that write. A
//! late wake on a reused node is at worst a spurious wake-up, which every wait
//! tolerates (and counts). It also lets a head that lost the lock to a
//! stealer hash itself again and sleep, instead of spinning out its time
//! slice behind a preempted owner.
//!
//! # The hash table
//!
//! A sleeping queue head is found by its lock's address in a global table
//! (`hash.rs`); the unlocker of a `SLOW_VAL` lock removes the entry and
//! kicks the node it names.
//!
//! # Memory ordering
//!
//! As the native lock (acquire on every load that ends a wait for the lock,
//! acquire-release tail swap), plus:
//!
//! * The head's `SLOW_VAL` swap is acquire-release: release publishes its
//!   hash entry and `HASHED` state to the unlocker, which reads `SLOW_VAL`
//!   and then fences with acquire (the kernel's `smp_rmb()`); acquire makes
//!   the lock ours when the old byte was 0.
//! * The unlocker's `state = RUNNING` is release after its release of the
//!   lock, and the head reads it with acquire, so a kicked head sees the lock
//!   word at least as new as that unlock.
//! * Removing an entry is a release store of a null key and claiming one an
//!   acquire compare-and-swap, so a removed entry's node is read before the
//!   entry is reused.
//! * Counters and the spin threshold are relaxed and order nothing.

mod hash;
mod stats;

use core::ptr;

use self::hash::{hash, unhash};
use self::stats::events;
pub use self::stats::{pv_stats, reset_pv_stats, PvStats};

use super::queued::{
    decode_tail, node_ptr, wait_for_next, while_queued, xchg_tail, NodeLease, LOCKED_MASK,
    LOCKED_PENDING_MASK, LOCKED_VAL, PENDING_MASK, PENDING_VAL, TAIL_MASK,
};
use crate::futex;
use crate::relax::cpu_relax;
use crate::sync::{self, fence, unmodelled, AtomicU32, Ordering};
use crate::thread_slot::{QNode, NODES_PER_SLOT};

/// `locked` byte value of a held lock whose unlock must wake a hashed queue
/// head (`_Q_SLOW_VAL`).
pub const SLOW_VAL: u8 = 3;

/// Node states (`enum vcpu_state`); `state` is also the node's futex word.
const RUNNING: u32 = 0;
const HALTED: u32 = 1;
const HASHED: u32 = 2;

/// A queued waiter checks its predecessor every `PREV_CHECK_MASK + 1` spins
/// (`PV_PREV_CHECK_MASK`).
const PREV_CHECK_MASK: u32 = 0xff;

// ---------------------------------------------------------------------------
// Tuning.

/// The kernel's `SPIN_THRESHOLD`: relaxes a waiter spins before it sleeps.
pub const DEFAULT_PV_SPIN_THRESHOLD: u32 = 1 << 15;

/// Under loom one spin is enough: loom cares which interleavings a spin
/// allows, not how long it is, and the model must reach the sleeping paths.
#[cfg(loom)]
const LOOM_SPIN_THRESHOLD: u32 = 1;

static SPIN_THRESHOLD: unmodelled::AtomicU32 =
    unmodelled::AtomicU32::new(DEFAULT_PV_SPIN_THRESHOLD);

/// Sets how many relaxes a [`RawPvQSpinLock`] waiter spins before it sleeps,
/// for every lock (at least 1; default [`DEFAULT_PV_SPIN_THRESHOLD`]).
///
/// Lower sleeps sooner, which helps when threads far outnumber cores and
/// costs a futex wake-up per hand-over when they do not. Under loom the
/// locks spin once regardless.
///
/// ```
/// use ksync::spin::{pv_spin_threshold, set_pv_spin_threshold, DEFAULT_PV_SPIN_THRESHOLD};
///
/// set_pv_spin_threshold(1 << 12);
/// assert_eq!(pv_spin_threshold(), 1 << 12);
/// set_pv_spin_threshold(DEFAULT_PV_SPIN_THRESHOLD);
/// ```
pub fn set_pv_spin_threshold(spins: u32) {
    SPIN_THRESHOLD.store(spins.max(1), Ordering::Relaxed);
}

/// The current spin threshold; see [`set_pv_spin_threshold`].
pub fn pv_spin_threshold() -> u32 {
    SPIN_THRESHOLD.load(Ordering::Relaxed)
}

#[inline]
fn spin_threshold() -> u32 {
    #[cfg(loom)]
    return LOOM_SPIN_THRESHOLD;
    #[cfg(not(loom))]
    pv_spin_threshold()
}

// ---------------------------------------------------------------------------
// The lock.

/// The kernel's paravirt queued spinlock: [`RawQSpinLock`](super::RawQSpinLock)'s
/// 4-byte word and fast paths, with waiters that sleep after a bounded spin
/// and arrivals that may steal the lock while the queue head sleeps. Needs
/// `std`.
///
/// Use it when threads may outnumber cores: a preempted waiter no longer
/// stalls the queue. Tune the spin with [`set_pv_spin_threshold`]; watch it
/// with [`pv_stats`].
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

    /// Whether other threads are queued (any pending or tail bit set).
    #[inline]
    pub fn is_contended(&self) -> bool {
        self.val.load(Ordering::Relaxed) & !LOCKED_MASK != 0
    }

    /// The hash key: the lock's address, never dereferenced through it.
    #[inline]
    fn key(&self) -> usize {
        self as *const Self as usize
    }

    /// The raw lock word, for tests.
    #[cfg(all(test, not(loom)))]
    fn word(&self) -> u32 {
        self.val.load(Ordering::Relaxed)
    }

    /// `(*,0,0) -> (*,0,1)` with a byte compare-and-swap; counts a steal if
    /// `seen` (the word read just before) showed a queue.
    #[inline]
    fn steal(&self, seen: u32) -> bool {
        let stolen = sync::compare_exchange_low_u8(
            &self.val,
            0,
            LOCKED_VAL as u8,
            Ordering::Acquire,
            Ordering::Relaxed,
        )
        .is_ok();
        if stolen && seen & TAIL_MASK != 0 {
            events().lock_stealing.bump();
        }
        stolen
    }

    /// `pv_hybrid_queued_unfair_trylock()`: steal while a queue exists and
    /// its head is not spinning; `false` once we should queue, or after the
    /// spin threshold (see the module comment).
    fn hybrid_trylock(&self) -> bool {
        for _ in 0..spin_threshold() {
            let val = self.val.load(Ordering::Relaxed);
            if val & LOCKED_PENDING_MASK == 0 && self.steal(val) {
                return true;
            }
            if val & TAIL_MASK == 0 || val & PENDING_MASK != 0 {
                return false;
            }
            cpu_relax();
        }
        false
    }

    /// `trylock_clear_pending()`: the spinning head's `(*,1,0) -> (*,0,1)`.
    /// A compare-and-swap, because stealers may take `locked` meanwhile.
    #[inline]
    fn trylock_clear_pending(&self) -> bool {
        self.val.load(Ordering::Relaxed) & LOCKED_MASK == 0
            && sync::compare_exchange_low_u16(
                &self.val,
                PENDING_VAL as u16,
                LOCKED_VAL as u16,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// The paravirt slow path: the hybrid trylock, then the queue.
    #[cold]
    #[inline(never)]
    fn lock_slow(&self) {
        events().slowpath.bump();
        let Some(lease) = NodeLease::claim() else {
            return self.lock_no_node();
        };
        let node = lease.node();
        let tail = lease.tail();
        node.locked.store(0, Ordering::Relaxed);
        node.next.store(ptr::null_mut(), Ordering::Relaxed);
        node.state.store(RUNNING, Ordering::Relaxed);

        if self.hybrid_trylock() {
            return;
        }

        let old = xchg_tail(&self.val, tail);
        let mut next = ptr::null_mut();
        if old & TAIL_MASK != 0 {
            let prev = decode_tail(old);
            // Pairs with the predecessor's acquire loads of `next` (below and
            // in `wait_for_next`): it sees our initialised node.
            prev.next.store(node_ptr(node), Ordering::Release);
            self.wait_node(node, prev, lease.depth());
            // Pairs with the successor's release store of `prev.next` above.
            next = node.next.load(Ordering::Acquire);
        }

        // Queue head; returns holding the lock, `locked == 1`.
        let val = self.wait_head_or_lock(node, lease.depth());

        // Last in the queue: (n,0,1) -> (0,0,1) empties it.
        if val & TAIL_MASK == tail
            && self
                .val
                .compare_exchange(val, LOCKED_VAL, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return;
        }
        let next = wait_for_next(node, next);
        // Pairs with the successor's acquire loads of `node.locked` in
        // `wait_node`.
        next.locked.store(1, Ordering::Release);
        self.kick_node(next);
    }

    /// No node: steal whenever the hybrid trylock allows, relaxing between.
    #[cold]
    fn lock_no_node(&self) {
        events().no_node.bump();
        while !self.hybrid_trylock() {
            while_queued(NODES_PER_SLOT as u32);
            cpu_relax();
        }
    }

    /// `pv_wait_node()`: spin, then sleep, until the predecessor makes us the
    /// queue head (`node.locked != 0`, read with acquire loads that pair with
    /// its release hand-over in `lock_slow`).
    fn wait_node(&self, node: &'static QNode, prev: &'static QNode, depth: u32) {
        let events = events();
        loop {
            let mut early = false;
            for spin in 0..spin_threshold() {
                if node.locked.load(Ordering::Acquire) != 0 {
                    return;
                }
                if spin & PREV_CHECK_MASK == 0 && prev.state.load(Ordering::Relaxed) != RUNNING {
                    early = true;
                    break;
                }
                while_queued(depth);
                cpu_relax();
            }

            // Store-buffering pair with `kick_node`: either we see `locked`
            // or the new owner sees `HALTED` (and hashes us).
            node.state.store(HALTED, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if node.locked.load(Ordering::Relaxed) == 0 {
                events.wait_node.bump();
                if early {
                    events.wait_early.bump();
                }
                futex::wait(&node.state, HALTED, None);
            }
            // Keep `HASHED` if the new owner hashed us meanwhile.
            let _ =
                node.state
                    .compare_exchange(HALTED, RUNNING, Ordering::Relaxed, Ordering::Relaxed);
            if node.locked.load(Ordering::Acquire) != 0 {
                return;
            }
            events.spurious_wakeup.bump();
        }
    }

    /// `pv_kick_node()`: we own the lock and just made `next` the queue head.
    /// If it sleeps, leave it asleep, hashed, and make our unlock wake it.
    fn kick_node(&self, next: &'static QNode) {
        // Store-buffering pair with `wait_node`: our `next.locked = 1`, this
        // fence, then `state`, against its `state = HALTED`, fence, `locked`.
        fence(Ordering::SeqCst);
        if next
            .state
            .compare_exchange(HALTED, HASHED, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        hash(self.key(), next);
        // We hold the lock, so nobody else writes `locked` now.
        sync::store_low_u8(&self.val, SLOW_VAL, Ordering::Relaxed);
        events().hash_next.bump();
    }

    /// Sleeps while `node` is hashed, until the unlocker's kick makes it
    /// `RUNNING`.
    fn sleep_hashed(&self, node: &'static QNode) {
        loop {
            futex::wait(&node.state, HASHED, None);
            // Pairs with the release store of `RUNNING` in `unlock_slow`.
            if node.state.load(Ordering::Acquire) != HASHED {
                return;
            }
            events().spurious_wakeup.bump();
        }
    }

    /// `pv_wait_head_or_lock()`: the queue head spins with stealing disabled,
    /// then hashes itself and sleeps until an unlock kicks it, and so on until
    /// it holds the lock. Returns the word with `locked` set.
    fn wait_head_or_lock(&self, node: &'static QNode, depth: u32) -> u32 {
        let events = events();
        let mut kicked = false;
        loop {
            // Hashed, by the previous owner or by us below: the lock is held
            // with `SLOW_VAL`, and its unlock will kick us. Until then we must
            // not touch the lock (see the module comment). The acquire pairs
            // with the release store of `RUNNING` in `unlock_slow`.
            if node.state.load(Ordering::Acquire) == HASHED {
                self.sleep_hashed(node);
                kicked = true;
            }

            sync::store_byte1(&self.val, 1, Ordering::Relaxed); // set_pending
            for _ in 0..spin_threshold() {
                if self.trylock_clear_pending() {
                    return self.val.load(Ordering::Relaxed) | LOCKED_VAL;
                }
                while_queued(depth);
                cpu_relax();
            }
            sync::store_byte1(&self.val, 0, Ordering::Relaxed); // clear_pending

            node.state.store(HASHED, Ordering::Relaxed);
            let entry = hash(self.key(), node);
            // Release pairs with the acquire fence in `unlock_slow` (our hash
            // entry and state are visible to the unlocker); acquire pairs
            // with the release in `unlock` when the lock turns out free.
            if sync::swap_low_u8(&self.val, SLOW_VAL, Ordering::AcqRel) == 0 {
                // The lock was free, so it is ours and nobody will kick us.
                sync::store_low_u8(&self.val, LOCKED_VAL as u8, Ordering::Relaxed);
                entry.clear();
                node.state.store(RUNNING, Ordering::Relaxed);
                return self.val.load(Ordering::Relaxed) | LOCKED_VAL;
            }
            events.wait_head.bump();
            if kicked {
                events.wait_again.bump();
            }
        }
    }

    /// `__pv_queued_spin_unlock_slowpath()`: `locked` was `SLOW_VAL`.
    #[cold]
    #[inline(never)]
    fn unlock_slow(&self, locked: u8) {
        if locked != SLOW_VAL {
            // Not held (an unlock without a lock): leave the word alone.
            return;
        }
        // Pairs with the head's release swap of `SLOW_VAL`: its hash entry
        // and state are visible.
        fence(Ordering::Acquire);
        let node = unhash(self.key());
        // Pairs with the acquire of whoever takes the lock next (see
        // `unlock`).
        sync::store_low_u8(&self.val, 0, Ordering::Release);
        // `self` may be freed from here on; only the node is touched.
        if let Some(node) = node {
            // Pairs with the head's acquire loads of `state` in
            // `sleep_hashed` and `wait_head_or_lock`: a kicked head sees the
            // word at least as new as the release above.
            node.state.store(RUNNING, Ordering::Release);
            futex::wake(&node.state, 1);
            events().kick_unlock.bump();
        }
    }
}

impl Default for RawPvQSpinLock {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: `locked` goes from 0 to non-zero only by compare-and-swap (fast
// path, steals, the head's `trylock_clear_pending`) or by the head's swap
// that finds 0, so one thread at a time holds the lock; `SLOW_VAL` is written
// over 1 only by the holder. Every acquisition is an acquire RMW that reads
// the previous holder's release (the unlock's compare-and-swap or the slow
// unlock's release store).
unsafe impl lock_api::RawMutex for RawPvQSpinLock {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[cfg(loom)]
    const INIT: Self = panic!("use RawPvQSpinLock::new() under loom");

    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        if self
            .val
            .compare_exchange(0, LOCKED_VAL, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
        lock_api::GuardSend::new()
    }

    /// One attempt; unlike the native lock it also takes a free lock that
    /// has a sleeping queue (the older kernels' `pv_queued_spin_steal_lock`).
    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        let val = self.val.load(Ordering::Relaxed);
        (val & LOCKED_PENDING_MASK == 0 && self.steal(val)).then(lock_api::GuardSend::new)
    }

    #[inline]
    unsafe fn unlock(&self, _guard: Self::Guard) {
        // The release pairs with the acquire of whoever takes the lock next:
        // the fast path's or a steal's compare-and-swap, the head's
        // `trylock_clear_pending` or its `SLOW_VAL` swap.
        if let Err(locked) = sync::compare_exchange_low_u8(
            &self.val,
            LOCKED_VAL as u8,
            0,
            Ordering::Release,
            Ordering::Relaxed,
        ) {
            self.unlock_slow(locked);
        }
    }

    /// Whether some thread holds the lock: the `locked` byte. (A queue whose
    /// head sleeps while the lock is free is not "locked", unlike the native
    /// lock's whole-word test, where that state lasts only an instant.)
    #[inline]
    fn is_locked(&self) -> bool {
        self.val.load(Ordering::Relaxed) & LOCKED_MASK != 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::queued::hook::{spawn_nester, Nested, LEVELS};
    use super::super::queued::tail_fields;
    use super::hash::table;
    use super::*;
    use crate::test_common::wait_until;
    use crate::thread_slot;
    use lock_api::RawMutex;
    use std::sync::atomic::{AtomicBool, AtomicU32 as StdAtomicU32, Ordering as O};
    use std::sync::Arc;
    use std::time::Duration;

    fn locked_byte(lock: &RawPvQSpinLock) -> u8 {
        lock.word() as u8
    }

    fn hashed_node(lock: &RawPvQSpinLock) -> Option<*mut QNode> {
        table()
            .iter()
            .find(|e| e.lock.load(O::Relaxed) == lock.key())
            .map(|e| e.node.load(O::Relaxed))
    }

    /// Locks and unlocks `lock` on a new thread.
    fn lock_once(lock: &Arc<RawPvQSpinLock>) -> std::thread::JoinHandle<()> {
        let lock = Arc::clone(lock);
        std::thread::spawn(move || {
            let g = lock.lock();
            // SAFETY: `g` came from `lock.lock()`.
            unsafe { lock.unlock(g) };
        })
    }

    #[test]
    fn lock_word() {
        assert_eq!(core::mem::size_of::<RawPvQSpinLock>(), 4);
        assert_eq!(u32::from(SLOW_VAL) & !LOCKED_MASK, 0);
        assert_ne!(u32::from(SLOW_VAL), LOCKED_VAL);
    }

    #[test]
    fn uncontended_and_try_lock() {
        let lock = RawPvQSpinLock::new();
        let g = lock.lock();
        assert_eq!(lock.word(), LOCKED_VAL);
        assert!(lock.is_locked() && lock.try_lock().is_none());
        // SAFETY: `g` came from `lock.lock()`.
        unsafe { lock.unlock(g) };
        assert_eq!(lock.word(), 0);
        let g = lock.try_lock().unwrap();
        // SAFETY: `g` came from `lock.try_lock()`.
        unsafe { lock.unlock(g) };
    }

    /// The head spins, hashes itself, marks the lock slow and sleeps; unlock
    /// finds it in the table and wakes it.
    #[test]
    fn head_halts_hashed_and_unlock_kicks_it() {
        let before = pv_stats();
        let lock = Arc::new(RawPvQSpinLock::new());
        let guard = lock.lock();
        let head = lock_once(&lock);
        wait_until("the slow value", || locked_byte(&lock) == SLOW_VAL);
        let node = decode_tail(lock.word());
        assert_eq!(node.state.load(O::Relaxed), HASHED);
        assert_eq!(hashed_node(&lock), Some(node_ptr(node)));
        assert!(lock.is_locked() && lock.is_contended());

        // SAFETY: `guard` came from `lock.lock()`.
        unsafe { lock.unlock(guard) };
        head.join().unwrap();
        assert_eq!(lock.word(), 0);
        assert_eq!(hashed_node(&lock), None);
        let after = pv_stats();
        assert!(after.wait_head > before.wait_head);
        assert!(after.kick_unlock > before.kick_unlock);
    }

    /// A waiter behind a sleeping head sleeps early; when the head gets the
    /// lock it hashes that halted successor instead of waking it, and its own
    /// unlock wakes it.
    #[test]
    fn new_owner_hashes_a_halted_successor() {
        static OWNER_INSIDE: AtomicBool = AtomicBool::new(false);
        static OWNER_MAY_LEAVE: AtomicBool = AtomicBool::new(false);
        let before = pv_stats();
        let lock = Arc::new(RawPvQSpinLock::new());
        let guard = lock.lock();

        let first = {
            let lock = Arc::clone(&lock);
            std::thread::spawn(move || {
                let g = lock.lock();
                OWNER_INSIDE.store(true, O::Release);
                wait_until("leave", || OWNER_MAY_LEAVE.load(O::Acquire));
                // SAFETY: `g` came from `lock.lock()`.
                unsafe { lock.unlock(g) };
            })
        };
        wait_until("the first head to hash itself", || {
            locked_byte(&lock) == SLOW_VAL
        });
        let first_tail = lock.word() & TAIL_MASK;
        let second = lock_once(&lock);
        wait_until("the second waiter to halt", || {
            let tail = lock.word() & TAIL_MASK;
            tail != first_tail && decode_tail(tail).state.load(O::Relaxed) == HALTED
        });
        let second_node = decode_tail(lock.word());

        // SAFETY: `guard` came from `lock.lock()`.
        unsafe { lock.unlock(guard) };
        wait_until("the first waiter to own the lock", || {
            OWNER_INSIDE.load(O::Acquire)
        });
        assert_eq!(locked_byte(&lock), SLOW_VAL);
        assert_eq!(second_node.state.load(O::Relaxed), HASHED);
        assert_eq!(hashed_node(&lock), Some(node_ptr(second_node)));

        OWNER_MAY_LEAVE.store(true, O::Release);
        first.join().unwrap();
        second.join().unwrap();
        assert_eq!(lock.word(), 0);
        let after = pv_stats();
        assert!(after.hash_next > before.hash_next);
        assert!(after.wait_node > before.wait_node);
        assert!(after.wait_early > before.wait_early);
        assert!(after.kick_unlock >= before.kick_unlock + 2);
    }

    // Nested queueing (see `hook::Nested`): while this thread is the
    // spinning head of one lock, the hook locks the next one, which is held
    // too.
    static NESTED: [RawPvQSpinLock; LEVELS] = [const { RawPvQSpinLock::new() }; LEVELS];
    static DEEPEST: AtomicBool = AtomicBool::new(false);

    impl Nested for RawPvQSpinLock {
        fn nested() -> &'static [Self; LEVELS] {
            &NESTED
        }

        fn deepest() -> &'static AtomicBool {
            &DEEPEST
        }
    }

    #[test]
    fn nested_queueing_uses_four_nodes_then_goes_without() {
        let before = pv_stats();
        let guards: Vec<_> = NESTED.iter().map(|l| l.lock()).collect();
        let nester = spawn_nester::<RawPvQSpinLock>();
        // Queued with nodes 0..3 (one tail per lock, index = depth).
        for (depth, lock) in NESTED.iter().take(NODES_PER_SLOT).enumerate() {
            let (_, idx) = tail_fields(lock.word() & TAIL_MASK);
            assert_eq!(idx as usize, depth);
        }
        assert_eq!(NESTED[NODES_PER_SLOT].word() & TAIL_MASK, 0, "no node left");
        for (lock, guard) in NESTED.iter().zip(guards).rev() {
            // SAFETY: each guard came from `lock.lock()` on its own lock.
            unsafe { lock.unlock(guard) };
        }
        assert_eq!(nester.join().unwrap(), 0b11111);
        assert!(pv_stats().no_node > before.no_node);
        assert!(NESTED.iter().all(|l| l.word() == 0));
    }

    #[test]
    fn locking_from_a_tls_destructor_after_the_slot_is_gone() {
        static LOCK: RawPvQSpinLock = RawPvQSpinLock::new();
        static INSIDE: StdAtomicU32 = StdAtomicU32::new(0);
        static HAD_SLOT: AtomicBool = AtomicBool::new(true);

        struct LocksOnExit;
        impl Drop for LocksOnExit {
            fn drop(&mut self) {
                HAD_SLOT.store(thread_slot::current().is_some(), O::Relaxed);
                let g = LOCK.lock();
                INSIDE.fetch_add(1, O::Relaxed);
                // SAFETY: `g` came from `LOCK.lock()`.
                unsafe { LOCK.unlock(g) };
            }
        }
        std::thread_local! {
            static ON_EXIT: LocksOnExit = const { LocksOnExit };
        }

        let before = pv_stats().no_node;
        let guard = LOCK.lock();
        let exiting = std::thread::spawn(|| {
            ON_EXIT.with(|_| {});
            assert!(thread_slot::current().is_some());
        });
        wait_until("the no-node path", || pv_stats().no_node > before);
        std::thread::sleep(Duration::from_millis(1));
        // SAFETY: `guard` came from `LOCK.lock()`.
        unsafe { LOCK.unlock(guard) };
        exiting.join().unwrap();
        assert_eq!(INSIDE.load(O::Relaxed), 1);
        assert!(
            !HAD_SLOT.load(O::Relaxed),
            "the slot outlived the destructor"
        );
        assert_eq!(LOCK.word(), 0);
    }
}
