//! The undo journal that makes every change under the set's lock atomic
//! against a process killed at any instruction.
//!
//! Before the lock holder overwrites a word it appends `(word, old value)` to
//! the journal and publishes the new length; only then does it store the new
//! value. [`Tx::commit`] sets the length back to 0, one store, and that store
//! is the commit point. A process that takes the lock over from a dead holder
//! finds a non-zero length and restores the old values newest first
//! ([`roll_back`]): the set is exactly as it was before the dead holder's
//! transaction began.
//!
//! Nothing a transaction decides may be seen outside the lock before it
//! commits: a sleeper's status word and its futex wake are written after the
//! commit (`queue.rs`), or a rollback could undo a result a sleeper already
//! returned.
//!
//! Barriers: the release store of the length in [`Tx::write`] pairs with the
//! acquire load in [`roll_back`] (through the lock's hand-over), so an entry
//! counted is an entry written; the data store comes after it in program
//! order and is a release store too, so it can never become visible to a
//! later lock holder without its journal entry.

use super::layout::header;
use super::map::Mapping;
use crate::sem::SemError;
use crate::sync::Ordering;

/// An open transaction: the set's lock is held and every store goes through
/// [`write`](Tx::write). Dropped without [`commit`](Tx::commit), it rolls
/// back.
pub(super) struct Tx<'m> {
    map: &'m Mapping,
    len: usize,
}

impl<'m> Tx<'m> {
    /// Opens a transaction; the caller holds the set's lock and no other
    /// transaction is open (the journal is empty after `lock`'s recovery).
    pub(super) fn begin(map: &'m Mapping) -> Tx<'m> {
        debug_assert_eq!(map.load(header::JOURNAL_LEN), 0);
        Tx { map, len: 0 }
    }

    /// Stores `value` in word `index`, journalling the old value first.
    pub(super) fn write(&mut self, index: usize, value: u32) {
        let word = self.map.word(index);
        let old = word.load(Ordering::Relaxed);
        if old == value {
            return;
        }
        let layout = &self.map.layout;
        debug_assert!(!layout.is_journal(index));
        // The capacity covers the largest transaction the module makes
        // (`Layout::new`); running out is a bug, not bad input.
        assert!(self.len < layout.journal_cap, "set journal overflow");
        let entry = layout.journal + 2 * self.len;
        self.map.word(entry).store(index as u32, Ordering::Relaxed);
        self.map.word(entry + 1).store(old, Ordering::Relaxed);
        self.len += 1;
        // Pairs with the acquire load in `roll_back`.
        self.map
            .word(header::JOURNAL_LEN)
            .store(self.len as u32, Ordering::Release);
        word.store(value, Ordering::Release);
    }

    /// The transaction's changes stand from here on.
    pub(super) fn commit(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        if self.len != 0 {
            self.map
                .word(header::JOURNAL_LEN)
                .store(0, Ordering::Release);
            self.len = 0;
        }
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if self.len != 0 {
            // An error path of the module's own: undo like a dead holder's.
            let _ = roll_back(self.map);
            self.len = 0;
        }
    }
}

/// Undoes an uncommitted transaction, newest change first. Called by the
/// lock's next holder after the previous one died (`lock.rs`). A journal
/// whose length or entries do not fit the layout means a corrupt file:
/// `EINVAL`, and nothing is written.
pub(super) fn roll_back(map: &Mapping) -> Result<(), SemError> {
    let layout = &map.layout;
    // Pairs with the release store in `Tx::write`.
    let len = map.load(header::JOURNAL_LEN) as usize;
    if len == 0 {
        return Ok(());
    }
    if len > layout.journal_cap {
        return Err(SemError::Invalid);
    }
    let entry = |i: usize| {
        let at = layout.journal + 2 * i;
        (map.load(at) as usize, map.load(at + 1))
    };
    if (0..len).any(|i| {
        let (index, _) = entry(i);
        index >= layout.words || layout.is_journal(index)
    }) {
        return Err(SemError::Invalid);
    }
    for i in (0..len).rev() {
        let (index, old) = entry(i);
        map.word(index).store(old, Ordering::Release);
    }
    map.word(header::JOURNAL_LEN).store(0, Ordering::Release);
    Ok(())
}
