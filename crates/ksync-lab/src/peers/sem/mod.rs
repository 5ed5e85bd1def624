//! Semaphore backends: every wait/wake mechanism the sembench, wake and
//! semop experiments drive, behind one trait, [`SemBackend`], and the
//! registry of their names ([`registry`]).
//!
//! The trait is a System V semaphore set, the shape of the kernel's
//! semaphores and of ksync's: `nsems` numbered semaphores, one `semop` call
//! for one or more operations, `semctl`-style reads and writes of values
//! and wait counts, and removal. Backends that are only a row of separate
//! semaphores (glibc's `sem_t`, bare futex words) take the operations
//! sembench needs, a sleeper's `-1` and a poster's `+1`s, and refuse the
//! rest; [`SemBackend::SYSV`] says which kind a backend is.
//!
//! Adding a backend: one `impl SemBackend` in a file of its own and one
//! line in [`registry`]; it then runs in sembench, and with full System V
//! semantics in wake. Adding an experiment: a [`SemVisitor`].

use ksync::stat::LockStatSnapshot;
use std::fmt;

mod futex;
mod futex_batch;
mod ksync_sem;
mod ksync_shared;
mod posix;
pub mod registry;
mod sysv;

pub use futex::{FutexChain, FutexSems};
pub use futex_batch::FutexBatch;
pub use ksync_shared::KsyncShared;
pub use posix::PosixSems;
pub use sysv::SysvSet;

/// How ksync's sets and the `futex-batch` floor share a post's wake-ups
/// out among the woken in this run (`ksync::futex_batch::sharing_mode`),
/// as the tables name it.
pub fn wake_sharing_name() -> &'static str {
    use ksync::futex_batch::SharingMode;
    match ksync::futex_batch::sharing_mode() {
        SharingMode::Off => "off",
        SharingMode::Any => "any",
        SharingMode::Local => "local",
    }
}

/// A semaphore set, as each backend provides it (see the module
/// documentation).
///
/// Like the lock traits, it is only ever used monomorphised (through
/// [`SemVisitor`]): the uncontended ksync operation it measures costs about
/// as much as an indirect call.
pub trait SemBackend: Send + Sync + Sized + 'static {
    /// Whether the backend has System V semantics in full: several
    /// semaphores changed atomically in one call, any operation value,
    /// [`waiters`](Self::waiters), [`value`](Self::value),
    /// [`set_value`](Self::set_value), [`set_all`](Self::set_all), and a
    /// [`remove`](Self::remove) that fails every present and future
    /// operation with [`SemError::Removed`].
    const SYSV: bool;

    /// Whether the set lives outside the process, so that a child forked
    /// after [`create`](Self::create) operates on the very same set through
    /// its copy of the value (the kernel's sets, ksync's shared sets): what
    /// sembench's `--processes` needs.
    const PROCESS_SHARED: bool = false;

    /// One operation in the backend's own form (`sembuf`, `SemBuf`), built
    /// before a measured loop so that the loop times the call alone.
    type Op: Copy + Send + Sync + 'static;

    /// `nsems` semaphores, all 0.
    fn create(nsems: usize) -> Result<Self, String>;

    /// Semaphore `num` changed by `delta`; with `nowait`, an operation that
    /// would block fails instead (`IPC_NOWAIT`).
    fn op(num: u16, delta: i16, nowait: bool) -> Self::Op;

    /// One call of `sops`, all or nothing, blocking until it can complete
    /// (System V `semop`).
    fn semop(&self, sops: &[Self::Op]) -> Result<(), SemError>;

    /// The calls a poster makes for one `semop` of `n` `+1`s: 1 for a set,
    /// `n` for a backend that posts one semaphore per call.
    fn calls_per_post(n: usize) -> u64 {
        let _ = n;
        1
    }

    /// Whether one `semop` may carry `n` operations here, with what to
    /// change if not (the kernel's SEMOPM).
    fn check_batch(n: usize) -> Result<(), String> {
        let _ = n;
        Ok(())
    }

    /// The most threads that may sleep in one set at once, for a backend
    /// whose set has a fixed table of sleepers (`None`: no limit of its own).
    fn max_sleepers() -> Option<usize> {
        None
    }

    /// Removes the set and wakes every sleeper. With [`SYSV`](Self::SYSV)
    /// every present and future operation then fails with
    /// [`SemError::Removed`]; other backends may instead let each present
    /// sleeper return normally once, so their users need a stop flag of
    /// their own (sembench has one).
    fn remove(&self);

    /// Sleepers waiting for semaphore `num` to grow (`GETNCNT`).
    fn waiters(&self, num: usize) -> Result<usize, String> {
        let _ = num;
        Err(not_sysv("GETNCNT"))
    }

    /// Semaphore `num`'s value (`GETVAL`).
    fn value(&self, num: usize) -> Result<i32, String> {
        let _ = num;
        Err(not_sysv("GETVAL"))
    }

    /// Sets semaphore `num` to `value` (`SETVAL`), waking whom it lets through.
    fn set_value(&self, num: usize, value: i32) -> Result<(), String> {
        let _ = (num, value);
        Err(not_sysv("SETVAL"))
    }

    /// Sets every semaphore (`SETALL`); `values` has one per semaphore.
    fn set_all(&self, values: &[u16]) -> Result<(), String> {
        let _ = values;
        Err(not_sysv("SETALL"))
    }

    /// ksync's counters of the work its sets did, for a backend that keeps
    /// them.
    fn counters(&self) -> Option<SetCounters> {
        None
    }

    /// What the backend's sleepers and wakers did (sleeps, wake system
    /// calls, lock waits, polls), for a backend that counts them.
    fn wait_events(&self) -> Option<WaitEvents> {
        None
    }

    /// The lock statistics of the set's lock, for a backend that keeps them.
    fn lock_stats(&self) -> Option<LockStatSnapshot> {
        None
    }

    /// Zeroes the lock statistics and restarts their window (while idle).
    fn reset_lock_stats(&self) {}
}

fn not_sysv(call: &str) -> String {
    format!("{call} needs a backend with System V semantics (sysv, ksync-sem, ksync-shared)")
}

/// The most semaphores a backend without a set of its own holds: as many
/// as an operation's `u16` semaphore number can name.
pub const MAX_SEMS: usize = 1 << 16;

/// Why a semaphore operation did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SemError {
    /// The set was removed: the normal end of a sleeper.
    Removed,
    /// An operation this backend does not have (see [`SemBackend::SYSV`]).
    Unsupported(&'static str),
    /// The call failed; the message names it.
    Failed(String),
}

impl fmt::Display for SemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SemError::Removed => f.write_str("the semaphore set was removed"),
            SemError::Unsupported(what) => write!(f, "not supported: {what}"),
            SemError::Failed(message) => f.write_str(message),
        }
    }
}

/// One operation for the backends that have no native form: which
/// semaphore, by how much, and whether it may block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlainOp {
    pub num: u16,
    pub delta: i16,
    pub nowait: bool,
}

/// ksync's semaphore-set counters (`SemSet::counters`): operation attempts,
/// wait-list entries visited, sleepers woken, futex wakes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetCounters {
    pub attempts: u64,
    pub visited: u64,
    pub wakeups: u64,
    pub futex_wakes: u64,
}

impl SetCounters {
    /// The sum of two sets' counters.
    pub fn plus(self, other: SetCounters) -> SetCounters {
        SetCounters {
            attempts: self.attempts + other.attempts,
            visited: self.visited + other.visited,
            wakeups: self.wakeups + other.wakeups,
            futex_wakes: self.futex_wakes + other.futex_wakes,
        }
    }

    /// Each counter with its name, as records key them
    /// (`{name}_per_burn`, `{name}_per_cycle`, ...).
    pub fn named(&self) -> [(&'static str, u64); 4] {
        [
            ("attempts", self.attempts),
            ("visited", self.visited),
            ("wakeups", self.wakeups),
            ("futex_wakes", self.futex_wakes),
        ]
    }

    /// What was counted between `before` and `self`.
    pub fn since(self, before: SetCounters) -> SetCounters {
        SetCounters {
            attempts: self.attempts - before.attempts,
            visited: self.visited - before.visited,
            wakeups: self.wakeups - before.wakeups,
            futex_wakes: self.futex_wakes - before.futex_wakes,
        }
    }
}

/// What a backend's sleepers and wakers did, counted by the backend: the
/// user-space side of a wait, which the kernel's semaphores keep to
/// themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaitEvents {
    /// `FUTEX_WAIT` calls by sleepers (a sleeper that polled its way to
    /// the post made none).
    pub sleeps: u64,
    /// System calls made to wake sleepers (`io_uring_enter` or `FUTEX_WAKE`).
    pub wake_calls: u64,
    /// Acquisitions of one of the backend's internal locks that found it
    /// taken.
    pub lock_waits: u64,
    /// Polls of a word a sleeper made before its post came or it slept.
    pub polls: u64,
}

/// The part of ksync's counters that says how much work the wakers did.
impl From<ksync::sem::SemCounters> for SetCounters {
    fn from(c: ksync::sem::SemCounters) -> SetCounters {
        SetCounters {
            attempts: c.attempts,
            visited: c.visited,
            wakeups: c.wakeups,
            futex_wakes: c.futex_wakes,
        }
    }
}

/// The part of ksync's counters that says where the waits went.
impl From<ksync::sem::SemCounters> for WaitEvents {
    fn from(c: ksync::sem::SemCounters) -> WaitEvents {
        WaitEvents {
            sleeps: c.parks,
            wake_calls: c.wake_calls,
            lock_waits: c.lock_waits,
            polls: c.polls,
        }
    }
}

impl WaitEvents {
    /// Each count with its name, as records key them (`{name}_per_burn`).
    pub fn named(&self) -> [(&'static str, u64); 4] {
        [
            ("sleeps", self.sleeps),
            ("wake_calls", self.wake_calls),
            ("lock_waits", self.lock_waits),
            ("polls", self.polls),
        ]
    }

    /// The sum of two sets' counts.
    pub fn plus(self, other: WaitEvents) -> WaitEvents {
        WaitEvents {
            sleeps: self.sleeps + other.sleeps,
            wake_calls: self.wake_calls + other.wake_calls,
            lock_waits: self.lock_waits + other.lock_waits,
            polls: self.polls + other.polls,
        }
    }

    /// What was counted between `before` and `self`.
    pub fn since(self, before: WaitEvents) -> WaitEvents {
        WaitEvents {
            sleeps: self.sleeps - before.sleeps,
            wake_calls: self.wake_calls - before.wake_calls,
            lock_waits: self.lock_waits - before.lock_waits,
            polls: self.polls - before.polls,
        }
    }
}

/// An experiment's loop, generic over the semaphore backend, run for one
/// registry entry by `Entry::dispatch`.
pub trait SemVisitor {
    type Out;
    fn visit<B: SemBackend>(self) -> Self::Out;
}

/// A failed ksync `semop` (in-process or shared set) as the lab reports it.
/// Out of line, so that the measured call is ksync's and not the lab's
/// error formatting.
#[cold]
#[inline(never)]
fn ksync_failed(e: ksync::sem::SemError, nsops: usize) -> SemError {
    match e {
        ksync::sem::SemError::Removed => SemError::Removed,
        e => SemError::Failed(format!("semop of {nsops} sops: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    /// What `SYSV` promises, checked the same way on every backend that
    /// claims it.
    fn has_sysv_semantics<B: SemBackend>() {
        assert!(B::SYSV);
        let set = Arc::new(B::create(2).unwrap());
        assert!(set.set_all(&[1]).is_err(), "SETALL of the wrong length");
        set.set_all(&[1, 2]).unwrap();
        assert_eq!((set.value(0), set.value(1)), (Ok(1), Ok(2)));
        // Two semaphores at once, all or nothing.
        set.semop(&[B::op(0, -1, false), B::op(1, -2, false)])
            .unwrap();
        assert!(set
            .semop(&[B::op(1, 1, false), B::op(0, -1, true)])
            .is_err());
        assert_eq!(set.value(1), Ok(0), "a failed call changed nothing");
        set.set_value(0, 3).unwrap();
        assert_eq!(set.value(0), Ok(3));
        // A sleeper is counted, then removal ends its wait and every later call.
        let sleeper = {
            let set = Arc::clone(&set);
            std::thread::spawn(move || set.semop(&[B::op(1, -1, false)]))
        };
        while set.waiters(1).unwrap() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        set.remove();
        assert_eq!(sleeper.join().unwrap(), Err(SemError::Removed));
        assert_eq!(set.semop(&[B::op(0, -1, false)]), Err(SemError::Removed));
    }

    #[test]
    fn the_kernel_and_ksync_agree_on_sysv_semantics() {
        has_sysv_semantics::<SysvSet>();
        has_sysv_semantics::<ksync::sem::SemSet>();
        has_sysv_semantics::<KsyncShared>();
    }

    #[test]
    fn counters_add_and_subtract_by_name() {
        let a = SetCounters {
            attempts: 5,
            visited: 4,
            wakeups: 3,
            futex_wakes: 2,
        };
        let sum = a.plus(a);
        assert_eq!(sum.since(a), a);
        assert_eq!(
            sum.named(),
            [
                ("attempts", 10),
                ("visited", 8),
                ("wakeups", 6),
                ("futex_wakes", 4)
            ]
        );
    }
}
