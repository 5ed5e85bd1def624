//! Named locks and one report of all of them.
//!
//! Locks are static or live inside an `Arc`; the registry holds `&'static`
//! references to the first and `Weak` references to the second, so it never
//! keeps a lock alive or outlives one, and needs no unsafe lifetime tricks.
//! An entry whose owner is gone drops out of the next report.
//!
//! As in the kernel's lock statistics, the name is a class: every lock
//! registered under one name is summed into one row.

use super::clock::{self, ClockSource};
use super::snapshot::{per_mille, Histogram, LockStatSnapshot, SideStats};
use super::LockStats;
use core::fmt::{self, Write as _};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Identifies one registration, to [`Registry::unregister`] it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegistrationId(u64);

/// Where a registered entry reads its statistics.
trait Source: Send + Sync {
    /// Calls `f` with the statistics; `false` if the lock is gone.
    fn with(&self, f: &mut dyn FnMut(&dyn LockStats)) -> bool;
}

struct Static(&'static (dyn LockStats + Sync));

impl Source for Static {
    fn with(&self, f: &mut dyn FnMut(&dyn LockStats)) -> bool {
        f(self.0);
        true
    }
}

struct Owned<T, F> {
    owner: Weak<T>,
    project: F,
}

impl<T, F> Source for Owned<T, F>
where
    T: Send + Sync,
    F: Fn(&T) -> &dyn LockStats,
    F: Send + Sync,
{
    fn with(&self, f: &mut dyn FnMut(&dyn LockStats)) -> bool {
        match self.owner.upgrade() {
            Some(owner) => {
                f((self.project)(&owner));
                true
            }
            None => false,
        }
    }
}

struct Entry {
    id: u64,
    name: String,
    source: Arc<dyn Source>,
}

struct Entries {
    next_id: u64,
    list: Vec<Entry>,
}

/// A set of named locks. [`registry`] is the process-wide one; a program or
/// test may also keep its own.
pub struct Registry {
    entries: Mutex<Entries>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("entries", &self.len())
            .finish()
    }
}

/// The process-wide registry.
pub fn registry() -> &'static Registry {
    static GLOBAL: Registry = Registry::new();
    &GLOBAL
}

impl Registry {
    /// An empty registry.
    pub const fn new() -> Self {
        Registry {
            entries: Mutex::new(Entries {
                next_id: 0,
                list: Vec::new(),
            }),
        }
    }

    fn entries(&self) -> MutexGuard<'_, Entries> {
        // A panic elsewhere while holding this mutex cannot leave the list
        // half-changed (every change is one push or retain), so a poisoned
        // lock is still good.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, name: String, source: Arc<dyn Source>) -> RegistrationId {
        source.with(&mut |s| s.mark_start());
        let mut entries = self.entries();
        let id = entries.next_id;
        entries.next_id += 1;
        entries.list.push(Entry { id, name, source });
        RegistrationId(id)
    }

    /// Registers a lock that lives for the whole program (a `static`, or a
    /// leaked one), and starts its per-mille window.
    pub fn register_static(
        &self,
        name: impl Into<String>,
        lock: &'static (dyn LockStats + Sync),
    ) -> RegistrationId {
        self.add(name.into(), Arc::new(Static(lock)))
    }

    /// Registers a lock shared through an `Arc`, and starts its per-mille
    /// window. The registry keeps a `Weak`: once the last `Arc` is gone the
    /// entry drops out.
    pub fn register<T>(&self, name: impl Into<String>, lock: &Arc<T>) -> RegistrationId
    where
        T: LockStats + Send + Sync + 'static,
    {
        self.register_in(name, lock, |t| t)
    }

    /// Registers the lock that `project` finds inside `owner` (a field of a
    /// shared structure, or a collection of locks, which are summed), and
    /// starts its per-mille window. Keeps a `Weak` to `owner`, as
    /// [`register`](Self::register) does.
    ///
    /// ```
    /// use ksync::spin::RawQSpinLock;
    /// use ksync::stat::{Registry, Stat};
    /// use std::sync::Arc;
    ///
    /// struct Table {
    ///     buckets: Vec<lock_api::Mutex<Stat<RawQSpinLock>, Vec<u64>>>,
    /// }
    ///
    /// let table = Arc::new(Table { buckets: (0..4).map(|_| lock_api::Mutex::new(vec![])).collect() });
    /// let registry = Registry::new();
    /// registry.register_in("table.buckets", &table, |t| &t.buckets);
    /// table.buckets[1].lock().push(7);
    /// assert_eq!(registry.report().get("table.buckets").unwrap().acquisitions(), 1);
    /// drop(table);
    /// assert!(registry.report().rows.is_empty());
    /// ```
    pub fn register_in<T, F>(
        &self,
        name: impl Into<String>,
        owner: &Arc<T>,
        project: F,
    ) -> RegistrationId
    where
        T: Send + Sync + 'static,
        F: Fn(&T) -> &dyn LockStats,
        F: Send + Sync + 'static,
    {
        let source = Owned {
            owner: Arc::downgrade(owner),
            project,
        };
        self.add(name.into(), Arc::new(source))
    }

    /// Removes a registration; `false` if it was not there (already removed,
    /// or its owner is gone and a report dropped it).
    pub fn unregister(&self, id: RegistrationId) -> bool {
        let mut entries = self.entries();
        let before = entries.list.len();
        entries.list.retain(|e| e.id != id.0);
        entries.list.len() != before
    }

    /// Number of registrations (including ones whose owner is gone but that
    /// no report has dropped yet).
    pub fn len(&self) -> usize {
        self.entries().list.len()
    }

    /// Whether nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every live registration's statistics, one `(name, snapshot)` each,
    /// in registration order. Drops the entries whose owner is gone.
    pub fn snapshots(&self) -> Vec<(String, LockStatSnapshot)> {
        // Read the locks outside the registry's mutex, so a slow snapshot
        // (thousands of locks in one entry) does not stall registrations.
        let sources: Vec<(u64, String, Arc<dyn Source>)> = self
            .entries()
            .list
            .iter()
            .map(|e| (e.id, e.name.clone(), Arc::clone(&e.source)))
            .collect();
        let mut out = Vec::with_capacity(sources.len());
        let mut gone = Vec::new();
        for (id, name, source) in sources {
            let mut snap = None;
            if source.with(&mut |s| snap = Some(s.snapshot())) {
                out.extend(snap.map(|s| (name, s)));
            } else {
                gone.push(id);
            }
        }
        if !gone.is_empty() {
            self.entries().list.retain(|e| !gone.contains(&e.id));
        }
        out
    }

    /// One report of every registered lock, a row per name.
    pub fn report(&self) -> Report {
        Report::from_snapshots(self.snapshots())
    }

    /// Resets every registered lock (see [`Stat::reset`](super::Stat::reset)),
    /// to measure one phase of a program.
    pub fn reset(&self) {
        let sources: Vec<Arc<dyn Source>> = self
            .entries()
            .list
            .iter()
            .map(|e| Arc::clone(&e.source))
            .collect();
        for source in sources {
            source.with(&mut |s| s.reset());
        }
    }
}

/// One row of a [`Report`]: a lock class and its summed statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReportRow {
    /// The name the locks were registered under.
    pub name: String,
    /// Their statistics, summed (`stats.locks` says how many).
    pub stats: LockStatSnapshot,
}

/// Statistics of named locks, printable as a table ([`table`](Self::table),
/// also `Display`), as JSON ([`to_json`](Self::to_json)) or in the one-line
/// form of Spraul's 2010 ipc/sem.c series
/// ([`summary_lines`](Self::summary_lines)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// The clock the times were measured with.
    pub clock: ClockSource,
    /// Online CPUs.
    pub cpus: u32,
    /// One row per name, most contended first (as the kernel sorts), then by name.
    pub rows: Vec<ReportRow>,
}

impl Report {
    /// A report of the given `(name, snapshot)` pairs; pairs with the same
    /// name are summed into one row. For statistics that are not in a
    /// registry (a semaphore set's, say).
    pub fn from_snapshots(
        snapshots: impl IntoIterator<Item = (String, LockStatSnapshot)>,
    ) -> Report {
        let mut rows: Vec<ReportRow> = Vec::new();
        for (name, stats) in snapshots {
            match rows.iter_mut().find(|r| r.name == name) {
                Some(row) => row.stats.merge(&stats),
                None => rows.push(ReportRow { name, stats }),
            }
        }
        rows.sort_by(|a, b| {
            b.stats
                .contended()
                .cmp(&a.stats.contended())
                .then_with(|| a.name.cmp(&b.name))
        });
        let cpus = rows.iter().map(|r| r.stats.cpus).max().unwrap_or(0);
        Report {
            clock: clock::source(),
            cpus,
            rows,
        }
    }

    /// The statistics of the row named `name`.
    pub fn get(&self, name: &str) -> Option<&LockStatSnapshot> {
        self.rows.iter().find(|r| r.name == name).map(|r| &r.stats)
    }

    /// The one-line form of Spraul's 2010 ipc/sem.c series, one line per
    /// row: `NAME: free F contended C wait W avg A 1/1000 cpu time P` (times
    /// in nanoseconds).
    pub fn summary_lines(&self) -> String {
        let mut out = String::new();
        for row in &self.rows {
            let _ = writeln!(out, "{}: {}", row.name, row.stats.summary_line());
        }
        out
    }

    /// The table, laid out like the kernel's `/proc/lock_stat`: times in
    /// microseconds with two decimals, a reader-writer lock as a `-W` and an
    /// `-R` row. Hold columns show `-` where nothing was timed; sampled hold
    /// totals are estimates (mean sample times acquisitions).
    pub fn table(&self) -> String {
        const HEADS: [&str; 9] = [
            "contentions",
            "waittime-max",
            "waittime-total",
            "waittime-avg",
            "acquisitions",
            "holdtime-max",
            "holdtime-total",
            "holdtime-avg",
            "1/1000 cpu",
        ];
        let mut lines: Vec<(String, [String; 9])> = Vec::new();
        let mut sampled = false;
        for row in &self.rows {
            let s = &row.stats;
            let rw = !s.read.is_empty();
            let sides: &[(&str, &SideStats)] = if rw {
                &[("-W", &s.write), ("-R", &s.read)]
            } else {
                &[("", &s.write)]
            };
            for &(suffix, side) in sides {
                sampled |= side.hold_samples != 0 && side.hold_samples < side.acquisitions();
                let hold = |v: u64| {
                    if side.hold_samples == 0 {
                        "-".to_string()
                    } else {
                        usecs(v)
                    }
                };
                lines.push((
                    format!("{}{}:", row.name, suffix),
                    [
                        side.contended.to_string(),
                        usecs(side.wait_max_ns),
                        usecs(side.wait_total_ns),
                        usecs(side.wait_avg_ns()),
                        side.acquisitions().to_string(),
                        hold(side.hold_max_ns),
                        hold(side.hold_total_ns()),
                        hold(side.hold_avg_ns()),
                        per_mille(side.wait_total_ns, s.elapsed_ns, s.cpus).to_string(),
                    ],
                ));
            }
        }
        let name_w = lines
            .iter()
            .map(|(n, _)| n.chars().count())
            .max()
            .unwrap_or(0)
            .max("class name".len());
        let col_w: Vec<usize> = (0..HEADS.len())
            .map(|i| {
                lines
                    .iter()
                    .map(|(_, c)| c[i].len())
                    .max()
                    .unwrap_or(0)
                    .max(HEADS[i].len())
            })
            .collect();
        let width = name_w + col_w.iter().map(|w| w + 1).sum::<usize>();
        let rule = "-".repeat(width);

        let mut out = String::new();
        let _ = writeln!(
            out,
            "ksync lock statistics: clock {}, {} cpus, times in us{}",
            clock_desc(self.clock),
            self.cpus,
            if sampled {
                "; hold times sampled, totals estimated"
            } else {
                ""
            }
        );
        let _ = writeln!(out, "{rule}");
        let _ = write!(out, "{:>name_w$}", "class name");
        for (h, w) in HEADS.iter().zip(&col_w) {
            let _ = write!(out, " {h:>w$}");
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "{rule}");
        for (name, cells) in &lines {
            let _ = write!(out, "{name:>name_w$}");
            for (c, w) in cells.iter().zip(&col_w) {
                let _ = write!(out, " {c:>w$}");
            }
            let _ = writeln!(out);
        }
        out
    }

    /// The report as JSON: every counter of every row, times in
    /// nanoseconds, histograms as arrays of [`BUCKETS`](super::BUCKETS)
    /// counts (bucket `i` from `2^i` ns; bucket 0 from 0).
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        out.push('{');
        out.push_str("\"clock\":{\"source\":");
        json_str(&mut out, self.clock.name());
        let _ = write!(out, ",\"hz\":{}}}", self.clock.hz());
        let _ = write!(out, ",\"cpus\":{}", self.cpus);
        out.push_str(",\"locks\":[");
        for (i, row) in self.rows.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let s = &row.stats;
            out.push_str("{\"name\":");
            json_str(&mut out, &row.name);
            let _ = write!(
                out,
                ",\"locks\":{},\"elapsed_ns\":{},\"cpus\":{},\"free\":{},\"contended\":{},\
                 \"wait_total_ns\":{},\"wait_avg_ns\":{},\"per_mille\":{},\"hold_total_ns\":{}",
                s.locks,
                s.elapsed_ns,
                s.cpus,
                s.free(),
                s.contended(),
                s.wait_total_ns(),
                s.wait_avg_ns(),
                s.per_mille(),
                s.hold_total_ns(),
            );
            out.push_str(",\"write\":");
            json_side(&mut out, &s.write);
            out.push_str(",\"read\":");
            json_side(&mut out, &s.read);
            out.push_str(",\"wait_histogram\":");
            json_hist(&mut out, &s.wait_histogram);
            out.push_str(",\"hold_histogram\":");
            json_hist(&mut out, &s.hold_histogram);
            out.push('}');
        }
        out.push_str("]}");
        out
    }
}

impl fmt::Display for Report {
    /// The table; see [`Report::table`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table())
    }
}

fn clock_desc(c: ClockSource) -> String {
    match c {
        ClockSource::Tsc { hz } => format!("tsc {} kHz", hz / 1000),
        ClockSource::Monotonic => "monotonic".to_string(),
    }
}

/// Nanoseconds as microseconds with two decimals, as `/proc/lock_stat` prints.
fn usecs(ns: u64) -> String {
    let hundredths = ns / 10;
    format!("{}.{:02}", hundredths / 100, hundredths % 100)
}

fn json_side(out: &mut String, s: &SideStats) {
    let _ = write!(
        out,
        "{{\"free\":{},\"contended\":{},\"wait_total_ns\":{},\"wait_max_ns\":{},\
         \"hold_samples\":{},\"hold_sampled_ns\":{},\"hold_max_ns\":{},\"hold_total_ns\":{},\
         \"timeouts\":{},\"timeout_wait_ns\":{}}}",
        s.free,
        s.contended,
        s.wait_total_ns,
        s.wait_max_ns,
        s.hold_samples,
        s.hold_sampled_ns,
        s.hold_max_ns,
        s.hold_total_ns(),
        s.timeouts,
        s.timeout_wait_ns,
    );
}

fn json_hist(out: &mut String, h: &Histogram) {
    out.push('[');
    for (i, n) in h.buckets.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{n}");
    }
    out.push(']');
}

/// Writes `s` as a JSON string literal.
fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usecs_like_lock_stat() {
        assert_eq!(usecs(0), "0.00");
        assert_eq!(usecs(260), "0.26");
        assert_eq!(usecs(939_104), "939.10");
        assert_eq!(usecs(1_000_000_000), "1000000.00");
    }

    #[test]
    fn json_strings_escape() {
        let mut s = String::new();
        json_str(&mut s, "a\"b\\c\nd\u{1}é");
        assert_eq!(s, "\"a\\\"b\\\\c\\nd\\u0001é\"");
    }
}
