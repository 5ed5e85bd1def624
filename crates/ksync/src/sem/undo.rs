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
//! set that is gone is simply skipped when the context drops.

use std::sync::{Arc, Mutex, Weak};

use super::complete::Changed;
use super::error::SemError;
use super::queue::Wakeups;
use super::stamp::current_pid;
use super::state::SetShared;
use super::undo_entry::UndoEntry;
use super::SEMVMX;
use crate::sync::Ordering;

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

impl SetShared {
    /// Enters a new context's entry in the set's list (the kernel's
    /// `list_id`), unless the set is gone.
    pub(super) fn register_undo(&self, entry: Arc<UndoEntry>) -> Result<(), SemError> {
        let mut list = self.undo_list.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_deleted() {
            return Err(SemError::Removed);
        }
        list.push(entry);
        Ok(())
    }

    /// Applies a dropped context's adjustments (the kernel's `exit_sem`).
    pub(super) fn apply_undo(&self, entry: &Arc<UndoEntry>) {
        let held = self.lock_global();
        let mut wakeups = Wakeups::default();
        if !self.is_deleted() {
            self.undo_list
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|e| !Arc::ptr_eq(e, entry));
            let pid = current_pid();
            for num in 0..entry.len() {
                let adj = entry.get(num);
                if adj != 0 {
                    // Never blocks: Linux clamps instead, at both ends.
                    let value = (self.value(&held, num) + adj).clamp(0, SEMVMX);
                    self.set_value(&held, num, value);
                    self.sems[num].pid.store(pid, Ordering::Relaxed);
                }
            }
            self.smart_update(&held, Changed::All, true, &mut wakeups);
        }
        self.unlock(held);
        self.wake(wakeups, &self.global.counters);
    }

    /// Zeroes adjustment `num` (or all, `None`) in every context. Global lock held.
    pub(super) fn clear_undo(&self, num: Option<usize>) {
        let list = self.undo_list.lock().unwrap_or_else(|e| e.into_inner());
        for entry in list.iter() {
            match num {
                Some(n) => entry.set(n, 0),
                None => (0..entry.len()).for_each(|n| entry.set(n, 0)),
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sem::SemSet;

    #[test]
    fn applying_clamps_at_both_ends_and_forgets_the_entry() {
        let set = SemSet::new(3).unwrap();
        set.set_all(&[1, (SEMVMX - 1) as u16, 4]).unwrap();
        let shared = set.shared();
        let entry = Arc::new(UndoEntry::new(3));
        shared.register_undo(Arc::clone(&entry)).unwrap();
        entry.set(0, -5);
        entry.set(1, 5);
        entry.set(2, -1);
        shared.apply_undo(&entry);
        assert_eq!(set.get_all().unwrap(), [0, SEMVMX as u16, 3]);
        assert!(shared.undo_list.lock().unwrap().is_empty());
        assert_eq!(set.pid(1), Ok(current_pid()));
    }

    #[test]
    fn clearing_zeroes_one_adjustment_or_all_in_every_context() {
        let set = SemSet::new(2).unwrap();
        let shared = set.shared();
        let entries = [Arc::new(UndoEntry::new(2)), Arc::new(UndoEntry::new(2))];
        for entry in &entries {
            shared.register_undo(Arc::clone(entry)).unwrap();
            entry.set(0, 3);
            entry.set(1, -2);
        }
        shared.clear_undo(Some(1));
        assert!(entries.iter().all(|e| e.get(0) == 3 && e.get(1) == 0));
        shared.clear_undo(None);
        assert!(entries.iter().all(|e| e.get(0) == 0 && e.get(1) == 0));
        // A removed set takes no new entries.
        set.remove().unwrap();
        let late = Arc::new(UndoEntry::new(2));
        assert_eq!(shared.register_undo(late), Err(SemError::Removed));
    }
}
