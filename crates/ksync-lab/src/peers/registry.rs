//! The shape every registry of the lab shares: an [`Entry`] per thing
//! measured (its name, aliases, where it comes from, whether a default run
//! measures it), the `+stat` twins, and the [`registry!`] macro that turns a
//! list of `Name(Type) = Info` lines into a static table and a `dispatch`
//! that runs a generic visitor with the entry's type.
//!
//! Dispatch is the one place a name becomes a type. An experiment adds a
//! loop by writing a visitor (`MutexVisitor`, `RwVisitor`, `SemVisitor`),
//! never by editing a registry; a new lock or backend is one line in its
//! registry and runs in every experiment at once.

/// Where an entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A ksync primitive.
    Ksync,
    /// Something people use today (std, parking_lot, spin, glibc, the
    /// kernel's own semaphores): the reference ksync is measured against.
    Peer,
    /// The bare compare-and-swap + store: not a usable lock, the floor.
    Floor,
    /// Deliberately broken (torture's self-test).
    Broken,
}

/// What a registry line says about its entry, before the macro adds the
/// identity that [`Entry::dispatch`] matches on.
#[derive(Debug, Clone, Copy)]
pub struct Info {
    name: &'static str,
    aliases: &'static [&'static str],
    origin: Origin,
    core: bool,
    about: &'static str,
}

impl Info {
    /// An entry of the default set.
    pub const fn new(name: &'static str, origin: Origin, about: &'static str) -> Info {
        Info {
            name,
            aliases: &[],
            origin,
            core: true,
            about,
        }
    }

    /// Measured only when named (or by `--lock-stats`): other constants of
    /// a ksync policy, `+stat` twins, experiments.
    pub const fn variant(self) -> Info {
        Info {
            core: false,
            ..self
        }
    }

    /// Other names the command line accepts for this entry (reports always
    /// use [`Entry::name`]).
    pub const fn aliases(self, aliases: &'static [&'static str]) -> Info {
        Info { aliases, ..self }
    }
}

/// One registered thing: a lock, a reader-writer lock or a semaphore
/// backend, identified by `Id` (an enum the [`registry!`] macro declares).
#[derive(Debug)]
pub struct Entry<Id: 'static> {
    /// The one name records, tables, JSON and the command line use.
    pub name: &'static str,
    /// Other names the command line accepts.
    pub aliases: &'static [&'static str],
    pub origin: Origin,
    /// Part of the default set of the commands that measure this kind
    /// (`compare` included); the others are measured when named.
    pub core: bool,
    pub about: &'static str,
    pub(in crate::peers) id: Id,
}

impl<Id> Entry<Id> {
    pub(in crate::peers) const fn new(id: Id, info: Info) -> Entry<Id> {
        Entry {
            name: info.name,
            aliases: info.aliases,
            origin: info.origin,
            core: info.core,
            about: info.about,
            id,
        }
    }

    pub fn is_ksync(&self) -> bool {
        self.origin == Origin::Ksync
    }

    /// How `list` describes where the entry comes from.
    pub fn tag(&self) -> &'static str {
        match self.origin {
            Origin::Ksync if self.core => "ksync",
            Origin::Ksync => "ksync variant",
            Origin::Peer => "peer",
            Origin::Floor => "floor",
            Origin::Broken => "torture only",
        }
    }
}

impl<Id> super::names::Named for Entry<Id> {
    fn name(&self) -> &str {
        self.name
    }

    fn aliases(&self) -> &[&'static str] {
        self.aliases
    }
}

/// The suffix of the entries that keep lock statistics: `qspin+stat` is
/// `qspin` wrapped in `ksync::stat::Stat`, `qspin+stat0` the same without
/// hold timing.
pub const STAT_SUFFIX: &str = "+stat";

/// For `X+stat` or `X+stat0` (any `X+stat...`), `X`.
pub fn stat_base(name: &str) -> Option<&str> {
    name.find(STAT_SUFFIX).map(|i| &name[..i])
}

/// `--lock-stats`: each ksync entry of `chosen` replaced by its `+stat` twin
/// in `all` where there is one (peers stay bare, as references), without
/// naming one twice.
pub fn with_lock_stats<Id>(
    chosen: Vec<&'static Entry<Id>>,
    all: &'static [Entry<Id>],
) -> Vec<&'static Entry<Id>> {
    let mut out: Vec<&'static Entry<Id>> = Vec::with_capacity(chosen.len());
    for e in chosen {
        let e = if e.is_ksync() && stat_base(e.name).is_none() {
            let wanted = format!("{}{STAT_SUFFIX}", e.name);
            all.iter().find(|s| s.name == wanted).unwrap_or(e)
        } else {
            e
        };
        if out.iter().all(|o| o.name != e.name) {
            out.push(e);
        }
    }
    out
}

/// Declares a registry: an `$id` enum with one variant per line, the static
/// table `$table` of [`Entry<$id>`], and `Entry<$id>::dispatch`, which calls
/// `$visitor::visit::<Type>()` for the entry's type.
///
/// ```ignore
/// registry! {
///     /// Every mutex.
///     pub static MUTEXES: [MutexId, MutexVisitor] = [
///         Tas(Api<RawTasLock>) = Info::new("tas", Ksync, "..."),
///     ];
/// }
/// ```
macro_rules! registry {
    (
        $(#[$doc:meta])*
        $vis:vis static $table:ident: [$id:ident, $visitor:ident] = [
            $( $variant:ident($ty:ty) = $info:expr ),* $(,)?
        ];
    ) => {
        /// The entries of the registry, one per line.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $id {
            $($variant),*
        }

        $(#[$doc])*
        $vis static $table: &[$crate::peers::registry::Entry<$id>] = &[
            $( $crate::peers::registry::Entry::new($id::$variant, $info) ),*
        ];

        impl $crate::peers::registry::Entry<$id> {
            /// Runs `visitor` with this entry's type: the experiment's loop,
            /// monomorphised for it.
            pub fn dispatch<V: $visitor>(&self, visitor: V) -> V::Out {
                match self.id {
                    $( $id::$variant => visitor.visit::<$ty>(), )*
                }
            }
        }
    };
}
pub(crate) use registry;
