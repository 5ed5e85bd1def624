//! A semaphore's word: its value, its lock, and the flags that keep
//! lock-free operations off it.
//!
//! | bits | field | set by | cleared by |
//! |---|---|---|---|
//! | 0..16 | the value, `0..=SEMVMX` | whoever performs an operation | |
//! | 16 | [`LOCKED`]: the semaphore's lock (`sem_lock.rs`) | `lock_sem`, `try_quiet` | its holder's release (`release`, `release_quiet`) |
//! | 17 | [`SLEEPERS`]: the semaphore's wait lists are not empty | every release | every release |
//! | 18 | [`GLOBAL`]: the set is in global mode | `enter_global`, on global mode's pass over the semaphores | the global unlock that leaves global mode |
//! | 19 | [`REMOVED`]: the set was removed | `remove` | never |
//! | 20 | [`CONTENDED`]: with `LOCKED`, a locker may sleep on the word | a locker about to sleep, or one that slept and takes the lock | the release, which then wakes one |
//! | 21 | [`QUIET`]: with `LOCKED`, the holder is a quiet call, which never looks for sleepers | `try_quiet` | its release, a plain store |
//!
//! With every flag clear, a single operation without `SEM_UNDO` is one
//! compare-and-swap of the whole word ([`lock_free_step`] says which): nobody
//! holds a lock that covers the semaphore and nobody sleeps on it, so the
//! operation can neither enable nor disturb anybody. Every locked path sets a
//! flag (or finds one set) before it looks at the value. A semaphore's lock
//! holder works on a copy of the value and writes it back with its release
//! (`sem_lock.rs`); in global mode the global lock's holder owns every word
//! and reads and writes the value with plain loads and stores ([`value_of`],
//! [`with_value`]).

use super::SEMVMX;

/// The value's bits.
pub(super) const VALUE_MASK: u32 = 0xffff;
/// The semaphore's lock: a holder is working on it.
pub(super) const LOCKED: u32 = 1 << 16;
/// Its wait lists are not empty: a change must look at them.
pub(super) const SLEEPERS: u32 = 1 << 17;
/// The set is in global mode.
pub(super) const GLOBAL: u32 = 1 << 18;
/// The set was removed.
pub(super) const REMOVED: u32 = 1 << 19;
/// Set only with `LOCKED`: a locker may be asleep on the word, so the
/// release must wake one.
pub(super) const CONTENDED: u32 = 1 << 20;
/// Set only with `LOCKED`, and never with `CONTENDED`: the holder is a quiet
/// call (`SetShared::try_quiet`), which holds the lock for a few
/// instructions and releases it with a plain store that wakes nobody. So
/// nobody else may write the word meanwhile: a locker waits the hold out on
/// the clock (`wait_out_quiet`) instead of setting `CONTENDED`.
pub(super) const QUIET: u32 = 1 << 21;

const _: () = assert!(SEMVMX as u32 <= VALUE_MASK);

/// The value a word holds.
#[inline]
pub(super) const fn value_of(word: u32) -> i32 {
    (word & VALUE_MASK) as i32
}

/// `word` with its value replaced by `value` (`0..=SEMVMX`), flags kept.
#[inline]
pub(super) const fn with_value(word: u32, value: i32) -> u32 {
    (word & !VALUE_MASK) | value as u32
}

/// The word that ends a locked stretch: `LOCKED`, `CONTENDED`, `SLEEPERS`
/// and the flags in `lift` cleared, `SLEEPERS` set again if the lists still
/// hold `sleepers`; the value and every other flag kept.
#[inline]
pub(super) const fn published(word: u32, lift: u32, sleepers: bool) -> u32 {
    let next = word & !(LOCKED | CONTENDED | SLEEPERS | lift);
    if sleepers {
        next | SLEEPERS
    } else {
        next
    }
}

/// What a lock-free single operation can do with the word it read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LockFree {
    /// A flag is set: take the locked path.
    Locked,
    /// It would block (a decrement below zero, or a wait for zero on a
    /// non-zero value): fail with `EAGAIN` under `IPC_NOWAIT`, else take the
    /// locked path to sleep.
    WouldBlock,
    /// It would exceed `SEMVMX`: `ERANGE`.
    Range,
    /// A wait for zero on a zero value: done, nothing to write.
    Satisfied,
    /// Done if this word replaces the one read (compare-and-swap).
    Store(u32),
}

/// Evaluates a single operation `op` against `word` without a lock.
#[inline]
pub(super) fn lock_free_step(word: u32, op: i16) -> LockFree {
    if word & !VALUE_MASK != 0 {
        return LockFree::Locked;
    }
    let value = value_of(word);
    if op == 0 {
        return if value != 0 {
            LockFree::WouldBlock
        } else {
            LockFree::Satisfied
        };
    }
    let result = value + i32::from(op);
    if result < 0 {
        LockFree::WouldBlock
    } else if result > SEMVMX {
        LockFree::Range
    } else {
        LockFree::Store(result as u32)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const FLAGS: [u32; 6] = [LOCKED, SLEEPERS, GLOBAL, REMOVED, CONTENDED, QUIET];

    #[test]
    fn flags_are_distinct_bits_above_the_value() {
        let mut seen = 0;
        for flag in FLAGS {
            assert_eq!(flag.count_ones(), 1);
            assert_eq!(flag & VALUE_MASK, 0, "{flag:#x} overlaps the value");
            assert_eq!(flag & seen, 0, "{flag:#x} used twice");
            seen |= flag;
        }
        assert_eq!(value_of(SEMVMX as u32), SEMVMX);
    }

    #[test]
    fn the_value_is_read_and_written_without_touching_the_flags() {
        let word = LOCKED | REMOVED | 7;
        assert_eq!(value_of(word), 7);
        assert_eq!(with_value(word, 0), LOCKED | REMOVED);
        assert_eq!(with_value(word, SEMVMX), LOCKED | REMOVED | SEMVMX as u32);
        assert_eq!(value_of(with_value(GLOBAL, 12_345)), 12_345);
    }

    #[test]
    fn publishing_clears_locked_and_recomputes_sleepers() {
        let word = LOCKED | CONTENDED | SLEEPERS | 3;
        assert_eq!(published(word, 0, false), 3);
        assert_eq!(published(word, 0, true), SLEEPERS | 3);
        assert_eq!(published(3, 0, true), SLEEPERS | 3);
        // GLOBAL stays unless the caller lifts it; REMOVED always stays.
        assert_eq!(
            published(GLOBAL | REMOVED | 3, 0, false),
            GLOBAL | REMOVED | 3
        );
        assert_eq!(published(GLOBAL | REMOVED | 3, GLOBAL, false), REMOVED | 3);
    }

    #[test]
    fn any_flag_sends_the_operation_to_the_locked_path() {
        for flag in FLAGS {
            for op in [-1, 0, 1] {
                assert_eq!(lock_free_step(flag | 1, op), LockFree::Locked);
                assert_eq!(lock_free_step(flag, op), LockFree::Locked);
            }
        }
    }

    #[test]
    fn lock_free_decisions_follow_semop() {
        use LockFree::*;
        assert_eq!(lock_free_step(0, 0), Satisfied);
        assert_eq!(lock_free_step(1, 0), WouldBlock);
        assert_eq!(lock_free_step(3, 1), Store(4));
        assert_eq!(lock_free_step(3, -3), Store(0));
        assert_eq!(lock_free_step(3, -4), WouldBlock);
        assert_eq!(lock_free_step(0, -1), WouldBlock);
        assert_eq!(lock_free_step(SEMVMX as u32 - 1, 1), Store(SEMVMX as u32));
        assert_eq!(lock_free_step(SEMVMX as u32, 1), Range);
        assert_eq!(lock_free_step(0, i16::MAX), Store(i16::MAX as u32));
        assert_eq!(lock_free_step(1, i16::MAX), Range);
    }
}
