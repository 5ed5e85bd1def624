//! Which of a process's sleepers in a process-shared set sleeps with a
//! timeout: the watch.
//!
//! A process-shared set has no server, so its safety net is its sleepers:
//! somebody asleep in the set must wake now and then to adopt what a dead
//! process left (its undo, a wake-up it claimed and never made, a removal
//! it began). Every sleeper used to sleep with a 100 ms timeout for that,
//! and arming and cancelling the timer cost about 0.3 us per sleep, 7% of
//! what a sembench burn costs the whole machine. It takes only one
//! timed sleeper per process: a process that dies takes its own sleepers
//! with it, and the watch of any process still alive adopts its leftovers.
//! So each process keeps at most one of its sleepers in a set timed, the
//! watch, and the others sleep until woken.
//!
//! The rule: **while a process has a sleeper in the set, one of them is its
//! watch or has been appointed and woken to become it.** Sleepers register
//! (`enter`) before their first sleep and unregister (`leave`) before they
//! return. Before each sleep a sleeper asks [`SleepWatch::is_watch`]: the
//! watch, or whoever finds the role vacant and takes it, sleeps timed. A
//! watch that leaves hands the role to a registered sleeper: it names it
//! the watch, then has it told through its status word (the caller's
//! `appoint`, a compare-and-swap from waiting to appointed that makes the
//! sleeper's futex wait fail or wakes it), and the caller wakes it.
//!
//! Two races are closed by a store, a `SeqCst` fence and a load on each
//! side (Dekker's pattern; the fences, not `SeqCst` accesses, so that loom
//! checks it):
//! * a watch that leaves gives the role up, then looks for registered
//!   sleepers; a sleeper registers, then reads the role. Either the leaver
//!   finds the sleeper, or the sleeper finds the role vacant.
//! * a leaver that names a successor then checks that the successor is
//!   still registered; a successor that leaves unregisters, then checks
//!   whether it is the watch. Either the leaver takes its choice back, or
//!   the successor hands the role on itself.
//!
//! The watch lives in process memory, not in the set's file: it names a
//! sleeper of this process to this process only. A `fork` child's copy names
//! its parent's sleepers and is [`reset`](SleepWatch::reset) when the child
//! claims a slot of its own.

use crate::sync::{fence, AtomicU32, AtomicU64, Ordering};

/// Sleeper slots a watch can track.
pub(crate) const CAPACITY: usize = WORDS * 64;

/// Bitmap words of registered sleepers, one per cache line. Slot `s` is bit
/// `s / WORDS` of word `s % WORDS`, so that sleepers of neighbouring slots,
/// which come and go together, update different lines.
const WORDS: usize = 16;

/// No watch.
const VACANT: u32 = 0;

#[repr(align(128))]
struct Line(AtomicU64);

/// One process's sleepers in one set, and which of them is the watch.
pub(crate) struct SleepWatch {
    asleep: [Line; WORDS],
    /// The watch's slot + 1, or [`VACANT`].
    watch: AtomicU32,
}

fn place(slot: usize) -> (usize, u64) {
    debug_assert!(slot < CAPACITY);
    (slot % WORDS, 1 << (slot / WORDS))
}

fn token(slot: usize) -> u32 {
    slot as u32 + 1
}

impl SleepWatch {
    pub(crate) fn new() -> SleepWatch {
        SleepWatch {
            asleep: core::array::from_fn(|_| Line(AtomicU64::new(0))),
            watch: AtomicU32::new(VACANT),
        }
    }

    /// The sleeper of `slot` is about to sleep for the first time in its
    /// call.
    pub(crate) fn enter(&self, slot: usize) {
        let (w, bit) = place(slot);
        self.asleep[w].0.fetch_or(bit, Ordering::Relaxed);
        // Registered before `is_watch` reads the role: pairs with the fence
        // in `leave` between giving the role up and looking for sleepers
        // (the first race in the module doc).
        fence(Ordering::SeqCst);
    }

    /// Whether the sleeper of `slot` (registered) is to sleep with a
    /// timeout: it is the watch, or it finds the role vacant and takes it.
    pub(crate) fn is_watch(&self, slot: usize) -> bool {
        let me = token(slot);
        loop {
            match self.watch.load(Ordering::Relaxed) {
                w if w == me => return true,
                VACANT => {
                    if self
                        .watch
                        .compare_exchange(VACANT, me, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                    {
                        return true;
                    }
                }
                _ => return false,
            }
        }
    }

    /// The sleeper of `slot` is about to return. If it was the watch, the
    /// role goes to another registered sleeper, whom `appoint` tells
    /// (`false`: that sleeper has its result and is leaving, and will hand
    /// the role on itself). Returns the slot appointed, for the caller to
    /// wake.
    pub(crate) fn leave(&self, slot: usize, appoint: impl Fn(usize) -> bool) -> Option<usize> {
        let (w, bit) = place(slot);
        self.asleep[w].0.fetch_and(!bit, Ordering::Relaxed);
        // Unregistered before reading the role: pairs with the fence in
        // `hand_over` between naming this slot and checking it is still
        // registered (the second race).
        fence(Ordering::SeqCst);
        let me = token(slot);
        if self.watch.load(Ordering::Relaxed) != me
            || self
                .watch
                .compare_exchange(me, VACANT, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return None;
        }
        // Given up before looking for sleepers: pairs with the fence in
        // `enter` (the first race).
        fence(Ordering::SeqCst);
        self.hand_over(appoint)
    }

    /// Names a registered sleeper the watch, if there is one and nobody
    /// took the vacant role first.
    fn hand_over(&self, appoint: impl Fn(usize) -> bool) -> Option<usize> {
        loop {
            let next = self.registered()?;
            let them = token(next);
            if self
                .watch
                .compare_exchange(VACANT, them, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            {
                return None;
            }
            // Named before checking it is still registered: pairs with the
            // fence in `leave` (the second race).
            fence(Ordering::SeqCst);
            let (w, bit) = place(next);
            if self.asleep[w].0.load(Ordering::Relaxed) & bit != 0 {
                return appoint(next).then_some(next);
            }
            // It left meanwhile: take the choice back, unless its own leave
            // took the role back first and hands it on itself.
            if self
                .watch
                .compare_exchange(them, VACANT, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            {
                return None;
            }
            // Given up again before looking again (the first race).
            fence(Ordering::SeqCst);
        }
    }

    /// A registered sleeper's slot, if any.
    fn registered(&self) -> Option<usize> {
        self.asleep.iter().enumerate().find_map(|(w, line)| {
            let bits = line.0.load(Ordering::Relaxed);
            (bits != 0).then(|| w + WORDS * bits.trailing_zeros() as usize)
        })
    }

    /// Forgets every sleeper and the watch: a `fork` child's copy describes
    /// its parent's threads. Call before any thread of this process
    /// registers.
    pub(crate) fn reset(&self) {
        for line in &self.asleep {
            line.0.store(0, Ordering::SeqCst);
        }
        self.watch.store(VACANT, Ordering::SeqCst);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_first_sleeper_takes_the_vacant_role_and_the_others_sleep_untimed() {
        let watch = SleepWatch::new();
        watch.enter(3);
        watch.enter(40);
        assert!(watch.is_watch(3));
        assert!(watch.is_watch(3));
        assert!(!watch.is_watch(40));
    }

    #[test]
    fn a_leaving_watch_appoints_a_registered_sleeper_and_others_leave_quietly() {
        let watch = SleepWatch::new();
        for slot in [5, 17, 900] {
            watch.enter(slot);
        }
        assert!(watch.is_watch(5));
        assert_eq!(watch.leave(17, |_| panic!("not the watch")), None);
        let next = watch.leave(5, |slot| slot == 900);
        assert_eq!(next, Some(900));
        assert!(watch.is_watch(900));
        assert_eq!(watch.leave(900, |_| panic!("nobody is left")), None);
        watch.enter(1);
        assert!(watch.is_watch(1), "the role is vacant again");
    }

    #[test]
    fn a_successor_with_its_result_is_named_but_not_woken() {
        let watch = SleepWatch::new();
        watch.enter(0);
        watch.enter(1);
        assert!(watch.is_watch(0));
        assert_eq!(watch.leave(0, |_| false), None);
        // Slot 1 is the watch; its own leave hands the role on.
        assert!(watch.is_watch(1));
    }

    #[test]
    fn reset_forgets_the_sleepers_and_the_watch() {
        let watch = SleepWatch::new();
        watch.enter(2);
        assert!(watch.is_watch(2));
        watch.reset();
        watch.enter(7);
        assert!(watch.is_watch(7));
        assert_eq!(watch.leave(7, |_| panic!("slot 2 is forgotten")), None);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;

    const WAITING: u32 = 0;
    const APPOINTED: u32 = 2;

    /// The status words of sleepers 0..3, and the compare-and-swap the
    /// shared sets appoint with.
    struct Sleepers {
        watch: SleepWatch,
        status: [AtomicU32; 3],
    }

    impl Sleepers {
        fn new() -> Arc<Sleepers> {
            Arc::new(Sleepers {
                watch: SleepWatch::new(),
                status: core::array::from_fn(|_| AtomicU32::new(WAITING)),
            })
        }

        fn leave(&self, slot: usize) {
            self.watch.leave(slot, |next| {
                self.status[next]
                    .compare_exchange(WAITING, APPOINTED, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            });
        }

        /// A sleeper that stays asleep is watched: it is the watch, and it
        /// either decided to sleep timed or was told through its status
        /// word (which fails its futex wait, or is followed by a wake).
        fn assert_watched(&self, slot: usize, timed: bool) {
            assert_eq!(self.watch.watch.load(Ordering::SeqCst), token(slot));
            assert!(timed || self.status[slot].load(Ordering::SeqCst) == APPOINTED);
        }
    }

    #[test]
    fn a_sleeper_arriving_as_the_watch_leaves_is_watched() {
        loom::model(|| {
            let s = Sleepers::new();
            s.watch.enter(0);
            assert!(s.watch.is_watch(0));
            let leaver = {
                let s = Arc::clone(&s);
                loom::thread::spawn(move || s.leave(0))
            };
            s.watch.enter(1);
            let timed = s.watch.is_watch(1);
            leaver.join().unwrap();
            s.assert_watched(1, timed);
        });
    }

    #[test]
    fn a_successor_leaving_as_it_is_appointed_passes_the_role_on() {
        loom::model(|| {
            let s = Sleepers::new();
            s.watch.enter(0);
            s.watch.enter(1);
            assert!(s.watch.is_watch(0));
            assert!(!s.watch.is_watch(1));
            let leavers: Vec<_> = [0, 1]
                .into_iter()
                .map(|slot| {
                    let s = Arc::clone(&s);
                    loom::thread::spawn(move || s.leave(slot))
                })
                .collect();
            s.watch.enter(2);
            let timed = s.watch.is_watch(2);
            for leaver in leavers {
                leaver.join().unwrap();
            }
            s.assert_watched(2, timed);
        });
    }
}
