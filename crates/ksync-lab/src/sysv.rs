//! The kernel's System V semaphores, which every semaphore experiment runs
//! beside `ksync::sem`: one owned set, removed when dropped.

use std::io;

/// A private SysV semaphore set (`semget(IPC_PRIVATE)`), removed on drop.
pub struct SysvSet {
    id: libc::c_int,
}

impl SysvSet {
    /// A new set of `nsems` semaphores, all 0.
    pub fn new(nsems: usize) -> Result<SysvSet, String> {
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
        Ok(SysvSet { id })
    }

    /// `semtimedop(id, sops, NULL)`, retried when a signal interrupts it.
    pub fn op(&self, sops: &mut [libc::sembuf]) -> io::Result<()> {
        loop {
            // SAFETY: `sops` is a valid array of `sops.len()` sembufs; a null
            // timeout means wait without limit.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_semtimedop,
                    self.id,
                    sops.as_mut_ptr(),
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
    pub unsafe fn ctl(
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

    /// IPC_RMID: sleepers get EIDRM. A second removal just fails.
    pub fn remove(&self) {
        // SAFETY: IPC_RMID takes no argument.
        unsafe { libc::semctl(self.id, 0, libc::IPC_RMID) };
    }
}

impl Drop for SysvSet {
    fn drop(&mut self) {
        self.remove();
    }
}
