//! Mutexes: every lock the spin, uncontended, backoff and torture
//! experiments measure, ksync's and its peers', behind one small trait,
//! [`LabLock`], and the registry of their names ([`registry`]).
//!
//! A lock protects some data `D` (see [`Data`]): a bare counter right beside
//! the lock word ("embedded", the case Rik van Riel's proportional backoff
//! targets) or a counter on a cache line of its own ([`Apart`], the lock
//! alone on its line). A [`LockKind`] names a lock independently of `D`, so
//! one registry line yields both layouts.
//!
//! Adding a lock: any `lock_api::RawMutex` is just `Api<MyRaw>` in
//! [`registry`]; anything else needs one `impl LabLock<D>` plus a kind
//! (`kind!` below), a dozen lines. Adding an experiment: a
//! [`MutexVisitor`], run through `entry.dispatch(visitor)`.

use ksync::stat::LockStatSnapshot;

/// The data a critical section writes.
pub trait Data: Default + Send + Sync + 'static {
    /// The counter every critical section increments.
    fn counter(&mut self) -> &mut u64;
}

/// Embedded layout: the counter sits right after the lock word.
impl Data for u64 {
    #[inline(always)]
    fn counter(&mut self) -> &mut u64 {
        self
    }
}

/// Standalone layout: the counter on its own 128-byte block (two cache
/// lines, past the adjacent-line prefetcher), so the lock word is alone.
#[derive(Default, Debug)]
#[repr(align(128))]
pub struct Apart(u64);

impl Data for Apart {
    #[inline(always)]
    fn counter(&mut self) -> &mut u64 {
        &mut self.0
    }
}

/// A lock protecting a `D`, as the experiments use it.
///
/// Implementations must be monomorphised into the benchmark loop: the lab
/// never calls them through a `dyn`, because an indirect call costs about as
/// much as the uncontended lock it would be measuring.
pub trait LabLock<D: Data>: Send + Sync + 'static {
    /// A new, unlocked lock around `D::default()`.
    fn new() -> Self;
    /// Runs `f` on the protected data with the lock held. `f` and its result
    /// are `Send` because a combining lock may run `f` on another thread.
    fn with<R: Send>(&self, f: impl FnOnce(&mut D) -> R + Send) -> R;
    /// The lock's statistics, for a lock that keeps them ([`StatApi`]).
    fn lock_stats(&self) -> Option<LockStatSnapshot> {
        None
    }
    /// Zeroes the statistics and restarts their window; call it while the
    /// lock is idle. Nothing for a lock without statistics.
    fn reset_lock_stats(&self) {}
    /// The lock's own event counters since
    /// [`reset_lock_events`](Self::reset_lock_events), by name: what its slow paths did (steals,
    /// sleeps, hand-offs, closures combined...). Empty for a lock without
    /// counters.
    fn lock_events(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Restarts the event counters' window; call it while the lock is idle.
    fn reset_lock_events(&self) {}
}

/// A lock type for every data layout.
pub trait LockKind: 'static {
    type Lock<D: Data>: LabLock<D>;
}

/// An experiment's loop, generic over the lock kind, run for one registry
/// entry by `Entry::dispatch`.
pub trait MutexVisitor {
    type Out;
    fn visit<K: LockKind>(self) -> Self::Out;
}

/// Declares a unit struct naming the lock family `$lock<D>`.
macro_rules! kind {
    ($(#[$doc:meta])* $kind:ident => $lock:ident) => {
        $(#[$doc])*
        pub struct $kind;
        impl LockKind for $kind {
            type Lock<D: Data> = $lock<D>;
        }
    };
}

mod baselines;
mod ksync_locks;
mod pthread;
mod raw_mutex;
pub mod registry;
mod rust_peers;

pub use baselines::{Busted, Cas};
pub use ksync_locks::{Combining, PvQSpin};
pub use pthread::{Pthread, PthreadSpin};
pub use raw_mutex::{Api, StatApi};
pub use rust_peers::{SpinCrate, SpinCrateTicket, Std};
