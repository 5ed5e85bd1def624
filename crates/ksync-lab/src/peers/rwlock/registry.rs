//! Every reader-writer lock the lab knows, by name: ksync's rwsems and
//! their `+stat` twins first, then the peers.

use super::{PthreadRwLock, RwVisitor, StatRwLock};
use crate::peers::names;
use crate::peers::registry::{registry, Entry, Info, Origin::*};
use ksync::rwsem::{RawRwSem, RawSpinRwSem};

/// A registered reader-writer lock.
pub type RwEntry = Entry<RwLockId>;

registry! {
    /// Every reader-writer lock, ksync's first.
    pub static RW_LOCKS: [RwLockId, RwVisitor] = [
        RwSem(lock_api::RwLock<RawRwSem, u64>) = Info::new("rwsem", Ksync, "ksync kernel rwsem"),
        SpinRwSem(lock_api::RwLock<RawSpinRwSem, u64>) =
            Info::new("spin-rwsem", Ksync, "ksync 2001 generic rwsem"),
        RwSemStat(StatRwLock<RawRwSem>) = Info::new(
            "rwsem+stat",
            Ksync,
            "ksync kernel rwsem with lock statistics (Stat)",
        )
        .variant(),
        SpinRwSemStat(StatRwLock<RawSpinRwSem>) = Info::new(
            "spin-rwsem+stat",
            Ksync,
            "ksync 2001 generic rwsem with lock statistics (Stat)",
        )
        .variant(),
        ParkingLot(parking_lot::RwLock<u64>) =
            Info::new("parking_lot", Peer, "parking_lot::RwLock"),
        Std(std::sync::RwLock<u64>) = Info::new("std", Peer, "std::sync::RwLock"),
        Spin(spin::rwlock::RwLock<u64>) =
            Info::new("spin", Peer, "spin::rwlock::RwLock (spins)"),
        Pthread(PthreadRwLock) = Info::new("pthread", Peer, "glibc pthread_rwlock_t"),
    ];
}

/// The core reader-writer locks, ksync's first: the default set.
pub fn core() -> Vec<&'static RwEntry> {
    RW_LOCKS.iter().filter(|e| e.core).collect()
}

/// The reader-writer locks named in `names` (see [`names::pick`]), or
/// those for which `default` holds.
pub fn chosen(
    names: &[String],
    default: impl Fn(&RwEntry) -> bool,
) -> Result<Vec<&'static RwEntry>, String> {
    names::pick(RW_LOCKS, names, "reader-writer lock", default)
}
