//! Spinlocks from the kernel's `kernel/locking`, each a [`lock_api::RawMutex`].
//!
//! | lock | word | fair | under oversubscription |
//! |---|---|---|---|
//! | [`RawTasLock`] | 1 byte | no | fine-ish: whoever runs takes it |
//! | [`RawTicketLock`] | 4 bytes | FIFO | collapses: a preempted next waiter stalls all |
//! | [`McsLock`] + [`McsNode`] | 1 pointer, caller-owned nodes (`no_std`) | FIFO | collapses like the ticket lock |
//! | `RawMcsLock` (`std`) | 1 pointer, per-thread nodes | FIFO | collapses like the ticket lock |
//! | `RawQSpinLock` (`std`) | 4 bytes | FIFO after the pending waiter | collapses like the ticket lock |
//! | `RawPvQSpinLock` (`std`) | 4 bytes | bounded barging, hand-off to a head that waited 1 ms | queued waiters sleep; the head never does, so unlock is one store |
//! | `RawCombiningLock` / `CombiningMutex` (`std`) | 2 pointers and counters | bounded barging, then publication order | the holder runs waiters' critical sections; a preempted waiter still gets its done |
//!
//! The queued spinlocks and `RawMcsLock` find per-thread queue nodes through a
//! thread-local, so they need the `std` feature; the others work in `no_std`.

mod backoff;
#[cfg(any(feature = "std", loom))]
mod combining;
#[cfg(any(feature = "std", loom))]
mod events;
mod mcs;
#[cfg(any(feature = "std", loom))]
mod pv;
#[cfg(any(feature = "std", loom))]
mod qspin;
#[cfg(any(feature = "std", loom))]
mod queued;
mod tas;
mod ticket;

pub use backoff::*;
#[cfg(any(feature = "std", loom))]
pub use combining::*;
pub use mcs::*;
#[cfg(any(feature = "std", loom))]
pub use pv::*;
#[cfg(any(feature = "std", loom))]
pub use qspin::*;
pub use tas::*;
pub use ticket::*;
