//! The one place atomics come from.
//!
//! Under `--cfg loom` every atomic is loom's model-checked stand-in; otherwise
//! it is `core`'s. No other module imports `core::sync::atomic` directly, so a
//! loom run checks every atomic access the locks make.
//!
//! It also holds the two sub-word stores the kernel's lock words rely on
//! (see [`store_low_u8`] and [`store_low_u16`]).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use core::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

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
pub(crate) const SUBWORD_STORES: bool = cfg!(all(
    not(loom),
    target_endian = "little",
    any(target_arch = "x86_64", target_arch = "x86", target_arch = "aarch64")
));

/// Stores `value` into bits 0..8 of `word`, leaving bits 8..32 untouched.
///
/// Only the thread that owns those bits may call this (the lock owner for the
/// `locked` byte), so no other thread changes them concurrently; other threads
/// may concurrently RMW the rest of the word.
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
