//! Process-shared System V semaphore sets: [`SharedSemSet`].
//!
//! A set is a file in a directory ([`sem_dir`]: `$KSYNC_SEM_DIR`, else
//! `/dev/shm/ksync-sem`, else `/tmp/ksync-sem`), found by key through a
//! symbolic link, mapped by
//! every process that opens it. No server: the processes keep the set
//! consistent among themselves, including when one of them is killed at any
//! instruction.
//!
//! # Recovery protocol and its invariants
//!
//! * **One lock, naming its holder's process** (`lock.rs`). Every change
//!   other than a lock-free single operation happens under the set's lock,
//!   whose word names the holder's process slot and incarnation. A waiter
//!   that has slept 10 ms checks the holder; a dead holder's lock is taken
//!   over with one compare-and-swap.
//! * **Processes prove they are alive with a byte-range lock** (`procs.rs`).
//!   A process's slot is held by a POSIX lock on one byte of the file, which
//!   the kernel drops when the process dies, by `exit`, a signal or
//!   `SIGKILL`. A slot whose lock can be taken belongs to a dead process.
//! * **Every change under the lock is a transaction** (`journal.rs`): old
//!   values are journalled before new ones are stored, and the commit is one
//!   store. Whoever takes the lock from a dead holder rolls its transaction
//!   back, then completes every sleeper the values let through: the holder
//!   may have died between committing a change and completing the sleepers
//!   it enabled, which the kernel's waker cannot. Invariant: once a holder
//!   has entered, outside a transaction, the set's values, undo
//!   adjustments, queue and counts are those of some sequence of whole
//!   calls; a killed process never leaves half a multi-operation call, and
//!   never loses or invents a unit.
//! * **Nothing decided is visible before its commit**: a sleeper learns its
//!   result from a status word stored after the commit, so a rollback never
//!   takes back a result somebody returned.
//! * **Wake-ups owed are marks anybody may claim** (`share.rs`,
//!   `crate::sem::owed_wakes`): a post with many sleepers marks some of them
//!   in the file after their results are published, and it and the
//!   sleepers it woke claim the marks, each once, and wake what they
//!   claimed. A process killed between a claim and its wake leaves those
//!   sleepers to the next sweep (below), which wakes every sleeper whose
//!   result is published but not collected, so they return within about
//!   100 ms.
//! * **Every process with sleepers in a set keeps one of them awake now and
//!   then** (`crate::sem::sleep_watch`): its sleepers sleep with a 100 ms
//!   timeout, but while 16 or more of them sleep in the set only one does,
//!   its watch, and the others sleep until woken (with a timer that never
//!   expires, so that a signal handler still ends their call with `EINTR`). A
//!   watch that returns names one of those others and wakes it. A process
//!   that dies takes its own sleepers with it, so the timed sleepers of
//!   the processes still alive are enough for its leftovers.
//! * **The dead's leftovers are adopted by the living** (`engine.rs`,
//!   `Locked::reap`): in every control call, before a call would block or
//!   fail with `EAGAIN` (before sleeping at most every 10 ms, before failing
//!   always: a reaped child's undo is seen at once; before answering
//!   `ENOSPC` for want of a sleeper slot, always: the dead's sleepers may
//!   fill the table), and in one timed sleeper of
//!   the set every 100 ms (`Locked::sweep`; under steady traffic, when no
//!   timed sleeper times out, in the next call through the lock once 100 ms
//!   have passed), the lock holder looks for dead slots;
//!   their queued sleepers leave the queue
//!   and their undo adjustments are applied as the kernel applies them at
//!   exit, then the sleepers this enables are completed. A sleeper whose
//!   units come back through a dead process's undo is woken within 100 ms.
//!   Until then a dead process's sleepers stay queued, but no change
//!   completes them (`wake.rs`, `owner_alive`): the kernel takes a killed
//!   sleeper off its queue as it dies, so no unit may go to one.
//! * **The lock-free path never crosses a lock holder** (`set.rs`): a
//!   single operation without `SEM_UNDO` is one compare-and-swap on the
//!   semaphore's word, allowed only while the word has neither the `LOCKED`
//!   flag (the holder is working on that semaphore) nor `SLEEPERS`. A killed
//!   compare-and-swap either happened or did not.
//! * **Nothing in the file is trusted** (`map.rs`, `engine.rs`): sizes,
//!   indices, links, counts and owners are checked before use; a file that
//!   fails a check gives `EINVAL`, and walks are bounded by the table sizes.
//!
//! # How it differs from the kernel's sets
//!
//! * Ids are random numbers in `2^30 .. 2^31`; a removed set's id gives
//!   `ENOENT` to [`SharedSemSet::open_id`] (the C library answers `EINVAL`,
//!   as the kernel does for a stale id) and `EIDRM` through any handle
//!   still open on it.
//! * A process that may read a set but not write its file waits for zero
//!   by polling (it cannot queue itself): `GETZCNT` does not count it, and
//!   its success does not update `GETPID` or the operation time.
//! * Rights follow the file. Its mode is the set's for the group and
//!   others, and always read and write for the user the file names as its
//!   owner (the creator, or the owner an `IPC_SET` by a process with
//!   `CAP_CHOWN` gave it), so that this user may do what the kernel lets
//!   an owner its own mode shuts out do (`IPC_SET`, `IPC_RMID`); the set's
//!   owner bits are checked against the header. Only `CAP_CHOWN` changes a
//!   file's owner, so after an `IPC_SET` without it names another owner,
//!   or one with it gives the set away from its creator, the owner or
//!   creator the file does not name has only the rights the file's group
//!   and other bits give it: it cannot alter a set it cannot open for
//!   writing (`EACCES`), nor remove or `IPC_SET` one it cannot open at all
//!   (`EPERM`), and its `IPC_SET` changes the set's mode but not the file's.
//! * Privilege is the kernel's, read from the effective capabilities
//!   (`capget(2)`), not from user id 0: `CAP_IPC_OWNER` passes the mode
//!   bits, `CAP_SYS_ADMIN` allows `IPC_SET` and `IPC_RMID` to a caller that
//!   neither owns nor created the set. They are the capabilities in the
//!   caller's own user namespace, where the kernel asks for them in the one
//!   that owns its IPC namespace. The file still has to open: a process
//!   with them that the file's mode shuts out (it lacks
//!   `CAP_DAC_OVERRIDE`, or `CAP_DAC_READ_SEARCH` for reading) gets
//!   `EACCES` where the kernel lets it through, and one that does not own
//!   the file and lacks `CAP_FOWNER` changes the set's mode with `IPC_SET`
//!   but not the file's.
//! * A process the file's mode shuts out (it may not read the file) cannot
//!   map the set. [`SharedSemSet::get`] still answers as `semget` does,
//!   and [`SealedSemSet`] gives the answers the kernel checks before the
//!   rights (`EFBIG`, `EINVAL` for a number, `EPERM`), from the file's
//!   attributes, which need no right on the file; [`SharedSemSet::open`],
//!   which returns a handle, answers `EACCES`. A process the mode lets alter
//!   but not read (0622, say) is shut out too: `EACCES` where the kernel
//!   would let it alter the set. A set whose remover was killed before it
//!   unlinked the file still looks present to a shut-out process.
//! * Undo adjustments are applied lazily: by the next process that blocks,
//!   fails with `EAGAIN`, makes a control call, or sleeps in the set, not at
//!   the instant of death. A lock-free operation in between does not see them.
//! * The credentials and capabilities a handle checks are read once per
//!   process (a `fork` child reads its own) and again after each
//!   `IPC_SET`: a process that lowers its own privileges keeps, through
//!   handles it already used, the rights it had, as with a file it had
//!   open.
//! * `exec` closes the set's descriptors (they are close-on-exec), which
//!   releases the process's slot, so its undo adjustments are applied at
//!   `exec`; the kernel keeps them across `exec`.
//! * At most [`NPROC`] processes (128) may hold a slot in one set
//!   and [`NSLEEP`] threads (1024) sleep in it at once: `ENOSPC`.
//! * Every set a process has used holds one of its descriptors until it
//!   exits. Out of descriptors, the process doubles its soft
//!   `RLIMIT_NOFILE`, up to the hard limit, and goes on (`dir.rs`); past
//!   the hard limit, `ENOSPC`.
//! * A file truncated by a process with write access while others have it
//!   mapped would make their next access fault (`SIGBUS`); a handler
//!   (`sigbus.rs`) turns that into `EINVAL` for every later call on the set
//!   in that process. It is installed when the first set is mapped and
//!   passes other `SIGBUS`es on to the handler that was there before. A
//!   thread already asleep in the set learns of it only if it sleeps with a
//!   timeout (see the watch above; no wake-up can reach a futex in a
//!   truncated file): like any other write a hostile process can make to
//!   the file, such as emptying the queue, it can leave sleepers asleep.

mod dir;
mod engine;
mod eval;
mod journal;
mod layout;
mod lock;
mod map;
mod privilege;
mod procs;
mod set;
mod share;
mod sigbus;
#[cfg(test)]
mod test_counts;
mod versions;
mod wake;

pub use dir::{key_id, sem_dir, set_ids, SEMMNI};
pub use layout::{NPROC, NSLEEP};
pub use set::{
    set_untimed_crowd, Got, RecoveryStats, SealedSemSet, SharedSemSet, SharedSemStat, UndoHolder,
    IPC_CREAT, IPC_EXCL, IPC_PRIVATE,
};
pub use versions::{file_layout_version, remove_other_version, LAYOUT_VERSION};
