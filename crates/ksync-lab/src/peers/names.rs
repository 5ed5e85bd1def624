//! The lab's one name-list parser: `--locks`, `--rw-locks`, `-o`, `--mixes`
//! all pick entries of a table by name (or alias), in the order given.
//! Fixed option values (layouts, workloads, wake's experiments) are
//! `clap::ValueEnum`s instead; these are open tables that grow.

/// Something a list option can name.
pub trait Named {
    /// The name reports use.
    fn name(&self) -> &str;
    /// Other names the command line accepts.
    fn aliases(&self) -> &[&'static str] {
        &[]
    }
}

/// [`Named`] for a reference, so that picking from a filtered list of
/// entries works as from the table itself.
impl<T: Named> Named for &T {
    fn name(&self) -> &str {
        (*self).name()
    }

    fn aliases(&self) -> &[&'static str] {
        (*self).aliases()
    }
}

/// The entries of `all` named in `names` (by name or alias, surrounding
/// blanks ignored), in that order; the entries for which `default` holds
/// when `names` is empty. An unknown name, or an entry named twice (even
/// by two aliases), is an error that lists the known names.
pub fn pick<'a, T: Named>(
    all: &'a [T],
    names: &[String],
    what: &str,
    default: impl Fn(&T) -> bool,
) -> Result<Vec<&'a T>, String> {
    if names.is_empty() {
        return Ok(all.iter().filter(|e| default(e)).collect());
    }
    let mut chosen: Vec<&'a T> = Vec::with_capacity(names.len());
    for name in names {
        let name = name.trim();
        let Some(entry) = all
            .iter()
            .find(|e| e.name() == name || e.aliases().contains(&name))
        else {
            return Err(format!("unknown {what} '{name}'; known: {}", known(all)));
        };
        if chosen.iter().any(|c| c.name() == entry.name()) {
            return Err(format!("{what} '{name}' named twice"));
        }
        chosen.push(entry);
    }
    Ok(chosen)
}

/// `a, b (also c, d), e`: every name of `all`, with its aliases.
fn known<T: Named>(all: &[T]) -> String {
    let names: Vec<String> = all
        .iter()
        .map(|e| match e.aliases() {
            [] => e.name().to_string(),
            aliases => format!("{} (also {})", e.name(), aliases.join(", ")),
        })
        .collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    struct N(&'static str, &'static [&'static str], bool);

    impl Named for N {
        fn name(&self) -> &str {
            self.0
        }
        fn aliases(&self) -> &[&'static str] {
            self.1
        }
    }

    const ALL: [N; 3] = [
        N("sysv", &["ipc", "0"], true),
        N("ksync", &[], true),
        N("posix", &[], false),
    ];

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn picked(list: &[&str]) -> Result<Vec<&'static str>, String> {
        pick(&ALL, &names(list), "backend", |e| e.2).map(|v| v.iter().map(|e| e.0).collect())
    }

    #[test]
    fn names_and_aliases_pick_in_the_order_given() {
        assert_eq!(picked(&[]).unwrap(), ["sysv", "ksync"]);
        assert_eq!(picked(&["posix", " ipc"]).unwrap(), ["posix", "sysv"]);
        assert_eq!(picked(&["0"]).unwrap(), ["sysv"]);
    }

    #[test]
    fn unknown_and_repeated_names_are_errors() {
        let e = picked(&["nope"]).unwrap_err();
        assert_eq!(
            e,
            "unknown backend 'nope'; known: sysv (also ipc, 0), ksync, posix"
        );
        assert_eq!(
            picked(&["ipc", "sysv"]).unwrap_err(),
            "backend 'sysv' named twice"
        );
    }
}
