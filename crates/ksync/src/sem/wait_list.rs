//! The FIFO lists sleepers queue on (the kernel's `pending_alter` and
//! `pending_const`): arrival order is the scan order.
//!
//! A list keeps its first entry in itself and only the others in a
//! `VecDeque`. A semaphore's alter list sits on the semaphore's first cache
//! line, beside its word (`state::Sem`), and most semaphores have at most
//! one sleeper (sembench's workers each wait on their own): its sleeper then
//! queues, and its waker finds it, on the line both already take for the
//! word. With every entry in the deque's buffer, each post and each queueing
//! also moved the buffer's line between the two CPUs.

use std::collections::VecDeque;

use super::queue::NodeRef;

/// A FIFO of queued sleepers. Only a holder of the lock that protects it
/// touches it (see `mode.rs`).
#[derive(Debug, Default)]
pub(super) struct WaitList {
    /// The oldest entry; `None` only when the list is empty.
    first: Option<NodeRef>,
    /// The entries after the first, oldest first.
    rest: VecDeque<NodeRef>,
}

impl WaitList {
    /// An empty list; allocates nothing.
    pub(super) const fn new() -> WaitList {
        WaitList {
            first: None,
            rest: VecDeque::new(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    pub(super) fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    /// The oldest entry.
    pub(super) fn front(&self) -> Option<NodeRef> {
        self.first
    }

    pub(super) fn push_back(&mut self, node: NodeRef) {
        match self.first {
            None => self.first = Some(node),
            Some(_) => self.rest.push_back(node),
        }
    }

    pub(super) fn pop_front(&mut self) -> Option<NodeRef> {
        let first = self.first.take()?;
        self.first = self.rest.pop_front();
        Some(first)
    }

    /// The entries, oldest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = &NodeRef> {
        self.first.iter().chain(self.rest.iter())
    }

    /// Takes `node` off the list; false if it was not on it.
    pub(super) fn remove(&mut self, node: NodeRef) -> bool {
        if self.first == Some(node) {
            self.first = self.rest.pop_front();
            return true;
        }
        match self.rest.iter().position(|&n| n == node) {
            Some(pos) => {
                self.rest.remove(pos);
                true
            }
            None => false,
        }
    }

    /// Empties the list, oldest entry first.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = NodeRef> + '_ {
        self.first.take().into_iter().chain(self.rest.drain(..))
    }

    /// Moves every entry of `later` to this list's end, in order.
    pub(super) fn append(&mut self, later: &mut WaitList) {
        for node in later.drain() {
            self.push_back(node);
        }
    }

    /// Lets `scan` work on the entries in place, as one slice, oldest first;
    /// `scan` returns how many entries at the slice's front stay queued, in
    /// the order it left them, and the rest leave the list.
    pub(super) fn keep_front(&mut self, scan: impl FnOnce(&mut [NodeRef]) -> usize) {
        let Some(first) = self.first else {
            scan(&mut []);
            return;
        };
        if self.rest.is_empty() {
            let mut one = [first];
            let kept = scan(&mut one);
            self.first = (kept > 0).then_some(one[0]);
        } else {
            self.rest.push_front(first);
            let kept = scan(self.rest.make_contiguous());
            self.rest.truncate(kept);
            self.first = self.rest.pop_front();
        }
    }
}

impl IntoIterator for WaitList {
    type Item = NodeRef;
    type IntoIter = core::iter::Chain<
        core::option::IntoIter<NodeRef>,
        std::collections::vec_deque::IntoIter<NodeRef>,
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.rest)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sem::queue::Sleeper;
    use crate::sem::SemBuf;

    /// `n` distinct nodes to queue (never dereferenced by the list).
    fn nodes(n: usize) -> Vec<Sleeper> {
        let sops = [SemBuf::new(0, -1, 0)];
        (0..n)
            .map(|_| Sleeper::new(&sops, None, 0, false))
            .collect()
    }

    fn entries(list: &WaitList) -> Vec<NodeRef> {
        list.iter().copied().collect()
    }

    #[test]
    fn keeps_arrival_order_across_the_inline_entry() {
        let owned = nodes(3);
        let refs: Vec<NodeRef> = owned.iter().map(NodeRef::new).collect();
        let mut list = WaitList::new();
        assert!(list.is_empty() && list.front().is_none());
        for &node in &refs {
            list.push_back(node);
        }
        assert_eq!((list.len(), list.front()), (3, Some(refs[0])));
        assert_eq!(entries(&list), refs);
        assert_eq!(list.pop_front(), Some(refs[0]));
        // The second moved up into the first's place.
        assert_eq!(list.front(), Some(refs[1]));
        list.push_back(refs[0]);
        assert_eq!(entries(&list), [refs[1], refs[2], refs[0]]);
        assert_eq!(
            list.drain().collect::<Vec<_>>(),
            [refs[1], refs[2], refs[0]]
        );
        assert!(list.is_empty() && list.pop_front().is_none());
    }

    #[test]
    fn removes_an_entry_wherever_it_is() {
        let owned = nodes(4);
        let refs: Vec<NodeRef> = owned.iter().map(NodeRef::new).collect();
        let mut list = WaitList::new();
        for &node in &refs[..3] {
            list.push_back(node);
        }
        assert!(!list.remove(refs[3]));
        assert!(list.remove(refs[1]));
        assert_eq!(entries(&list), [refs[0], refs[2]]);
        assert!(list.remove(refs[0]));
        // The first's place is taken by the next: still a list of one.
        assert_eq!(entries(&list), [refs[2]]);
        assert_eq!((list.len(), list.front()), (1, Some(refs[2])));
        assert!(!list.is_empty());
        assert!(list.remove(refs[2]));
        assert!(list.is_empty());
    }

    #[test]
    fn a_scan_in_place_keeps_what_it_leaves_at_the_front() {
        let owned = nodes(4);
        let refs: Vec<NodeRef> = owned.iter().map(NodeRef::new).collect();
        // One entry (the inline one alone), kept and then dropped.
        let mut list = WaitList::new();
        list.push_back(refs[0]);
        list.keep_front(|e| {
            assert_eq!(e, [refs[0]]);
            1
        });
        assert_eq!(entries(&list), [refs[0]]);
        list.keep_front(|_| 0);
        assert!(list.is_empty());
        // Several: the scan reorders and keeps two.
        for &node in &refs {
            list.push_back(node);
        }
        list.keep_front(|e| {
            assert_eq!(e, refs.as_slice());
            e.swap(0, 3);
            2
        });
        assert_eq!(entries(&list), [refs[3], refs[1]]);
        // An empty list gives an empty slice.
        let mut empty = WaitList::new();
        empty.keep_front(|e| {
            assert!(e.is_empty());
            0
        });
        assert!(empty.is_empty());
    }

    #[test]
    fn append_puts_the_later_list_behind() {
        let owned = nodes(3);
        let refs: Vec<NodeRef> = owned.iter().map(NodeRef::new).collect();
        let (mut a, mut b) = (WaitList::new(), WaitList::new());
        a.push_back(refs[0]);
        b.push_back(refs[1]);
        b.push_back(refs[2]);
        a.append(&mut b);
        assert!(b.is_empty());
        assert_eq!(a.into_iter().collect::<Vec<_>>(), refs);
    }
}
