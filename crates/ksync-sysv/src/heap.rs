//! The main heap: glibc's `brk` area, where `malloc` serves the main
//! thread's small allocations, the third range of a caller's memory the
//! library may read directly.
//!
//! Everything from the heap's start (`start_brk`, read once from
//! `/proc/self/stat`) up to the current break is one mapping; glibc's
//! `sbrk(0)` returns the break it keeps, with no system call, and `malloc`
//! moves the break only through glibc, so the two bound memory that is
//! mapped now.
//!
//! Not covered, and left to the checked copy: other threads' `malloc`
//! arenas and large allocations (separate mappings that `free` unmaps).
//! Not detected: a program that moves its break with the raw system call
//! behind glibc's back, or makes part of its heap unreadable, or frees the
//! top of the heap in one thread while passing a pointer into it to the
//! library in another (a use after free), faults here where the kernel
//! would return `EFAULT`.

use std::sync::OnceLock;

/// Whether the `len` bytes at `addr` lie between the heap's start and the
/// current break.
#[inline]
pub fn holds(addr: usize, len: usize) -> bool {
    within(start_brk(), addr, len)
}

/// [`holds`] without reading `/proc/self/stat`: false until a call of
/// [`holds`] in this process has. For the calls that must not reach a
/// cancellation point, which `open` is.
#[inline]
pub fn holds_known(addr: usize, len: usize) -> bool {
    START.get().is_some_and(|&start| within(start, addr, len))
}

#[inline(always)]
fn within(start: usize, addr: usize, len: usize) -> bool {
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    if start == 0 || addr < start {
        return false;
    }
    // SAFETY: sbrk(0) moves nothing: it returns the break glibc keeps.
    let top = unsafe { libc::sbrk(0) } as usize;
    top != usize::MAX && end <= top
}

/// The heap's start once [`start_brk`] has read it.
static START: OnceLock<usize> = OnceLock::new();

/// The heap's start, 0 if unknown (then nothing is vouched for).
fn start_brk() -> usize {
    *START.get_or_init(|| {
        std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|stat| parse_start_brk(&stat))
            .unwrap_or(0)
    })
}

/// Field 47 of `/proc/<pid>/stat` (`proc(5)`), counted after the command
/// name, which may itself hold spaces and parentheses.
fn parse_start_brk(stat: &str) -> Option<usize> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // The first field after the name is field 3.
    after_name.split_whitespace().nth(47 - 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_brk_is_field_47() {
        let fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        let stat = format!("1234 (a (b) c) {}", fields.join(" "));
        assert_eq!(parse_start_brk(&stat), Some(47));
        assert_eq!(parse_start_brk("1 (x) R 1"), None);
    }

    #[test]
    fn the_top_of_the_heap_is_held_and_past_the_break_is_not() {
        // SAFETY: sbrk(0) reads the break and moves nothing.
        let top = unsafe { libc::sbrk(0) } as usize;
        let start = start_brk();
        assert_ne!(start, 0, "start_brk from /proc/self/stat");
        if top > start {
            assert!(holds(top - 8, 8));
        }
        assert!(!holds(top, 1));
        assert!(!holds(start.saturating_sub(1), 1));
        assert!(!holds(usize::MAX - 2, 8));
    }
}
