//! Every semaphore backend the lab knows, by name. Records, tables and
//! JSON use the name; the command line also takes the aliases, among them
//! sembench's own `-o 0` (System V) and `-o 2` (futex).

use super::{
    FutexBatch, FutexChain, FutexSems, KsyncShared, PosixSems, SemBackend, SemVisitor, SysvSet,
};
use crate::peers::names;
use crate::peers::registry::{registry, Entry, Info, Origin::*};

/// A registered semaphore backend.
pub type SemEntry = Entry<SemId>;

registry! {
    /// Every semaphore backend, the kernel's first: the reference.
    pub static SEM_BACKENDS: [SemId, SemVisitor] = [
        Sysv(SysvSet) = Info::new(
            "sysv",
            Peer,
            "the kernel's System V semaphores (semget, semtimedop, semctl)",
        )
        .aliases(&["ipc", "0"]),
        KsyncSem(ksync::sem::SemSet) = Info::new(
            "ksync-sem",
            Ksync,
            "ksync::sem::SemSet: System V semantics in user space",
        )
        .aliases(&["ksync"]),
        KsyncShared(KsyncShared) = Info::new(
            "ksync-shared",
            Ksync,
            "ksync::sem::SharedSemSet: System V semantics shared between processes, in a file",
        )
        .aliases(&["shared"]),
        Futex(FutexSems) = Info::new(
            "futex",
            Peer,
            "a bare futex word per semaphore, one FUTEX_WAKE per post (sembench's -o 2)",
        )
        .aliases(&["2"]),
        FutexBatch(FutexBatch) = Info::new(
            "futex-batch",
            Floor,
            "the floor: futex words and a poll, woken in one batched call as ksync wakes; no SysV semantics",
        )
        .variant(),
        Posix(PosixSems) = Info::new("posix-sem", Peer, "glibc sem_t, one per semaphore")
            .aliases(&["posix"])
            .variant(),
        FutexChain(FutexChain) = Info::new(
            "futex-chain",
            Peer,
            "futex words; each woken sleeper wakes the next of its call (an experiment)",
        )
        .variant(),
    ];
}

/// Whether the backend has System V semantics in full ([`SemBackend::SYSV`]).
struct HasSysv;

impl SemVisitor for HasSysv {
    type Out = bool;
    fn visit<B: SemBackend>(self) -> bool {
        B::SYSV
    }
}

/// Whether the backend's sets are shared between processes ([`SemBackend::PROCESS_SHARED`]).
struct IsProcessShared;

impl SemVisitor for IsProcessShared {
    type Out = bool;
    fn visit<B: SemBackend>(self) -> bool {
        B::PROCESS_SHARED
    }
}

/// The most sleepers one of the backend's sets holds ([`SemBackend::max_sleepers`]).
struct MaxSleepers;

impl SemVisitor for MaxSleepers {
    type Out = Option<usize>;
    fn visit<B: SemBackend>(self) -> Option<usize> {
        B::max_sleepers()
    }
}

impl SemEntry {
    /// Whether the backend has System V semantics in full: only those run
    /// `wake` and the multi-semaphore `semop` cases.
    pub fn has_sysv_semantics(&self) -> bool {
        self.dispatch(HasSysv)
    }

    /// Whether a forked child operates on the parent's sets: only those
    /// run sembench's `--processes`.
    pub fn is_process_shared(&self) -> bool {
        self.dispatch(IsProcessShared)
    }

    /// The most sleepers one set holds, where the backend has a limit.
    pub fn max_sleepers(&self) -> Option<usize> {
        self.dispatch(MaxSleepers)
    }
}

/// The kernel's backend: what every semaphore experiment's ratios compare with.
pub const KERNEL: &str = "sysv";

/// The floor: the best a user-space design could reach
/// (`peers::sem::futex_batch`), the second reference of the contended
/// experiments.
pub const FLOOR: &str = "futex-batch";

/// The core backends, the kernel's first: `compare`'s sembench part.
pub fn core() -> Vec<&'static SemEntry> {
    SEM_BACKENDS.iter().filter(|e| e.core).collect()
}

/// The backend called `name` (or an alias of it).
pub fn by_name(name: &str) -> Option<&'static SemEntry> {
    names::pick(SEM_BACKENDS, &[name.to_string()], "backend", |_| false)
        .ok()
        .and_then(|v| v.first().copied())
}

/// The backends named in `names` (see [`names::pick`]) among those for
/// which `offered` holds; `what` names them in errors.
pub fn chosen(
    names: &[String],
    what: &str,
    offered: impl Fn(&SemEntry) -> bool,
) -> Result<Vec<&'static SemEntry>, String> {
    let offered: Vec<&'static SemEntry> = SEM_BACKENDS.iter().filter(|e| offered(e)).collect();
    names::pick(&offered, names, what, |_| false).map(|v| v.into_iter().copied().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_references_are_registered_under_their_own_names() {
        assert_eq!(by_name(KERNEL).map(|e| e.name), Some(KERNEL));
        assert_eq!(by_name(FLOOR).map(|e| e.name), Some(FLOOR));
        assert!(by_name(KERNEL).unwrap().has_sysv_semantics());
        assert!(!by_name(FLOOR).unwrap().has_sysv_semantics());
    }

    #[test]
    fn the_kernel_is_sysv_under_every_name() {
        for name in ["sysv", "ipc", "0"] {
            assert_eq!(by_name(name).unwrap().name, "sysv");
        }
        assert_eq!(by_name("ksync").unwrap().name, "ksync-sem");
        assert_eq!(by_name("2").unwrap().name, "futex");
        assert!(by_name("sysv-sem").is_none());
    }

    #[test]
    fn only_sets_have_sysv_semantics() {
        let sets: Vec<&str> = SEM_BACKENDS
            .iter()
            .filter(|e| e.has_sysv_semantics())
            .map(|e| e.name)
            .collect();
        assert_eq!(sets, ["sysv", "ksync-sem", "ksync-shared"]);
        let shared: Vec<&str> = SEM_BACKENDS
            .iter()
            .filter(|e| e.is_process_shared())
            .map(|e| e.name)
            .collect();
        assert_eq!(shared, ["sysv", "ksync-shared"]);
        assert_eq!(by_name("shared").unwrap().name, "ksync-shared");
        let core: Vec<&str> = core().iter().map(|e| e.name).collect();
        assert_eq!(core, ["sysv", "ksync-sem", "ksync-shared", "futex"]);
    }
}
