//! Reader-writer locks: every lock the rwsem mixes and torture measure,
//! ksync's rwsems and their peers, behind one trait, [`LabRwLock`], and the
//! registry of their names ([`registry`]).
//!
//! Adding a lock: any `lock_api::RawRwLock` is `lock_api::RwLock<MyRaw, u64>`
//! in [`registry`]; anything else needs one `impl LabRwLock`. Adding an
//! experiment: an [`RwVisitor`], run through `entry.dispatch(visitor)`.

use ksync::stat::LockStatSnapshot;

mod pthread;
mod raw_rwlock;
pub mod registry;
mod rust_peers;

pub use pthread::PthreadRwLock;
pub use raw_rwlock::StatRwLock;

/// A reader-writer lock protecting one `u64`, as the mixes use it.
pub trait LabRwLock: Send + Sync + 'static {
    fn new() -> Self;
    fn read<R>(&self, f: impl FnOnce(&u64) -> R) -> R;
    fn write<R>(&self, f: impl FnOnce(&mut u64) -> R) -> R;
    /// The lock's statistics, for a lock that keeps them ([`StatRwLock`]).
    fn lock_stats(&self) -> Option<LockStatSnapshot> {
        None
    }
    /// Zeroes the statistics and restarts their window (while idle).
    fn reset_lock_stats(&self) {}
}

/// An experiment's loop, generic over the reader-writer lock, run for one
/// registry entry by `Entry::dispatch`.
pub trait RwVisitor {
    type Out;
    fn visit<L: LabRwLock>(self) -> Self::Out;
}
