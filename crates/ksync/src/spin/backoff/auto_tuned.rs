//! The auto-tuned policies, [`AutoTunedBackoff`] and [`AutoTunedPerLock`]:
//! van Riel's controller, additive increase while the lock is not yet ours,
//! exponential decay after oversleeping.
//!
//! The auto-tuned policies keep `delay` in fixed point (`1.0` =
//! [`DELAY_ONE`] = 256) between `MIN` and `MAX`, and per wait:
//!
//! 1. `waiters_ahead = ticket - owner - 1`; if 0, poll tightly, done;
//! 2. additive increase: `delay += 256 / 7`, capped at `MAX`;
//! 3. spin `(delay * waiters_ahead) >> 8` relaxes, then re-read `owner`;
//! 4. if our ticket was served during that spin we overslept by an unknown
//!    amount: exponential decay, `delay -= max(delay / 32, 256)` when
//!    `delay >= 512` (never below `MIN`), done; else go to 1.
//!
//! The increase happens on every pass including the first, as in v3/v4.
//! The constants are const parameters of the policies:
//!
//! * `MAX`: [`NATIVE_MAX_DELAY`] (`16000 * 256`) by default,
//!   [`GUEST_MAX_DELAY`] (`16 * 256`) for a virtualised host, where the
//!   hypervisor's pause-loop exiting already backs off
//!   ([`AutoTunedBackoffGuest`], [`AutoTunedPerLockGuest`]);
//! * `MIN`: [`MIN_DELAY`] (`1.0`) by default; Lespinasse's review asks for it
//!   to be tunable, since the real floor is the lock's cache-line transfer
//!   time;
//! * `SMOOTH_DECAY`: `false` is v3's decay above; `true` is the one
//!   Lespinasse's review proposes, `delay -= (delay - MIN) / 32`, with no
//!   condition.
//!
//! [`AutoTunedBackoff`] uses the same arithmetic as [`AutoTunedPerLock`] so
//! that, in ksync-lab's backoff experiment, the only difference between them
//! is v3's per-lock hashing.

use core::marker::PhantomData;

use super::delay::{
    lock_hash, DefaultDelayStorage, DelayStorage, DELAY_ONE, DELAY_SHIFT, MIN_DELAY,
};
use crate::relax::spin_for;
use crate::spin::{TicketWait, TicketWaiter};

/// The default cap on the learned delay: 16000 relaxes per waiter ahead.
pub const NATIVE_MAX_DELAY: u32 = 16000 * DELAY_ONE;
/// The cap for a virtualised host (16 relaxes per waiter ahead): the
/// hypervisor's pause-loop exiting already backs off.
pub const GUEST_MAX_DELAY: u32 = 16 * DELAY_ONE;
/// Additive increase per poll that finds waiters still ahead.
const DELAY_STEP: u32 = DELAY_ONE / 7;

/// The controller's constants, from an auto-tuned policy's const parameters.
#[derive(Debug, Clone, Copy)]
struct Tuning {
    min: u32,
    /// Never below `min`.
    max: u32,
    smooth_decay: bool,
}

impl Tuning {
    #[inline]
    const fn new(min: u32, max: u32, smooth_decay: bool) -> Self {
        Tuning {
            min,
            max: if max < min { min } else { max },
            smooth_decay,
        }
    }

    /// A stored delay brought back into `min..=max` (a zeroed table, a table
    /// shared with a policy of other bounds, a foreign storage).
    #[inline]
    fn clamp(self, delay: u32) -> u32 {
        delay.clamp(self.min, self.max)
    }

    /// Additive increase, capped at `max`.
    #[inline]
    fn increase(self, delay: u32) -> u32 {
        delay.saturating_add(DELAY_STEP).min(self.max)
    }

    /// Exponential decay after oversleeping; never below `min`.
    ///
    /// v3: `delay -= max(delay / 32, 1.0)` once `delay >= 2.0`. Smooth
    /// (Lespinasse's review): `delay -= (delay - min) / 32`, no condition.
    #[inline]
    fn decay(self, delay: u32) -> u32 {
        if self.smooth_decay {
            delay - delay.saturating_sub(self.min) / 32
        } else if delay >= 2 * DELAY_ONE {
            (delay - (delay / 32).max(DELAY_ONE)).max(self.min)
        } else {
            delay
        }
    }
}

/// Relaxes to spin for `delay` with `ahead` waiters in front.
#[inline]
fn backoff_loops(delay: u32, ahead: u16) -> u32 {
    let loops = (u64::from(delay) * u64::from(ahead)) >> DELAY_SHIFT;
    u32::try_from(loops).unwrap_or(u32::MAX)
}

/// The auto-tuned wait loop: waits for `waiter`'s turn starting from `delay`
/// and returns the delay it learned.
fn auto_tuned_wait(waiter: &TicketWaiter<'_>, mut delay: u32, tuning: Tuning) -> u32 {
    let mut head = waiter.head();
    loop {
        let ahead = match waiter.waiters_ahead(head) {
            None => return delay,
            Some(0) => {
                waiter.spin_until_served();
                return delay;
            }
            Some(ahead) => ahead,
        };
        delay = tuning.increase(delay);
        spin_for(backoff_loops(delay, ahead));
        head = waiter.head();
        if head == waiter.ticket() {
            // Served while we were not looking: we overslept.
            return tuning.decay(delay);
        }
    }
}

/// Waiting policy: auto-tuned proportional backoff with **one** learned delay
/// per thread, shared by every lock it waits for (the RFC's patch 3/5, before
/// patch 4/5 made the delay per lock; with v3's fixed-point arithmetic).
///
/// With `k` threads ahead, a waiter adds `256 / 7` to its delay (capped at
/// `MAX`), spins `delay * k / 256` relaxes without touching the lock, and
/// polls again; if its turn came during that spin it overslept, and the delay
/// decays by `max(delay / 32, 256)` (never below [`MIN_DELAY`]). The thread
/// next in line polls tightly.
///
/// Parameters (fixed point, `256` = one relax per waiter ahead): `MAX` caps
/// the delay (a `MAX` below `MIN` acts as `MIN`); `S` holds it; `MIN` is its
/// floor and starting value; `SMOOTH_DECAY` picks Lespinasse's
/// `delay -= (delay - MIN) / 32` over v3's decay.
///
/// ```
/// use ksync::spin::{AutoTunedBackoffGuest, AutoTunedTicketMutex, RawTicketLock};
///
/// let native = AutoTunedTicketMutex::new(0u64);
/// *native.lock() += 1;
/// let guest: lock_api::Mutex<RawTicketLock<AutoTunedBackoffGuest>, u64> = lock_api::Mutex::new(0);
/// *guest.lock() += 1;
/// ```
#[derive(Debug)]
pub struct AutoTunedBackoff<
    const MAX: u32 = NATIVE_MAX_DELAY,
    S = DefaultDelayStorage,
    const MIN: u32 = MIN_DELAY,
    const SMOOTH_DECAY: bool = false,
>(PhantomData<fn() -> S>);

/// [`AutoTunedBackoff`] capped for a virtualised host ([`GUEST_MAX_DELAY`]).
pub type AutoTunedBackoffGuest = AutoTunedBackoff<GUEST_MAX_DELAY>;

impl<const MAX: u32, S: DelayStorage, const MIN: u32, const SMOOTH_DECAY: bool> TicketWait
    for AutoTunedBackoff<MAX, S, MIN, SMOOTH_DECAY>
{
    fn wait(waiter: &TicketWaiter<'_>) {
        let tuning = Tuning::new(MIN, MAX, SMOOTH_DECAY);
        let start = S::with_table(|table| table.per_thread).unwrap_or(MIN);
        let learned = auto_tuned_wait(waiter, tuning.clamp(start), tuning);
        S::with_table(|table| table.per_thread = learned);
    }
}

/// Waiting policy: auto-tuned proportional backoff with a delay learned per
/// thread **and lock**, in a 64-entry table hashed by lock address (the RFC's
/// final v3/v4 `ticket_spin_lock_wait()`).
///
/// The wait is [`AutoTunedBackoff`]'s; the delay it starts from and stores
/// back is the one in this lock's table entry, or [`MIN_DELAY`] if another
/// lock owns the entry, so a thread that meets short- and long-held locks
/// learns each separately.
///
/// Parameters as for [`AutoTunedBackoff`]; `S` holds the table.
///
/// ```
/// use ksync::spin::{AutoTunedPerLock, AutoTunedPerLockTicketMutex, DefaultDelayStorage};
/// use ksync::spin::{RawTicketLock, DELAY_ONE, NATIVE_MAX_DELAY};
///
/// let native = AutoTunedPerLockTicketMutex::new(0u64);
/// *native.lock() += 1;
/// // A cap of 64 relaxes per waiter ahead:
/// let capped: lock_api::Mutex<RawTicketLock<AutoTunedPerLock<{ 64 * DELAY_ONE }>>, u64> =
///     lock_api::Mutex::new(0);
/// *capped.lock() += 1;
///
/// // Lespinasse's refinements (his review of van Riel's patch 3/5, January
/// // 2013): a floor of 32.0 and the condition-free decay.
/// type Refined = AutoTunedPerLock<NATIVE_MAX_DELAY, DefaultDelayStorage, { 32 * DELAY_ONE }, true>;
/// let refined: lock_api::Mutex<RawTicketLock<Refined>, u64> = lock_api::Mutex::new(0);
/// *refined.lock() += 1;
/// ```
#[derive(Debug)]
pub struct AutoTunedPerLock<
    const MAX: u32 = NATIVE_MAX_DELAY,
    S = DefaultDelayStorage,
    const MIN: u32 = MIN_DELAY,
    const SMOOTH_DECAY: bool = false,
>(PhantomData<fn() -> S>);

/// [`AutoTunedPerLock`] capped for a virtualised host ([`GUEST_MAX_DELAY`]).
pub type AutoTunedPerLockGuest = AutoTunedPerLock<GUEST_MAX_DELAY>;

impl<const MAX: u32, S: DelayStorage, const MIN: u32, const SMOOTH_DECAY: bool> TicketWait
    for AutoTunedPerLock<MAX, S, MIN, SMOOTH_DECAY>
{
    fn wait(waiter: &TicketWaiter<'_>) {
        let tuning = Tuning::new(MIN, MAX, SMOOTH_DECAY);
        let hash = lock_hash(waiter.lock_addr());
        let start = S::with_table(|table| table.lookup(hash))
            .flatten()
            .unwrap_or(MIN);
        let learned = auto_tuned_wait(waiter, tuning.clamp(start), tuning);
        S::with_table(|table| table.record(hash, learned));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::spin::{RawTicketLock, ThreadLocalDelays};
    use crate::sync::Ordering;
    use lock_api::RawMutex;

    const NATIVE: Tuning = Tuning::new(MIN_DELAY, NATIVE_MAX_DELAY, false);
    const GUEST: Tuning = Tuning::new(MIN_DELAY, GUEST_MAX_DELAY, false);

    #[test]
    fn increase_is_additive_and_capped() {
        assert_eq!(DELAY_STEP, 36);
        assert_eq!(NATIVE.increase(MIN_DELAY), MIN_DELAY + 36);
        assert_eq!(GUEST.increase(GUEST_MAX_DELAY - 1), GUEST_MAX_DELAY);
        assert_eq!(GUEST.increase(GUEST_MAX_DELAY), GUEST_MAX_DELAY);
        let unbounded = Tuning::new(MIN_DELAY, u32::MAX, false);
        assert_eq!(unbounded.increase(u32::MAX - 1), u32::MAX);
        // Seven increases add (almost) one relax per waiter.
        let seven = (0..7).fold(MIN_DELAY, |d, _| NATIVE.increase(d));
        assert_eq!(seven, MIN_DELAY + 7 * 36);
    }

    #[test]
    fn decay_is_exponential_with_a_floor() {
        // Large delays lose 1/32.
        assert_eq!(NATIVE.decay(320 * DELAY_ONE), 310 * DELAY_ONE);
        // Small ones lose at least 1.0...
        assert_eq!(NATIVE.decay(2 * DELAY_ONE), DELAY_ONE);
        assert_eq!(NATIVE.decay(20 * DELAY_ONE), 19 * DELAY_ONE);
        // ...but only from 2.0 up, so the delay never drops below MIN.
        assert_eq!(NATIVE.decay(2 * DELAY_ONE - 1), 2 * DELAY_ONE - 1);
        assert_eq!(NATIVE.decay(MIN_DELAY), MIN_DELAY);
        let mut delay = NATIVE_MAX_DELAY;
        for _ in 0..10_000 {
            delay = NATIVE.decay(delay);
            assert!(delay >= MIN_DELAY);
        }
        assert!(delay < 2 * DELAY_ONE);
        // A raised floor holds too.
        let floor = Tuning::new(32 * DELAY_ONE, NATIVE_MAX_DELAY, false);
        assert_eq!(floor.decay(32 * DELAY_ONE), 32 * DELAY_ONE);
        assert_eq!(floor.decay(33 * DELAY_ONE), 32 * DELAY_ONE);
    }

    #[test]
    fn smooth_decay_approaches_min_without_conditions() {
        let smooth = Tuning::new(MIN_DELAY, NATIVE_MAX_DELAY, true);
        // (320.0 - 1.0) / 32 = 9.96875 removed.
        assert_eq!(smooth.decay(320 * DELAY_ONE), 320 * DELAY_ONE - 2552);
        assert_eq!(smooth.decay(MIN_DELAY), MIN_DELAY);
        assert_eq!(smooth.decay(MIN_DELAY + 31), MIN_DELAY + 31);
        let mut delay = NATIVE_MAX_DELAY;
        for _ in 0..100_000 {
            let next = smooth.decay(delay);
            assert!(next <= delay && next >= MIN_DELAY);
            delay = next;
        }
        assert!(delay < MIN_DELAY + 32);
        let floor = Tuning::new(32 * DELAY_ONE, NATIVE_MAX_DELAY, true);
        assert_eq!(floor.decay(64 * DELAY_ONE), 63 * DELAY_ONE);
        // Below the floor (a foreign stored value) it never underflows.
        assert_eq!(floor.decay(0), 0);
    }

    #[test]
    fn backoff_loops_are_proportional_and_never_overflow() {
        assert_eq!(backoff_loops(MIN_DELAY, 1), 1);
        assert_eq!(backoff_loops(10 * DELAY_ONE, 3), 30);
        assert_eq!(backoff_loops(DELAY_ONE + DELAY_ONE / 2, 2), 3);
        assert_eq!(backoff_loops(NATIVE_MAX_DELAY, u16::MAX), 16000 * 65535);
        assert_eq!(backoff_loops(u32::MAX, u16::MAX), u32::MAX);
    }

    #[test]
    fn bounds_are_ordered_and_stored_delays_are_clamped() {
        assert_eq!(Tuning::new(MIN_DELAY, 0, false).max, MIN_DELAY);
        assert_eq!(Tuning::new(5000, 4000, true).max, 5000);
        assert_eq!(GUEST.max, GUEST_MAX_DELAY);
        assert_eq!(NATIVE.clamp(0), MIN_DELAY);
        assert_eq!(GUEST.clamp(NATIVE_MAX_DELAY), GUEST_MAX_DELAY);
        assert_eq!(GUEST.clamp(3000), 3000);
    }

    #[test]
    fn uncontended_waits_leave_the_table_alone() {
        // An uncontended lock never reaches the policy.
        let lock = <RawTicketLock<AutoTunedBackoff>>::new();
        let before = ThreadLocalDelays::with_table(|t| t.per_thread).unwrap();
        for _ in 0..100 {
            let guard = lock.lock();
            // SAFETY: `guard` came from `lock()` on this lock.
            unsafe { lock.unlock(guard) };
        }
        assert_eq!(
            ThreadLocalDelays::with_table(|t| t.per_thread),
            Some(before)
        );
    }

    #[test]
    fn policies_learn_while_waiting() {
        // Three tickets ahead of ours (holder + 2 waiters): the policy must
        // back off and increase its delay, then return once we are served.
        fn learned<W: TicketWait>(read: fn() -> u32) -> u32 {
            let lock = <RawTicketLock<W>>::new();
            lock.word().store(3 << 16, Ordering::Relaxed); // tickets 0, 1, 2 taken
            std::thread::scope(|s| {
                let word = lock.word();
                s.spawn(move || {
                    for owner in 1..=3u32 {
                        std::thread::sleep(std::time::Duration::from_millis(2));
                        word.store(4 << 16 | owner, Ordering::Release);
                    }
                });
                // Ticket 3: waits behind the three taken above.
                let guard = lock.lock();
                // SAFETY: `guard` came from `lock()` on this lock.
                unsafe { lock.unlock(guard) };
            });
            read()
        }
        let per_thread = std::thread::spawn(|| {
            learned::<AutoTunedBackoff>(|| ThreadLocalDelays::with_table(|t| t.per_thread).unwrap())
        })
        .join()
        .unwrap();
        assert!(per_thread > MIN_DELAY, "delay did not grow: {per_thread}");

        let per_lock = std::thread::spawn(|| {
            learned::<AutoTunedPerLock>(|| {
                ThreadLocalDelays::with_table(|t| t.slots.iter().map(|s| s.delay).max().unwrap())
                    .unwrap()
            })
        })
        .join()
        .unwrap();
        assert!(per_lock > MIN_DELAY, "delay did not grow: {per_lock}");
    }
}
