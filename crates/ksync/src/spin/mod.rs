//! Spinlocks from the kernel's `kernel/locking`, each a [`lock_api::RawMutex`].
//!
//! | lock | word | fair | under oversubscription |
//! |---|---|---|---|
//! | [`RawTasLock`] | 1 byte | no | fine-ish: whoever runs takes it |
//! | [`RawTicketLock`] | 4 bytes | FIFO | collapses: a preempted next waiter stalls all |
//! | [`RawMcsLock`] | 1 pointer | FIFO | collapses like the ticket lock |
//! | [`RawQSpinLock`] | 4 bytes | FIFO after the pending waiter | collapses like the ticket lock |
//! | [`RawPvQSpinLock`] | 4 bytes | mostly; arrivals may steal from a sleeping head | sleeps instead of spinning |

mod mcs;
#[cfg(any(feature = "std", loom))]
mod pv;
#[cfg(any(feature = "std", loom))]
mod qspin;
mod tas;
mod ticket;

pub use mcs::*;
#[cfg(any(feature = "std", loom))]
pub use pv::*;
#[cfg(any(feature = "std", loom))]
pub use qspin::*;
pub use tas::*;
pub use ticket::*;
