//! The one place atomics come from.
//!
//! Under `--cfg loom` every atomic is loom's model-checked stand-in; otherwise
//! it is `core`'s. No other module imports `core::sync::atomic` directly, so a
//! loom run checks every atomic access the locks make.
//!
//! It also holds the two sub-word stores the kernel's lock words rely on
//! (see [`store_low_u8`] and [`store_low_u16`]).

#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use core::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::cell::UnsafeCell;

/// `core::cell::UnsafeCell` with loom's closure API, so data protected by a
/// lock is checked for unsynchronized access under loom and costs nothing
/// otherwise.
#[cfg(not(loom))]
pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
#[allow(dead_code)]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(core::cell::UnsafeCell::new(value))
    }

    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// True where [`store_low_u8`] and [`store_low_u16`] are single plain stores.
///
/// The kernel's ticket and queued spinlocks release with a store to one byte or
/// one half of a 32-bit word that other CPUs update with full-word atomic
/// read-modify-writes. x86 and AArch64 guarantee that such a store is atomic
/// and that it neither tears nor loses a concurrent full-word RMW (the RMW
/// takes the cache line exclusively). Rust's memory model does not describe
/// mixed-size accesses, so we use them only on those architectures, outside
/// loom, and fall back to an equivalent full-word RMW everywhere else (loom
/// checks the algorithm with the fallback).
#[cfg_attr(loom, allow(dead_code))]
pub(crate) const SUBWORD_STORES: bool = cfg!(all(
    not(loom),
    target_endian = "little",
    any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "aarch64"
    )
));

/// Stores `value` into bits 0..8 of `word`, leaving bits 8..32 untouched.
///
/// Only the thread that owns those bits may call this (the lock owner for the
/// `locked` byte), so no other thread changes them concurrently; other threads
/// may concurrently RMW the rest of the word.
// Used by the queued spinlocks, which need `std`.
#[cfg_attr(not(any(feature = "std", loom)), allow(dead_code))]
#[inline(always)]
pub(crate) fn store_low_u8(word: &AtomicU32, value: u8, order: Ordering) {
    #[cfg(not(loom))]
    if SUBWORD_STORES {
        // SAFETY: `AtomicU32` has the size and alignment of `u32`, so its first
        // byte (the least significant on these little-endian targets) is a valid,
        // aligned `AtomicU8` for as long as `word` is borrowed. The mixed-size
        // access is sound on the architectures `SUBWORD_STORES` admits; see there.
        let byte = unsafe { &*(word.as_ptr() as *const core::sync::atomic::AtomicU8) };
        byte.store(value, order);
        return;
    }
    let _ = word.fetch_update(order, Ordering::Relaxed, |w| {
        Some((w & !0xff) | u32::from(value))
    });
}

/// Stores `value` into bits 0..16 of `word`, leaving bits 16..32 untouched.
///
/// Same contract as [`store_low_u8`]: only the owner of the low half writes it.
#[inline(always)]
pub(crate) fn store_low_u16(word: &AtomicU32, value: u16, order: Ordering) {
    #[cfg(not(loom))]
    if SUBWORD_STORES {
        // SAFETY: as in `store_low_u8`: the low half of an aligned `AtomicU32`
        // is an aligned `AtomicU16` on these little-endian targets.
        let half = unsafe { &*(word.as_ptr() as *const core::sync::atomic::AtomicU16) };
        half.store(value, order);
        return;
    }
    let _ = word.fetch_update(order, Ordering::Relaxed, |w| {
        Some((w & !0xffff) | u32::from(value))
    });
}

// The sub-word read-modify-writes the queued spinlocks need, in the kernel's
// `_Q_PENDING_BITS == 8` layout (`locked` byte, `pending` byte, 16-bit tail).
// Each is one instruction on the targets `SUBWORD_STORES` admits, and an
// equivalent full-word compare-and-swap loop everywhere else, and under loom.

/// Bits 8..16 of `word` as an `AtomicU8` (the `pending` byte).
#[cfg(all(not(loom), feature = "std"))]
#[inline(always)]
fn byte1(word: &AtomicU32) -> &core::sync::atomic::AtomicU8 {
    // SAFETY: `AtomicU32` has the size and alignment of `u32`; its second
    // byte holds bits 8..16 on the little-endian targets `SUBWORD_STORES`
    // admits (the only ones that call this), lies inside the word, and needs
    // no further alignment. x86 and AArch64 keep a byte-sized atomic access
    // and a full-word one to the same word coherent and atomic with respect
    // to each other.
    unsafe { &*((word.as_ptr() as *const u8).add(1) as *const core::sync::atomic::AtomicU8) }
}

/// Bits 16..32 of `word` as an `AtomicU16` (the tail).
#[cfg(all(not(loom), feature = "std"))]
#[inline(always)]
fn half1(word: &AtomicU32) -> &core::sync::atomic::AtomicU16 {
    // SAFETY: the high half of a 4-aligned `u32` starts 2 bytes in, so it is
    // 2-aligned and inside the word; on these little-endian targets it holds
    // bits 16..32. Mixed-size RMWs on x86 (`lock`ed instructions) and AArch64
    // (exclusives or LSE atomics) are atomic with respect to full-word ones;
    // the kernel's `xchg_tail` is exactly this 16-bit exchange.
    unsafe { &*((word.as_ptr() as *const u16).add(1) as *const core::sync::atomic::AtomicU16) }
}

/// Stores `value` into bits 8..16 of `word`, leaving the other bits untouched.
///
/// Same contract as [`store_low_u8`]: only the owner of those bits (the
/// queued spinlock's pending waiter) writes them with a plain store; others
/// may RMW the word concurrently.
#[cfg(any(feature = "std", loom))]
#[inline(always)]
pub(crate) fn store_byte1(word: &AtomicU32, value: u8, order: Ordering) {
    #[cfg(not(loom))]
    if SUBWORD_STORES {
        byte1(word).store(value, order);
        return;
    }
    let _ = word.fetch_update(order, Ordering::Relaxed, |w| {
        Some((w & !0xff00) | (u32::from(value) << 8))
    });
}

/// Atomically swaps bits 16..32 of `word` with `value`; returns the old half.
#[cfg(any(feature = "std", loom))]
#[inline(always)]
pub(crate) fn swap_high_u16(word: &AtomicU32, value: u16, order: Ordering) -> u16 {
    #[cfg(not(loom))]
    if SUBWORD_STORES {
        return half1(word).swap(value, order);
    }
    let old = word
        .fetch_update(order, Ordering::Relaxed, |w| {
            Some((w & 0xffff) | (u32::from(value) << 16))
        })
        .unwrap_or_else(|w| w);
    (old >> 16) as u16
}

/// A compiler-only barrier: keeps the compiler from moving this thread's
/// memory accesses across it, so a signal handler that interrupts the thread
/// sees them in program order. It emits no instruction. Loom has no signals,
/// so there it is nothing.
#[cfg(any(feature = "std", loom))]
#[inline(always)]
pub(crate) fn signal_fence() {
    #[cfg(not(loom))]
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
}

/// Atomics that never take part in a lock protocol: event counters and
/// tuning knobs, read and written relaxed.
///
/// They stay `core`'s atomics under loom too: they order nothing, so loom has
/// no interleavings of theirs to explore (modelling them would only multiply
/// the executions), and a counter that keeps counting across a model's
/// executions is how a model shows that it reached a path.
#[cfg(any(feature = "std", loom))]
pub(crate) mod unmodelled {
    pub(crate) use core::sync::atomic::{AtomicU32, AtomicU64};
}
