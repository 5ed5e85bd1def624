//! FIFO ticket spinlock; how its waiters wait is a type parameter (`Spin`
//! here, the proportional backoff policies in `backoff/`).
//!
//! # State
//!
//! One `u32`: the low 16 bits are `owner`, the ticket now being served, the
//! high 16 bits are `next`, the next ticket to hand out. The lock is free when
//! `owner == next`; `next - owner` (mod 2^16) is the number of threads holding
//! or waiting for it.
//!
//! # Transitions
//!
//! * `lock`: `fetch_add(1 << 16)` takes ticket `t = next` and bumps `next`
//!   (the carry out of bit 31 is discarded, so `next` wraps without touching
//!   `owner`). If `t == owner` the lock was free and is now ours; otherwise
//!   wait until `owner` reaches `t`, which happens after exactly `t - owner`
//!   unlocks: strict FIFO.
//! * `unlock`: `owner += 1`, written as a release store to the low half only
//!   (`crate::sync::store_low_u16`). Only the holder writes `owner`, so there
//!   is no lost update; the store must not disturb `next`, which arriving
//!   threads keep bumping concurrently.
//! * `try_lock`: read the word; fail unless `owner == next`; then
//!   compare-and-swap it to `next + 1`. A failed compare-and-swap means
//!   another thread took a ticket after our read, so the lock is held and
//!   failing is the right answer.
//!
//! Tickets are 16 bits, so at most 65 535 threads may hold or wait for one
//! lock at a time (the kernel's `NR_CPUS < 64K` assumption); a 65 536th
//! waiter would make `next` wrap onto `owner`.
//!
//! # Memory ordering
//!
//! The unlock store is release. A thread whose ticket is served observes it
//! either through its own acquire `fetch_add` (the lock was free) or through
//! an acquire load of `owner == t`; both read from that release store or from
//! a later `fetch_add` in its release sequence, so the previous critical
//! section happens-before the next. The backoff policies poll `owner` with
//! relaxed loads because each poll publishes and consumes nothing; when a
//! policy returns, [`RawTicketLock`] confirms the handover with one acquire
//! load (and calls the policy again if it returned early, so a custom
//! [`TicketWait`] cannot break exclusion). `try_lock`'s successful
//! compare-and-swap is acquire; its initial read is relaxed.
//!
//! # Waiting policies
//!
//! Every waiter spins on the one lock word, so each handover costs a cache
//! line transfer to every waiter. How a waiter waits is a [`TicketWait`]
//! policy, a type parameter of [`RawTicketLock`]: [`Spin`] (one `cpu_relax`
//! between polls, the kernel's `arch_spin_lock()` in
//! `include/asm-generic/ticket_spinlock.h`) here, and the proportional
//! backoff policies of Rik van Riel's 2013 series in
//! [`backoff`](super::backoff) ([`FixedBackoff`](super::FixedBackoff),
//! [`AutoTunedBackoff`](super::AutoTunedBackoff),
//! [`AutoTunedPerLock`](super::AutoTunedPerLock)).

use core::fmt;
use core::marker::PhantomData;

use crate::relax::cpu_relax;
use crate::sync::{store_low_u16, AtomicU32, Ordering};

/// One ticket, as added to the lock word: the `next` half starts at bit 16.
const ONE_TICKET: u32 = 1 << 16;

#[inline(always)]
fn owner_of(word: u32) -> u16 {
    word as u16
}

#[inline(always)]
fn next_of(word: u32) -> u16 {
    (word >> 16) as u16
}

/// A FIFO ticket spinlock in one `u32`; `W` says how a waiter waits.
///
/// The low half of the word is the ticket being served, the high half the
/// next ticket to hand out. `lock` takes a ticket with one `fetch_add` and
/// waits for its turn; `unlock` bumps the served ticket with a 16-bit release
/// store. Strictly FIFO, and every waiter watches the same word, which is
/// what the backoff policies ([`FixedBackoff`](super::FixedBackoff),
/// [`AutoTunedBackoff`](super::AutoTunedBackoff),
/// [`AutoTunedPerLock`](super::AutoTunedPerLock)) make cheaper. At most 65 535 threads may hold or
/// wait for one lock at a time.
///
/// Use it through [`TicketMutex`] (plain spinning) or the backoff aliases
/// [`FixedBackoffTicketMutex`](super::FixedBackoffTicketMutex),
/// [`AutoTunedTicketMutex`](super::AutoTunedTicketMutex) and
/// [`AutoTunedPerLockTicketMutex`](super::AutoTunedPerLockTicketMutex).
///
/// ```
/// use ksync::spin::{AutoTunedPerLock, RawTicketLock, TicketMutex};
/// use lock_api::{Mutex, RawMutex};
///
/// let plain = TicketMutex::new(0);
/// *plain.lock() += 1;
/// assert_eq!(*plain.lock(), 1);
///
/// // Any waiting policy, spelled out.
/// let tuned: Mutex<RawTicketLock<AutoTunedPerLock>, u32> = Mutex::new(5);
/// assert_eq!(*tuned.lock(), 5);
///
/// // The raw lock on its own.
/// let raw = <RawTicketLock>::INIT;
/// let guard = raw.lock();
/// assert!(raw.is_locked() && raw.try_lock().is_none());
/// // SAFETY: `guard` came from `raw.lock()` just above.
/// unsafe { raw.unlock(guard) };
/// assert!(!raw.is_locked());
/// ```
pub struct RawTicketLock<W = Spin> {
    /// `next << 16 | owner`.
    word: AtomicU32,
    /// `fn() -> W` so the lock is `Send + Sync` whatever the policy type is.
    wait: PhantomData<fn() -> W>,
}

/// A [`lock_api::Mutex`] guarded by a plain spinning [`RawTicketLock`].
pub type TicketMutex<T> = lock_api::Mutex<RawTicketLock<Spin>, T>;
/// The guard of a [`TicketMutex`].
pub type TicketMutexGuard<'a, T> = lock_api::MutexGuard<'a, RawTicketLock<Spin>, T>;

impl<W: TicketWait> RawTicketLock<W> {
    /// A new, unlocked lock.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        RawTicketLock {
            word: AtomicU32::new(0),
            wait: PhantomData,
        }
    }

    /// A new, unlocked lock (loom's atomics have no `const` constructor).
    #[cfg(loom)]
    pub fn new() -> Self {
        RawTicketLock {
            word: AtomicU32::new(0),
            wait: PhantomData,
        }
    }

    /// Whether threads are waiting behind the holder (`next - owner > 1`).
    ///
    /// A momentary snapshot, like [`lock_api::RawMutex::is_locked`].
    #[inline]
    pub fn is_contended(&self) -> bool {
        let word = self.word.load(Ordering::Relaxed);
        next_of(word).wrapping_sub(owner_of(word)) > 1
    }

    /// The lock word, for the policies' unit tests that stage a queue by hand.
    #[cfg(all(test, not(loom)))]
    pub(in crate::spin) fn word(&self) -> &AtomicU32 {
        &self.word
    }

    /// Waits until ticket `ticket` is served. Cold: an uncontended lock never
    /// gets here, so the policy's code stays out of the fast path.
    #[cold]
    #[inline(never)]
    fn wait_for_turn(&self, ticket: u16) {
        let waiter = TicketWaiter {
            word: &self.word,
            ticket,
        };
        loop {
            W::wait(&waiter);
            // The handover: pairs with the release store in `unlock`.
            if owner_of(self.word.load(Ordering::Acquire)) == ticket {
                return;
            }
        }
    }
}

impl<W: TicketWait> Default for RawTicketLock<W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<W> fmt::Debug for RawTicketLock<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = self.word.load(Ordering::Relaxed);
        f.debug_struct("RawTicketLock")
            .field("owner", &owner_of(word))
            .field("next", &next_of(word))
            .finish()
    }
}

// SAFETY: tickets are handed out by an atomic `fetch_add`, so no two threads
// hold the same ticket, and a thread returns from `lock` only after observing
// `owner == its ticket`; `owner` moves only in `unlock`, by one, so at most
// one ticket is served at a time. Acquisition is acquire and release is
// release (module documentation, "Memory ordering").
unsafe impl<W: TicketWait> lock_api::RawMutex for RawTicketLock<W> {
    #[allow(clippy::declare_interior_mutable_const)]
    #[cfg(not(loom))]
    const INIT: Self = Self::new();
    #[cfg(loom)]
    const INIT: Self = panic!("use RawTicketLock::new() under loom");

    type Guard = lock_api::GuardSend;

    #[inline]
    fn lock(&self) -> Self::Guard {
        // Acquire pairs with the release store in `unlock` when the lock was
        // free (otherwise `wait_for_turn`'s load does).
        let word = self.word.fetch_add(ONE_TICKET, Ordering::Acquire);
        let ticket = next_of(word);
        if ticket != owner_of(word) {
            self.wait_for_turn(ticket);
        }
        lock_api::GuardSend::new()
    }

    #[inline]
    fn try_lock(&self) -> Option<Self::Guard> {
        let word = self.word.load(Ordering::Relaxed);
        if next_of(word) != owner_of(word) {
            return None;
        }
        // Acquire pairs with the release store in `unlock`.
        self.word
            .compare_exchange(
                word,
                word.wrapping_add(ONE_TICKET),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .ok()
            .map(|_| lock_api::GuardSend::new())
    }

    #[inline]
    unsafe fn unlock(&self, _guard: Self::Guard) {
        // Only the holder writes `owner`, and the last write to it happened
        // before our acquisition, so a relaxed load reads the current value.
        let owner = owner_of(self.word.load(Ordering::Relaxed));
        // Pairs with the next holder's acquire: the `fetch_add` in `lock`,
        // the handover load in `wait_for_turn`, or `try_lock`'s
        // compare-and-swap.
        store_low_u16(&self.word, owner.wrapping_add(1), Ordering::Release);
    }

    #[inline]
    fn is_locked(&self) -> bool {
        let word = self.word.load(Ordering::Relaxed);
        next_of(word) != owner_of(word)
    }
}

// SAFETY: `unlock` already hands the lock to the next ticket in FIFO order;
// `unlock_fair` is the same operation.
unsafe impl<W: TicketWait> lock_api::RawMutexFair for RawTicketLock<W> {
    #[inline]
    unsafe fn unlock_fair(&self, guard: Self::Guard) {
        // SAFETY: forwarded caller contract: the lock is held with `guard`.
        unsafe { lock_api::RawMutex::unlock(self, guard) }
    }
}

/// How a [`RawTicketLock`] waiter waits for its ticket to be served.
///
/// `wait` is called only when the ticket was not served at once. It should
/// return when it has seen [`TicketWaiter::head`] equal
/// [`TicketWaiter::ticket`]; the lock then confirms the handover with an
/// acquire load and calls `wait` again if the policy returned early, so an
/// implementation can make the lock slow but never unsound.
///
/// Implement it to try another policy in ksync-lab:
///
/// ```
/// use ksync::relax::yield_now;
/// use ksync::spin::{RawTicketLock, TicketWait, TicketWaiter};
/// use lock_api::Mutex;
///
/// /// Give the CPU away between polls.
/// struct YieldBetweenPolls;
///
/// impl TicketWait for YieldBetweenPolls {
///     fn wait(waiter: &TicketWaiter<'_>) {
///         while waiter.head() != waiter.ticket() {
///             yield_now();
///         }
///     }
/// }
///
/// let m: Mutex<RawTicketLock<YieldBetweenPolls>, i32> = Mutex::new(1);
/// assert_eq!(*m.lock(), 1);
/// ```
pub trait TicketWait {
    /// Waits (spinning, backing off, yielding: the policy's choice) until
    /// `waiter`'s ticket is served.
    fn wait(waiter: &TicketWaiter<'_>);
}

/// A thread waiting in a [`RawTicketLock`]'s queue, as its [`TicketWait`]
/// policy sees it.
///
/// ```
/// use ksync::relax::{cpu_relax, spin_for};
/// use ksync::spin::{TicketWait, TicketWaiter};
///
/// /// Poll once per waiter ahead, 100 relaxes apart.
/// struct Linear;
///
/// impl TicketWait for Linear {
///     fn wait(waiter: &TicketWaiter<'_>) {
///         loop {
///             match waiter.waiters_ahead(waiter.head()) {
///                 None => return,            // our ticket is served
///                 Some(0) => cpu_relax(),    // next in line: poll tightly
///                 Some(ahead) => spin_for(100 * u32::from(ahead)),
///             }
///         }
///     }
/// }
/// # let m: lock_api::Mutex<ksync::spin::RawTicketLock<Linear>, ()> = lock_api::Mutex::new(());
/// # drop(m.lock());
/// ```
pub struct TicketWaiter<'a> {
    word: &'a AtomicU32,
    ticket: u16,
}

impl TicketWaiter<'_> {
    /// The ticket this thread holds.
    #[inline]
    pub fn ticket(&self) -> u16 {
        self.ticket
    }

    /// The ticket being served now (`owner`): one relaxed load of the lock word.
    #[inline]
    pub fn head(&self) -> u16 {
        owner_of(self.word.load(Ordering::Relaxed))
    }

    /// How many threads are ahead of this one when `head` is being served,
    /// not counting the holder: `Some(0)` when this thread is next in line,
    /// `None` when `head` is this thread's ticket.
    #[inline]
    pub fn waiters_ahead(&self, head: u16) -> Option<u16> {
        match self.ticket.wrapping_sub(head) {
            0 => None,
            n => Some(n - 1),
        }
    }

    /// The address of the lock word: the key per-lock policies hash.
    #[inline]
    pub fn lock_addr(&self) -> usize {
        self.word as *const AtomicU32 as usize
    }

    /// Polls tightly until this ticket is served.
    #[inline]
    pub(in crate::spin) fn spin_until_served(&self) {
        while self.head() != self.ticket {
            cpu_relax();
        }
    }
}

impl fmt::Debug for TicketWaiter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TicketWaiter")
            .field("ticket", &self.ticket)
            .field("head", &self.head())
            .finish()
    }
}

/// Waiting policy: poll the lock word with one `cpu_relax` between polls (the
/// kernel's plain ticket lock). The default; [`TicketMutex`] uses it.
///
/// ```
/// use ksync::spin::{RawTicketLock, Spin, TicketMutex};
///
/// let m: TicketMutex<u8> = TicketMutex::new(1);
/// let same: lock_api::Mutex<RawTicketLock<Spin>, u8> = m;
/// assert_eq!(*same.lock(), 1);
/// ```
#[derive(Debug)]
pub struct Spin(());

impl TicketWait for Spin {
    #[inline]
    fn wait(waiter: &TicketWaiter<'_>) {
        waiter.spin_until_served();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::spin::AutoTunedPerLock;
    use lock_api::RawMutex;

    #[test]
    fn lock_word_is_four_bytes() {
        assert_eq!(core::mem::size_of::<RawTicketLock>(), 4);
        assert_eq!(core::mem::size_of::<RawTicketLock<AutoTunedPerLock>>(), 4);
    }

    #[test]
    fn halves_track_tickets() {
        let lock = <RawTicketLock>::new();
        let first = lock.lock();
        assert!(lock.is_locked() && !lock.is_contended());
        // A second ticket taken by hand: the lock is now contended.
        lock.word.fetch_add(ONE_TICKET, Ordering::Relaxed);
        assert!(lock.is_contended());
        assert!(lock.try_lock().is_none());
        // SAFETY: `first` came from `lock()` on this lock.
        unsafe { lock.unlock(first) };
        // Ticket 1 is now served: held, not contended.
        assert_eq!(owner_of(lock.word.load(Ordering::Relaxed)), 1);
        assert!(lock.is_locked() && !lock.is_contended());
        // SAFETY: ticket 1 is being served and nobody else uses the lock.
        unsafe { lock.unlock(lock_api::GuardSend::new()) };
        assert!(!lock.is_locked());
    }

    #[test]
    fn tickets_wrap_around() {
        let lock = <RawTicketLock>::new();
        lock.word.store(0xfffe_fffe, Ordering::Relaxed);
        for _ in 0..4 {
            let guard = lock.try_lock().expect("free lock");
            assert!(lock.is_locked());
            // SAFETY: `guard` came from `try_lock()` on this lock.
            unsafe { lock.unlock(guard) };
            assert!(!lock.is_locked());
        }
        assert_eq!(lock.word.load(Ordering::Relaxed), 0x0002_0002);
    }

    #[test]
    fn waiters_ahead_counts_modulo_2_16() {
        let word = AtomicU32::new(0);
        let waiter = TicketWaiter {
            word: &word,
            ticket: 2,
        };
        assert_eq!(waiter.waiters_ahead(2), None);
        assert_eq!(waiter.waiters_ahead(1), Some(0));
        assert_eq!(waiter.waiters_ahead(0), Some(1));
        assert_eq!(waiter.waiters_ahead(0xfffe), Some(3));
    }
}
