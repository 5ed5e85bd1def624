//! [`RawMcsLock`]: the MCS lock as a [`lock_api::RawMutex`], its queue nodes
//! taken from a per-thread pool (`pool.rs`) and carried in the guard.

use super::{pool, Queue};
use core::fmt;

/// An MCS queue lock as a [`lock_api::RawMutex`], with queue nodes from a
/// per-thread pool (needs `std`).
///
/// ```
/// use ksync::spin::McsMutex;
///
/// let log = McsMutex::new(Vec::new());
/// std::thread::scope(|s| {
///     for t in 0..3 {
///         let log = &log;
///         s.spawn(move || log.lock().push(t));
///     }
/// });
/// let mut log = log.into_inner();
/// log.sort();
/// assert_eq!(log, [0, 1, 2]);
/// ```
pub struct RawMcsLock {
    queue: Queue,
}

/// A [`lock_api::Mutex`] guarded by a [`RawMcsLock`].
pub type McsMutex<T> = lock_api::Mutex<RawMcsLock, T>;
/// The guard of a [`McsMutex`]; not `Send`, since it carries the node of
/// the thread that locked.
pub type McsMutexGuard<'a, T> = lock_api::MutexGuard<'a, RawMcsLock, T>;

/// The state a [`RawMcsLock`] guard carries: the queue node this thread
/// acquired with. Not `Send`: the node belongs to the locking thread's pool.
///
/// ```
/// use ksync::spin::RawMcsLock;
/// use lock_api::RawMutex;
///
/// let lock = RawMcsLock::new();
/// let node = lock.lock(); // a `McsGuardNode`
/// assert!(lock.is_locked());
/// // SAFETY: `node` came from `lock()` on this lock, on this thread.
/// unsafe { lock.unlock(node) };
/// assert!(!lock.is_locked());
/// ```
///
/// ```compile_fail
/// // The guard stays on the thread whose node it carries.
/// let m = ksync::spin::McsMutex::new(0);
/// let guard = m.lock();
/// std::thread::scope(|s| {
///     s.spawn(move || drop(guard));
/// });
/// ```
pub struct McsGuardNode {
    pub(super) node: &'static super::McsNode,
    _not_send: lock_api::GuardNoSend,
}

impl fmt::Debug for McsGuardNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McsGuardNode")
            .field("node", &(self.node as *const super::McsNode))
            .finish()
    }
}

impl RawMcsLock {
    /// A new, unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RawMcsLock {
            queue: Queue::new(),
        }
    }

    /// A new, unlocked lock (loom's atomics have no `const` constructor).
    #[cfg(loom)]
    pub fn new() -> Self {
        RawMcsLock {
            queue: Queue::new(),
        }
    }
}

impl Default for RawMcsLock {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for RawMcsLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawMcsLock")
            .field("locked", &self.queue.is_locked())
            .finish()
    }
}

// SAFETY: the MCS queue admits one holder at a time (module
// documentation). Pool nodes are never freed and a node leaves the pool
// only while no queue references it, so `Queue`'s node contract holds
// even if a guard is forgotten or its thread exits.
unsafe impl lock_api::RawMutex for RawMcsLock {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[cfg(loom)]
    const INIT: Self = panic!("use RawMcsLock::new() under loom");

    type Guard = McsGuardNode;

    #[inline]
    fn lock(&self) -> McsGuardNode {
        let node = pool::take();
        // SAFETY: a node from the pool is in no queue and is never freed.
        unsafe { self.queue.acquire(node) };
        McsGuardNode {
            node,
            _not_send: lock_api::GuardNoSend::new(),
        }
    }

    #[inline]
    fn try_lock(&self) -> Option<McsGuardNode> {
        if self.queue.is_locked() {
            return None;
        }
        let node = pool::take();
        // SAFETY: as in `lock`.
        if unsafe { self.queue.try_acquire(node) } {
            Some(McsGuardNode {
                node,
                _not_send: lock_api::GuardNoSend::new(),
            })
        } else {
            pool::give(node);
            None
        }
    }

    #[inline]
    unsafe fn unlock(&self, guard: McsGuardNode) {
        // SAFETY: the caller holds this lock with `guard`, whose node is
        // the one that acquired it.
        unsafe { self.queue.release(guard.node) };
        // `release` returned: nothing references the node any more.
        pool::give(guard.node);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.queue.is_locked()
    }
}

// SAFETY: `unlock` already hands the lock to the next queued thread.
unsafe impl lock_api::RawMutexFair for RawMcsLock {
    #[inline]
    unsafe fn unlock_fair(&self, guard: McsGuardNode) {
        // SAFETY: forwarded caller contract: the lock is held with `guard`.
        unsafe { lock_api::RawMutex::unlock(self, guard) }
    }
}
