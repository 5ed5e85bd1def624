//! `SEM_UNDO`: adjustments that are applied when their owner goes away.
//!
//! In the kernel every process has one undo list (shared by its threads) with
//! one `sem_undo` per set it used, and `exit_sem` applies them when the last
//! thread exits. In user space there is no process exit to hook, so the
//! owner is a [`SemUndo`] value: create one, pass it to
//! [`SemSet::semop_undo`](super::SemSet::semop_undo), and dropping it applies
//! every adjustment it collected. Share it between threads to get the
//! kernel's per-process behaviour (a thread that exits does not apply
//! anything, LTP semop05); give each thread its own to get per-thread undo.
//!
//! An [`UndoEntry`] is the kernel's `sem_undo`: one adjustment per semaphore
//! for one (context, set) pair. The set keeps a strong reference in its list
//! (SETVAL and SETALL clear adjustments in every context, removal forgets
//! them); the context keeps the entry and a weak reference to the set, so a
//! set that is gone is simply skipped when the context drops. Each adjustment
//! is read and written only under the lock that protects its semaphore's
//! value, so relaxed atomics suffice.

use std::sync::{Arc, Mutex, Weak};

use super::state::SetShared;
use super::SemError;
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

struct UndoLink {
    set: Weak<SetShared>,
    entry: Arc<UndoEntry>,
}

/// An undo context: the owner of `SEM_UNDO` adjustments, the user-space
/// stand-in for a process's undo list.
///
/// Every operation with `SEM_UNDO` passed to
/// [`SemSet::semop_undo`](super::SemSet::semop_undo) with this context adds
/// the negation of its change to the context's adjustment for that
/// semaphore. When the context is dropped, each adjustment is added back to
/// its semaphore, clamped to `0..=SEMVMX` (never blocking, as Linux does at
/// process exit), and sleepers that can now proceed are completed.
///
/// ```
/// use ksync::sem::{SemBuf, SemSet, SemUndo, SEM_UNDO};
///
/// let set = SemSet::new(1)?;
/// set.set_value(0, 1)?;
/// {
///     let undo = SemUndo::new();
///     // Take the semaphore; if this owner "dies", it is given back.
///     set.semop_undo(&[SemBuf::new(0, -1, SEM_UNDO)], &undo, None)?;
///     assert_eq!(set.get_value(0)?, 0);
/// } // dropped: the adjustment +1 is applied
/// assert_eq!(set.get_value(0)?, 1);
/// # Ok::<(), ksync::sem::SemError>(())
/// ```
#[derive(Default)]
pub struct SemUndo {
    links: Mutex<Vec<UndoLink>>,
}

impl SemUndo {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }

    /// This context's entry for `set`, created and registered with the set on
    /// first use (the kernel's `find_alloc_undo`). The most recently used set
    /// moves to the front, as the kernel does with its per-process list.
    pub(super) fn entry_for(&self, set: &Arc<SetShared>) -> Result<Arc<UndoEntry>, SemError> {
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pos) = links
            .iter()
            .position(|l| core::ptr::eq(l.set.as_ptr(), Arc::as_ptr(set)))
        {
            let link = links.remove(pos);
            let entry = Arc::clone(&link.entry);
            links.insert(0, link);
            return Ok(entry);
        }
        let entry = Arc::new(UndoEntry::new(set.nsems()));
        set.register_undo(Arc::clone(&entry))?;
        links.insert(
            0,
            UndoLink {
                set: Arc::downgrade(set),
                entry: Arc::clone(&entry),
            },
        );
        Ok(entry)
    }
}

impl Drop for SemUndo {
    fn drop(&mut self) {
        let links = core::mem::take(self.links.get_mut().unwrap_or_else(|e| e.into_inner()));
        for link in links {
            if let Some(set) = link.set.upgrade() {
                set.apply_undo(&link.entry);
            }
        }
    }
}

impl core::fmt::Debug for SemUndo {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let sets = self.links.lock().map_or(0, |l| l.len());
        f.debug_struct("SemUndo").field("sets", &sets).finish()
    }
}
