//! Every lock the lab knows, ksync's and its peers', by name.

use crate::bench::{self, Contended};
use crate::peers::{CasFloor, LabLock, PthreadMutex, PthreadSpin};
use std::time::Duration;

/// Where a lock comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Ksync,
    Peer,
    /// The bare compare-and-swap + store: not a usable lock, the floor.
    Floor,
}

/// One lock, with its benchmark loops monomorphised.
pub struct LockEntry {
    pub name: &'static str,
    pub origin: Origin,
    pub about: &'static str,
    pub uncontended: fn(u64, u32) -> f64,
    pub contended: fn(usize, Duration, u32) -> Contended,
}

fn entry<L: LabLock>(name: &'static str, origin: Origin, about: &'static str) -> LockEntry {
    LockEntry {
        name,
        origin,
        about,
        uncontended: bench::uncontended::<L>,
        contended: bench::contended::<L>,
    }
}

type KsyncMutex<R> = lock_api::Mutex<R, u64>;

/// Every lock, ksync's first, in the order tables list them.
pub fn registry() -> Vec<LockEntry> {
    use ksync::spin::*;
    use Origin::*;
    vec![
        entry::<KsyncMutex<RawTasLock>>(
            "tas",
            Ksync,
            "ksync test-and-test-and-set, exponential backoff",
        ),
        entry::<KsyncMutex<RawTicketLock>>("ticket", Ksync, "ksync ticket lock, no backoff"),
        entry::<KsyncMutex<RawTicketLock<FixedBackoff>>>(
            "ticket-fixed",
            Ksync,
            "ksync ticket lock, fixed 50 x waiters-ahead backoff",
        ),
        entry::<KsyncMutex<RawTicketLock<AutoTunedBackoff>>>(
            "ticket-auto",
            Ksync,
            "ksync ticket lock, auto-tuned backoff, one delay per thread",
        ),
        entry::<KsyncMutex<RawTicketLock<AutoTunedPerLock>>>(
            "ticket-auto-lock",
            Ksync,
            "ksync ticket lock, auto-tuned backoff per lock address",
        ),
        entry::<KsyncMutex<RawMcsLock>>("mcs", Ksync, "ksync MCS queue lock, per-thread nodes"),
        entry::<KsyncMutex<RawQSpinLock>>(
            "qspin",
            Ksync,
            "ksync 4-byte queued spinlock (kernel qspinlock)",
        ),
        entry::<KsyncMutex<RawPvQSpinLock>>(
            "pv-qspin",
            Ksync,
            "ksync paravirt qspinlock: sleeps, arrivals steal",
        ),
        entry::<parking_lot::Mutex<u64>>("parking_lot", Peer, "parking_lot::Mutex"),
        entry::<parking_lot::FairMutex<u64>>("parking_lot-fair", Peer, "parking_lot::FairMutex"),
        entry::<std::sync::Mutex<u64>>("std", Peer, "std::sync::Mutex"),
        entry::<spin::mutex::SpinMutex<u64>>("spin", Peer, "spin::mutex::SpinMutex"),
        entry::<spin::mutex::TicketMutex<u64>>("spin-ticket", Peer, "spin::mutex::TicketMutex"),
        entry::<PthreadMutex>("pthread", Peer, "glibc pthread_mutex_t"),
        entry::<PthreadSpin>("pthread-spin", Peer, "glibc pthread_spinlock_t"),
        entry::<CasFloor>("cas-floor", Floor, "bare compare-and-swap + release store"),
    ]
}
