//! The one interface between glibc's ABI and whatever implements the sets.
//!
//! `exports` decodes C arguments and hands them here; a backend implements
//! System V semantics. Pointers arrive as [`UserPtr`]s, so a backend decides
//! when to copy (the kernel's order of checks puts some copies before the set
//! is looked up and some after) and a bad pointer becomes `EFAULT`, never a
//! fault in the library.

use libc::{c_int, key_t, sembuf, timespec};

use crate::command::Command;
use crate::errno::Errno;
use crate::user::UserPtr;

/// System V semaphore sets as glibc's wrappers see them.
pub trait Backend: Sync {
    /// `semget(key, nsems, semflg)`: the set's id.
    fn get(&self, key: key_t, nsems: c_int, flags: c_int) -> Result<c_int, Errno>;

    /// `semtimedop(semid, sops, nsops, timeout)`; `semop` is this with no
    /// timeout. `nsops` is as the caller passed it (glibc's `size_t`).
    fn operate(
        &self,
        semid: c_int,
        sops: UserPtr<sembuf>,
        nsops: usize,
        timeout: Option<UserPtr<timespec>>,
    ) -> Result<(), Errno>;

    /// The part of [`operate`](Self::operate) that finishes a call without
    /// reaching a cancellation point, tried first with cancellation left as
    /// the caller has it: `true` when it did the call, which succeeded;
    /// `false`, with nothing done, when the call needs
    /// `operate`, which then runs from the start with cancellation disabled.
    /// The default never finishes one.
    fn operate_at_once(
        &self,
        _semid: c_int,
        _sops: UserPtr<sembuf>,
        _nsops: usize,
        _timeout: Option<UserPtr<timespec>>,
    ) -> bool {
        false
    }

    /// `semctl(semid, semnum, cmd, arg)`: what the command returns.
    fn control(&self, semid: c_int, semnum: c_int, command: Command) -> Result<c_int, Errno>;
}
