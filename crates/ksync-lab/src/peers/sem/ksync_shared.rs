//! ksync's process-shared semaphore sets, `ksync::sem::SharedSemSet`: the
//! kernel's System V semantics in a file every process maps (`$KSYNC_SEM_DIR`,
//! else `/dev/shm/ksync-sem`), with no server.
//!
//! The backend owns one private set (`IPC_PRIVATE`, mode 0600), removed
//! when the backend value is dropped, on every path that drops it, so a
//! run leaves no set file behind. `SharedSemSet` itself never removes its
//! set on drop (other processes may still use it), hence the wrapper.

use super::{ksync_failed, SemBackend, SemError, SetCounters, WaitEvents};
use ksync::sem::shared::NSLEEP;
use ksync::sem::{SemBuf, SharedSemSet, IPC_CREAT, IPC_NOWAIT, IPC_PRIVATE};

/// A private process-shared set, removed on drop.
pub struct KsyncShared {
    set: SharedSemSet,
}

impl KsyncShared {
    /// The set's id, as `ipcs` lists it.
    #[cfg(test)]
    pub fn id(&self) -> i32 {
        self.set.id()
    }
}

impl SemBackend for KsyncShared {
    const SYSV: bool = true;
    const PROCESS_SHARED: bool = true;
    type Op = SemBuf;

    fn create(nsems: usize) -> Result<Self, String> {
        let set = SharedSemSet::open(IPC_PRIVATE, nsems, IPC_CREAT | 0o600).map_err(|e| {
            format!(
                "SharedSemSet::open of {nsems} semaphores in {}: {e}",
                ksync::sem::shared::sem_dir().display()
            )
        })?;
        Ok(KsyncShared { set })
    }

    fn op(num: u16, delta: i16, nowait: bool) -> SemBuf {
        SemBuf::new(num, delta, if nowait { IPC_NOWAIT } else { 0 })
    }

    // Always inline, as for `SemSet`.
    #[inline(always)]
    fn semop(&self, sops: &[SemBuf]) -> Result<(), SemError> {
        // The conversion stays out of line, as for `SemSet`.
        self.set
            .semop(sops)
            .map_err(|e| ksync_failed(e, sops.len()))
    }

    fn remove(&self) {
        // A second removal fails with Removed; either way the set is gone.
        let _ = self.set.remove();
    }

    fn max_sleepers() -> Option<usize> {
        Some(NSLEEP)
    }

    fn waiters(&self, num: usize) -> Result<usize, String> {
        self.set.ncnt(num).map_err(|e| format!("ncnt: {e}"))
    }

    fn value(&self, num: usize) -> Result<i32, String> {
        self.set
            .get_value(num)
            .map_err(|e| format!("get_value: {e}"))
    }

    fn set_value(&self, num: usize, value: i32) -> Result<(), String> {
        self.set
            .set_value(num, value)
            .map_err(|e| format!("set_value: {e}"))
    }

    fn set_all(&self, values: &[u16]) -> Result<(), String> {
        self.set
            .set_all(values)
            .map_err(|e| format!("set_all: {e}"))
    }

    /// This process's share: with workers in other processes, theirs are
    /// missing (`SharedSemSet::counters`).
    fn counters(&self) -> Option<SetCounters> {
        Some(self.set.counters().into())
    }

    fn wait_events(&self) -> Option<WaitEvents> {
        Some(self.set.counters().into())
    }
}

impl Drop for KsyncShared {
    fn drop(&mut self) {
        self.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_the_backend_removes_its_set_file() {
        let set = KsyncShared::create(3).unwrap();
        let id = set.id();
        assert!(ksync::sem::shared::set_ids().contains(&id));
        set.semop(&[KsyncShared::op(0, 1, false)]).unwrap();
        assert_eq!(set.value(0), Ok(1));
        drop(set);
        assert!(!ksync::sem::shared::set_ids().contains(&id));
    }
}
