//! glibc's POSIX semaphores: one unnamed `sem_t` per semaphore. No set
//! semantics: a call takes one `-1` (`sem_wait`) or any number of `+1`s
//! (one `sem_post` each).

use super::{PlainOp, SemBackend, SemError, MAX_SEMS};
use std::cell::UnsafeCell;

/// A row of `sem_t`, each at a fixed heap address until dropped.
pub struct PosixSems {
    sems: Box<[UnsafeCell<libc::sem_t>]>,
}

// SAFETY: POSIX semaphores are made to be used from many threads at once;
// each stays at its boxed address until Drop, which runs after all users.
unsafe impl Sync for PosixSems {}
// SAFETY: an initialised sem_t nobody waits on may be destroyed from any thread.
unsafe impl Send for PosixSems {}

impl PosixSems {
    fn sem(&self, num: u16) -> Result<*mut libc::sem_t, SemError> {
        self.sems
            .get(usize::from(num))
            .map(UnsafeCell::get)
            .ok_or_else(|| SemError::Failed(format!("no semaphore {num}")))
    }

    fn down(&self, num: u16, nowait: bool) -> Result<(), SemError> {
        let sem = self.sem(num)?;
        loop {
            // SAFETY: an initialised semaphore at a stable address.
            let rc = unsafe {
                if nowait {
                    libc::sem_trywait(sem)
                } else {
                    libc::sem_wait(sem)
                }
            };
            if rc == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                let call = if nowait { "sem_trywait" } else { "sem_wait" };
                return Err(SemError::Failed(format!("{call}: {e}")));
            }
        }
    }

    fn post(&self, num: u16) -> Result<(), SemError> {
        let sem = self.sem(num)?;
        // SAFETY: an initialised semaphore at a stable address.
        if unsafe { libc::sem_post(sem) } != 0 {
            return Err(SemError::Failed(format!(
                "sem_post: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }
}

impl SemBackend for PosixSems {
    const SYSV: bool = false;
    type Op = PlainOp;

    fn create(nsems: usize) -> Result<PosixSems, String> {
        if nsems > MAX_SEMS {
            return Err(format!("at most {MAX_SEMS} semaphores, not {nsems}"));
        }
        // SAFETY: sem_t is plain data; zeroed is a valid place to sem_init.
        let sems: Box<[UnsafeCell<libc::sem_t>]> = (0..nsems)
            .map(|_| UnsafeCell::new(unsafe { std::mem::zeroed() }))
            .collect();
        for (made, sem) in sems.iter().enumerate() {
            // SAFETY: `sem` is writable, stable storage for one semaphore,
            // process-private, value 0.
            if unsafe { libc::sem_init(sem.get(), 0, 0) } != 0 {
                let e = std::io::Error::last_os_error();
                for done in &sems[..made] {
                    // SAFETY: initialised just above; nobody uses it yet.
                    unsafe { libc::sem_destroy(done.get()) };
                }
                return Err(format!("sem_init: {e}"));
            }
        }
        Ok(PosixSems { sems })
    }

    fn op(num: u16, delta: i16, nowait: bool) -> PlainOp {
        PlainOp { num, delta, nowait }
    }

    // Always inline, as for `SemSet`: the measured call is `sem_t`'s.
    #[inline(always)]
    fn semop(&self, sops: &[PlainOp]) -> Result<(), SemError> {
        match sops {
            [down] if down.delta == -1 => self.down(down.num, down.nowait),
            ups if ups.iter().all(|op| op.delta == 1) => {
                ups.iter().try_for_each(|op| self.post(op.num))
            }
            _ => Err(SemError::Unsupported(
                "POSIX semaphores take one -1 or any number of +1s per call",
            )),
        }
    }

    fn calls_per_post(n: usize) -> u64 {
        n as u64
    }

    /// Posts every semaphore once: each present sleeper returns normally.
    fn remove(&self) {
        for num in 0..self.sems.len() {
            let _ = self.post(num as u16);
        }
    }
}

impl Drop for PosixSems {
    fn drop(&mut self) {
        for sem in self.sems.iter() {
            // SAFETY: initialised in `create`, and nobody waits any more.
            unsafe { libc::sem_destroy(sem.get()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posts_and_downs_pair_up_and_sets_are_refused() {
        let sems = PosixSems::create(2).unwrap();
        let op = PosixSems::op;
        sems.semop(&[op(0, 1, false), op(1, 1, false)]).unwrap();
        sems.semop(&[op(1, -1, false)]).unwrap();
        assert!(matches!(
            sems.semop(&[op(1, -1, true)]),
            Err(SemError::Failed(_))
        ));
        assert!(matches!(
            sems.semop(&[op(0, -1, false), op(1, -1, false)]),
            Err(SemError::Unsupported(_))
        ));
        assert!(matches!(
            sems.semop(&[op(7, 1, false)]),
            Err(SemError::Failed(_))
        ));
        assert!(sems.value(0).is_err());
    }
}
