//! `ipcs`: the process-shared semaphore sets ksync keeps in its directory
//! (`ksync::sem::shared::sem_dir`), as `ipcs -s` lists the kernel's: one row
//! per set, or with `-i ID` one set in full, its semaphores and the
//! processes that hold undo adjustments in it.
//!
//! A set file that cannot be opened or read (another user's, or not a set
//! at all) gets a row that says why, with the errno, and the listing goes
//! on: `ipcs` is what one runs to find out what is wrong with the directory.

use crate::output::files::{resolve_output, write_file, Outputs};
use crate::output::lab::Lab;
use crate::output::table::Table;
use ksync::sem::shared::{file_layout_version, sem_dir, set_ids, LAYOUT_VERSION};
use ksync::sem::{SemError, SharedSemSet, SharedSemStat};
use serde::Serialize;
use std::time::{SystemTime, UNIX_EPOCH};

/// `ksync-lab ipcs`: ksync's shared semaphore sets, like `ipcs -s`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Show set ID in full (like `ipcs -s -i ID`): its semaphores' values, wait counts and
    /// last pids, and the processes with undo adjustments.
    #[arg(short = 'i', long = "id", value_name = "ID")]
    pub id: Option<i32>,
}

/// An error as `ipcs` shows it: the library's words, then the errno.
pub fn describe(e: SemError) -> String {
    format!("{e} (errno {})", e.errno())
}

/// [`describe`] for set `id` that could not be opened; for a file of another
/// ksync's layout (`EINVAL`), says so and how to remove it.
pub fn describe_unopened(id: i32, e: SemError) -> String {
    match (e, file_layout_version(id)) {
        (SemError::Invalid, Ok(v)) if v != LAYOUT_VERSION => format!(
            "made by another version of ksync (set file layout {v}; this one reads \
             {LAYOUT_VERSION}), which this one cannot open: `ksync-lab ipcrm -s {id}` removes it"
        ),
        _ => describe(e),
    }
}

/// One set's `IPC_STAT`, as rows and JSON show it.
#[derive(Debug, Serialize)]
struct SetRow {
    /// The key in hex, as `ipcs` prints it (0x00000000: IPC_PRIVATE).
    key: String,
    id: i32,
    owner: String,
    uid: u32,
    gid: u32,
    cuid: u32,
    cgid: u32,
    /// The low nine mode bits, in octal.
    perms: String,
    mode: u32,
    nsems: usize,
    /// Seconds since the epoch; `None` before the first `semop`.
    otime: Option<u64>,
    ctime: u64,
}

impl SetRow {
    fn new(id: i32, st: &SharedSemStat) -> SetRow {
        SetRow {
            key: hex_key(st.key),
            id,
            owner: user_name(st.uid),
            uid: st.uid,
            gid: st.gid,
            cuid: st.cuid,
            cgid: st.cgid,
            perms: format!("{:o}", st.mode),
            mode: st.mode,
            nsems: st.nsems,
            otime: st.otime.map(unix_secs),
            ctime: unix_secs(st.ctime),
        }
    }
}

/// A set file that could not be read.
#[derive(Debug, Serialize)]
struct BadRow {
    id: i32,
    error: String,
    errno: i32,
}

/// What `ipcs` lists, for `--json`.
#[derive(Debug, Serialize)]
struct Listing {
    dir: String,
    sets: Vec<SetRow>,
    unreadable: Vec<BadRow>,
}

/// One semaphore of `ipcs -i`.
#[derive(Debug, Serialize)]
struct SemRow {
    num: usize,
    value: i32,
    ncnt: usize,
    zcnt: usize,
    pid: i32,
}

/// A process's undo adjustments, `(semaphore, adjustment)`.
#[derive(Debug, Serialize)]
struct UndoRow {
    pid: i32,
    adjustments: Vec<(usize, i32)>,
}

/// What `ipcs -i` shows, for `--json`.
#[derive(Debug, Serialize)]
struct Detail {
    dir: String,
    set: SetRow,
    semaphores: Vec<SemRow>,
    undo: Vec<UndoRow>,
}

fn hex_key(key: i32) -> String {
    format!("0x{:08x}", key as u32)
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The user name of `uid`, or the number where the system has none.
fn user_name(uid: u32) -> String {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: plain old data; all-zero is a valid value.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call, `buf` for its length;
    // the result points into `pw` and `buf`, read before they go.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pw.pw_name.is_null() {
        return uid.to_string();
    }
    // SAFETY: getpwuid_r succeeded: pw_name is a C string inside `buf`.
    unsafe { std::ffi::CStr::from_ptr(pw.pw_name) }
        .to_string_lossy()
        .into_owned()
}

/// `t` as `YYYY-MM-DD HH:MM:SS` in UTC (ipcs prints local time; the lab
/// has no time zone database, so it says UTC).
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_date(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01: counted in
/// 400-year eras (146097 days each) of years that start on 1 March, so
/// that the leap day ends the year.
fn civil_date(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn time_or_not_set(t: Option<u64>) -> String {
    t.map_or_else(|| "not set".into(), utc)
}

/// `--json`, the lab's way to keep what a command saw; `--csv` and
/// `--plot` draw measurements, which `ipcs` has none of.
fn check_outputs(outputs: &Outputs) -> Result<(), String> {
    if outputs.csv.is_some() || outputs.plot.is_some() {
        return Err("ipcs writes --json only (--csv and --plot are for measurements)".into());
    }
    Ok(())
}

fn write_json(outputs: &Outputs, value: &impl Serialize) -> Result<(), String> {
    let Some(path) = &outputs.json else {
        return Ok(());
    };
    let text = serde_json::to_string_pretty(value).map_err(|e| format!("JSON: {e}"))?;
    let path = resolve_output(path);
    write_file(&path, text.as_bytes())?;
    eprintln!("ksync-lab: wrote {}", path.display());
    Ok(())
}

/// `ksync-lab ipcs [-i ID]`.
pub fn run(lab: &mut Lab, args: Args, outputs: &Outputs) -> Result<(), String> {
    check_outputs(outputs)?;
    match args.id {
        Some(id) => detail(lab, id, outputs),
        None => list(lab, outputs),
    }
}

fn list(lab: &mut Lab, outputs: &Outputs) -> Result<(), String> {
    let dir = sem_dir();
    let mut listing = Listing {
        dir: dir.display().to_string(),
        sets: Vec::new(),
        unreadable: Vec::new(),
    };
    for id in set_ids() {
        match SharedSemSet::open_id(id).and_then(|set| set.stat()) {
            Ok(st) => listing.sets.push(SetRow::new(id, &st)),
            // Removed between the directory listing and the open: gone, not broken.
            Err(SemError::NotFound) | Err(SemError::Removed) => {}
            Err(e) => listing.unreadable.push(BadRow {
                id,
                error: describe_unopened(id, e),
                errno: e.errno(),
            }),
        }
    }
    if listing.sets.is_empty() && listing.unreadable.is_empty() {
        lab.print(&format!(
            "no ksync shared semaphore sets in {}\n",
            dir.display()
        ));
        return write_json(outputs, &listing);
    }
    let mut table = Table::new([
        "key",
        "semid",
        "owner",
        "perms",
        "nsems",
        "otime (UTC)",
        "ctime (UTC)",
    ]);
    for s in &listing.sets {
        table.row(vec![
            s.key.clone(),
            s.id.to_string(),
            s.owner.clone(),
            s.perms.clone(),
            s.nsems.to_string(),
            time_or_not_set(s.otime),
            utc(s.ctime),
        ]);
    }
    for b in &listing.unreadable {
        table.row(vec![
            "?".into(),
            b.id.to_string(),
            format!("unreadable: {}", b.error),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ]);
    }
    lab.print(&format!(
        "ksync shared semaphore sets in {}\n\n{}",
        dir.display(),
        table.render()
    ));
    write_json(outputs, &listing)
}

fn detail(lab: &mut Lab, id: i32, outputs: &Outputs) -> Result<(), String> {
    let dir = sem_dir();
    let read = || -> Result<Detail, SemError> {
        let set = SharedSemSet::open_id(id)?;
        let st = set.stat()?;
        let values = set.get_all()?;
        let semaphores = (0..st.nsems)
            .map(|num| {
                Ok(SemRow {
                    num,
                    value: i32::from(values[num]),
                    ncnt: set.ncnt(num)?,
                    zcnt: set.zcnt(num)?,
                    pid: set.pid(num)?,
                })
            })
            .collect::<Result<Vec<_>, SemError>>()?;
        let undo = set
            .undo_holders()?
            .into_iter()
            .map(|h| UndoRow {
                pid: h.pid,
                adjustments: h.adjustments,
            })
            .collect();
        Ok(Detail {
            dir: dir.display().to_string(),
            set: SetRow::new(id, &st),
            semaphores,
            undo,
        })
    };
    let d = match read() {
        Ok(d) => d,
        Err(e) => {
            lab.fail(format!(
                "ipcs -i {id}: set {id} in {}: {}",
                dir.display(),
                describe_unopened(id, e)
            ));
            return Ok(());
        }
    };
    let s = &d.set;
    let mut text = format!(
        "Semaphore Array semid={} in {}\nkey={} uid={} ({}) gid={} cuid={} cgid={}\n\
         mode={:04o}, access_perms={:04o}\nnsems = {}\notime = {}\nctime = {}\n\n",
        s.id,
        d.dir,
        s.key,
        s.uid,
        s.owner,
        s.gid,
        s.cuid,
        s.cgid,
        s.mode,
        s.mode,
        s.nsems,
        s.otime
            .map_or_else(|| "Not set".into(), |t| utc(t) + " UTC"),
        utc(s.ctime) + " UTC",
    );
    let mut sems = Table::new(["semnum", "value", "ncount", "zcount", "pid"]);
    for r in &d.semaphores {
        sems.row(vec![
            r.num.to_string(),
            r.value.to_string(),
            r.ncnt.to_string(),
            r.zcnt.to_string(),
            r.pid.to_string(),
        ]);
    }
    text.push_str(&sems.render());
    if d.undo.is_empty() {
        text.push_str("\nno process holds undo adjustments in this set\n");
    } else {
        let mut undo = Table::new(["pid", "undo adjustments (semnum: amount)"]);
        for h in &d.undo {
            let adj: Vec<String> = h
                .adjustments
                .iter()
                .map(|(n, a)| format!("{n}: {a:+}"))
                .collect();
            undo.row(vec![h.pid.to_string(), adj.join(", ")]);
        }
        text.push_str(&format!("\nundo adjustments\n\n{}", undo.render()));
    }
    lab.print(&text);
    write_json(outputs, &d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(utc(1_709_251_199), "2024-02-29 23:59:59");
        assert_eq!(utc(4_102_444_800), "2100-01-01 00:00:00");
        assert_eq!(hex_key(0x1234), "0x00001234");
        assert_eq!(hex_key(-1), "0xffffffff");
    }
}
