//! The errors of [`SemSet`](super::SemSet) calls, one variant per errno the
//! kernel's `semop`, `semtimedop` and `semctl` return for the same mistake.

use core::fmt;

/// Why a semaphore call failed. Each variant is one errno of the kernel's
/// `semop(2)` / `semctl(2)`, checked in the kernel's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SemError {
    /// `E2BIG`: more than [`SEMOPM`](super::SEMOPM) operations in one call.
    TooBig,
    /// `EINVAL`: no operations; a set of 0 or more than
    /// [`SEMMSL`](super::SEMMSL) semaphores; a semaphore number out of range
    /// in a control call; `SEM_UNDO` without an undo context; a value array of
    /// the wrong length.
    Invalid,
    /// `EFBIG`: an operation names a semaphore the set does not have.
    FileTooBig,
    /// `ERANGE`: a value would exceed [`SEMVMX`](super::SEMVMX) (or a
    /// `SETVAL` / `SETALL` value is outside `0..=SEMVMX`), or an undo
    /// adjustment would leave the kernel's range.
    Range,
    /// `EAGAIN`: the operation would block and its `IPC_NOWAIT` flag is set,
    /// or the timeout expired.
    Again,
    /// `EIDRM`: the set was removed, while the caller slept or before.
    Removed,
    /// `EINTR`: a signal handler ran while the caller slept in a
    /// process-shared set ([`SharedSemSet`](super::SharedSemSet)); like the
    /// kernel's `semop`, the call is not restarted.
    Interrupted,
    /// `EEXIST`: a process-shared set with this key exists and
    /// `IPC_CREAT | IPC_EXCL` asked for a new one.
    Exists,
    /// `ENOENT`: no process-shared set has this key (or id) and
    /// `IPC_CREAT` was not given.
    NotFound,
    /// `EACCES`: the caller lacks the read or alter permission a call needs.
    Access,
    /// `EPERM`: `IPC_SET` or `IPC_RMID` by a process that is neither the
    /// set's owner, its creator, nor privileged.
    Permission,
    /// `ENOSPC`: `SEMMNI` sets exist already, or a set's table of processes
    /// or sleepers is full.
    NoSpace,
    /// `ENOMEM`: the file system could not hold a new set, or mapping it failed.
    NoMemory,
}

impl SemError {
    /// The errno the kernel returns for this error.
    pub fn errno(self) -> i32 {
        match self {
            SemError::TooBig => 7,      // E2BIG
            SemError::Invalid => 22,    // EINVAL
            SemError::FileTooBig => 27, // EFBIG
            SemError::Range => 34,      // ERANGE
            SemError::Again => 11,      // EAGAIN
            SemError::Removed => 43,    // EIDRM
            SemError::Interrupted => 4, // EINTR
            SemError::Exists => 17,     // EEXIST
            SemError::NotFound => 2,    // ENOENT
            SemError::Access => 13,     // EACCES
            SemError::Permission => 1,  // EPERM
            SemError::NoSpace => 28,    // ENOSPC
            SemError::NoMemory => 12,   // ENOMEM
        }
    }

    /// The error for a kernel errno, if `semop` or `semctl` can return it here.
    pub fn from_errno(errno: i32) -> Option<SemError> {
        [
            SemError::TooBig,
            SemError::Invalid,
            SemError::FileTooBig,
            SemError::Range,
            SemError::Again,
            SemError::Removed,
            SemError::Interrupted,
            SemError::Exists,
            SemError::NotFound,
            SemError::Access,
            SemError::Permission,
            SemError::NoSpace,
            SemError::NoMemory,
        ]
        .into_iter()
        .find(|e| e.errno() == errno)
    }

    /// The status word value a waker publishes for this error (see `queue`).
    /// Only errors a waker decides are published (`EIDRM`, `EAGAIN`,
    /// `ERANGE`, `EFBIG`...); `EPERM` and `ENOENT` would read as the status
    /// word's own `PARKED` and `DONE`.
    pub(crate) fn to_code(self) -> u32 {
        let code = self.errno() as u32;
        debug_assert!(code > 2, "{self:?} cannot be published as a status");
        code
    }
}

impl fmt::Display for SemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SemError::TooBig => "too many operations in one call (E2BIG): at most SEMOPM = 500",
            SemError::Invalid => "invalid argument (EINVAL)",
            SemError::FileTooBig => "semaphore number out of range for this set (EFBIG)",
            SemError::Range => "value or undo adjustment out of range (ERANGE): at most 32767",
            SemError::Again => "operation would block (EAGAIN): IPC_NOWAIT or timeout",
            SemError::Removed => "the semaphore set was removed (EIDRM)",
            SemError::Interrupted => "interrupted by a signal while sleeping (EINTR)",
            SemError::Exists => "a set with this key exists (EEXIST)",
            SemError::NotFound => "no set with this key or id (ENOENT)",
            SemError::Access => "permission denied by the set's mode (EACCES)",
            SemError::Permission => {
                "only the owner, the creator or a process with CAP_SYS_ADMIN may do this (EPERM)"
            }
            SemError::NoSpace => {
                "no room: SEMMNI sets, or a set's process or sleeper table is full (ENOSPC)"
            }
            SemError::NoMemory => "could not create or map the set's file (ENOMEM)",
        })
    }
}

impl std::error::Error for SemError {}

/// What a control call on semaphore `num` of a set of `nsems` gives when
/// there is no such semaphore: `EINVAL`, as the kernel's `semctl`. Both set
/// types check it the same way.
pub(super) fn check_num(num: usize, nsems: usize) -> Result<(), SemError> {
    if num < nsems {
        Ok(())
    } else {
        Err(SemError::Invalid)
    }
}

#[cfg(test)]
mod tests {
    use super::SemError;

    #[test]
    fn errno_round_trips_and_matches_libc() {
        for (e, errno) in [
            (SemError::TooBig, libc::E2BIG),
            (SemError::Invalid, libc::EINVAL),
            (SemError::FileTooBig, libc::EFBIG),
            (SemError::Range, libc::ERANGE),
            (SemError::Again, libc::EAGAIN),
            (SemError::Removed, libc::EIDRM),
            (SemError::Interrupted, libc::EINTR),
            (SemError::Exists, libc::EEXIST),
            (SemError::NotFound, libc::ENOENT),
            (SemError::Access, libc::EACCES),
            (SemError::Permission, libc::EPERM),
            (SemError::NoSpace, libc::ENOSPC),
            (SemError::NoMemory, libc::ENOMEM),
        ] {
            assert_eq!(e.errno(), errno, "{e:?}");
            assert_eq!(SemError::from_errno(errno), Some(e));
            assert!(!e.to_string().is_empty(), "{e:?} has no message");
        }
        assert_eq!(SemError::from_errno(libc::ENOSYS), None);
    }
}
