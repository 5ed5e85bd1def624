//! The loaded objects' segments: the program's and its libraries' static
//! data, the other memory the library may read directly, with no system
//! call and no fault.
//!
//! A `PT_LOAD` segment of a loaded ELF object (`.data`, `.bss`, `.rodata`)
//! stays mapped until the object is unloaded, so a `static struct sembuf`
//! (the classic style, as in Stevens' examples) lies in memory the library
//! may read as long as no `dlclose` has unloaded its object. glibc counts
//! loads and unloads (`dlpi_adds`, `dlpi_subs`, read through
//! `dl_iterate_phdr`, stopping at the first object: ~10 ns); each thread
//! keeps the readable segments it last collected with the two counts, and
//! collects again when either has moved.
//!
//! What this cannot vouch for, and leaves to the checked copy: the heap and
//! other anonymous mappings (unmapped by `free` or `munmap` without anything
//! cheap telling), and objects loaded meanwhile until the next collection.
//! What it gets wrong: a program that makes part of its own static data
//! unreadable (`mprotect(PROT_NONE)`), or that passes a pointer into an
//! object another thread is unloading at that very moment, faults here
//! where the kernel would return `EFAULT`.

use core::cell::RefCell;
use core::ffi::{c_int, c_void};

/// The readable `PT_LOAD` segments of every loaded object, as sorted,
/// disjoint `[start, end)` ranges, with the load and unload counts they
/// were collected at.
struct Segments {
    adds: u64,
    subs: u64,
    ranges: Vec<(usize, usize)>,
}

thread_local! {
    static SEGMENTS: RefCell<Option<Segments>> = const { RefCell::new(None) };
}

/// Whether the `len` bytes at `addr` lie in one readable segment of a
/// loaded object.
pub fn holds(addr: usize, len: usize) -> bool {
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    let Some((adds, subs)) = counts() else {
        return false;
    };
    SEGMENTS
        .try_with(|cell| {
            // Busy: re-entered from a signal handler; the checked copy it is.
            let Ok(mut cached) = cell.try_borrow_mut() else {
                return false;
            };
            if !matches!(&*cached, Some(s) if s.adds == adds && s.subs == subs) {
                *cached = collect();
            }
            let Some(segments) = cached.as_ref() else {
                return false;
            };
            let after = segments.ranges.partition_point(|&(start, _)| start <= addr);
            after > 0 && end <= segments.ranges[after - 1].1
        })
        .unwrap_or(false)
}

/// Whether `info` has the load and unload counts (glibc's do; the `size`
/// argument says how much of the structure the C library filled).
fn has_counts(size: usize) -> bool {
    size >= core::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8
}

/// glibc's load and unload counts, `None` where the C library has none.
fn counts() -> Option<(u64, u64)> {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: usize,
        out: *mut c_void,
    ) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid `info` of `size` bytes and
        // our `out`, a live `Option<(u64, u64)>`.
        unsafe {
            if has_counts(size) {
                let info = &*info;
                *out.cast::<Option<(u64, u64)>>() = Some((info.dlpi_adds, info.dlpi_subs));
            }
        }
        1 // the first object is enough: the counts are the same in every one
    }
    let mut out: Option<(u64, u64)> = None;
    // SAFETY: the callback writes only through `out`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut out as *mut Option<(u64, u64)>).cast()) };
    out
}

/// Every loaded object's readable segments, with the counts; `None` if the
/// C library does not give the counts.
fn collect() -> Option<Segments> {
    struct Walk {
        counts: Option<(u64, u64)>,
        ranges: Vec<(usize, usize)>,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        size: usize,
        walk: *mut c_void,
    ) -> c_int {
        // SAFETY: as in `counts`; `dlpi_phdr` points at `dlpi_phnum`
        // program headers for the duration of the callback, and `walk` is
        // our live `Walk`.
        unsafe {
            let walk = &mut *walk.cast::<Walk>();
            let info = &*info;
            if !has_counts(size) {
                walk.counts = None;
                return 1;
            }
            walk.counts = Some((info.dlpi_adds, info.dlpi_subs));
            if info.dlpi_phdr.is_null() {
                return 0;
            }
            let headers = core::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum));
            for h in headers {
                if h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_R != 0 {
                    let start = (info.dlpi_addr as usize).wrapping_add(h.p_vaddr as usize);
                    if let Some(end) = start.checked_add(h.p_memsz as usize) {
                        walk.ranges.push((start, end));
                    }
                }
            }
        }
        0
    }
    let mut walk = Walk {
        counts: None,
        ranges: Vec::new(),
    };
    // SAFETY: the callback writes only through `walk`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut walk as *mut Walk).cast()) };
    let (adds, subs) = walk.counts?;
    let mut ranges = walk.ranges;
    ranges.sort_unstable();
    // Overlapping or touching ranges become one, so that a read spanning
    // two adjacent segments of one object is vouched for.
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    Some(Segments {
        adds,
        subs,
        ranges: merged,
    })
}

#[cfg(test)]
mod tests {
    use super::holds;

    static DATA: [u16; 4] = [1, 2, 3, 4];
    static mut BSS: [u8; 64] = [0; 64];

    #[test]
    fn static_data_and_bss_are_held() {
        assert!(holds(DATA.as_ptr() as usize, 8));
        assert!(holds(&raw const BSS as usize, 64));
    }

    #[test]
    fn the_heap_and_bad_addresses_are_not() {
        let heap = Box::new([0u8; 16]);
        assert!(!holds(heap.as_ptr() as usize, 16));
        assert!(!holds(8, 8));
        assert!(!holds(usize::MAX - 2, 8));
        assert!(!holds(DATA.as_ptr() as usize, usize::MAX));
    }
}
