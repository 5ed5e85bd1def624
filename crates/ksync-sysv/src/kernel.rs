//! The pass-through backend: the kernel's own sets, through its system calls.
//!
//! Every call goes to the kernel, so a program under `LD_PRELOAD` sees exactly
//! what it would see without the library. Where the ABI layer's checked
//! copies can stand in for the kernel's own without changing a single result,
//! they do (the `timespec` and `semid_ds` read in, every structure and array
//! written out), so the comparison tests exercise them; the rest of the
//! pointers go to the kernel untouched.
//!
//! The system calls go through `syscall`, which is not a cancellation point,
//! as glibc's own wrappers for these calls are not. The exports disable
//! cancellation around these calls all the same: the checked copies' pipe
//! fallback (`read`, `write`) is one, and an asynchronous cancel must not
//! unwind out of the middle of the library.

use libc::{c_int, c_long, c_ulong, key_t, sembuf, semid_ds, seminfo, timespec};

use crate::backend::Backend;
use crate::command::Command;
use crate::errno::Errno;
use crate::user::UserPtr;

/// The kernel's System V semaphore sets.
pub struct KernelSets;

/// A system call's raw return: the value, or the errno it set.
fn checked(ret: c_long) -> Result<c_int, Errno> {
    if ret == -1 {
        Err(Errno::last())
    } else {
        // The System V calls return an int's worth (an id, a value, a count).
        Ok(ret as c_int)
    }
}

fn semctl(semid: c_int, semnum: c_int, cmd: c_int, arg: c_ulong) -> Result<c_int, Errno> {
    // SAFETY: semctl reads or writes through `arg` only for the commands that
    // take a pointer, and the kernel checks that pointer (EFAULT).
    checked(unsafe { libc::syscall(libc::SYS_semctl, semid, semnum, cmd, arg) })
}

/// A command whose result is a structure the kernel fills: the kernel fills
/// the library's copy, the library hands it on with a checked copy.
fn filled<T: crate::user::Plain>(
    semid: c_int,
    semnum: c_int,
    cmd: c_int,
    out: UserPtr<T>,
) -> Result<c_int, Errno> {
    // SAFETY: semid_ds and seminfo are plain C structures; all zeroes is a
    // valid value of each.
    let mut local: T = unsafe { core::mem::zeroed() };
    let ret = semctl(semid, semnum, cmd, &mut local as *mut T as c_ulong)?;
    out.write(&local)?;
    Ok(ret)
}

impl Backend for KernelSets {
    fn get(&self, key: key_t, nsems: c_int, flags: c_int) -> Result<c_int, Errno> {
        // SAFETY: semget takes no pointers.
        checked(unsafe { libc::syscall(libc::SYS_semget, key, nsems, flags) })
    }

    fn operate(
        &self,
        semid: c_int,
        sops: UserPtr<sembuf>,
        nsops: usize,
        timeout: Option<UserPtr<timespec>>,
    ) -> Result<(), Errno> {
        // The kernel reads the timeout before it checks anything else, so
        // reading it here first gives the same EFAULT in the same place.
        let local = timeout.map(UserPtr::read).transpose()?;
        let timeout_addr = local
            .as_ref()
            .map_or(core::ptr::null(), |ts| ts as *const timespec);
        // SAFETY: `timeout_addr` is null or points to `local`, alive for the
        // call; the kernel checks `sops` itself (EFAULT) after its E2BIG and
        // EINVAL checks, an order the library keeps by handing it on.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_semtimedop,
                semid,
                sops.addr(),
                nsops,
                timeout_addr,
            )
        };
        checked(ret).map(|_| ())
    }

    fn control(&self, semid: c_int, semnum: c_int, command: Command) -> Result<c_int, Errno> {
        let cmd = command.number();
        match command {
            Command::Stat(out) | Command::StatIndex(out) | Command::StatIndexAny(out) => {
                filled::<semid_ds>(semid, semnum, cmd, out)
            }
            Command::Info(out) | Command::UsageInfo(out) => {
                filled::<seminfo>(semid, semnum, cmd, out)
            }
            Command::Set(input) => {
                // The kernel rejects a negative id before it reads the
                // structure, and reads the structure before it looks the set up.
                if semid < 0 {
                    return Err(Errno::EINVAL);
                }
                let local = input.read()?;
                semctl(semid, semnum, cmd, &local as *const semid_ds as c_ulong)
            }
            Command::GetAll(out) => {
                // GETALL needs read permission, as IPC_STAT does, so asking
                // for the size first fails exactly when GETALL would.
                // SAFETY: as in `filled`.
                let mut ds: semid_ds = unsafe { core::mem::zeroed() };
                semctl(
                    semid,
                    0,
                    libc::IPC_STAT,
                    &mut ds as *mut semid_ds as c_ulong,
                )?;
                let mut values = vec![0u16; ds.sem_nsems as usize];
                let ret = semctl(semid, semnum, cmd, values.as_mut_ptr() as c_ulong)?;
                out.write_slice(&values)?;
                Ok(ret)
            }
            // SETALL needs only alter permission, so the library cannot learn
            // the set's size the way GETALL does; the kernel reads the array.
            Command::SetAll(input) => semctl(semid, semnum, cmd, input.addr() as c_ulong),
            Command::SetValue(value) => semctl(semid, semnum, cmd, value as u32 as c_ulong),
            Command::Remove
            | Command::GetValue
            | Command::GetPid
            | Command::GetWaitingForIncrease
            | Command::GetWaitingForZero => semctl(semid, semnum, cmd, 0),
        }
    }
}
