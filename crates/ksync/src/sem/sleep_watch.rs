//! Which of a process's sleepers in a process-shared set sleeps with a
//! timeout: the watch.
//!
//! A process-shared set has no server, so its safety net is its sleepers:
//! somebody asleep in the set must wake now and then to adopt what a dead
//! process left (its undo, a wake-up it claimed and never made, a removal
//! it began). Every sleeper used to sleep with a 100 ms timeout for that,
//! so that every sleeper of an idle set woke ten times a second. It takes
//! only one timed sleeper per process: a process that dies takes its own
//! sleepers with it, and the watch of any process still alive adopts its
//! leftovers. So a process with many sleepers in a set keeps one of them
//! timed, the watch, and the others sleep until woken.
//!
//! "Until woken" still arms a kernel timer, one that never expires
//! (`crate::futex::wait_shared`): the kernel restarts a futex wait without
//! a timeout after a signal handler installed with `SA_RESTART`, where its
//! `semop` fails with `EINTR`. That timer costs what the 100 ms one did
//! (about 0.3 us per sleep; sembench `-t 64 -w 16` made about 10% fewer
//! burns with it than without on the 2-core guest), so the untimed
//! sleepers save the wake-ups, not the timer.
//!
//! Handing the role on costs a wake-up, and a watch hands it on each time
//! it returns. With many sleepers queued in turn, that is once per round of
//! the queue; with few, it can be every other sleep, far more wake-ups
//! than the timeouts it saves (sembench `-t 8`: 30% fewer burns). So
//! sleepers sleep without a timeout only while [`CROWD`] or more of their
//! process sleep in the set; below that every sleeper keeps its timeout,
//! as before.
//!
//! The rule: **while a process has a sleeper in the set without a timeout,
//! one of its sleepers is its watch or has been appointed and woken to
//! become it.** Sleepers `enter` before their first sleep and `leave`
//! before they return; one that is to sleep without a timeout first
//! registers, so that a watch that leaves can find it. Before each sleep a
//! sleeper asks [`SleepWatch::nap`]: the watch, or whoever finds the role
//! vacant and takes it, sleeps timed. A watch that leaves hands the role to
//! a registered sleeper: it names it the watch, then has it told through its
//! status word (the caller's `appoint`, a compare-and-swap from waiting to
//! appointed that makes the sleeper's futex wait fail), and the caller wakes
//! it. It wakes it even if the compare-and-swap failed because the
//! sleeper's result is in: that sleeper would hand the role on as it left,
//! but only once it runs, and the wake-up its waker owed it may be lost (a
//! waker killed between publishing and waking). Then the new watch, which
//! is to wake every 100 ms to sweep up such losses, would sleep untimed,
//! and its process with it.
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

/// Sleepers of one process in one set from which they sleep without a
/// timeout, by default: below this, hand-overs would come too often
/// (module doc). The process-shared sets let a user or a
/// test choose another, and pass it to [`SleepWatch::nap`].
pub(crate) const CROWD: u32 = 16;

/// How a sleeper is to sleep ([`SleepWatch::nap`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Nap {
    /// With a timeout, as the process's watch (a timed sleeper that times
    /// out sweeps the set, whichever kind).
    Watch,
    /// With a timeout, among few sleepers: no hand-over to pay for.
    Timed,
    /// Without one (but the timer that never expires, which lets a signal
    /// handler end the sleep: module doc); registered, for a leaving watch
    /// to find.
    Untimed,
}

#[repr(align(128))]
struct Line(AtomicU64);

/// One process's sleepers in one set, and which of them is the watch.
pub(crate) struct SleepWatch {
    /// Sleepers that sleep, or may sleep, without a timeout.
    untimed: [Line; WORDS],
    /// The watch's slot + 1, or [`VACANT`].
    watch: AtomicU32,
    /// Sleepers between `enter` and `leave`.
    sleeping: Line32,
}

#[repr(align(128))]
struct Line32(AtomicU32);

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
            untimed: core::array::from_fn(|_| Line(AtomicU64::new(0))),
            watch: AtomicU32::new(VACANT),
            sleeping: Line32(AtomicU32::new(0)),
        }
    }

    /// A sleeper is about to sleep for the first time in its call (it is
    /// counted; it registers in `nap` if it sleeps untimed).
    pub(crate) fn enter(&self) {
        self.sleeping.0.fetch_add(1, Ordering::Relaxed);
    }

    /// How the sleeper of `slot` (entered) is to sleep: timed as the watch
    /// (it is, or it finds the role vacant and takes it), timed among fewer
    /// than `crowd`, or untimed, registered first.
    pub(crate) fn nap(&self, slot: usize, crowd: u32) -> Nap {
        let me = token(slot);
        loop {
            match self.watch.load(Ordering::Relaxed) {
                w if w == me => return Nap::Watch,
                VACANT => {
                    if self.pass_role(VACANT, me) {
                        return Nap::Watch;
                    }
                    continue;
                }
                _ => {}
            }
            if self.sleeping.0.load(Ordering::Relaxed) < crowd {
                return Nap::Timed;
            }
            if self.is_registered(slot) {
                return Nap::Untimed;
            }
            let (w, bit) = place(slot);
            self.untimed[w].0.fetch_or(bit, Ordering::Relaxed);
            // Registered before reading the role again: pairs with the
            // fence in `leave` between giving the role up and looking for
            // sleepers (the first race in the module doc).
            fence(Ordering::SeqCst);
        }
    }

    /// The sleeper of `slot` is about to return. If it was the watch, the
    /// role goes to another registered sleeper, the one `rather` names if it
    /// is one (the one likely to sleep longest: each hand-over costs a
    /// wake-up), whom `appoint` tells. Returns the slot appointed, for the
    /// caller to wake, whether or not `appoint` found it still waiting (see
    /// the module doc).
    pub(crate) fn leave(
        &self,
        slot: usize,
        rather: impl FnOnce() -> Option<usize>,
        appoint: impl Fn(usize),
    ) -> Option<usize> {
        self.sleeping.0.fetch_sub(1, Ordering::Relaxed);
        if self.is_registered(slot) {
            let (w, bit) = place(slot);
            self.untimed[w].0.fetch_and(!bit, Ordering::Relaxed);
        }
        // Unregistered before reading the role: pairs with the fence in
        // `hand_over` between naming this slot and checking it is still
        // registered (the second race).
        fence(Ordering::SeqCst);
        let me = token(slot);
        if self.watch.load(Ordering::Relaxed) != me || !self.pass_role(me, VACANT) {
            return None;
        }
        // Given up before looking for sleepers: pairs with the fence in
        // `nap` between registering and reading the role (the first race).
        fence(Ordering::SeqCst);
        self.hand_over(rather().filter(|&r| r != slot && r < CAPACITY), appoint)
    }

    /// Names a registered sleeper the watch, if there is one and nobody
    /// took the vacant role first.
    fn hand_over(&self, rather: Option<usize>, appoint: impl Fn(usize)) -> Option<usize> {
        let mut rather = rather.filter(|&r| self.is_registered(r));
        loop {
            let next = rather.take().or_else(|| self.registered())?;
            let them = token(next);
            if !self.pass_role(VACANT, them) {
                return None;
            }
            // Named before checking it is still registered: pairs with the
            // fence in `leave` (the second race). And named before it is
            // appointed: pairs with the fence the caller's sleeper makes
            // after setting an appointment back to waiting, so that one
            // whose status still held a stale appointment, which `appoint`
            // then fails on, sees itself named before it sleeps again.
            fence(Ordering::SeqCst);
            if self.is_registered(next) {
                appoint(next);
                return Some(next);
            }
            // It left meanwhile: take the choice back, unless its own leave
            // took the role back first and hands it on itself.
            if !self.pass_role(them, VACANT) {
                return None;
            }
            // Given up again before looking again (the first race).
            fence(Ordering::SeqCst);
        }
    }

    /// Moves the role from `from` to `to` (tokens or [`VACANT`]), if
    /// nobody moved it first; the fences around the callers order it.
    fn pass_role(&self, from: u32, to: u32) -> bool {
        self.watch
            .compare_exchange(from, to, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    fn is_registered(&self, slot: usize) -> bool {
        let (w, bit) = place(slot);
        self.untimed[w].0.load(Ordering::Relaxed) & bit != 0
    }

    /// A registered sleeper's slot, if any.
    fn registered(&self) -> Option<usize> {
        self.untimed.iter().enumerate().find_map(|(w, line)| {
            let bits = line.0.load(Ordering::Relaxed);
            (bits != 0).then(|| w + WORDS * bits.trailing_zeros() as usize)
        })
    }

    /// Forgets every sleeper and the watch: a `fork` child's copy describes
    /// its parent's threads. Call before any thread of this process
    /// registers.
    pub(crate) fn reset(&self) {
        for line in &self.untimed {
            line.0.store(0, Ordering::SeqCst);
        }
        self.watch.store(VACANT, Ordering::SeqCst);
        self.sleeping.0.store(0, Ordering::SeqCst);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A watch whose process has `CROWD` other sleepers, which never nap,
    /// so that the tests' sleepers nap untimed.
    fn crowded() -> SleepWatch {
        let watch = SleepWatch::new();
        for _ in 0..CROWD {
            watch.enter();
        }
        watch
    }

    /// [`crowded`], with sleeper `first` napped as the watch and each of
    /// `untimed` napped untimed (all of them entered).
    fn watched(first: usize, untimed: &[usize]) -> SleepWatch {
        let watch = crowded();
        for _ in 0..=untimed.len() {
            watch.enter();
        }
        assert_eq!(watch.nap(first, CROWD), Nap::Watch);
        for &slot in untimed {
            assert_eq!(watch.nap(slot, CROWD), Nap::Untimed);
        }
        watch
    }

    #[test]
    fn among_few_sleepers_everyone_keeps_a_timeout() {
        let watch = SleepWatch::new();
        for _ in 0..CROWD - 1 {
            watch.enter();
        }
        assert_eq!(watch.nap(0, CROWD), Nap::Watch);
        assert_eq!(watch.nap(1, CROWD), Nap::Timed);
        // Nobody to hand over to: nobody sleeps untimed.
        assert_eq!(
            watch.leave(0, || None, |_| panic!("nobody is untimed")),
            None
        );
        assert_eq!(watch.nap(1, CROWD), Nap::Watch, "the role was left vacant");
    }

    #[test]
    fn in_a_crowd_the_first_sleeper_takes_the_vacant_role_and_the_others_sleep_untimed() {
        let watch = crowded();
        watch.enter();
        watch.enter();
        assert_eq!(watch.nap(3, CROWD), Nap::Watch);
        assert_eq!(watch.nap(3, CROWD), Nap::Watch);
        assert_eq!(watch.nap(40, CROWD), Nap::Untimed);
        assert_eq!(watch.nap(40, CROWD), Nap::Untimed);
    }

    #[test]
    fn a_leaving_watch_appoints_an_untimed_sleeper_and_others_leave_quietly() {
        let watch = watched(5, &[17, 900]);
        assert_eq!(watch.leave(17, || None, |_| panic!("not the watch")), None);
        let next = watch.leave(5, || None, |slot| assert_eq!(slot, 900));
        assert_eq!(next, Some(900));
        assert_eq!(watch.nap(900, CROWD), Nap::Watch);
        assert_eq!(
            watch.leave(900, || None, |_| panic!("nobody is left")),
            None
        );
        watch.enter();
        assert_eq!(watch.nap(1, CROWD), Nap::Watch, "the role is vacant again");
    }

    #[test]
    fn the_sleeper_preferred_is_appointed_if_untimed() {
        let watch = watched(0, &[1, 2]);
        assert_eq!(watch.leave(0, || Some(2), |_| ()), Some(2));
        assert_eq!(
            watch.leave(2, || Some(1001), |_| ()),
            Some(1),
            "1001 never registered"
        );
    }

    /// The successor's result is in, and its wake-up may have been lost:
    /// it is named and woken all the same, and its own leave hands the role
    /// on.
    #[test]
    fn a_successor_with_its_result_is_named_and_woken() {
        let watch = watched(0, &[1]);
        assert_eq!(watch.leave(0, || None, |_| ()), Some(1));
        assert_eq!(watch.nap(1, CROWD), Nap::Watch);
    }

    #[test]
    fn reset_forgets_the_sleepers_and_the_watch() {
        let watch = watched(2, &[3]);
        watch.reset();
        watch.enter();
        assert_eq!(watch.nap(7, CROWD), Nap::Watch);
        assert_eq!(
            watch.leave(7, || None, |_| panic!("slot 3 is forgotten")),
            None
        );
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;

    const WAITING: u32 = 0;
    const APPOINTED: u32 = 2;

    /// The status words of sleepers 0..3, and the compare-and-swap the
    /// shared sets appoint with; a crowd of other sleepers, which never
    /// nap, makes them nap untimed. `woken`: the wake-ups leavers made.
    struct Sleepers {
        watch: SleepWatch,
        status: [AtomicU32; 3],
        woken: [AtomicU32; 3],
    }

    impl Sleepers {
        fn new() -> Arc<Sleepers> {
            let watch = SleepWatch::new();
            for _ in 0..CROWD {
                watch.enter();
            }
            Arc::new(Sleepers {
                watch,
                status: core::array::from_fn(|_| AtomicU32::new(WAITING)),
                woken: core::array::from_fn(|_| AtomicU32::new(0)),
            })
        }

        /// Slot 0 the watch, slot 1 asleep untimed.
        fn watch_and_one_untimed() -> Arc<Sleepers> {
            let s = Sleepers::new();
            s.watch.enter();
            s.watch.enter();
            assert_eq!(s.watch.nap(0, CROWD), Nap::Watch);
            assert_eq!(s.watch.nap(1, CROWD), Nap::Untimed);
            s
        }

        fn leave(&self, slot: usize) {
            let appointed = self.watch.leave(
                slot,
                || None,
                |next| {
                    let _ = self.status[next].compare_exchange(
                        WAITING,
                        APPOINTED,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                },
            );
            if let Some(next) = appointed {
                self.woken[next].fetch_add(1, Ordering::SeqCst);
            }
        }

        /// A sleeper that stays asleep untimed is watched: it is the watch,
        /// and it either napped as the watch or was told through its status
        /// word (which fails its futex wait) and woken.
        fn assert_watched(&self, slot: usize, nap: Nap) {
            if nap == Nap::Timed {
                return;
            }
            assert_eq!(self.watch.watch.load(Ordering::SeqCst), token(slot));
            assert!(
                nap == Nap::Watch
                    || (self.status[slot].load(Ordering::SeqCst) == APPOINTED
                        && self.woken[slot].load(Ordering::SeqCst) > 0)
            );
        }
    }

    #[test]
    fn a_sleeper_arriving_as_the_watch_leaves_is_watched() {
        loom::model(|| {
            let s = Sleepers::new();
            s.watch.enter();
            assert_eq!(s.watch.nap(0, CROWD), Nap::Watch);
            let leaver = {
                let s = Arc::clone(&s);
                loom::thread::spawn(move || s.leave(0))
            };
            s.watch.enter();
            let nap = s.watch.nap(1, CROWD);
            leaver.join().unwrap();
            s.assert_watched(1, nap);
        });
    }

    /// The successor's result arrives as it is appointed: the waker's
    /// store of READY overwrites, or fails, the appointment, and the
    /// successor, leaving with its result, passes the role to the sleeper
    /// still asleep.
    #[test]
    fn a_successor_whose_result_arrives_passes_the_role_on() {
        const READY: u32 = 1;
        loom::model(|| {
            let s = Sleepers::new();
            for _ in 0..3 {
                s.watch.enter();
            }
            assert_eq!(s.watch.nap(0, CROWD), Nap::Watch);
            assert_eq!(s.watch.nap(1, CROWD), Nap::Untimed);
            assert_eq!(s.watch.nap(2, CROWD), Nap::Untimed);
            let leaver = {
                let s = Arc::clone(&s);
                loom::thread::spawn(move || s.leave(0))
            };
            // Slot 1's waker publishes; its sleeper sees the result (or
            // its appointment, which it waits out) and leaves.
            s.status[1].store(READY, Ordering::SeqCst);
            s.leave(1);
            leaver.join().unwrap();
            // Slot 2 may have been appointed by either leaver; if it is
            // not the watch, nobody is, and that must not be.
            s.assert_watched(2, Nap::Untimed);
        });
    }

    /// A stale appointment (a leaver's, that named the slot's previous
    /// sleeper) sits in a sleeper's status as a watch leaves and names it:
    /// the appointment fails on the stale value and the wake-up may come
    /// before the sleeper, which sets its status back to waiting, sleeps
    /// again. Its fence after that store, against the leaver's between
    /// naming and appointing, makes it see itself named.
    #[test]
    fn a_sleeper_setting_a_stale_appointment_back_sees_itself_named() {
        loom::model(|| {
            let s = Sleepers::watch_and_one_untimed();
            s.status[1].store(APPOINTED, Ordering::SeqCst);
            let leaver = {
                let s = Arc::clone(&s);
                loom::thread::spawn(move || s.leave(0))
            };
            let _ = s.status[1].compare_exchange(
                APPOINTED,
                WAITING,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            fence(Ordering::SeqCst);
            let nap = s.watch.nap(1, CROWD);
            leaver.join().unwrap();
            // A sleeper that goes back to sleep untimed while named must
            // find its status appointed, which fails its futex wait; a
            // wake-up may have come and gone before it.
            if s.watch.watch.load(Ordering::SeqCst) == token(1) {
                assert!(nap == Nap::Watch || s.status[1].load(Ordering::SeqCst) == APPOINTED);
            }
        });
    }

    #[test]
    fn a_successor_leaving_as_it_is_appointed_passes_the_role_on() {
        loom::model(|| {
            let s = Sleepers::watch_and_one_untimed();
            let leavers: Vec<_> = [0, 1]
                .into_iter()
                .map(|slot| {
                    let s = Arc::clone(&s);
                    loom::thread::spawn(move || s.leave(slot))
                })
                .collect();
            s.watch.enter();
            let nap = s.watch.nap(2, CROWD);
            for leaver in leavers {
                leaver.join().unwrap();
            }
            s.assert_watched(2, nap);
        });
    }
}
