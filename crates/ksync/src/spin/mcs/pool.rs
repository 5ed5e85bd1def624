//! Queue nodes for [`RawMcsLock`](super::RawMcsLock): leaked once, reused
//! forever.
//!
//! * Each thread keeps a free list (a thread-local `Vec`); `take` pops from
//!   it, `give` pushes onto it, so locking after the first time does not
//!   allocate (the `Vec` grows only when a thread holds more locks at once
//!   than ever before).
//! * A thread's free list moves to a global pool when the thread exits, and a
//!   thread with an empty free list takes from there before allocating, so a
//!   program that keeps creating threads reuses their nodes.
//! * A node is never freed: one held by a forgotten guard may be written by
//!   later lockers of that lock forever.
//!
//! Under loom the free list is a `loom::thread_local!` and there is no global
//! pool (nodes are per model execution; leaking them is harmless).

use super::McsNode;
use core::cell::RefCell;
use crossbeam_utils::CachePadded;

/// A thread's unused nodes.
struct FreeList(Vec<&'static McsNode>);

#[cfg(not(loom))]
impl Drop for FreeList {
    fn drop(&mut self) {
        global::give_all(&mut self.0);
    }
}

#[cfg(not(loom))]
std::thread_local! {
    static FREE: RefCell<FreeList> = const { RefCell::new(FreeList(Vec::new())) };
}

#[cfg(loom)]
loom::thread_local! {
    static FREE: RefCell<FreeList> = RefCell::new(FreeList(Vec::new()));
}

/// A node in no queue, for this thread to lock with.
#[inline]
pub(super) fn take() -> &'static McsNode {
    let local = FREE
        .try_with(|free| free.try_borrow_mut().ok()?.0.pop())
        .ok()
        .flatten();
    match local {
        Some(node) => node,
        None => take_slow(),
    }
}

#[cold]
fn take_slow() -> &'static McsNode {
    global::take().unwrap_or_else(|| {
        // Padded so that no two threads' nodes share a cache line.
        let node: &'static CachePadded<McsNode> =
            Box::leak(Box::new(CachePadded::new(McsNode::new())));
        node
    })
}

/// Returns a node that is in no queue (its `release` has returned).
#[inline]
pub(super) fn give(node: &'static McsNode) {
    let kept = FREE
        .try_with(|free| match free.try_borrow_mut() {
            Ok(mut free) => {
                free.0.push(node);
                true
            }
            Err(_) => false,
        })
        .unwrap_or(false);
    if !kept {
        // This thread's free list is gone (thread-local destructors are
        // running) or busy (re-entered): keep the node elsewhere.
        global::give(node);
    }
}

#[cfg(not(loom))]
mod global {
    use super::McsNode;
    use std::sync::{Mutex, PoisonError};

    static POOL: Mutex<Vec<&'static McsNode>> = Mutex::new(Vec::new());

    fn pool() -> std::sync::MutexGuard<'static, Vec<&'static McsNode>> {
        // The pool is a plain list; a panic elsewhere cannot break it.
        POOL.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn take() -> Option<&'static McsNode> {
        pool().pop()
    }

    pub(super) fn give(node: &'static McsNode) {
        pool().push(node);
    }

    pub(super) fn give_all(nodes: &mut Vec<&'static McsNode>) {
        if !nodes.is_empty() {
            pool().append(nodes);
        }
    }
}

#[cfg(loom)]
mod global {
    use super::McsNode;

    pub(super) fn take() -> Option<&'static McsNode> {
        None
    }

    pub(super) fn give(_node: &'static McsNode) {}
}

/// Serialises the tests that watch the global pool (every test thread
/// that locks takes its first node from there).
#[cfg(all(test, not(loom)))]
pub(super) static POOL_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_thread_reuses_its_nodes() {
        let _serial = POOL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let first = take();
        give(first);
        let again = take();
        assert!(core::ptr::eq(first, again), "pooled node not reused");
        let second = take();
        assert!(!core::ptr::eq(again, second));
        give(second);
        give(again);
    }

    #[test]
    fn an_exited_threads_nodes_go_to_the_global_pool() {
        let _serial = POOL_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let (a, b) = std::thread::spawn(|| {
            let (a, b) = (take(), take());
            give(a);
            give(b);
            (a as *const McsNode as usize, b as *const McsNode as usize)
        })
        .join()
        .unwrap();
        // The next thread without a free list of its own gets them back.
        let reused = std::thread::spawn(|| {
            let (x, y) = (take(), take());
            give(x);
            give(y);
            [x as *const McsNode as usize, y as *const McsNode as usize]
        })
        .join()
        .unwrap();
        assert!(
            reused.contains(&a) && reused.contains(&b),
            "exited thread's nodes not reused"
        );
    }
}
