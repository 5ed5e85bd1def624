//! `ipcrm`: removes ksync's process-shared semaphore sets, as `ipcrm -s` /
//! `-S` / `--all` removes the kernel's: by id, by key, or every set the
//! caller may remove. Removal is `IPC_RMID`: sleepers in any process fail
//! with `EIDRM`, the key is free at once, the file goes.
//!
//! Each removal is reported; any that fails makes the run fail (exit status
//! 1) with one message naming every set that stayed and why.

use super::ipcs::{describe, describe_unopened};
use crate::output::files::Outputs;
use crate::output::lab::Lab;
use ksync::sem::shared::{key_id, remove_other_version, sem_dir, set_ids};
use ksync::sem::{SemError, SharedSemSet, IPC_PRIVATE};

/// `ksync-lab ipcrm`: removes ksync's shared semaphore sets, like `ipcrm -s/-S/--all`.
#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("which").required(true).multiple(true).args(["ids", "keys", "all"])))]
pub struct Args {
    /// Remove the set with this id (repeatable), as `ipcs` lists it.
    #[arg(short = 's', long = "id", value_name = "ID")]
    pub ids: Vec<i32>,
    /// Remove the set bound to this key (repeatable): hex (0x1234) or decimal.
    #[arg(short = 'S', long = "key", value_name = "KEY", value_parser = parse_key)]
    pub keys: Vec<i32>,
    /// Remove every set in the directory the caller may remove.
    #[arg(long, conflicts_with_all = ["ids", "keys"])]
    pub all: bool,
}

/// A key as `ipcs` prints it (`0x0000abcd`) or in decimal (negative too,
/// as `key_t` is signed); `IPC_PRIVATE` names no set, so it is refused.
pub fn parse_key(text: &str) -> Result<i32, String> {
    let t = text.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).map(|k| k as i32).ok(),
        None => t.parse::<i32>().ok(),
    };
    match parsed {
        Some(IPC_PRIVATE) => Err("key 0 is IPC_PRIVATE, which no set is bound to".into()),
        Some(key) => Ok(key),
        None => Err(format!(
            "'{text}' is no key: hex like 0x1234 or a 32-bit decimal"
        )),
    }
}

/// Removes set `id`, saying so; one of another ksync's layout (which
/// cannot be opened: `EINVAL`) is unlinked instead.
fn remove_id(lab: &Lab, id: i32) -> Result<(), SemError> {
    match SharedSemSet::open_id(id) {
        Ok(set) => remove(lab, &set),
        // Not another version's file either: `EINVAL` stands.
        Err(SemError::Invalid) => remove_other_version(id).map(|version| {
            lab.print(&format!(
                "removed set {id}, made by another version of ksync (set file layout \
                 {version}; its users were not told)\n"
            ))
        }),
        Err(e) => Err(e),
    }
}

/// Removes `set`, saying so.
fn remove(lab: &Lab, set: &SharedSemSet) -> Result<(), SemError> {
    set.remove()?;
    lab.print(&format!(
        "removed set {} (key 0x{:08x})\n",
        set.id(),
        set.key() as u32
    ));
    Ok(())
}

/// `ksync-lab ipcrm -s ID | -S KEY | --all`.
pub fn run(lab: &mut Lab, args: Args, outputs: &Outputs) -> Result<(), String> {
    if outputs.json.is_some() || outputs.csv.is_some() || outputs.plot.is_some() {
        return Err("ipcrm writes no --json, --csv or --plot file".into());
    }
    let dir = sem_dir();
    let mut failures = Vec::new();
    for &id in &args.ids {
        if let Err(e) = remove_id(lab, id) {
            failures.push(format!("id {id}: {}", describe_unopened(id, e)));
        }
    }
    for &key in &args.keys {
        // nsems 0 and no flags: find the key's set, whatever its size.
        let done = match SharedSemSet::open(key, 0, 0) {
            Ok(set) => remove(lab, &set),
            Err(SemError::Invalid) => match key_id(key) {
                Ok(Some(id)) => remove_id(lab, id),
                _ => Err(SemError::Invalid),
            },
            Err(e) => Err(e),
        };
        if let Err(e) = done {
            failures.push(format!("key 0x{:08x}: {}", key as u32, describe(e)));
        }
    }
    if args.all {
        let mut removed = 0;
        for id in set_ids() {
            match remove_id(lab, id) {
                Ok(()) => removed += 1,
                // Removed by someone else meanwhile: nothing left to do.
                Err(SemError::NotFound) | Err(SemError::Removed) => {}
                Err(e) => failures.push(format!("id {id}: {}", describe_unopened(id, e))),
            }
        }
        if removed == 0 && failures.is_empty() {
            lab.print(&format!(
                "no ksync shared semaphore sets in {}\n",
                dir.display()
            ));
        }
    }
    if !failures.is_empty() {
        lab.fail(format!(
            "ipcrm: {} set(s) in {} not removed: {}",
            failures.len(),
            dir.display(),
            failures.join("; ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_hex_or_decimal_and_never_private() {
        assert_eq!(parse_key("0x1234"), Ok(0x1234));
        assert_eq!(parse_key("0XFFFFFFFF"), Ok(-1));
        assert_eq!(parse_key("4660"), Ok(4660));
        assert_eq!(parse_key("-5"), Ok(-5));
        assert!(parse_key("0").unwrap_err().contains("IPC_PRIVATE"));
        assert!(parse_key("0x").is_err());
        assert!(parse_key("0x1_0000_0000").is_err());
        assert!(parse_key("0x100000000").is_err());
        assert!(parse_key("abc").unwrap_err().contains("no key"));
    }
}
