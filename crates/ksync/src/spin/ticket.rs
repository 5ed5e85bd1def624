//! FIFO ticket spinlock, with optional proportional (auto-tuned) backoff.
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
//! line transfer to every waiter, and the more waiters poll, the slower the
//! holder's own accesses to data on that line become. Proportional backoff
//! (Rik van Riel, "[PATCH 3/5] x86,smp: auto tune spinlock backoff delay
//! factor", LKML, January 2013, and Michel Lespinasse's review of it, LKML,
//! 10 January 2013) makes a waiter with `k` threads ahead spin about `k` times
//! the expected hold time *without touching the lock*, then look again. The
//! waiting half is a [`TicketWait`] policy, a type parameter of
//! [`RawTicketLock`]:
//!
//! | policy | between polls | kernel version |
//! |---|---|---|
//! | [`Spin`] | one `cpu_relax` | `arch_spin_lock()` in `include/asm-generic/ticket_spinlock.h` |
//! | [`FixedBackoff`] | `50 * waiters_ahead` relaxes | RFC patch 2/5 (fixed factor) |
//! | [`AutoTunedBackoff`] | `delay * waiters_ahead`, one learned `delay` per thread | RFC patch 3/5 (one per-CPU delay), v3 arithmetic |
//! | [`AutoTunedPerLock`] | the same, `delay` learned per thread *and* lock (64-entry table) | RFC patch 4/5, the v3/v4 `ticket_spin_lock_wait()` |
//!
//! In every policy the waiter that is next in line polls tightly.
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
//!
//! # Where the learned delay lives, with and without `std`
//!
//! The kernel keeps it per CPU; ksync keeps it per thread, in a [`DelayTable`]
//! (one per-thread delay for [`AutoTunedBackoff`] plus the 64 `{hash, delay}`
//! entries for [`AutoTunedPerLock`], indexed by a hash of the lock's address;
//! an entry holding another lock's hash starts at `MIN`). Who owns the
//! table is the [`DelayStorage`] type parameter of the auto-tuned policies:
//!
//! * with `std` (or under loom) the default is [`ThreadLocalDelays`], a
//!   thread-local table;
//! * without `std` there are no thread-locals, and the default is
//!   [`NoDelayStorage`]: every wait starts at `MIN` and learns only
//!   within that wait. A kernel or embedded user who has per-CPU storage
//!   implements [`DelayStorage`] over it (with preemption off for the few
//!   instructions of the closure) to get the full behaviour.
//!
//! The table is read once before a wait and written once after it, never
//! borrowed across the spinning, so a storage may simply refuse re-entrant
//! access (return `None`) without harm.

use core::fmt;
use core::marker::PhantomData;

use crate::relax::{cpu_relax, spin_for};
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
/// what the backoff policies ([`FixedBackoff`], [`AutoTunedBackoff`],
/// [`AutoTunedPerLock`]) make cheaper. At most 65 535 threads may hold or
/// wait for one lock at a time.
///
/// Use it through [`TicketMutex`] (plain spinning) or the backoff aliases
/// [`FixedBackoffTicketMutex`], [`AutoTunedTicketMutex`] and
/// [`AutoTunedPerLockTicketMutex`].
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
/// A ticket mutex whose waiters back off `50 * waiters_ahead` relaxes between polls.
pub type FixedBackoffTicketMutex<T> = lock_api::Mutex<RawTicketLock<FixedBackoff>, T>;
/// A ticket mutex with auto-tuned proportional backoff, one learned delay per thread.
pub type AutoTunedTicketMutex<T> = lock_api::Mutex<RawTicketLock<AutoTunedBackoff>, T>;
/// A ticket mutex with auto-tuned proportional backoff, delays learned per thread and lock.
pub type AutoTunedPerLockTicketMutex<T> = lock_api::Mutex<RawTicketLock<AutoTunedPerLock>, T>;

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
    fn spin_until_served(&self) {
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

/// Waiting policy: with `k` threads ahead, spin `FACTOR * k` relaxes between
/// polls (default 50, the fixed factor of the RFC's patch 2/5); the thread
/// next in line polls tightly.
///
/// ```
/// use ksync::spin::{FixedBackoff, FixedBackoffTicketMutex, RawTicketLock};
///
/// let m = FixedBackoffTicketMutex::new(0); // factor 50
/// *m.lock() += 1;
/// // Another factor:
/// let m: lock_api::Mutex<RawTicketLock<FixedBackoff<200>>, i32> = lock_api::Mutex::new(0);
/// *m.lock() += 1;
/// ```
#[derive(Debug)]
pub struct FixedBackoff<const FACTOR: u32 = 50>(());

impl<const FACTOR: u32> TicketWait for FixedBackoff<FACTOR> {
    fn wait(waiter: &TicketWaiter<'_>) {
        loop {
            match waiter.waiters_ahead(waiter.head()) {
                None => return,
                Some(0) => return waiter.spin_until_served(),
                Some(ahead) => spin_for(FACTOR.saturating_mul(u32::from(ahead))),
            }
        }
    }
}

/// Fixed-point shift of the auto-tuned delay: `delay >> DELAY_SHIFT` relaxes.
pub const DELAY_SHIFT: u32 = 8;
/// `1.0` in the delay's fixed point.
pub const DELAY_ONE: u32 = 1 << DELAY_SHIFT;
/// The default floor of the learned delay, and where an unknown lock starts:
/// one relax per waiter ahead.
pub const MIN_DELAY: u32 = DELAY_ONE;
/// The default cap on the learned delay: 16000 relaxes per waiter ahead.
pub const NATIVE_MAX_DELAY: u32 = 16000 * DELAY_ONE;
/// The cap for a virtualised host (16 relaxes per waiter ahead): the
/// hypervisor's pause-loop exiting already backs off.
pub const GUEST_MAX_DELAY: u32 = 16 * DELAY_ONE;
/// Entries in a [`DelayTable`]'s per-lock part.
pub const DELAY_SLOTS: usize = 1 << DELAY_HASH_BITS;
const DELAY_HASH_BITS: u32 = 6;
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

/// A lock address folded to the 32-bit key stored in a [`DelayTable`] entry.
#[inline]
fn lock_hash(addr: usize) -> u32 {
    let addr = addr as u64;
    (addr ^ (addr >> 32)) as u32
}

/// The table entry for a key: the top bits of a multiplicative
/// (Fibonacci) hash, so nearby addresses spread over the table.
#[inline]
fn slot_of(hash: u32) -> usize {
    (hash.wrapping_mul(0x9E37_79B9) >> (32 - DELAY_HASH_BITS)) as usize
}

#[derive(Debug, Clone, Copy)]
struct DelaySlot {
    hash: u32,
    delay: u32,
}

/// What one thread (or CPU) learned about lock hold times: the state of the
/// auto-tuned policies, owned by a [`DelayStorage`].
///
/// It holds one delay for [`AutoTunedBackoff`] and [`DELAY_SLOTS`]
/// `{lock hash, delay}` entries for [`AutoTunedPerLock`], 520 bytes in all.
/// Its contents are private; a storage only has to hand out `&mut` access
/// (see [`DelayStorage`] for a storage built on one).
///
/// ```
/// use ksync::spin::DelayTable;
///
/// static FRESH: DelayTable = DelayTable::new(); // `const`: fits in a `static`
/// let copy = FRESH.clone();
/// # let _ = copy;
/// ```
#[derive(Debug, Clone)]
pub struct DelayTable {
    per_thread: u32,
    slots: [DelaySlot; DELAY_SLOTS],
}

impl DelayTable {
    /// A table that knows nothing: every lock starts at [`MIN_DELAY`].
    pub const fn new() -> Self {
        DelayTable {
            per_thread: MIN_DELAY,
            slots: [DelaySlot { hash: 0, delay: 0 }; DELAY_SLOTS],
        }
    }

    /// The delay learned for the lock with key `hash`, or `None` if its
    /// entry belongs to another lock.
    #[inline]
    fn lookup(&self, hash: u32) -> Option<u32> {
        let slot = &self.slots[slot_of(hash)];
        (slot.hash == hash).then_some(slot.delay)
    }

    /// Records `delay` for the lock with key `hash`, evicting whatever lock
    /// shared its entry.
    #[inline]
    fn record(&mut self, hash: u32, delay: u32) {
        self.slots[slot_of(hash)] = DelaySlot { hash, delay };
    }
}

impl Default for DelayTable {
    fn default() -> Self {
        Self::new()
    }
}

/// Where the auto-tuned policies keep their [`DelayTable`]: per thread with
/// `std` (`ThreadLocalDelays`), per CPU in a kernel or firmware (implement
/// this trait over your per-CPU data), or nowhere ([`NoDelayStorage`]).
///
/// A waiter calls `with_table` twice per contended acquisition: once to read
/// its starting delay, once to store what it learned. The closure only reads
/// or writes a few words: it never spins, blocks or takes a lock. Storage is
/// a tuning hint, never a correctness matter: any value read back is clamped
/// into range, and `None` just means "start from [`MIN_DELAY`]" or "forget".
///
/// ```
/// use core::cell::RefCell;
/// use ksync::spin::{AutoTunedPerLock, DelayStorage, DelayTable, RawTicketLock};
/// use ksync::spin::NATIVE_MAX_DELAY;
/// use lock_api::Mutex;
///
/// /// A single-core firmware's one table, never touched from interrupts.
/// struct OneCpu;
///
/// std::thread_local! {
///     // (in firmware: a `static` in a critical-section cell)
///     static TABLE: RefCell<DelayTable> = const { RefCell::new(DelayTable::new()) };
/// }
///
/// impl DelayStorage for OneCpu {
///     fn with_table<R>(f: impl FnOnce(&mut DelayTable) -> R) -> Option<R> {
///         TABLE.with(|t| t.try_borrow_mut().ok().map(|mut t| f(&mut t)))
///     }
/// }
///
/// type Lock = RawTicketLock<AutoTunedPerLock<NATIVE_MAX_DELAY, OneCpu>>;
/// let m: Mutex<Lock, u8> = Mutex::new(7);
/// assert_eq!(*m.lock(), 7);
/// ```
pub trait DelayStorage {
    /// Runs `f` on the calling thread's (or CPU's) table and returns its
    /// result, or returns `None` without running it if no table is available
    /// now (a thread being torn down, a re-entrant call).
    fn with_table<R>(f: impl FnOnce(&mut DelayTable) -> R) -> Option<R>;
}

/// A [`DelayStorage`] with no memory: every wait starts at [`MIN_DELAY`] and
/// learns only while it lasts. The default without `std`.
///
/// ```
/// use ksync::spin::{AutoTunedPerLock, NoDelayStorage, RawTicketLock, NATIVE_MAX_DELAY};
///
/// type Forgetful = RawTicketLock<AutoTunedPerLock<NATIVE_MAX_DELAY, NoDelayStorage>>;
/// let m: lock_api::Mutex<Forgetful, ()> = lock_api::Mutex::new(());
/// drop(m.lock());
/// ```
#[derive(Debug)]
pub struct NoDelayStorage(());

impl DelayStorage for NoDelayStorage {
    #[inline]
    fn with_table<R>(_f: impl FnOnce(&mut DelayTable) -> R) -> Option<R> {
        None
    }
}

/// A [`DelayStorage`] holding one [`DelayTable`] per thread in a
/// thread-local. The default with `std`.
///
/// ```
/// use ksync::spin::{AutoTunedPerLock, DefaultDelayStorage, ThreadLocalDelays};
/// use ksync::spin::NATIVE_MAX_DELAY;
///
/// // The same policy, default spelled out:
/// type A = AutoTunedPerLock;
/// type B = AutoTunedPerLock<NATIVE_MAX_DELAY, ThreadLocalDelays>;
/// let _same: fn(A) -> B = |a: AutoTunedPerLock<NATIVE_MAX_DELAY, DefaultDelayStorage>| a;
/// ```
#[cfg(any(feature = "std", loom))]
#[derive(Debug)]
pub struct ThreadLocalDelays(());

#[cfg(all(feature = "std", not(loom)))]
std::thread_local! {
    static DELAYS: core::cell::RefCell<DelayTable> =
        const { core::cell::RefCell::new(DelayTable::new()) };
}

#[cfg(loom)]
loom::thread_local! {
    static DELAYS: core::cell::RefCell<DelayTable> = core::cell::RefCell::new(DelayTable::new());
}

#[cfg(any(feature = "std", loom))]
impl DelayStorage for ThreadLocalDelays {
    #[inline]
    fn with_table<R>(f: impl FnOnce(&mut DelayTable) -> R) -> Option<R> {
        DELAYS
            .try_with(|table| table.try_borrow_mut().ok().map(|mut table| f(&mut table)))
            .ok()
            .flatten()
    }
}

/// The [`DelayStorage`] the auto-tuned policies use unless told otherwise:
/// [`ThreadLocalDelays`] with `std`, [`NoDelayStorage`] without.
#[cfg(any(feature = "std", loom))]
pub type DefaultDelayStorage = ThreadLocalDelays;
/// The [`DelayStorage`] the auto-tuned policies use unless told otherwise:
/// `ThreadLocalDelays` with `std`, [`NoDelayStorage`] without.
#[cfg(not(any(feature = "std", loom)))]
pub type DefaultDelayStorage = NoDelayStorage;

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
    fn table_entries_belong_to_one_lock_at_a_time() {
        let mut table = DelayTable::new();
        let a = lock_hash(0x7f00_1234_5670);
        assert_eq!(table.lookup(a), None);
        table.record(a, 40 * DELAY_ONE);
        assert_eq!(table.lookup(a), Some(40 * DELAY_ONE));

        // Another lock whose key lands on the same entry starts at MIN, and
        // recording it evicts the first lock.
        let b = (1..)
            .map(|i| lock_hash(0x7f00_1234_5670 + 4 * i))
            .find(|&h| slot_of(h) == slot_of(a) && h != a)
            .expect("a colliding key");
        assert_eq!(table.lookup(b), None);
        table.record(b, 3 * DELAY_ONE);
        assert_eq!(table.lookup(b), Some(3 * DELAY_ONE));
        assert_eq!(table.lookup(a), None);

        // A lock on another entry is untouched.
        let c = (1..)
            .map(|i| lock_hash(0x7f00_1234_5670 + 4 * i))
            .find(|&h| slot_of(h) != slot_of(a))
            .expect("a key elsewhere");
        table.record(c, 9 * DELAY_ONE);
        assert_eq!(table.lookup(b), Some(3 * DELAY_ONE));
        assert_eq!(table.lookup(c), Some(9 * DELAY_ONE));
    }

    #[test]
    fn nearby_locks_spread_over_the_table() {
        // 64 consecutive 4-byte locks (a lock array) use most of the table.
        let mut used = [false; DELAY_SLOTS];
        for i in 0..DELAY_SLOTS {
            used[slot_of(lock_hash(0x5555_0000_1000 + 4 * i))] = true;
        }
        let distinct = used.iter().filter(|&&u| u).count();
        assert!(distinct >= DELAY_SLOTS / 2, "only {distinct} slots used");
        // The high half of the address matters too.
        assert_ne!(lock_hash(0x1_0000_0000), lock_hash(0x2_0000_0000));
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
            lock.word.store(3 << 16, Ordering::Relaxed); // tickets 0, 1, 2 taken
            std::thread::scope(|s| {
                let word = &lock.word;
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

    #[test]
    fn no_storage_forgets() {
        assert_eq!(NoDelayStorage::with_table(|t| t.per_thread), None);
    }
}
