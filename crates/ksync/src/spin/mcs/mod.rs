//! MCS queue spinlock (Mellor-Crummey and Scott), as in the kernel's
//! `kernel/locking/mcs_spinlock.h` (`mcs_spin_lock()` / `mcs_spin_unlock()`).
//!
//! # State
//!
//! The lock is one pointer, `tail`: null when the lock is free, else the
//! queue node of the last thread to arrive. Each thread brings a node
//! (`next`: its successor's node, `locked`: "you hold the lock now") and spins
//! only on its own node, so a handover moves one cache line, from the
//! releasing thread to its successor, instead of one to every waiter as in the
//! ticket lock.
//!
//! # Transitions
//!
//! * `lock(node)`: `node.next = null; node.locked = false;` then
//!   `prev = swap(tail, node)`. If `prev` is null the lock was free and is
//!   ours. Otherwise link in with `prev.next = node` and spin until
//!   `node.locked` is true.
//! * `unlock(node)`: if `node.next` is null, try `cas(tail, node, null)`: on
//!   success nobody was queued and the lock is free. If it fails, a successor
//!   has swapped itself into `tail` but not linked in yet: wait for
//!   `node.next`. Then set `next.locked = true`, which makes the successor
//!   the holder.
//! * `try_lock(node)`: initialise the node, then `cas(tail, null, node)`.
//!
//! Once `unlock` returns, nothing references the node: a successor touches its
//! predecessor's node only to link in, which `unlock` waits for, and the
//! releasing thread's last access to the successor's node is the handover
//! store. So a node can be reused as soon as `unlock` returns. It must not be
//! *freed* while the lock may still point at it, though: a thread that never
//! unlocks (a forgotten guard) leaves its node in `tail`, and the next arrival
//! will write into it. The two APIs below handle that differently.
//!
//! # Memory ordering
//!
//! * The `swap` is acquire-release. Release publishes the node's
//!   initialisation to the next arrival, which gets the node from `tail` and
//!   writes `node.next`; acquire makes the lock ours when `prev` is null, by
//!   reading from the previous holder's release `cas` (or a later swap).
//! * `prev.next = node` is a release store, read by an acquire load in
//!   `unlock`: the holder sees our initialised `locked = false` before it
//!   stores `true` over it.
//! * The handover `next.locked = true` is release; the waiter's spin on
//!   `locked` is acquire. With the `cas` that frees the lock (release), every
//!   way a critical section ends happens-before the next one begins.
//! * `try_lock`'s `cas` is acquire-release for the same reasons as the `swap`.
//!
//! # Two APIs
//!
//! * [`McsLock`] + [`McsNode`]: the caller owns the node, as kernel code
//!   does; works without `std`. The safe API is a closure,
//!   [`McsLock::with_node`], which borrows the node mutably for the whole
//!   critical section and releases the lock on the way out (also when the
//!   closure panics), so the node cannot be moved, freed or reused while the
//!   lock may point at it. Unsafe `lock_raw` / `unlock_raw` exist for code
//!   that cannot scope its critical section.
//! * [`RawMcsLock`] (needs `std`): a [`lock_api::RawMutex`] that takes nodes
//!   from a per-thread pool, so `lock_api::Mutex<RawMcsLock, T>`
//!   ([`McsMutex`]) works like any mutex. The node pointer rides in the guard
//!   ([`McsGuardNode`], not `Send`). Because `lock_api` lets a guard be
//!   forgotten, pooled nodes are never freed: they are leaked on first use,
//!   returned to the thread's free list on unlock, and moved to a global pool
//!   when the thread exits, so a forgotten guard or a thread that exits
//!   holding a lock leaves a node that stays valid forever, and memory stays
//!   bounded by the most nodes ever in use at once. After a thread's first
//!   lock, locking takes a node from the free list and does not allocate.

use core::cell::UnsafeCell;
use core::fmt;
use core::ptr;

use crate::relax::cpu_relax;
use crate::sync::{AtomicBool, AtomicPtr, Ordering};

/// A queue node for [`McsLock`]: one per thread per lock it is acquiring.
///
/// A node lives wherever the caller likes (typically the stack) and can be
/// used again and again, for any lock, once a critical section has ended.
///
/// ```
/// use ksync::spin::{McsLock, McsNode};
///
/// let lock = McsLock::new(0);
/// let mut node = McsNode::new();
/// lock.with_node(&mut node, |n| *n += 1);
/// lock.with_node(&mut node, |n| *n += 1);
/// assert_eq!(lock.into_inner(), 2);
/// ```
pub struct McsNode {
    /// The successor's node, written by the successor once it has swapped
    /// itself into the tail.
    next: AtomicPtr<McsNode>,
    /// Set by the predecessor to hand over the lock.
    locked: AtomicBool,
}

impl McsNode {
    /// A new node, in no queue.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        McsNode {
            next: AtomicPtr::new(ptr::null_mut()),
            locked: AtomicBool::new(false),
        }
    }

    /// A new node, in no queue (loom's atomics have no `const` constructor).
    #[cfg(loom)]
    pub fn new() -> Self {
        McsNode {
            next: AtomicPtr::new(ptr::null_mut()),
            locked: AtomicBool::new(false),
        }
    }

    #[inline]
    fn as_ptr(&self) -> *mut McsNode {
        self as *const McsNode as *mut McsNode
    }
}

impl Default for McsNode {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for McsNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McsNode").finish_non_exhaustive()
    }
}

/// The lock word both APIs share: the queue's tail.
struct Queue {
    tail: AtomicPtr<McsNode>,
}

impl Queue {
    #[cfg(not(loom))]
    const fn new() -> Self {
        Queue {
            tail: AtomicPtr::new(ptr::null_mut()),
        }
    }

    #[cfg(loom)]
    fn new() -> Self {
        Queue {
            tail: AtomicPtr::new(ptr::null_mut()),
        }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        !self.tail.load(Ordering::Relaxed).is_null()
    }

    /// Joins the queue with `node` and returns once the lock is held.
    ///
    /// # Safety
    ///
    /// `node` is in no queue, and stays valid and in place (not moved, freed
    /// or used for another acquisition) until [`Queue::release`] with it has
    /// returned, or forever if that never happens.
    #[inline]
    unsafe fn acquire(&self, node: &McsNode) {
        node.next.store(ptr::null_mut(), Ordering::Relaxed);
        node.locked.store(false, Ordering::Relaxed);
        // Release publishes our initialised node to the next arrival, whose
        // own swap (acquire) returns it; acquire pairs with the previous
        // holder's release compare-and-swap in `release` when the lock was
        // free.
        let prev = self.tail.swap(node.as_ptr(), Ordering::AcqRel);
        if prev.is_null() {
            return;
        }
        // SAFETY: `prev` was the tail, so its owner is queued or holding and
        // cannot finish `release` before it sees our link (`release` waits
        // for `next`); by the contract above its node is still valid.
        // Pairs with the acquire loads of `next` in the predecessor's
        // `release`: it sees our `locked = false` before it stores `true`.
        unsafe { (*prev).next.store(node.as_ptr(), Ordering::Release) };
        // Pairs with the hand-over store at the end of `release`.
        while !node.locked.load(Ordering::Acquire) {
            cpu_relax();
        }
    }

    /// Takes the lock with `node` if it is free; `false` leaves `node` in no
    /// queue.
    ///
    /// # Safety
    ///
    /// As [`Queue::acquire`] when it returns `true`.
    #[inline]
    unsafe fn try_acquire(&self, node: &McsNode) -> bool {
        if self.is_locked() {
            return false;
        }
        node.next.store(ptr::null_mut(), Ordering::Relaxed);
        node.locked.store(false, Ordering::Relaxed);
        // As the swap in `acquire`: release for the next arrival, acquire
        // pairing with the release compare-and-swap in `release`.
        self.tail
            .compare_exchange(
                ptr::null_mut(),
                node.as_ptr(),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Releases the lock held with `node`, handing it to the successor if any.
    ///
    /// # Safety
    ///
    /// The lock is held by the caller through `node` (an `acquire` or a
    /// successful `try_acquire` with this node on this queue, not yet released).
    #[inline]
    unsafe fn release(&self, node: &McsNode) {
        // The loads of `next` pair with the successor's release store of
        // `prev.next` in `acquire`.
        let mut next = node.next.load(Ordering::Acquire);
        if next.is_null() {
            // Release pairs with the acquire of the next arrival's swap (or
            // `try_acquire`'s compare-and-swap) that finds the lock free.
            if self
                .tail
                .compare_exchange(
                    node.as_ptr(),
                    ptr::null_mut(),
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                return;
            }
            // A successor swapped itself in after us; wait for it to link in.
            loop {
                next = node.next.load(Ordering::Acquire);
                if !next.is_null() {
                    break;
                }
                cpu_relax();
            }
        }
        // SAFETY: `next` is the successor's node; its owner spins until this
        // store and keeps the node valid until then (acquire's contract).
        // Pairs with the successor's acquire spin on `locked` in `acquire`.
        unsafe { (*next).locked.store(true, Ordering::Release) };
    }
}

/// An MCS queue lock protecting a `T`, used with caller-owned [`McsNode`]s.
///
/// Works without `std`. Each critical section is a closure run by
/// [`with_node`](Self::with_node) (or [`try_with_node`](Self::try_with_node)),
/// which queues the caller's node for exactly as long as the closure runs.
///
/// ```
/// use ksync::spin::{McsLock, McsNode};
///
/// let total = McsLock::new(0u64);
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| {
///             let mut node = McsNode::new(); // one per thread, reused
///             for _ in 0..1000 {
///                 total.with_node(&mut node, |t| *t += 1);
///             }
///         });
///     }
/// });
/// assert_eq!(total.into_inner(), 4000);
/// ```
pub struct McsLock<T: ?Sized = ()> {
    queue: Queue,
    data: UnsafeCell<T>,
}

// SAFETY: the lock hands `&mut T` to one thread at a time (the queue's
// exclusion), which needs `T: Send` and nothing more, like `std::sync::Mutex`.
unsafe impl<T: ?Sized + Send> Sync for McsLock<T> {}
// SAFETY: moving the lock moves the `T`; the queue holds no thread-bound state
// when the lock can be moved (nobody borrows it).
unsafe impl<T: ?Sized + Send> Send for McsLock<T> {}

impl<T> McsLock<T> {
    /// A new, unlocked lock holding `value`.
    #[cfg(not(loom))]
    pub const fn new(value: T) -> Self {
        McsLock {
            queue: Queue::new(),
            data: UnsafeCell::new(value),
        }
    }

    /// A new, unlocked lock holding `value` (loom's atomics have no `const`
    /// constructor).
    #[cfg(loom)]
    pub fn new(value: T) -> Self {
        McsLock {
            queue: Queue::new(),
            data: UnsafeCell::new(value),
        }
    }

    /// Consumes the lock and returns the value.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> McsLock<T> {
    /// Waits for the lock using `node`, runs `f` on the protected value, and
    /// releases the lock, also if `f` panics.
    ///
    /// Calling `with_node` on the same lock from inside `f` deadlocks, as with
    /// any non-recursive lock.
    #[inline]
    pub fn with_node<R>(&self, node: &mut McsNode, f: impl FnOnce(&mut T) -> R) -> R {
        let node: &McsNode = node;
        // SAFETY: `node` is mutably borrowed for this whole call, so it is in
        // no other queue (every earlier `with_node` released it before
        // returning, and `lock_raw`'s contract forbids borrowing a node it
        // queued) and cannot move or be freed before `Release` below has run
        // `release`, on return or on unwind.
        unsafe { self.queue.acquire(node) };
        let _release = Release {
            queue: &self.queue,
            node,
        };
        // SAFETY: we hold the lock, so nobody else accesses the data until
        // `_release` unlocks, after `f` and its borrow have ended.
        f(unsafe { &mut *self.data.get() })
    }

    /// Like [`with_node`](Self::with_node) but does not wait: returns `None`
    /// without running `f` if the lock is held.
    #[inline]
    pub fn try_with_node<R>(&self, node: &mut McsNode, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let node: &McsNode = node;
        // SAFETY: as in `with_node`.
        if !unsafe { self.queue.try_acquire(node) } {
            return None;
        }
        let _release = Release {
            queue: &self.queue,
            node,
        };
        // SAFETY: as in `with_node`.
        Some(f(unsafe { &mut *self.data.get() }))
    }

    /// Whether some thread holds the lock; a momentary snapshot.
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.queue.is_locked()
    }

    /// The protected value, through exclusive access to the lock.
    #[inline]
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }

    /// A raw pointer to the protected value, for use with
    /// [`lock_raw`](Self::lock_raw): dereference it only while holding the lock.
    #[inline]
    pub fn data_ptr(&self) -> *mut T {
        self.data.get()
    }

    /// Waits for the lock using `node`, for code that cannot put its critical
    /// section in a closure. Prefer [`with_node`](Self::with_node).
    ///
    /// ```
    /// use ksync::spin::{McsLock, McsNode};
    ///
    /// let lock = McsLock::new(1);
    /// let node = McsNode::new();
    /// // SAFETY: `node` is in no queue and outlives the critical section; it is
    /// // not moved before `unlock_raw` returns.
    /// unsafe {
    ///     lock.lock_raw(&node);
    ///     *lock.data_ptr() += 1;
    ///     lock.unlock_raw(&node);
    /// }
    /// assert_eq!(lock.into_inner(), 2);
    /// ```
    ///
    /// # Safety
    ///
    /// * `node` is in no queue: any earlier `lock_raw` (or successful
    ///   `try_lock_raw`) with it has been matched by `unlock_raw`;
    /// * `node` stays valid and in place until `unlock_raw(node)` on this
    ///   lock returns, or forever if the lock is never released: it is not
    ///   moved, dropped, mutably borrowed (so not passed to `with_node` or
    ///   `try_with_node`), or used to acquire another lock in the meantime.
    #[inline]
    pub unsafe fn lock_raw(&self, node: &McsNode) {
        // SAFETY: forwarded caller contract.
        unsafe { self.queue.acquire(node) }
    }

    /// Takes the lock using `node` if it is free; `false` leaves `node`
    /// unused. Prefer [`try_with_node`](Self::try_with_node).
    ///
    /// # Safety
    ///
    /// As [`lock_raw`](Self::lock_raw) when it returns `true`.
    #[inline]
    pub unsafe fn try_lock_raw(&self, node: &McsNode) -> bool {
        // SAFETY: forwarded caller contract.
        unsafe { self.queue.try_acquire(node) }
    }

    /// Releases the lock taken with [`lock_raw`](Self::lock_raw) or
    /// [`try_lock_raw`](Self::try_lock_raw). When it returns, `node` is free
    /// to reuse or drop.
    ///
    /// # Safety
    ///
    /// The calling code holds this lock through `node`, and releases it once.
    #[inline]
    pub unsafe fn unlock_raw(&self, node: &McsNode) {
        // SAFETY: forwarded caller contract.
        unsafe { self.queue.release(node) }
    }
}

impl<T: Default> Default for McsLock<T> {
    fn default() -> Self {
        Self::new(T::default())
    }
}

impl<T: ?Sized> fmt::Debug for McsLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McsLock")
            .field("locked", &self.is_locked())
            .finish_non_exhaustive()
    }
}

/// Releases a [`McsLock`] when a `with_node` critical section ends.
struct Release<'a> {
    queue: &'a Queue,
    node: &'a McsNode,
}

impl Drop for Release<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: built only after `node` acquired `queue`, dropped once.
        unsafe { self.queue.release(self.node) }
    }
}

#[cfg(any(feature = "std", loom))]
mod pool;
#[cfg(any(feature = "std", loom))]
mod raw;

#[cfg(any(feature = "std", loom))]
pub use raw::*;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use lock_api::RawMutex;

    #[test]
    fn caller_node_can_be_reused_across_locks() {
        let a = McsLock::new(1);
        let b = McsLock::new(2);
        let mut node = McsNode::new();
        let sum = a.with_node(&mut node, |x| *x) + b.with_node(&mut node, |x| *x);
        assert_eq!(sum, 3);
        assert!(!a.is_locked() && !b.is_locked());
    }

    #[test]
    fn try_with_node_fails_while_held() {
        let lock = McsLock::new(());
        let mut outer = McsNode::new();
        let mut inner = McsNode::new();
        lock.with_node(&mut outer, |_| {
            assert!(lock.is_locked());
            assert!(lock.try_with_node(&mut inner, |_| ()).is_none());
        });
        assert_eq!(lock.try_with_node(&mut inner, |_| 5), Some(5));
    }

    #[test]
    fn raw_lock_nodes_come_back_to_the_pool() {
        let _serial = pool::POOL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let lock = RawMcsLock::new();
        let guard = lock.lock();
        let node = guard.node as *const McsNode;
        // SAFETY: `guard` came from `lock()` on this lock.
        unsafe { lock.unlock(guard) };
        let guard = lock.lock();
        assert_eq!(guard.node as *const McsNode, node, "node not reused");
        // SAFETY: as above.
        unsafe { lock.unlock(guard) };
    }
}
