//! `semctl`'s command and argument, decoded from glibc's ABI.
//!
//! glibc passes the `union semun` on as one machine word (the kernel's
//! `unsigned long arg`); which member it is depends on the command. Decoding
//! it once, here, gives every backend a typed command whose pointers can only
//! be used through checked copies.

use libc::{c_int, c_ulong, semid_ds, seminfo};

use crate::errno::Errno;
use crate::user::UserPtr;

/// One `semctl` request: every command glibc exposes, with its argument.
#[derive(Debug, Clone, Copy)]
pub enum Command {
    /// `IPC_STAT`: the set's `semid_ds`.
    Stat(UserPtr<semid_ds>),
    /// `SEM_STAT`: like `IPC_STAT`, but `semid` is an index into the table of
    /// sets; returns the set's id.
    StatIndex(UserPtr<semid_ds>),
    /// `SEM_STAT_ANY`: `SEM_STAT` without the read-permission check.
    StatIndexAny(UserPtr<semid_ds>),
    /// `IPC_SET`: owner and mode from a `semid_ds`.
    Set(UserPtr<semid_ds>),
    /// `IPC_RMID`.
    Remove,
    /// `IPC_INFO`: the limits; returns the highest index in use.
    Info(UserPtr<seminfo>),
    /// `SEM_INFO`: the limits with usage counts; returns the highest index.
    UsageInfo(UserPtr<seminfo>),
    /// `GETALL`: every value, into an array of `unsigned short`.
    GetAll(UserPtr<u16>),
    /// `SETALL`: every value, from an array of `unsigned short`.
    SetAll(UserPtr<u16>),
    /// `GETVAL`.
    GetValue,
    /// `GETPID`: the process that last changed the semaphore.
    GetPid,
    /// `GETNCNT`: sleepers waiting for the value to grow.
    GetWaitingForIncrease,
    /// `GETZCNT`: sleepers waiting for zero.
    GetWaitingForZero,
    /// `SETVAL`.
    SetValue(c_int),
}

impl Command {
    /// Decodes `cmd` and the word glibc passed for the union. An unknown
    /// command is `EINVAL`, as in the kernel.
    pub fn decode(cmd: c_int, arg: c_ulong) -> Result<Command, Errno> {
        let addr = arg as usize;
        Ok(match cmd {
            libc::IPC_STAT => Command::Stat(UserPtr::new(addr)),
            libc::SEM_STAT => Command::StatIndex(UserPtr::new(addr)),
            libc::SEM_STAT_ANY => Command::StatIndexAny(UserPtr::new(addr)),
            libc::IPC_SET => Command::Set(UserPtr::new(addr)),
            libc::IPC_RMID => Command::Remove,
            libc::IPC_INFO => Command::Info(UserPtr::new(addr)),
            libc::SEM_INFO => Command::UsageInfo(UserPtr::new(addr)),
            libc::GETALL => Command::GetAll(UserPtr::new(addr)),
            libc::SETALL => Command::SetAll(UserPtr::new(addr)),
            libc::GETVAL => Command::GetValue,
            libc::GETPID => Command::GetPid,
            libc::GETNCNT => Command::GetWaitingForIncrease,
            libc::GETZCNT => Command::GetWaitingForZero,
            // The union's `int val` is the word's low 32 bits on these
            // little-endian targets; the kernel truncates the same way.
            libc::SETVAL => Command::SetValue(arg as u32 as c_int),
            _ => return Err(Errno::EINVAL),
        })
    }

    /// The command number, as the kernel's system call takes it.
    pub fn number(self) -> c_int {
        match self {
            Command::Stat(_) => libc::IPC_STAT,
            Command::StatIndex(_) => libc::SEM_STAT,
            Command::StatIndexAny(_) => libc::SEM_STAT_ANY,
            Command::Set(_) => libc::IPC_SET,
            Command::Remove => libc::IPC_RMID,
            Command::Info(_) => libc::IPC_INFO,
            Command::UsageInfo(_) => libc::SEM_INFO,
            Command::GetAll(_) => libc::GETALL,
            Command::SetAll(_) => libc::SETALL,
            Command::GetValue => libc::GETVAL,
            Command::GetPid => libc::GETPID,
            Command::GetWaitingForIncrease => libc::GETNCNT,
            Command::GetWaitingForZero => libc::GETZCNT,
            Command::SetValue(_) => libc::SETVAL,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_round_trips_through_its_number() {
        let all = [
            libc::IPC_STAT,
            libc::SEM_STAT,
            libc::SEM_STAT_ANY,
            libc::IPC_SET,
            libc::IPC_RMID,
            libc::IPC_INFO,
            libc::SEM_INFO,
            libc::GETALL,
            libc::SETALL,
            libc::GETVAL,
            libc::GETPID,
            libc::GETNCNT,
            libc::GETZCNT,
            libc::SETVAL,
        ];
        for cmd in all {
            assert_eq!(Command::decode(cmd, 0).unwrap().number(), cmd);
        }
    }

    #[test]
    fn unknown_commands_are_einval() {
        for cmd in [-1, 4, 10, 21, libc::IPC_STAT | 0x100] {
            assert_eq!(Command::decode(cmd, 0).unwrap_err(), Errno::EINVAL);
        }
    }

    #[test]
    fn setval_takes_the_low_32_bits_as_a_signed_int() {
        let word = 0xdead_beef_ffff_ffff_u64 as c_ulong;
        assert!(matches!(
            Command::decode(libc::SETVAL, word).unwrap(),
            Command::SetValue(-1)
        ));
        assert!(matches!(
            Command::decode(libc::SETVAL, 7).unwrap(),
            Command::SetValue(7)
        ));
    }

    #[test]
    fn pointer_commands_keep_the_address() {
        match Command::decode(libc::GETALL, 0x1234).unwrap() {
            Command::GetAll(ptr) => assert_eq!(ptr.addr(), 0x1234),
            other => panic!("decoded as {other:?}"),
        }
    }
}
