//! Where everything is in a set's file: a header, then arrays of 32-bit
//! words. The file holds indices and counts, never pointers, so every process
//! may map it at its own address; everything read back is checked against
//! the layout before it is used (`map.rs`, and the readers of each field).

use super::super::{SEMMSL, SEMOPM};

/// "KSEM": the first word of every set file.
pub(super) const MAGIC: u32 = 0x4b53_454d;
/// The layout's version; a file of another version is refused (`EINVAL`),
/// and only `versions::remove_other_version` touches it.
/// Version 2 moved the queue's links out of the sleeper slots into the
/// dense [`queue index`](Layout::link), beside a [`summary`] of each
/// sleeper's semaphores. Version 3 added the bitmaps of sleepers owed a
/// wake-up ([`Layout::owed`]) and each sleeper's CPU ([`sleeper::CPU`]).
/// Version 4 gave the status word a third value, [`APPOINTED`], which a
/// sleeper of an older version would take for a spurious wake-up forever.
pub(super) const VERSION: u32 = 4;

/// Processes that may use one set at the same time (each holds a slot while
/// it has undo adjustments, sleepers, or the set's lock).
pub const NPROC: usize = 128;
/// Threads that may sleep in one set at the same time, over all processes.
pub const NSLEEP: usize = 1024;

/// The header's words.
pub(super) mod header {
    pub(crate) const MAGIC: usize = 0;
    pub(crate) const VERSION: usize = 1;
    pub(crate) const NSEMS: usize = 2;
    pub(crate) const KEY: usize = 3;
    pub(crate) const ID: usize = 4;
    pub(crate) const UID: usize = 5;
    pub(crate) const GID: usize = 6;
    pub(crate) const CUID: usize = 7;
    pub(crate) const CGID: usize = 8;
    /// The low nine bits of `sem_perm.mode`.
    pub(crate) const MODE: usize = 9;
    /// [`super::REMOVED`].
    pub(crate) const FLAGS: usize = 10;
    /// Seconds since the epoch; 0: no `semop` yet.
    pub(crate) const OTIME: usize = 11;
    pub(crate) const CTIME: usize = 12;
    /// Bumped by every `IPC_SET`, so handles recompute their rights.
    pub(crate) const PERM_GEN: usize = 13;
    /// Entries in the journal; 0 when no transaction is open.
    pub(crate) const JOURNAL_LEN: usize = 14;
    /// First and last sleeper in the FIFO queue, as slot + 1 (0: none).
    pub(crate) const QUEUE_HEAD: usize = 15;
    pub(crate) const QUEUE_TAIL: usize = 16;
    /// Coarse clock (milliseconds, wrapping) of the last search for dead
    /// processes (`engine.rs`).
    pub(crate) const LAST_REAP: usize = 17;
    /// Recovery counters (`RecoveryStats`): locks taken over from a dead
    /// holder, transactions rolled back, dead processes' slots adopted.
    pub(crate) const TAKEOVERS: usize = 19;
    pub(crate) const ROLLBACKS: usize = 20;
    pub(crate) const REAPED: usize = 21;
    /// Coarse clock of the last sleepers' sweep (`engine.rs`).
    pub(crate) const LAST_SWEEP: usize = 22;
    /// Recovery counter (`RecoveryStats::swept`): sleepers a sweep completed
    /// or woke, which their wakers had not.
    pub(crate) const SWEPT: usize = 23;
    /// Queued sleepers of several operations (the kernel's
    /// `complex_count`): while there are any, alter sleepers are completed
    /// from one list (`wake.rs`); journalled.
    pub(crate) const COMPLEX: usize = 24;
    /// Of those, sleepers whose operations all wait for zero; journalled.
    /// While there are any, every semaphore is closed to the lock-free path
    /// (`engine.rs`).
    pub(crate) const COMPLEX_ZERO: usize = 25;
    /// Where the search for a free sleeper slot starts.
    pub(crate) const SLEEP_HINT: usize = 18;
    /// The set's lock (`lock.rs`), alone on its cache line.
    pub(crate) const LOCK: usize = 32;
}

/// Header flag: the set was removed (`IPC_RMID`); set once, never cleared.
pub(super) const REMOVED: u32 = 1;

/// Words the header takes (two 128-byte lines).
pub(super) const HEADER_WORDS: usize = 64;

/// A semaphore's word: its value in the low 16 bits and two flags.
pub(super) mod sem_word {
    /// The value (0 ..= SEMVMX fits in 15 bits).
    pub(crate) const VALUE: u32 = 0xffff;
    /// The set's lock holder is working on this semaphore: the lock-free
    /// path keeps off it.
    pub(crate) const LOCKED: u32 = 1 << 30;
    /// Some sleeper's operations name this semaphore: changes must go
    /// through the lock, which completes sleepers.
    pub(crate) const SLEEPERS: u32 = 1 << 31;
}

/// A process slot: who it is, and its undo adjustments.
pub(super) mod proc_slot {
    /// [`super::SLOT_FREE`] or [`super::SLOT_LIVE`].
    pub(crate) const STATE: usize = 0;
    /// Incarnation: bumped each time a process claims the slot, so a lock
    /// or a sleeper of an earlier owner is recognised as dead.
    pub(crate) const GEN: usize = 1;
    pub(crate) const PID: usize = 2;
    /// Nonzero once the process has made a `SEM_UNDO` call on the set: the
    /// kernel's `sem_undo` for it, whose existence makes the process's exit
    /// an operation (`exit_sem` stamps the time and rescans the queue even
    /// when every adjustment is 0).
    pub(crate) const UNDO: usize = 3;
    /// Adjustments follow: one word per semaphore, `(generation << 16) |
    /// (adjustment as u16)`; an adjustment counts only while its generation
    /// equals the semaphore's current undo generation (`SETVAL` and
    /// `SETALL` clear every process's adjustments by bumping it).
    pub(crate) const ADJ: usize = 4;
}

pub(super) const SLOT_FREE: u32 = 0;
pub(super) const SLOT_LIVE: u32 = 1;

/// A sleeper slot: one blocked call.
pub(super) mod sleeper {
    /// The futex word the sleeper waits on: [`WAITING`](super::WAITING)
    /// (or [`APPOINTED`](super::APPOINTED)) until the result is published,
    /// after the transaction that decided it.
    pub(crate) const STATUS: usize = 0;
    /// Free, queued or done (`SLEEPER_*`); journalled.
    pub(crate) const STATE: usize = 1;
    /// The outcome once done: 0 for success, else an errno; journalled.
    pub(crate) const RESULT: usize = 2;
    /// The owning process, an [`owner_word`](super::owner_word).
    pub(crate) const OWNER: usize = 3;
    pub(crate) const NSOPS: usize = 4;
    /// Index in the operation array of the operation that blocks
    /// (`GETNCNT` / `GETZCNT` count sleepers by it, as the kernel does).
    pub(crate) const BLOCKING: usize = 5;
    /// The CPU the sleeper queued on (`futex_batch::sleeper_cpu`), which
    /// tells a poster whose wake-ups its helpers there can make
    /// (`share.rs`); a hint, never trusted for anything else.
    pub(crate) const CPU: usize = 6;
    /// Wake-ups owed for results published in this slot and not made yet:
    /// one more as each result is published, under the lock, and one fewer
    /// from whoever made that wake-up, after it (`share.rs`), by then
    /// perhaps for a later sleeper of the slot. So it counts over every
    /// sleeper the slot held and is never reset: 0 means every result ever
    /// published here was followed by its wake-up. Only the sweep reads it,
    /// to tell a wake-up lost from one still on its way (`Locked::sweep`); a
    /// process that died owing one leaves it above 0, which only keeps the
    /// sweep from counting what it wakes here.
    pub(crate) const WAKES_DUE: usize = 7;
    /// Operations follow, two words each: `num | (op as u16) << 16`, flags.
    pub(crate) const OPS: usize = 8;
}

pub(super) const SLEEPER_FREE: u32 = 0;
pub(super) const SLEEPER_QUEUED: u32 = 1;
pub(super) const SLEEPER_DONE: u32 = 2;

/// Status word values.
pub(super) const WAITING: u32 = 0;
pub(super) const READY: u32 = 1;
/// Still waiting, and named its process's watch (`crate::sem::sleep_watch`)
/// by a watch that left: its futex wait fails, and it takes the role. Only
/// a sleeper's own process stores it, with a compare-and-swap from
/// [`WAITING`]; a waker's [`READY`] overwrites it.
pub(super) const APPOINTED: u32 = 2;

const _: () = assert!(NSLEEP <= crate::sem::sleep_watch::CAPACITY);

const SLEEPER_WORDS: usize = sleeper::OPS + 2 * SEMOPM;

/// Bitmaps of sleepers owed a wake-up (`crate::sem::owed_wakes`), one per
/// group of CPUs: the sleepers a post leaves to be woken by the sleepers it
/// woke on the same CPUs (`share.rs`).
pub(super) const OWED_GROUPS: usize = 8;
/// Words of one bitmap: a bit per sleeper slot.
pub(super) const OWED_WORDS: usize = NSLEEP / crate::sem::owed_wakes::BITS;
/// Each bitmap starts a 128-byte block of its own (two cache lines, which
/// x86 fetches in pairs): posters and helpers of one group do not take the
/// lines of another's.
const OWED_ALIGN: usize = 32;
const _: () = assert!(OWED_WORDS.is_multiple_of(OWED_ALIGN));

/// A queued sleeper's summary word in the queue index ([`Layout::summary`]):
/// enough of its operations for a waker's walk of the queue to tell which of
/// the kernel's lists it is on and to pass over a sleeper that a change
/// cannot concern without reading its slot, 4 KiB away from the next one's
/// (`wake.rs`). Written with the operations, before the sleeper is queued;
/// a corrupt one can only make a walk pass over a sleeper or look at it out
/// of the kernel's order, as a corrupt value could.
pub(super) mod summary {
    use crate::sem::{SemBuf, IPC_NOWAIT, SEM_UNDO};

    /// The sleeper has several operations: the low bits are a mask of their
    /// semaphores, semaphore `n` on bit `n % MASK_BITS` (a superset). Without
    /// it, the low 16 bits are the one operation's semaphore.
    pub(crate) const MANY: u32 = 1 << 31;
    /// One of its operations waits for zero.
    pub(crate) const ZERO: u32 = 1 << 30;
    /// One of its operations changes a value (the kernel's `alter`).
    pub(crate) const ALTER: u32 = 1 << 29;
    /// One of its operations has `IPC_NOWAIT`.
    pub(crate) const NOWAIT: u32 = 1 << 28;
    /// One of its operations has `SEM_UNDO`.
    pub(crate) const UNDO: u32 = 1 << 27;
    /// Bits of a mask of several operations' semaphores.
    pub(crate) const MASK_BITS: usize = 27;
    pub(crate) const NUM: u32 = 0xffff;

    /// The summary of `sops` (semaphore numbers below `SEMMSL`).
    pub(crate) fn of(sops: &[SemBuf]) -> u32 {
        let flag = |has: bool, bit: u32| if has { bit } else { 0 };
        let flags = flag(sops.iter().any(|s| s.op == 0), ZERO)
            | flag(sops.iter().any(|s| s.op != 0), ALTER)
            | flag(sops.iter().any(|s| s.flags & IPC_NOWAIT != 0), NOWAIT)
            | flag(sops.iter().any(|s| s.flags & SEM_UNDO != 0), UNDO);
        match sops {
            [one] => flags | u32::from(one.num),
            many => many.iter().fold(MANY | flags, |summary, s| {
                summary | 1 << (usize::from(s.num) % MASK_BITS)
            }),
        }
    }
}

/// The word offsets of one set's arrays, computed from its size alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) nsems: usize,
    /// `nsems` semaphore words ([`sem_word`]).
    pub(super) sems: usize,
    /// `nsems` words: the pid of the last change.
    pub(super) pids: usize,
    /// `nsems` words: how many queued sleepers name each semaphore.
    pub(super) waiters: usize,
    /// `nsems` words: each semaphore's undo generation.
    pub(super) undo_gen: usize,
    /// Journal entries, two words each (`journal.rs`).
    pub(super) journal: usize,
    pub(super) journal_cap: usize,
    pub(super) procs: usize,
    /// `NSLEEP` pairs: each sleeper slot's link and summary ([`Layout::link`]).
    pub(super) index: usize,
    pub(super) sleepers: usize,
    /// [`OWED_GROUPS`] bitmaps of [`OWED_WORDS`] ([`Layout::owed`]).
    pub(super) owed: usize,
    pub(super) words: usize,
}

impl Layout {
    /// The layout for `nsems` semaphores (1 ..= SEMMSL).
    pub(super) fn new(nsems: usize) -> Layout {
        debug_assert!((1..=SEMMSL).contains(&nsems));
        let sems = HEADER_WORDS;
        let pids = sems + nsems;
        let waiters = pids + nsems;
        let undo_gen = waiters + nsems;
        let journal = undo_gen + nsems;
        // The largest transaction: SETALL writes every value and every undo
        // generation; completing one sleeper writes at most its operations'
        // values, adjustments and waiter counts, and a few words of its slot.
        let journal_cap = (2 * nsems).max(3 * SEMOPM) + 64;
        let procs = journal + 2 * journal_cap;
        let index = procs + NPROC * Self::proc_words(nsems);
        let sleepers = index + 2 * NSLEEP;
        let owed = (sleepers + NSLEEP * SLEEPER_WORDS).next_multiple_of(OWED_ALIGN);
        let words = owed + OWED_GROUPS * OWED_WORDS;
        Layout {
            nsems,
            sems,
            pids,
            waiters,
            undo_gen,
            journal,
            journal_cap,
            procs,
            index,
            sleepers,
            owed,
            words,
        }
    }

    fn proc_words(nsems: usize) -> usize {
        proc_slot::ADJ + nsems
    }

    pub(super) fn bytes(&self) -> usize {
        self.words * 4
    }

    /// The number of semaphores of a set file `bytes` long, for a process
    /// that may not read the file's header (`SealedSemSet`): the size grows
    /// with every semaphore (each adds a word to each process slot, and 128
    /// slots outgrow the alignment of the owed wake-ups), so it names one
    /// count; `None` for a size no count gives.
    pub(super) fn nsems_of_bytes(bytes: u64) -> Option<usize> {
        let (mut low, mut high) = (1, SEMMSL);
        while low < high {
            let mid = low + (high - low) / 2;
            if (Layout::new(mid).bytes() as u64) < bytes {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        (Layout::new(low).bytes() as u64 == bytes).then_some(low)
    }

    pub(super) fn sem(&self, num: usize) -> usize {
        self.sems + num
    }

    pub(super) fn pid(&self, num: usize) -> usize {
        self.pids + num
    }

    pub(super) fn waiter_count(&self, num: usize) -> usize {
        self.waiters + num
    }

    pub(super) fn undo_gen(&self, num: usize) -> usize {
        self.undo_gen + num
    }

    /// Word `field` of process slot `slot`.
    pub(super) fn proc(&self, slot: usize, field: usize) -> usize {
        self.procs + slot * Self::proc_words(self.nsems) + field
    }

    /// Process slot `slot`'s adjustment word for semaphore `num`.
    pub(super) fn adj(&self, slot: usize, num: usize) -> usize {
        self.proc(slot, proc_slot::ADJ + num)
    }

    /// Sleeper slot `slot`'s link in the queue index: the next sleeper in
    /// the queue, slot + 1 (0: last). Journalled. The links of the whole
    /// queue share a few cache lines, so a walk of it misses once per eight
    /// sleepers, not once per sleeper.
    pub(super) fn link(&self, slot: usize) -> usize {
        self.index + 2 * slot
    }

    /// Sleeper slot `slot`'s [`summary`], beside its link.
    pub(super) fn summary(&self, slot: usize) -> usize {
        self.index + 2 * slot + 1
    }

    /// Word `field` of sleeper slot `slot`.
    pub(super) fn sleeper(&self, slot: usize, field: usize) -> usize {
        self.sleepers + slot * SLEEPER_WORDS + field
    }

    /// The words of group `group`'s bitmap of sleepers owed a wake-up
    /// (`group < OWED_GROUPS`).
    pub(super) fn owed(&self, group: usize) -> std::ops::Range<usize> {
        let start = self.owed + group * OWED_WORDS;
        start..start + OWED_WORDS
    }

    /// The journal word range: never a journal entry's target.
    pub(super) fn is_journal(&self, word: usize) -> bool {
        (self.journal..self.procs).contains(&word) || word == header::JOURNAL_LEN
    }
}

/// Bits of a process slot's incarnation kept in an owner word.
pub(super) const GEN_MASK: u32 = (1 << 23) - 1;

/// An owner word, naming a process (a sleeper's owner, the lock's holder):
/// its process slot (7 bits, as [`NPROC`] is 128) and incarnation (23 bits).
/// The top two bits stay free for the lock's flags.
pub(super) fn owner_word(slot: usize, gen: u32) -> u32 {
    ((slot as u32) << 23) | (gen & GEN_MASK)
}

/// `(slot, gen)` of an owner word; the slot still needs checking against [`NPROC`].
pub(super) fn split_owner(word: u32) -> (usize, u32) {
    (((word >> 23) & 0x7f) as usize, word & GEN_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sem::{SemBuf, IPC_NOWAIT, SEM_UNDO};

    #[test]
    fn arrays_do_not_overlap_and_the_largest_set_fits_in_u32_words() {
        for n in [1, 2, 250, SEMMSL] {
            let l = Layout::new(n);
            assert!(l.sems >= HEADER_WORDS);
            assert!(l.sems < l.pids && l.pids < l.waiters && l.waiters < l.undo_gen);
            assert!(l.undo_gen + n <= l.journal);
            assert!(l.journal + 2 * l.journal_cap <= l.procs);
            assert!(l.adj(NPROC - 1, n - 1) < l.index);
            assert!(l.summary(NSLEEP - 1) < l.sleepers);
            assert!(l.sleeper(NSLEEP - 1, sleeper::OPS + 2 * SEMOPM - 1) < l.owed(0).start);
            assert_eq!(l.owed(0).start % OWED_ALIGN, 0);
            assert_eq!(l.owed(OWED_GROUPS - 1).end, l.words);
            assert!(l.words < u32::MAX as usize);
        }
    }

    /// A process that may not read a set's header learns its size from
    /// the file's length: every count must give its own length.
    #[test]
    fn a_files_length_names_its_number_of_semaphores() {
        let mut previous = 0;
        for n in 1..=SEMMSL {
            let bytes = Layout::new(n).bytes() as u64;
            assert!(
                bytes > previous,
                "{n} semaphores take no more room than {}",
                n - 1
            );
            previous = bytes;
        }
        for n in [1, 2, 3, 250, SEMMSL - 1, SEMMSL] {
            let bytes = Layout::new(n).bytes() as u64;
            assert_eq!(Layout::nsems_of_bytes(bytes), Some(n));
            assert_eq!(Layout::nsems_of_bytes(bytes - 4), None);
            assert_eq!(Layout::nsems_of_bytes(bytes + 4), None);
        }
        assert_eq!(Layout::nsems_of_bytes(0), None);
    }

    #[test]
    fn a_summary_names_one_semaphore_exactly_and_several_by_mask() {
        let op = |num, op| SemBuf::new(num, op, 0);
        assert_eq!(summary::of(&[op(31_999, -1)]), summary::ALTER | 31_999);
        assert_eq!(summary::of(&[op(7, 0)]), summary::ZERO | 7);
        assert_eq!(
            summary::of(&[op(1, -1), op(28, 1), op(2, 0)]),
            summary::MANY | summary::ZERO | summary::ALTER | 0b110
        );
        let flagged = [SemBuf::new(3, 1, IPC_NOWAIT), SemBuf::new(4, -1, SEM_UNDO)];
        assert_eq!(
            summary::of(&flagged),
            summary::MANY | summary::ALTER | summary::NOWAIT | summary::UNDO | 0b11000
        );
        assert_eq!(
            summary::of(&[op(1, 0), op(2, 0)]),
            summary::MANY | summary::ZERO | 0b110
        );
    }

    #[test]
    fn owner_words_round_trip() {
        assert_eq!(
            split_owner(owner_word(127, 0x007b_cdef)),
            (127, 0x007b_cdef)
        );
        assert_eq!(split_owner(owner_word(3, 0x0080_0001)), (3, 1));
        assert_eq!(owner_word(NPROC - 1, u32::MAX) >> 30, 0);
    }
}
