//! Every mutex the lab knows, ksync's and its peers', by name.

use crate::bench::{self, SpinConfig, SpinResult, TwoLockConfig, TwoLockResult};
use crate::peers::{
    Api, Busted, Cas, LockKind, Pthread, PthreadSpin, SpinCrate, SpinCrateTicket, StatApi, Std,
};
use crate::torture::{self, TortureConfig, TortureResult};

/// Where a lock comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Ksync,
    Peer,
    /// The bare compare-and-swap + store: not a usable lock, the floor.
    Floor,
    /// Deliberately broken (torture's self-test).
    Broken,
}

/// One lock, with every experiment's loop monomorphised for it.
pub struct LockEntry {
    pub name: &'static str,
    pub origin: Origin,
    /// Part of the default set of `compare`, `spin` and `uncontended`;
    /// variants (other backoff constants) are measured when named.
    pub core: bool,
    pub about: &'static str,
    pub uncontended: fn(u64, u32) -> f64,
    pub spin: fn(&SpinConfig) -> SpinResult,
    pub two_lock: fn(&TwoLockConfig) -> TwoLockResult,
    pub torture: fn(&TortureConfig) -> TortureResult,
}

impl LockEntry {
    pub fn is_ksync(&self) -> bool {
        self.origin == Origin::Ksync
    }
}

fn entry<K: LockKind>(name: &'static str, origin: Origin, about: &'static str) -> LockEntry {
    LockEntry {
        name,
        origin,
        core: true,
        about,
        uncontended: bench::uncontended::<K::Lock<u64>>,
        spin: bench::spin::<K>,
        two_lock: bench::two_lock::<K>,
        torture: torture::exclusive::<K>,
    }
}

fn variant<K: LockKind>(name: &'static str, about: &'static str) -> LockEntry {
    LockEntry {
        core: false,
        ..entry::<K>(name, Origin::Ksync, about)
    }
}

/// A lock wrapped in `ksync::stat::Stat` (lock statistics): never in the
/// default set, so defaults measure the bare locks.
fn stat<K: LockKind>(name: &'static str, origin: Origin, about: &'static str) -> LockEntry {
    LockEntry {
        core: false,
        ..entry::<K>(name, origin, about)
    }
}

/// The suffix of the entries that keep lock statistics: `qspin+stat` is
/// `qspin` wrapped in `Stat`, `qspin+stat0` the same without hold timing.
pub const STAT_SUFFIX: &str = "+stat";

/// For `X+stat` or `X+stat0` (any `X+stat...`), `X`.
pub fn stat_base(name: &str) -> Option<&str> {
    name.find(STAT_SUFFIX).map(|i| &name[..i])
}

/// `--lock-stats`: each ksync lock of `entries` replaced by its `+stat`
/// entry where there is one (peers stay bare, as references), without
/// naming one twice.
pub fn with_lock_stats(entries: Vec<LockEntry>) -> Vec<LockEntry> {
    let mut out: Vec<LockEntry> = Vec::with_capacity(entries.len());
    for e in entries {
        let e = if e.is_ksync() && stat_base(e.name).is_none() {
            let wanted = format!("{}{STAT_SUFFIX}", e.name);
            registry()
                .into_iter()
                .find(|s| s.name == wanted)
                .unwrap_or(e)
        } else {
            e
        };
        if out.iter().all(|o| o.name != e.name) {
            out.push(e);
        }
    }
    out
}

/// Seed 004's refinements: a floor of 32.0 and the condition-free decay.
type Refined = ksync::spin::AutoTunedPerLock<
    { ksync::spin::NATIVE_MAX_DELAY },
    ksync::spin::DefaultDelayStorage,
    { 32 * ksync::spin::DELAY_ONE },
    true,
>;

/// Every lock, ksync's first, in the order tables list them.
pub fn registry() -> Vec<LockEntry> {
    use ksync::spin::*;
    use Origin::*;
    vec![
        entry::<Api<RawTasLock>>(
            "tas",
            Ksync,
            "ksync test-and-test-and-set, exponential backoff",
        ),
        entry::<Api<RawTicketLock>>("ticket", Ksync, "ksync ticket lock, no backoff"),
        entry::<Api<RawTicketLock<FixedBackoff>>>(
            "ticket-fixed",
            Ksync,
            "ksync ticket lock, fixed 50 x waiters-ahead backoff",
        ),
        entry::<Api<RawTicketLock<AutoTunedBackoff>>>(
            "ticket-auto",
            Ksync,
            "ksync ticket lock, auto-tuned backoff, one delay per thread",
        ),
        entry::<Api<RawTicketLock<AutoTunedPerLock>>>(
            "ticket-auto-lock",
            Ksync,
            "ksync ticket lock, auto-tuned backoff per lock address",
        ),
        entry::<Api<RawMcsLock>>("mcs", Ksync, "ksync MCS queue lock, per-thread nodes"),
        entry::<Api<RawQSpinLock>>(
            "qspin",
            Ksync,
            "ksync 4-byte queued spinlock (kernel qspinlock)",
        ),
        entry::<Api<RawPvQSpinLock>>(
            "pv-qspin",
            Ksync,
            "ksync paravirt qspinlock: sleeps, arrivals steal",
        ),
        variant::<Api<RawTicketLock<FixedBackoff<250>>>>(
            "ticket-fixed-250",
            "ksync ticket lock, fixed 250 x waiters-ahead backoff (variant)",
        ),
        variant::<Api<RawTicketLock<AutoTunedBackoffGuest>>>(
            "ticket-auto-guest",
            "ksync ticket lock, auto-tuned per thread, capped at 16 for guests (variant)",
        ),
        variant::<Api<RawTicketLock<AutoTunedPerLockGuest>>>(
            "ticket-auto-lock-guest",
            "ksync ticket lock, auto-tuned per lock, capped at 16 for guests (variant)",
        ),
        variant::<Api<RawTicketLock<Refined>>>(
            "ticket-auto-lock-refined",
            "ksync ticket lock, auto-tuned per lock, floor 32 and smooth decay (variant)",
        ),
        stat::<StatApi<RawTasLock>>("tas+stat", Ksync, "tas with lock statistics (Stat)"),
        stat::<StatApi<RawTicketLock>>("ticket+stat", Ksync, "ticket with lock statistics (Stat)"),
        stat::<StatApi<RawTicketLock<FixedBackoff>>>(
            "ticket-fixed+stat",
            Ksync,
            "ticket-fixed with lock statistics (Stat)",
        ),
        stat::<StatApi<RawTicketLock<AutoTunedBackoff>>>(
            "ticket-auto+stat",
            Ksync,
            "ticket-auto with lock statistics (Stat)",
        ),
        stat::<StatApi<RawTicketLock<AutoTunedPerLock>>>(
            "ticket-auto-lock+stat",
            Ksync,
            "ticket-auto-lock with lock statistics (Stat)",
        ),
        stat::<StatApi<RawMcsLock>>("mcs+stat", Ksync, "mcs with lock statistics (Stat)"),
        stat::<StatApi<RawQSpinLock>>(
            "qspin+stat",
            Ksync,
            "qspin with lock statistics (Stat, holds sampled 1 in 64)",
        ),
        stat::<StatApi<RawQSpinLock, 0>>(
            "qspin+stat0",
            Ksync,
            "qspin with lock statistics, no hold timing (Stat<_, 0>)",
        ),
        stat::<StatApi<RawPvQSpinLock>>(
            "pv-qspin+stat",
            Ksync,
            "pv-qspin with lock statistics (Stat)",
        ),
        entry::<Api<parking_lot::RawMutex>>("parking_lot", Peer, "parking_lot::Mutex"),
        stat::<StatApi<parking_lot::RawMutex>>(
            "parking_lot+stat",
            Peer,
            "parking_lot::Mutex's raw lock wrapped in ksync's Stat",
        ),
        entry::<Api<parking_lot::RawFairMutex>>("parking_lot-fair", Peer, "parking_lot::FairMutex"),
        entry::<Std>("std", Peer, "std::sync::Mutex"),
        entry::<SpinCrate>("spin", Peer, "spin::mutex::SpinMutex"),
        entry::<SpinCrateTicket>("spin-ticket", Peer, "spin::mutex::TicketMutex"),
        entry::<Pthread>("pthread", Peer, "glibc pthread_mutex_t"),
        entry::<PthreadSpin>("pthread-spin", Peer, "glibc pthread_spinlock_t"),
        entry::<Cas>("cas-floor", Floor, "bare compare-and-swap + release store"),
    ]
}

/// The registry plus `busted`, torture's deliberately broken lock.
pub fn registry_with_busted() -> Vec<LockEntry> {
    let mut all = registry();
    all.push(LockEntry {
        core: false,
        ..entry::<Busted>(
            "busted",
            Origin::Broken,
            "deliberately broken: lets every thread in (torture self-test only)",
        )
    });
    all
}

/// The core entries (those `compare` and the defaults measure).
pub fn core() -> Vec<LockEntry> {
    registry().into_iter().filter(|e| e.core).collect()
}

/// The entries of `all` named in `names`, in that order; `default` when
/// `names` is empty. An unknown or repeated name is an error that lists the
/// known ones.
pub fn pick<T>(
    mut all: Vec<T>,
    names: &[String],
    name_of: fn(&T) -> &'static str,
    what: &str,
    default: impl FnOnce(Vec<T>) -> Vec<T>,
) -> Result<Vec<T>, String> {
    if names.is_empty() {
        return Ok(default(all));
    }
    let known: Vec<&str> = all.iter().map(name_of).collect();
    let mut chosen = Vec::with_capacity(names.len());
    for name in names {
        match all.iter().position(|e| name_of(e) == name) {
            Some(i) => chosen.push(all.remove(i)),
            None => {
                return Err(format!(
                    "unknown {what} '{name}' (or named twice); known: {}",
                    known.join(", ")
                ))
            }
        }
    }
    Ok(chosen)
}

/// The named mutexes, or the core ones.
pub fn chosen(names: &[String]) -> Result<Vec<LockEntry>, String> {
    pick(
        registry(),
        names,
        |e| e.name,
        "lock",
        |all| all.into_iter().filter(|e| e.core).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_entries_name_their_bare_lock_and_stay_out_of_the_defaults() {
        assert_eq!(stat_base("qspin+stat"), Some("qspin"));
        assert_eq!(stat_base("qspin+stat0"), Some("qspin"));
        assert_eq!(stat_base("ticket-auto-lock"), None);
        let all = registry();
        for e in all.iter().filter(|e| stat_base(e.name).is_some()) {
            assert!(!e.core, "{} is in the default set", e.name);
            let base = stat_base(e.name).unwrap();
            assert!(
                all.iter().any(|b| b.name == base),
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
        let got: Vec<&str> = with_lock_stats(chosen(&names).unwrap())
            .iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(got, ["qspin+stat", "mcs+stat", "std", "parking_lot"]);
        // Every core ksync lock has a wrapped twin.
        for e in with_lock_stats(core()) {
            assert!(!e.is_ksync() || stat_base(e.name).is_some(), "{}", e.name);
        }
    }
}
