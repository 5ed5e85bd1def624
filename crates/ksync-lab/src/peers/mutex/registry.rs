//! Every mutex the lab knows, by name, in the order tables list them:
//! ksync's locks, their variants and `+stat` twins, then the peers, the
//! floor, and torture's broken lock.

use super::{
    Api, Busted, Cas, Combining as CombiningKind, MutexVisitor, Pthread, PthreadSpin,
    PvQSpin as PvQSpinKind, SpinCrate, SpinCrateTicket, StatApi, Std,
};
use crate::peers::names;
use crate::peers::registry::{registry, Entry, Info, Origin::*};
use ksync::spin::*;

/// A registered mutex.
pub type MutexEntry = Entry<MutexId>;

/// The refinements from Michel Lespinasse's review of Rik van Riel's
/// auto-tuned backoff (LKML, January 2013): a floor of 32.0 and the
/// condition-free decay.
type Refined =
    AutoTunedPerLock<{ NATIVE_MAX_DELAY }, DefaultDelayStorage, { 32 * DELAY_ONE }, true>;

registry! {
    /// Every mutex, ksync's first.
    pub static MUTEXES: [MutexId, MutexVisitor] = [
        Tas(Api<RawTasLock>) =
            Info::new("tas", Ksync, "ksync test-and-test-and-set, exponential backoff"),
        Ticket(Api<RawTicketLock>) = Info::new("ticket", Ksync, "ksync ticket lock, no backoff"),
        TicketFixed(Api<RawTicketLock<FixedBackoff>>) = Info::new(
            "ticket-fixed",
            Ksync,
            "ksync ticket lock, fixed 50 x waiters-ahead backoff",
        ),
        TicketAuto(Api<RawTicketLock<AutoTunedBackoff>>) = Info::new(
            "ticket-auto",
            Ksync,
            "ksync ticket lock, auto-tuned backoff, one delay per thread",
        ),
        TicketAutoLock(Api<RawTicketLock<AutoTunedPerLock>>) = Info::new(
            "ticket-auto-lock",
            Ksync,
            "ksync ticket lock, auto-tuned backoff per lock address",
        ),
        Mcs(Api<RawMcsLock>) = Info::new("mcs", Ksync, "ksync MCS queue lock, per-thread nodes"),
        QSpin(Api<RawQSpinLock>) =
            Info::new("qspin", Ksync, "ksync 4-byte queued spinlock (kernel qspinlock)"),
        PvQSpin(PvQSpinKind) = Info::new(
            "pv-qspin",
            Ksync,
            "ksync paravirt qspinlock for threads: bounded barging, sleeping queue, hand-off",
        ),
        Combining(CombiningKind) = Info::new(
            "combining",
            Ksync,
            "ksync combining lock: the holder runs the critical sections waiters publish",
        ),
        TicketFixed250(Api<RawTicketLock<FixedBackoff<250>>>) = Info::new(
            "ticket-fixed-250",
            Ksync,
            "ksync ticket lock, fixed 250 x waiters-ahead backoff (variant)",
        )
        .variant(),
        TicketAutoGuest(Api<RawTicketLock<AutoTunedBackoffGuest>>) = Info::new(
            "ticket-auto-guest",
            Ksync,
            "ksync ticket lock, auto-tuned per thread, capped at 16 for guests (variant)",
        )
        .variant(),
        TicketAutoLockGuest(Api<RawTicketLock<AutoTunedPerLockGuest>>) = Info::new(
            "ticket-auto-lock-guest",
            Ksync,
            "ksync ticket lock, auto-tuned per lock, capped at 16 for guests (variant)",
        )
        .variant(),
        TicketAutoLockRefined(Api<RawTicketLock<Refined>>) = Info::new(
            "ticket-auto-lock-refined",
            Ksync,
            "ksync ticket lock, auto-tuned per lock, floor 32 and smooth decay (variant)",
        )
        .variant(),
        TasStat(StatApi<RawTasLock>) =
            Info::new("tas+stat", Ksync, "tas with lock statistics (Stat)").variant(),
        TicketStat(StatApi<RawTicketLock>) =
            Info::new("ticket+stat", Ksync, "ticket with lock statistics (Stat)").variant(),
        TicketFixedStat(StatApi<RawTicketLock<FixedBackoff>>) = Info::new(
            "ticket-fixed+stat",
            Ksync,
            "ticket-fixed with lock statistics (Stat)",
        )
        .variant(),
        TicketAutoStat(StatApi<RawTicketLock<AutoTunedBackoff>>) = Info::new(
            "ticket-auto+stat",
            Ksync,
            "ticket-auto with lock statistics (Stat)",
        )
        .variant(),
        TicketAutoLockStat(StatApi<RawTicketLock<AutoTunedPerLock>>) = Info::new(
            "ticket-auto-lock+stat",
            Ksync,
            "ticket-auto-lock with lock statistics (Stat)",
        )
        .variant(),
        McsStat(StatApi<RawMcsLock>) =
            Info::new("mcs+stat", Ksync, "mcs with lock statistics (Stat)").variant(),
        QSpinStat(StatApi<RawQSpinLock>) = Info::new(
            "qspin+stat",
            Ksync,
            "qspin with lock statistics (Stat, holds sampled 1 in 64)",
        )
        .variant(),
        QSpinStat0(StatApi<RawQSpinLock, 0>) = Info::new(
            "qspin+stat0",
            Ksync,
            "qspin with lock statistics, no hold timing (Stat<_, 0>)",
        )
        .variant(),
        PvQSpinStat(StatApi<RawPvQSpinLock>) =
            Info::new("pv-qspin+stat", Ksync, "pv-qspin with lock statistics (Stat)").variant(),
        ParkingLot(Api<parking_lot::RawMutex>) =
            Info::new("parking_lot", Peer, "parking_lot::Mutex"),
        ParkingLotStat(StatApi<parking_lot::RawMutex>) = Info::new(
            "parking_lot+stat",
            Peer,
            "parking_lot::Mutex's raw lock wrapped in ksync's Stat",
        )
        .variant(),
        ParkingLotFair(Api<parking_lot::RawFairMutex>) =
            Info::new("parking_lot-fair", Peer, "parking_lot::FairMutex"),
        Std(Std) = Info::new("std", Peer, "std::sync::Mutex"),
        Spin(SpinCrate) = Info::new("spin", Peer, "spin::mutex::SpinMutex"),
        SpinTicket(SpinCrateTicket) = Info::new("spin-ticket", Peer, "spin::mutex::TicketMutex"),
        Pthread(Pthread) = Info::new("pthread", Peer, "glibc pthread_mutex_t"),
        PthreadSpin(PthreadSpin) = Info::new("pthread-spin", Peer, "glibc pthread_spinlock_t"),
        CasFloor(Cas) = Info::new("cas-floor", Floor, "bare compare-and-swap + release store"),
        Busted(Busted) = Info::new(
            "busted",
            Broken,
            "deliberately broken: lets every thread in (torture self-test only)",
        )
        .variant(),
    ];
}

/// Every usable mutex: all but torture's broken one.
pub fn usable() -> impl Iterator<Item = &'static MutexEntry> {
    MUTEXES.iter().filter(|e| e.origin != Broken)
}

/// The core entries (those `compare` and the defaults measure).
pub fn core() -> Vec<&'static MutexEntry> {
    usable().filter(|e| e.core).collect()
}

/// The mutexes named in `names` (see [`names::pick`]), or the core ones;
/// `busted` is only for torture ([`pick_for_torture`]).
pub fn chosen(names: &[String]) -> Result<Vec<&'static MutexEntry>, String> {
    let all: Vec<&'static MutexEntry> = usable().collect();
    names::pick(&all, names, "lock", |e| e.core).map(|v| v.into_iter().copied().collect())
}

/// `torture --locks`: any mutex, `busted` included; by default the core
/// ksync locks.
pub fn pick_for_torture(names: &[String]) -> Result<Vec<&'static MutexEntry>, String> {
    names::pick(MUTEXES, names, "lock", |e| e.core && e.is_ksync())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::registry::{stat_base, with_lock_stats};

    #[test]
    fn stat_entries_name_their_bare_lock_and_stay_out_of_the_defaults() {
        assert_eq!(stat_base("qspin+stat"), Some("qspin"));
        assert_eq!(stat_base("qspin+stat0"), Some("qspin"));
        assert_eq!(stat_base("ticket-auto-lock"), None);
        for e in MUTEXES.iter().filter(|e| stat_base(e.name).is_some()) {
            assert!(!e.core, "{} is in the default set", e.name);
            let base = stat_base(e.name).unwrap();
            assert!(
                MUTEXES.iter().any(|b| b.name == base),
                "{} has no bare lock",
                e.name
            );
        }
    }

    #[test]
    fn lock_stats_wraps_ksync_locks_once_and_leaves_peers_bare() {
        let names: Vec<String> = ["qspin", "qspin+stat", "mcs", "std", "parking_lot"]
            .map(String::from)
            .into();
        let got: Vec<&str> = with_lock_stats(chosen(&names).unwrap(), MUTEXES)
            .iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(got, ["qspin+stat", "mcs+stat", "std", "parking_lot"]);
        // Every core ksync lock has a wrapped twin, except the combining
        // lock: `Stat` wraps lock and unlock, while its critical sections are
        // closures (it counts its own events instead).
        for e in with_lock_stats(core(), MUTEXES) {
            assert!(
                !e.is_ksync() || stat_base(e.name).is_some() || e.name == "combining",
                "{}",
                e.name
            );
        }
    }

    #[test]
    fn names_are_unique_and_busted_is_for_torture_only() {
        for (i, a) in MUTEXES.iter().enumerate() {
            assert!(
                MUTEXES[i + 1..].iter().all(|b| b.name != a.name),
                "{}",
                a.name
            );
        }
        assert!(chosen(&["busted".into()]).is_err());
        assert_eq!(
            pick_for_torture(&["busted".into()]).unwrap()[0].name,
            "busted"
        );
        assert!(pick_for_torture(&[])
            .unwrap()
            .iter()
            .all(|e| e.is_ksync() && e.core));
    }
}
