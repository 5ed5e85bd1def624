//! loom models of every lock protocol. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p ksync --release --test loom`.
//! Six models sit beside the private algorithms they check, in the
//! library: the process-shared sets' owner-naming lock (`... --lib
//! owner_lock`), their wake-ups owed and claimed (`--lib
//! sem::owed_wakes`), the watch among their sleepers (`--lib
//! sem::sleep_watch`), the shared-out bulk wake-up (`--lib futex_batch::spread`),
//! a semaphore's word lock against a quiet hold (`--lib sem::sem_lock`) and
//! a call on several semaphores polling before it queues (`--lib
//! sem::mode::loom_models`).
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
