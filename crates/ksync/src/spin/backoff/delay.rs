//! The auto-tuned policies' learned delay: its fixed point, the
//! [`DelayTable`] that remembers it, and the [`DelayStorage`] that owns the
//! table.
//!
//! The kernel keeps it per CPU; ksync keeps it per thread, in a [`DelayTable`]
//! (one per-thread delay for [`AutoTunedBackoff`](super::AutoTunedBackoff)
//! plus the 64 `{hash, delay}` entries for
//! [`AutoTunedPerLock`](super::AutoTunedPerLock), indexed by a hash of the
//! lock's address;
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

/// Fixed-point shift of the auto-tuned delay: `delay >> DELAY_SHIFT` relaxes.
pub const DELAY_SHIFT: u32 = 8;
/// `1.0` in the delay's fixed point.
pub const DELAY_ONE: u32 = 1 << DELAY_SHIFT;
/// The default floor of the learned delay, and where an unknown lock starts:
/// one relax per waiter ahead.
pub const MIN_DELAY: u32 = DELAY_ONE;
/// Entries in a [`DelayTable`]'s per-lock part.
pub const DELAY_SLOTS: usize = 1 << DELAY_HASH_BITS;
const DELAY_HASH_BITS: u32 = 6;

/// A lock address folded to the 32-bit key stored in a [`DelayTable`] entry.
#[inline]
pub(super) fn lock_hash(addr: usize) -> u32 {
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
pub(super) struct DelaySlot {
    hash: u32,
    pub(super) delay: u32,
}

/// What one thread (or CPU) learned about lock hold times: the state of the
/// auto-tuned policies, owned by a [`DelayStorage`].
///
/// It holds one delay for [`AutoTunedBackoff`](super::AutoTunedBackoff) and
/// [`DELAY_SLOTS`] `{lock hash, delay}` entries for
/// [`AutoTunedPerLock`](super::AutoTunedPerLock), 520 bytes in all.
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
    /// [`AutoTunedBackoff`](super::AutoTunedBackoff)'s one delay.
    pub(super) per_thread: u32,
    /// [`AutoTunedPerLock`](super::AutoTunedPerLock)'s entries.
    pub(super) slots: [DelaySlot; DELAY_SLOTS],
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
    pub(super) fn lookup(&self, hash: u32) -> Option<u32> {
        let slot = &self.slots[slot_of(hash)];
        (slot.hash == hash).then_some(slot.delay)
    }

    /// Records `delay` for the lock with key `hash`, evicting whatever lock
    /// shared its entry.
    #[inline]
    pub(super) fn record(&mut self, hash: u32, delay: u32) {
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

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
    fn no_storage_forgets() {
        assert_eq!(NoDelayStorage::with_table(|t| t.per_thread), None);
    }
}
