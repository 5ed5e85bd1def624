//! Reader-writer semaphores: the kernel's modern rwsem and the 2001 generic
//! one, each a [`lock_api::RawRwLock`] with downgrade and timed acquisition.
//!
//! | | [`RawRwSem`] | [`RawSpinRwSem`] |
//! |---|---|---|
//! | kernel source | `kernel/locking/rwsem.c` (today) | `lib/rwsem-spinlock.c` (Howells, April 2001) |
//! | state | one atomic count word | counters under a spinlock |
//! | uncontended read / write | one atomic read-modify-write | spinlock round trip |
//! | queue | FIFO, readers and writers | FIFO, readers and writers |
//! | readers woken | every queued reader, up to 256, writers keep their order | the readers at the front |
//! | writers woken | the first one, which retries, and no other until it has looked; running writers may steal until handoff | the first one, granted directly |
//! | writer spinning | at most one context switch, measured | no |
//! | list lock | [`RawSemLock`](crate::sem::RawSemLock): short spin, then sleep | [`RawTasLock`](crate::spin::RawTasLock): spins |
//! | anti-starvation | handoff after the first waiter waited 4 ms | strict FIFO |
//! | downgrade | grants the queued readers if a reader is first | grants the readers at the front |
//!
//! Both sleep on futexes, with each waiter's node on its own stack, linked
//! into the list under an internal lock (see the table);
//! a waker does the lock's accounting for the readers (and, in the generic
//! one, the writer) it lets in, so a woken waiter holds the lock without a
//! retry. Timed acquisitions that give up leave the semaphore as if they had
//! never queued.
//!
//! [`rwsem_stats`] counts `RawRwSem`'s slow-path events (steals, spins,
//! sleeps, futex wakes, handoffs), as the kernel's lock events do.
//!
//! Guards are `Send`: like the kernel's `up_read_non_owner`, a semaphore may be
//! released by a thread other than the one that acquired it.
//!
//! ```
//! use ksync::rwsem::{RwSem, SpinRwSem};
//! use std::time::Duration;
//!
//! let modern = RwSem::new(0u32);
//! let classic = SpinRwSem::new(0u32);
//! {
//!     let _reading = modern.read();
//!     assert!(modern.try_write_for(Duration::from_millis(1)).is_none());
//! }
//! *modern.write() += 1;
//! *classic.write() += 1;
//! assert_eq!(*modern.read() + *classic.read(), 2);
//! ```

mod events;
mod generic;
mod kernel;
mod wait_list;

pub use events::{reset_rwsem_stats, rwsem_stats, RwSemStats};
pub use generic::{RawSpinRwSem, SpinRwSem, SpinRwSemReadGuard, SpinRwSemWriteGuard};
pub use kernel::{RawRwSem, RwSem, RwSemReadGuard, RwSemWriteGuard};
