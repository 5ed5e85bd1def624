//! What the lab shows and keeps: the results model ([`record`]: records
//! and medians), the run's context and progress bar ([`lab`]), plain-text
//! tables ([`table`]), `compare`'s summary ([`summary`]), lock statistics
//! ([`lock_stats`]), the `--json`/`--csv` report ([`report`]), output files
//! ([`files`]) and plots ([`plot`]).
//!
//! Knows no lock, workload or experiment: experiments feed it records.

pub mod files;
pub mod lab;
pub mod lock_stats;
pub mod plot;
pub mod record;
pub mod report;
pub mod summary;
pub mod table;
