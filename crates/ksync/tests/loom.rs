//! loom models of every lock protocol. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p ksync --release --test loom`.
//! The model of the process-shared sets' owner-naming lock sits beside its
//! private algorithm: `... cargo test -p ksync --release --lib owner_lock`.
//! Without `--cfg loom` this file compiles to nothing.
#![cfg(loom)]

mod common;

#[path = "loom/combining.rs"]
mod combining;
#[path = "loom/exclusion.rs"]
mod exclusion;
#[path = "loom/mcs.rs"]
mod mcs;
#[path = "loom/pv.rs"]
mod pv;
#[path = "loom/qspin.rs"]
mod qspin;
#[path = "loom/rwsem.rs"]
mod rwsem;
#[path = "loom/sem.rs"]
mod sem;
#[path = "loom/tas.rs"]
mod tas;
#[path = "loom/ticket.rs"]
mod ticket;
