//! The paravirt lock's lock-to-head hash table (the kernel's `pv_hash()` and
//! `pv_unhash()`): where a queue head that sleeps under a `SLOW_VAL` lock
//! can be found by the lock's unlocker.
//!
//! Entries are (lock address, node). Only a queue head (or the owner, on its
//! behalf) inserts, and only the unlocker (or the head itself, when its
//! `SLOW_VAL` swap found the lock free) removes, so a lock has at most one
//! entry; a node is in at most one entry, so the table, with more entries
//! than nodes can exist (`4 * MAX_SLOTS`), never fills. The address is only a
//! key, never dereferenced. Insertion probes linearly from a bucket derived
//! from the address, aligned to a cache line of entries, as the kernel's.
//!
//! An entry is claimed with an acquire compare-and-swap of its key and freed
//! with a release store of 0 ([`HashEntry::clear`]), so a freed entry's node
//! is read before the entry is used again.

use core::ptr::{self, NonNull};

use super::super::queued::node_ptr;
use super::stats::events;
use crate::sync::{AtomicPtr, AtomicUsize, Ordering};
use crate::thread_slot::QNode;
#[cfg(not(loom))]
use crate::thread_slot::NODES_PER_SLOT;

/// One entry: a lock's address (0 = free) and its hashed queue head.
pub(super) struct HashEntry {
    pub(super) lock: AtomicUsize,
    pub(super) node: AtomicPtr<QNode>,
}

impl HashEntry {
    #[cfg(not(loom))]
    const fn new() -> Self {
        HashEntry {
            lock: AtomicUsize::new(0),
            node: AtomicPtr::new(ptr::null_mut()),
        }
    }

    #[cfg(loom)]
    fn new() -> Self {
        HashEntry {
            lock: AtomicUsize::new(0),
            node: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Frees the entry after its node has been read (or was never needed).
    /// The release pairs with the acquire compare-and-swap in `hash` that
    /// claims the entry next, so that claim comes after our read of `node`.
    #[inline]
    pub(super) fn clear(&self) {
        self.lock.store(0, Ordering::Release);
    }
}

/// Entries per 64-byte line; probing starts at a line boundary.
const ENTRIES_PER_LINE: usize = 64 / core::mem::size_of::<HashEntry>();

/// 2^16 entries of 16 bytes: more than the 4 * 16383 nodes that can exist,
/// so the table never fills; zero-initialised, so it costs address space
/// until first touched.
#[cfg(not(loom))]
const HASH_BITS: u32 = 16;
#[cfg(not(loom))]
const HASH_LEN: usize = 1 << HASH_BITS;
#[cfg(not(loom))]
const _: () = assert!(HASH_LEN > NODES_PER_SLOT * crate::thread_slot::MAX_SLOTS as usize);

#[cfg(not(loom))]
#[repr(align(64))]
struct HashTable([HashEntry; HASH_LEN]);

#[cfg(not(loom))]
#[inline]
pub(super) fn table() -> &'static [HashEntry] {
    static TABLE: HashTable = HashTable([const { HashEntry::new() }; HASH_LEN]);
    &TABLE.0
}

/// The first bucket to probe for `lock`: a Fibonacci hash of its address,
/// rounded down to a cache line of entries.
#[cfg(not(loom))]
#[inline]
fn bucket(lock: usize) -> usize {
    let hash = (lock as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - HASH_BITS);
    hash as usize & !(ENTRIES_PER_LINE - 1)
}

/// Under loom: a small table per execution (models have a few locks), and
/// every probe starts at 0, because loom replays each execution and an
/// address-derived bucket would differ between runs.
#[cfg(loom)]
pub(super) fn table() -> &'static [HashEntry] {
    loom::lazy_static! {
        static ref TABLE: Vec<HashEntry> = (0..ENTRIES_PER_LINE * 2).map(|_| HashEntry::new()).collect();
    }
    let table: &'static Vec<HashEntry> = &TABLE;
    table
}

#[cfg(loom)]
fn bucket(_lock: usize) -> usize {
    0
}

/// Enters `node` as `lock`'s hashed head (`pv_hash`). The caller makes sure
/// the lock has no entry yet; the table always has a free one.
pub(super) fn hash(lock: usize, node: &'static QNode) -> &'static HashEntry {
    let table = table();
    let mask = table.len() - 1;
    let start = bucket(lock);
    let mut hops = 0;
    loop {
        let entry = &table[(start + hops) & mask];
        // The acquire pairs with the release in `HashEntry::clear` of the
        // entry's previous user.
        if entry.lock.load(Ordering::Relaxed) == 0
            && entry
                .lock
                .compare_exchange(0, lock, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            // Published by the caller's following release (the `SLOW_VAL`
            // swap), or read by this same owner's unlock.
            entry.node.store(node_ptr(node), Ordering::Relaxed);
            if hops > 0 {
                events().hash_hops.add(hops as u64);
            }
            return entry;
        }
        hops += 1;
    }
}

/// Removes `lock`'s entry and returns its node (`pv_unhash`). Called by the
/// unlocker after it read `SLOW_VAL` with acquire, so the entry is visible.
pub(super) fn unhash(lock: usize) -> Option<&'static QNode> {
    let table = table();
    let mask = table.len() - 1;
    let start = bucket(lock);
    for hop in 0..table.len() {
        let entry = &table[(start + hop) & mask];
        if entry.lock.load(Ordering::Relaxed) == lock {
            let node = NonNull::new(entry.node.load(Ordering::Relaxed));
            entry.clear();
            // SAFETY: the pointer was stored from a `&'static QNode` (see
            // `node_ptr`); slot blocks are never freed.
            return node.map(|node| unsafe { &*node.as_ptr() });
        }
    }
    None
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::thread_slot;

    #[test]
    fn table_layout() {
        assert_eq!(ENTRIES_PER_LINE, 4);
        assert!(table().len().is_power_of_two());
        assert_eq!(bucket(0x1234_5678) % ENTRIES_PER_LINE, 0);
        assert!(bucket(usize::MAX) < table().len());
    }

    #[test]
    fn hash_insert_probe_and_remove() {
        // This thread's own nodes, idle while it runs this test.
        let nodes = &thread_slot::current().unwrap().block.nodes[..3];
        // Three keys that land in the same bucket line.
        let base = 0x7000_0000_usize;
        let keys: Vec<usize> = (1..)
            .map(|i| base + i * 4)
            .filter(|&k| bucket(k) == bucket(base))
            .take(3)
            .collect();
        let entries: Vec<_> = keys.iter().zip(nodes).map(|(&k, n)| hash(k, n)).collect();
        assert!(!ptr::eq(entries[0], entries[1]) && !ptr::eq(entries[1], entries[2]));
        for (k, n) in keys.iter().zip(nodes).rev() {
            assert!(ptr::eq(unhash(*k).unwrap(), n));
            assert!(unhash(*k).is_none());
        }
    }
}
