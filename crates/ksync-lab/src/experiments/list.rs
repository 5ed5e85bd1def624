//! `list`: everything the lab can measure, from the registries.

use crate::peers::mutex::registry::MUTEXES;
use crate::peers::registry::Entry;
use crate::peers::rwlock::registry::RW_LOCKS;
use crate::peers::sem::registry::SEM_BACKENDS;
use crate::workloads::rw_mix::MIXES;

fn entries<Id>(title: &str, all: &[Entry<Id>]) {
    println!("{title}:");
    for e in all {
        let about = match e.aliases {
            [] => e.about.to_string(),
            aliases => format!("{} (also {})", e.about, aliases.join(", ")),
        };
        println!("  {:<26} {:<14} {about}", e.name, e.tag());
    }
}

/// Prints every mutex, reader-writer lock, rwsem mix and semaphore backend.
pub fn run() {
    entries(
        "mutexes (compare, spin, uncontended, backoff, torture --locks)",
        MUTEXES,
    );
    entries("reader-writer locks (rwsem, torture --rw-locks)", RW_LOCKS);
    println!(
        "rwsem mixes (Howells and Arcangeli, rw_semaphores, optimisations, LKML, April 2001):"
    );
    for m in MIXES {
        println!(
            "  {:<26} {} readers, {} writers, load {} us, interval {} us",
            m.name, m.readers, m.writers, m.load_us, m.interval_us
        );
    }
    entries(
        "semaphore backends (sembench, wake, semop -o)",
        SEM_BACKENDS,
    );
}
