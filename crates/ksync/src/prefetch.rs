//! Asking the CPU for a cache line before it is needed.
//!
//! A call that touches many semaphores, each last written by a sleeper on
//! another CPU, pays one cache miss per semaphore word and per sleeper node
//! if it reaches them one after the other: a locked compare-and-swap or a
//! load whose result picks the next address cannot start before the one
//! before it ends. Asking for all of those lines first lets the misses
//! overlap. A prefetch is a hint: it changes no value and orders nothing.

/// Asks for the cache line holding `p`, for writing: it arrives owned, so
/// the compare-and-swap or store that follows needs no second trip. Where
/// the CPU has no such instruction, nothing happens.
#[inline(always)]
pub(crate) fn for_write<T>(p: *const T) {
    hint::<true, T>(p);
}

/// Asks for the cache line holding `p`, for reading: it arrives shared, so
/// the caches that hold it keep their copies. For lines a scan reads and
/// mostly leaves alone. Where the CPU has no such instruction, nothing
/// happens.
#[inline(always)]
pub(crate) fn for_read<T>(p: *const T) {
    hint::<false, T>(p);
}

#[inline(always)]
// The address is only a hint to the cache, never dereferenced.
#[allow(clippy::pointers_in_nomem_asm_block)]
fn hint<const WRITE: bool, T>(p: *const T) {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    // SAFETY: PREFETCHW and PREFETCHT0 only hint the cache; they never
    // fault, even on an unmapped address, and read or write no register or
    // memory the program can see (hence `nomem`: the compiler need not
    // order memory around them). CPUs without PREFETCHW execute its encoding
    // as a no-op (0F 0D is a reserved NOP).
    unsafe {
        if WRITE {
            core::arch::asm!("prefetchw [{}]", in(reg) p, options(nostack, preserves_flags, nomem));
        } else {
            core::arch::asm!("prefetcht0 [{}]", in(reg) p, options(nostack, preserves_flags, nomem));
        }
    }
    #[cfg(all(target_arch = "aarch64", not(loom)))]
    // SAFETY: PRFM is a hint that never faults and writes nothing.
    unsafe {
        if WRITE {
            core::arch::asm!("prfm pstl1keep, [{}]", in(reg) p, options(nostack, preserves_flags, nomem));
        } else {
            core::arch::asm!("prfm pldl1keep, [{}]", in(reg) p, options(nostack, preserves_flags, nomem));
        }
    }
    #[cfg(any(loom, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    let _ = p;
}
