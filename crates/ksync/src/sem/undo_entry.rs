//! One undo context's adjustments for one set: the kernel's `sem_undo`.
//!
//! Each adjustment is read and written only under the lock that protects its
//! semaphore's value, so relaxed atomics suffice. The set keeps every entry
//! in its list (SETVAL and SETALL clear adjustments in every context), the
//! owning [`SemUndo`](super::SemUndo) applies its entries when dropped, and
//! a sleeper carries its call's entry for the waker that completes it.

use crate::sync::{AtomicI32, Ordering};

/// One context's adjustments for one set (the kernel's `sem_undo`).
pub(crate) struct UndoEntry {
    adj: Box<[AtomicI32]>,
}

impl UndoEntry {
    /// Zero adjustments for a set of `nsems` semaphores.
    pub(super) fn new(nsems: usize) -> Self {
        UndoEntry {
            adj: (0..nsems).map(|_| AtomicI32::new(0)).collect(),
        }
    }

    /// Semaphore `num`'s adjustment. Caller holds the lock protecting `num`.
    pub(super) fn get(&self, num: usize) -> i32 {
        self.adj[num].load(Ordering::Relaxed)
    }

    /// Sets semaphore `num`'s adjustment. Caller holds the lock protecting `num`.
    pub(super) fn set(&self, num: usize, value: i32) {
        self.adj[num].store(value, Ordering::Relaxed);
    }

    pub(super) fn len(&self) -> usize {
        self.adj.len()
    }
}
