//! Everything the lab measures, ksync's primitives and their peers, behind
//! one abstraction per kind of primitive, each with one registry of names:
//!
//! - [`mutex`]: [`LabLock`](mutex::LabLock) and the mutexes of spin,
//!   uncontended, backoff, torture and compare;
//! - [`rwlock`]: [`LabRwLock`](rwlock::LabRwLock) and the reader-writer
//!   locks of rwsem and torture;
//! - [`sem`]: [`SemBackend`](sem::SemBackend) and the semaphore backends of
//!   sembench, wake and semop.
//!
//! The registries share [`registry`] (entries, `+stat` twins, dispatch to a
//! generic visitor) and [`names`] (the one parser of name lists). ksync's
//! adapters and the peers' are backends alike, each in a file of its own;
//! only the registries know them by name. Peers know no experiment.

pub mod mutex;
pub mod names;
pub mod registry;
pub mod rwlock;
pub mod sem;
