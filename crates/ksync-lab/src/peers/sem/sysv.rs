//! The kernel's System V semaphores, the reference every other backend is
//! measured against: one owned set (`semget(IPC_PRIVATE)`), removed when
//! dropped.

use super::{SemBackend, SemError};
use std::io;

/// A private SysV semaphore set, removed on drop.
pub struct SysvSet {
    id: libc::c_int,
    nsems: usize,
}

impl SysvSet {
    /// `semtimedop(id, sops, NULL)`, retried when a signal interrupts it.
    fn semtimedop(&self, sops: &[libc::sembuf]) -> io::Result<()> {
        loop {
            // SAFETY: `sops` is a valid array of `sops.len()` sembufs, which
            // the kernel only reads (it copies them in), so handing it a
            // pointer from a shared slice is sound; a null timeout means
            // wait without limit.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_semtimedop,
                    self.id,
                    sops.as_ptr(),
                    sops.len(),
                    std::ptr::null::<libc::timespec>(),
                )
            };
            if rc == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    /// `semctl(id, num, cmd, arg)` for GETVAL, GETNCNT, SETVAL and SETALL.
    ///
    /// # Safety
    ///
    /// For SETALL, `arg` is the address of `nsems` u16 values, alive for the call.
    unsafe fn ctl(
        &self,
        num: usize,
        cmd: libc::c_int,
        arg: libc::c_ulong,
    ) -> Result<libc::c_int, String> {
        // SAFETY: for the commands allowed here the variadic argument is
        // ignored, an int (SETVAL), or the caller's array (SETALL).
        let rc = unsafe { libc::semctl(self.id, num as libc::c_int, cmd, arg) };
        if rc < 0 {
            return Err(format!("semctl({cmd}): {}", io::Error::last_os_error()));
        }
        Ok(rc)
    }
}

impl SemBackend for SysvSet {
    const SYSV: bool = true;
    // An id names the set in every process.
    const PROCESS_SHARED: bool = true;
    type Op = libc::sembuf;

    fn create(nsems: usize) -> Result<SysvSet, String> {
        let n = libc::c_int::try_from(nsems).map_err(|_| format!("{nsems} semaphores"))?;
        // SAFETY: semget takes no pointers.
        let id = unsafe { libc::semget(libc::IPC_PRIVATE, n, libc::IPC_CREAT | 0o600) };
        if id < 0 {
            return Err(format!(
                "semget of {nsems} semaphores failed: {} (is SysV IPC available? limits in \
                 /proc/sys/kernel/sem: SEMMSL SEMMNS SEMOPM SEMMNI)",
                io::Error::last_os_error()
            ));
        }
        Ok(SysvSet { id, nsems })
    }

    fn op(num: u16, delta: i16, nowait: bool) -> libc::sembuf {
        libc::sembuf {
            sem_num: num,
            sem_op: delta,
            sem_flg: if nowait {
                libc::IPC_NOWAIT as libc::c_short
            } else {
                0
            },
        }
    }

    #[inline]
    fn semop(&self, sops: &[libc::sembuf]) -> Result<(), SemError> {
        self.semtimedop(sops).map_err(|e| match e.raw_os_error() {
            // EINVAL: the id no longer names a set (removed before the call).
            Some(libc::EIDRM) | Some(libc::EINVAL) => SemError::Removed,
            _ => SemError::Failed(format!("semtimedop of {} sops: {e}", sops.len())),
        })
    }

    /// The kernel's SEMOPM must admit one call of `n` operations.
    fn check_batch(n: usize) -> Result<(), String> {
        let Ok(text) = std::fs::read_to_string("/proc/sys/kernel/sem") else {
            return Ok(());
        };
        let semopm = text
            .split_whitespace()
            .nth(2)
            .and_then(|f| f.parse::<usize>().ok());
        match semopm {
            Some(max) if max < n => Err(format!(
                "the kernel's SEMOPM is {max}, below the {n} operations of one call: \
                 raise it, e.g. echo \"512 32000 512 512\" > /proc/sys/kernel/sem"
            )),
            _ => Ok(()),
        }
    }

    /// IPC_RMID: sleepers get EIDRM. A second removal just fails.
    fn remove(&self) {
        // SAFETY: IPC_RMID takes no argument.
        unsafe { libc::semctl(self.id, 0, libc::IPC_RMID) };
    }

    fn waiters(&self, num: usize) -> Result<usize, String> {
        // SAFETY: GETNCNT takes no argument.
        unsafe { self.ctl(num, libc::GETNCNT, 0) }.map(|n| n as usize)
    }

    fn value(&self, num: usize) -> Result<i32, String> {
        // SAFETY: GETVAL takes no argument.
        unsafe { self.ctl(num, libc::GETVAL, 0) }
    }

    fn set_value(&self, num: usize, value: i32) -> Result<(), String> {
        // SAFETY: SETVAL takes an int.
        unsafe { self.ctl(num, libc::SETVAL, value as libc::c_ulong) }.map(drop)
    }

    fn set_all(&self, values: &[u16]) -> Result<(), String> {
        if values.len() != self.nsems {
            return Err(format!(
                "SETALL needs {} values, not {}",
                self.nsems,
                values.len()
            ));
        }
        // SAFETY: `values` holds one u16 per semaphore (checked above) and
        // outlives the call.
        unsafe { self.ctl(0, libc::SETALL, values.as_ptr() as libc::c_ulong) }.map(drop)
    }
}

impl Drop for SysvSet {
    fn drop(&mut self) {
        self.remove();
    }
}
