//! One semaphore's lock, which is a bit of its word, and the ascending set
//! of them a call takes.
//!
//! The kernel gives every semaphore a spinlock beside its value. Here the
//! lock is the [`LOCKED`] bit of the word that holds the value (`word.rs`):
//! taking it is one compare-and-swap from a word with no flag that forbids
//! it, releasing it one compare-and-swap that also writes the new value and
//! flags back. The lock, the value and the flags that keep lock-free
//! operations off it share one cache line. (An uncontended call on a few
//! quiet semaphores needs even less: `SetShared::try_quiet` locks all but
//! the highest and does that one lock-free, two atomic instructions and a
//! store for two semaphores.)
//!
//! While it holds the lock, the holder works on a copy of the value
//! ([`LockedSems`] keeps it), read from the word it locked and written back
//! by the release: nobody else may change the value meanwhile, but a waiting
//! locker may set [`CONTENDED`], so the holder never stores to the word in
//! between.
//!
//! Waiting is Drepper's three-state futex mutex ("Futexes Are Tricky",
//! mutex 2) inside the word: a locker that finds the lock taken spins for
//! about one context switch ([`SpinTimer::one_switch`], the longest the
//! holder's short critical section should take while it runs), then sets
//! `CONTENDED` and sleeps on the word while it still reads what it set. A
//! release that clears `CONTENDED` wakes one sleeper, and a locker that ever
//! slept takes the lock with `CONTENDED` set, since others may still sleep.
//! Both the flag and the lock live in one word, so no wake-up is lost: a
//! sleeper only sleeps while the word holds the value it wrote, and a
//! release changes it.
//!
//! A quiet call (`SetShared::try_quiet`) holds its locks differently: it
//! sets [`QUIET`] with `LOCKED`, holds them for a few instructions, and
//! releases them with a plain store, which would overwrite a `CONTENDED`
//! and wake nobody. So a locker that finds `QUIET` never sets `CONTENDED`:
//! it spins for about one context switch, then naps, each nap longer
//! ([`SetShared::wait_out_quiet`]). Only a quiet holder preempted inside its
//! hold makes anyone nap, and the nap bounds how late the napper sees the
//! release.
//!
//! A locker that finds [`GLOBAL`] or [`REMOVED`] set gives back what it took
//! and takes the global path (`mode.rs`); if it had slept on the word it
//! wakes every other sleeper there, which would otherwise wait for a release
//! that global mode never makes. Entering global mode takes every word in
//! ascending order like a locker and leaves `GLOBAL` in it instead of
//! `LOCKED`, waking every sleeper if it finds `CONTENDED` or slept itself
//! (the release that woke it cleared the flag, and wakes only one).
//!
//! Calls take their semaphores in ascending order ([`LockedSems`]), and the
//! global mode's pass goes the same way, so no two lockers wait for each
//! other in a cycle.

use core::cell::Cell;

use crate::futex;
use crate::prefetch;
use crate::relax::cpu_relax;
use crate::spin_budget::SpinTimer;
use crate::sync::Ordering;
use std::time::Duration;

use super::counters::Counters;
use super::state::{Sem, SetShared};
use super::word::{self, CONTENDED, GLOBAL, LOCKED, QUIET, REMOVED};
use super::SemBuf;

/// Why a semaphore could not be locked: the set is in global mode or was
/// removed, and the caller must take the global path instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Diverted;

/// How many semaphores [`LockedSems`] keeps inline.
const FEW: usize = 6;

/// The first nap of a locker that waits out a quiet hold
/// ([`SetShared::wait_out_quiet`]); each next one is twice as long, up to
/// [`QUIET_NAP_MAX`]. A quiet hold outlasts the spin before it only when its
/// holder was preempted inside it, and then the holder needs a CPU: the nap
/// gives one back, and the short first nap keeps the napper from seeing
/// the release much later than it happens.
const QUIET_NAP_MIN: Duration = Duration::from_micros(50);
/// The longest nap: about a scheduler's time slice, the usual wait of a
/// preempted thread for its CPU.
const QUIET_NAP_MAX: Duration = Duration::from_millis(2);

/// Semaphores a call locks (or locked), distinct and ascending, the order
/// that keeps two lockers from waiting for each other; and, while they are
/// locked, the value the holder works on for each.
#[derive(Debug)]
pub(super) struct LockedSems {
    nums: Nums,
    /// One per semaphore, in the same order: the holder's copy of its value.
    values: Values,
    /// Where the last lookup found its semaphore: a call's operations are
    /// mostly looked up in ascending order, each twice (read, then write),
    /// so the next lookup is usually here or just after.
    last: Cell<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Nums {
    /// Up to [`FEW`] semaphores, the usual case, without an allocation.
    Few {
        len: u8,
        nums: [u16; FEW],
    },
    Many(Vec<u16>),
}

#[derive(Debug)]
enum Values {
    Few([Cell<u16>; FEW]),
    Many(Vec<Cell<u16>>),
}

impl LockedSems {
    /// The distinct semaphores `sops` names, ascending.
    pub(super) fn of(sops: &[SemBuf]) -> LockedSems {
        if let [sop] = sops {
            // The usual call, a blocking one included: no sorting to do.
            return LockedSems::one(sop.num);
        }
        let mut nums = [0u16; FEW];
        let mut len = 0;
        for sop in sops {
            // Insertion into the sorted prefix, skipping duplicates.
            let at = nums[..len].partition_point(|&n| n < sop.num);
            if at < len && nums[at] == sop.num {
                continue;
            }
            if len == FEW {
                return LockedSems::many(sops);
            }
            nums.copy_within(at..len, at + 1);
            nums[at] = sop.num;
            len += 1;
        }
        LockedSems::few(len, nums)
    }

    fn few(len: usize, nums: [u16; FEW]) -> LockedSems {
        LockedSems {
            nums: Nums::Few {
                len: len as u8,
                nums,
            },
            values: Values::Few([const { Cell::new(0) }; FEW]),
            last: Cell::new(0),
        }
    }

    #[cold]
    fn many(sops: &[SemBuf]) -> LockedSems {
        let mut nums: Vec<u16> = sops.iter().map(|s| s.num).collect();
        nums.sort_unstable();
        nums.dedup();
        let values = nums.iter().map(|_| Cell::new(0)).collect();
        LockedSems {
            nums: Nums::Many(nums),
            values: Values::Many(values),
            last: Cell::new(0),
        }
    }

    /// Only semaphore `num`.
    pub(super) fn one(num: u16) -> LockedSems {
        let mut nums = [0u16; FEW];
        nums[0] = num;
        LockedSems::few(1, nums)
    }

    pub(super) fn as_slice(&self) -> &[u16] {
        match &self.nums {
            Nums::Few { len, nums } => &nums[..usize::from(*len)],
            Nums::Many(nums) => nums,
        }
    }

    fn index(&self, num: usize) -> Option<usize> {
        let num = u16::try_from(num).ok()?;
        let nums = self.as_slice();
        let last = self.last.get();
        let at = if nums.get(last) == Some(&num) {
            last
        } else if nums.get(last + 1) == Some(&num) {
            last + 1
        } else {
            nums.binary_search(&num).ok()?
        };
        self.last.set(at);
        Some(at)
    }

    pub(super) fn contains(&self, num: usize) -> bool {
        self.index(num).is_some()
    }

    /// The first (lowest) semaphore: whose counters a holder writes.
    pub(super) fn first(&self) -> usize {
        usize::from(self.as_slice()[0])
    }

    fn cell(&self, i: usize) -> &Cell<u16> {
        match &self.values {
            Values::Few(values) => &values[i],
            Values::Many(values) => &values[i],
        }
    }

    /// The holder's value of semaphore `num`, which it locked.
    pub(super) fn value(&self, num: usize) -> i32 {
        let i = self.index(num).expect("a semaphore this call locked");
        i32::from(self.cell(i).get())
    }

    /// Sets the holder's value of semaphore `num` (`0..=SEMVMX`), written
    /// back when it releases the lock.
    pub(super) fn set_value(&self, num: usize, value: i32) {
        let i = self.index(num).expect("a semaphore this call locked");
        self.cell(i).set(value as u16);
    }
}

impl SetShared {
    /// Takes the lock of every semaphore in `sems`, in order, and copies
    /// their values. On [`Diverted`] nothing is held.
    pub(super) fn lock_sems(&self, sems: &LockedSems) -> Result<(), Diverted> {
        let nums = sems.as_slice();
        if nums.len() > 2 {
            // Each compare-and-swap below waits for its line before the
            // next can start; asked for together, the misses overlap.
            for &num in nums {
                prefetch::for_write(&self.sems[usize::from(num)].word);
            }
        }
        for (i, &num) in nums.iter().enumerate() {
            match self.lock_sem(usize::from(num)) {
                Ok(value) => sems.cell(i).set(value as u16),
                Err(diverted) => {
                    // Nothing changed under these: give them back as they were.
                    for (j, &taken) in sems.as_slice()[..i].iter().enumerate() {
                        let sem = &self.sems[usize::from(taken)];
                        Self::release(sem, i32::from(sems.cell(j).get()), |w| w);
                    }
                    return Err(diverted);
                }
            }
        }
        Ok(())
    }

    /// Releases every lock in `sems`, writing back its value and whether
    /// its lists hold sleepers (`sleepers(num)`).
    pub(super) fn unlock_sems(&self, sems: &LockedSems, sleepers: impl Fn(usize) -> bool) {
        for (i, &num) in sems.as_slice().iter().enumerate() {
            let num = usize::from(num);
            let waiting = sleepers(num);
            Self::release(&self.sems[num], i32::from(sems.cell(i).get()), |w| {
                word::published(w, 0, waiting)
            });
        }
    }

    /// Takes semaphore `num`'s lock; returns its value. Released with
    /// [`release`](Self::release).
    pub(super) fn lock_sem(&self, num: usize) -> Result<i32, Diverted> {
        let sem = &self.sems[num];
        let current = sem.word.load(Ordering::Relaxed);
        if current & (LOCKED | GLOBAL | REMOVED) == 0
            && sem
                .word
                // Pairs with the release compare-and-swap in `release` and
                // the release store in `release_quiet` (the last holder), and
                // with the release half of a lock-free operation's
                // compare-and-swap (`try_lock_free`): their value is ours to
                // read.
                .compare_exchange(
                    current,
                    current | LOCKED,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Ok(word::value_of(current));
        }
        if current & (GLOBAL | REMOVED) != 0 {
            // Not a wait: the caller goes to the global lock (or fails), and
            // a count here would be a write to a shared line on every call
            // made in global mode.
            return Err(Diverted);
        }
        self.lock_sem_contended(sem)
    }

    #[cold]
    fn lock_sem_contended(&self, sem: &Sem) -> Result<i32, Diverted> {
        let mut timer = SpinTimer::one_switch();
        // Once we slept we take the lock with CONTENDED: others may sleep too.
        let mut slept = false;
        Counters::add(&sem.counters.outside.lock_waits, 1);
        let mut current = sem.word.load(Ordering::Relaxed);
        loop {
            if current & (GLOBAL | REMOVED) != 0 {
                if slept {
                    // Global mode makes no release that would wake them.
                    futex::wake(&sem.word, u32::MAX);
                }
                return Err(Diverted);
            }
            if current & LOCKED == 0 {
                let take = current | LOCKED | if slept { CONTENDED } else { 0 };
                // As in `lock_sem`: pairs with `release` and `try_lock_free`.
                match sem.word.compare_exchange_weak(
                    current,
                    take,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Ok(word::value_of(current)),
                    Err(now) => {
                        current = now;
                        continue;
                    }
                }
            }
            if current & QUIET != 0 {
                current = Self::wait_out_quiet(sem, current);
                continue;
            }
            if !timer.expired() {
                cpu_relax();
                current = sem.word.load(Ordering::Relaxed);
                continue;
            }
            if current & CONTENDED == 0 {
                if let Err(now) = sem.word.compare_exchange_weak(
                    current,
                    current | CONTENDED,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    current = now;
                    continue;
                }
                current |= CONTENDED;
            }
            slept = true;
            futex::wait(&sem.word, current, None);
            current = sem.word.load(Ordering::Relaxed);
        }
    }

    /// Releases `sem`'s lock: the word becomes `rest(word)` (the flags the
    /// caller keeps or sets, `LOCKED` and `CONTENDED` cleared) with `value`,
    /// and one sleeping locker is woken if `CONTENDED` was set.
    pub(super) fn release(sem: &Sem, value: i32, rest: impl Fn(u32) -> u32) {
        let mut current = sem.word.load(Ordering::Relaxed);
        loop {
            let next = word::with_value(rest(current) & !(LOCKED | CONTENDED), value);
            // Release: hands the value and everything done under the lock to
            // the next locker's acquire (`lock_sem`, `enter_global`) and to
            // the next lock-free operation (`try_lock_free`). It fails only
            // when a waiter set CONTENDED meanwhile.
            match sem.word.compare_exchange_weak(
                current,
                next,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        if current & CONTENDED != 0 {
            futex::wake(&sem.word, 1);
        }
    }

    /// Waits until the quiet hold `held` (a word with `QUIET`) of `sem` ends;
    /// returns the word then. Its holder stores the release and wakes nobody,
    /// so this never sets `CONTENDED`: it spins for about one context switch,
    /// then naps for [`QUIET_NAP_MIN`] to [`QUIET_NAP_MAX`], each nap twice
    /// the last.
    ///
    /// The naps are plain sleeps, not futex waits on the word: a release
    /// that finds `CONTENDED` wakes one futex waiter of the word, and a
    /// napper that took that wake-up would leave the sleeper it was meant
    /// for asleep (the napper never slept for it, so it takes the lock
    /// without `CONTENDED` and its release wakes nobody). Eight threads
    /// making calls on two of four semaphores hung that way within seconds.
    #[cold]
    fn wait_out_quiet(sem: &Sem, held: u32) -> u32 {
        debug_assert!(held & (LOCKED | QUIET) == LOCKED | QUIET && held & CONTENDED == 0);
        let mut timer = SpinTimer::one_switch();
        let mut nap = QUIET_NAP_MIN;
        loop {
            let current = sem.word.load(Ordering::Relaxed);
            if current != held {
                return current;
            }
            if !timer.expired() {
                cpu_relax();
                continue;
            }
            // Under loom, which has no clock, a nap is a yield.
            #[cfg(loom)]
            cpu_relax();
            #[cfg(not(loom))]
            std::thread::sleep(nap);
            nap = (nap * 2).min(QUIET_NAP_MAX);
        }
    }

    /// Global mode's pass over one semaphore: waits for its holder to leave,
    /// then sets `GLOBAL` instead of `LOCKED`, and sends every sleeping
    /// locker of the word to the global path.
    pub(super) fn enter_global(&self, num: usize) {
        let sem = &self.sems[num];
        let mut timer = SpinTimer::one_switch();
        // Once we slept, others may sleep on the word too, even if the
        // release that woke us cleared CONTENDED (as a locker that slept
        // takes the lock with CONTENDED in `lock_sem_contended`).
        let mut slept = false;
        let mut current = sem.word.load(Ordering::Relaxed);
        loop {
            debug_assert_eq!(current & GLOBAL, 0, "global mode entered twice");
            if current & LOCKED == 0 {
                // Acquire: pairs with `release` and `try_lock_free`, as in
                // `lock_sem`.
                match sem.word.compare_exchange_weak(
                    current,
                    (current & !CONTENDED) | GLOBAL,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(now) => {
                        current = now;
                        continue;
                    }
                }
            }
            if current & QUIET != 0 {
                current = Self::wait_out_quiet(sem, current);
                continue;
            }
            if !timer.expired() {
                cpu_relax();
            } else if current & CONTENDED != 0
                || sem
                    .word
                    .compare_exchange_weak(
                        current,
                        current | CONTENDED,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                slept = true;
                futex::wait(&sem.word, current | CONTENDED, None);
            }
            current = sem.word.load(Ordering::Relaxed);
        }
        // Lockers asleep on the word wait for a release that global mode
        // never makes: send them all to the global path.
        if slept || current & CONTENDED != 0 {
            futex::wake(&sem.word, u32::MAX);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sem::SemSet;

    fn sops(nums: &[u16]) -> Vec<SemBuf> {
        nums.iter().map(|&n| SemBuf::new(n, 1, 0)).collect()
    }

    /// The lock waits counted on semaphore `num`.
    fn lock_waits(set: &SetShared, num: usize) -> u64 {
        set.sems[num]
            .counters
            .outside
            .lock_waits
            .load(Ordering::Relaxed)
    }

    #[test]
    fn semaphores_are_locked_distinct_and_ascending() {
        assert_eq!(LockedSems::of(&sops(&[3, 1, 3, 0])).as_slice(), [0, 1, 3]);
        assert_eq!(LockedSems::of(&sops(&[7])).as_slice(), [7]);
        let many = LockedSems::of(&sops(&[9, 8, 7, 6, 5, 4, 3, 2, 1, 9]));
        assert!(matches!(many.nums, Nums::Many(_)));
        assert_eq!(many.as_slice(), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert!(many.contains(4) && !many.contains(0) && !many.contains(70_000));
        assert_eq!(many.first(), 1);
        let few = LockedSems::of(&sops(&[5, 4, 3, 2, 1, 0]));
        assert!(matches!(few.nums, Nums::Few { len: 6, .. }));
        assert_eq!(few.as_slice(), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn the_holder_works_on_a_copy_written_back_by_the_release() {
        let set = SemSet::new(2).unwrap();
        set.set_all(&[3, 4]).unwrap();
        let set = set.shared();
        let both = LockedSems::of(&sops(&[1, 0]));
        set.lock_sems(&both).unwrap();
        assert_eq!((both.value(0), both.value(1)), (3, 4));
        both.set_value(1, 9);
        // The word still holds the old value, and the lock.
        assert_eq!(set.sems[1].word.load(Ordering::Relaxed), LOCKED | 4);
        set.unlock_sems(&both, |num| num == 0);
        assert_eq!(set.sems[0].word.load(Ordering::Relaxed), word::SLEEPERS | 3);
        assert_eq!(set.sems[1].word.load(Ordering::Relaxed), 9);
    }

    #[test]
    fn a_locked_semaphore_waits_out_its_holder() {
        let set = SemSet::new(2).unwrap();
        let set = set.shared();
        let both = LockedSems::of(&sops(&[1, 0]));
        set.lock_sems(&both).unwrap();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let one = LockedSems::one(1);
                set.lock_sems(&one).unwrap();
                set.unlock_sems(&one, |_| false);
            });
            crate::test_common::wait_until("the waiter went to sleep", || {
                set.sems[1].word.load(Ordering::Relaxed) & CONTENDED != 0
            });
            set.unlock_sems(&both, |_| false);
            waiter.join().unwrap();
        });
        assert_eq!(set.sems[1].word.load(Ordering::Relaxed), 0);
        assert_eq!(lock_waits(set, 1), 1);
    }

    #[test]
    fn global_mode_diverts_lockers_and_gives_back_what_they_took() {
        let set = SemSet::new(3).unwrap();
        set.set_value(0, 5).unwrap();
        let set = set.shared();
        set.enter_global(2);
        let all = LockedSems::of(&sops(&[0, 1, 2]));
        assert_eq!(set.lock_sems(&all), Err(Diverted));
        // The two taken before semaphore 2 were released untouched.
        assert_eq!(set.sems[0].word.load(Ordering::Relaxed), 5);
        assert_eq!(set.sems[1].word.load(Ordering::Relaxed), 0);
        assert_eq!(set.sems[2].word.load(Ordering::Relaxed), GLOBAL);
    }

    #[test]
    fn a_sleeping_locker_goes_global_and_wakes_the_others() {
        let set = SemSet::new(1).unwrap();
        let set = set.shared();
        let one = LockedSems::one(0);
        set.lock_sems(&one).unwrap();
        std::thread::scope(|s| {
            // Each either goes global or, woken by the release before global
            // mode takes the word, gets the lock and gives it back.
            let lockers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let one = LockedSems::one(0);
                        let got = set.lock_sems(&one);
                        if got.is_ok() {
                            set.unlock_sems(&one, |_| false);
                        }
                    })
                })
                .collect();
            crate::test_common::wait_until("both lockers waited", || {
                lock_waits(set, 0) == 2 && set.sems[0].word.load(Ordering::Relaxed) & CONTENDED != 0
            });
            // Global mode waits for the holder, then takes the word.
            let global = s.spawn(|| set.enter_global(0));
            set.unlock_sems(&one, |_| false);
            global.join().unwrap();
            for locker in lockers {
                locker.join().unwrap();
            }
        });
        assert_eq!(set.sems[0].word.load(Ordering::Relaxed), GLOBAL);
    }

    /// Joins `locker` once it has returned. If it is still running after
    /// [`PATIENCE`](crate::test_common::PATIENCE), wakes every sleeper on
    /// `word`, so that the scope can end, and fails with `what`.
    fn join_or_fail<T>(
        locker: std::thread::ScopedJoinHandle<'_, T>,
        word: &crate::sync::AtomicU32,
        what: &str,
    ) -> T {
        let start = std::time::Instant::now();
        while !locker.is_finished() {
            if start.elapsed() > crate::test_common::PATIENCE {
                futex::wake(word, u32::MAX);
                drop(locker.join().unwrap());
                panic!("{what}");
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        locker.join().unwrap()
    }

    /// Whether thread `tid` of this process is asleep (state `S`).
    fn asleep(tid: libc::pid_t) -> bool {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
            .ok()
            .and_then(|stat| {
                let after_name = stat.rsplit_once(')')?.1;
                after_name.split_whitespace().next().map(|s| s == "S")
            })
            .unwrap_or(false)
    }

    #[test]
    fn a_locker_waits_out_a_quiet_hold_on_the_clock() {
        // A quiet hold, as `try_quiet` takes it; its release is a plain
        // store that wakes nobody. The locker must not mark the word
        // CONTENDED (the store would erase it) nor sleep without a timeout
        // (nothing would wake it).
        let set = SemSet::new(1).unwrap();
        set.set_value(0, 3).unwrap();
        let set = set.shared();
        let held = LOCKED | QUIET | 3;
        set.sems[0].word.store(held, Ordering::Relaxed);
        std::thread::scope(|s| {
            let (tids, tid) = std::sync::mpsc::channel();
            let locker = s.spawn(move || {
                // SAFETY: gettid has no preconditions.
                tids.send(unsafe { libc::gettid() }).unwrap();
                let one = LockedSems::one(0);
                set.lock_sems(&one).unwrap();
                let value = one.value(0);
                set.unlock_sems(&one, |_| false);
                value
            });
            let locker_tid = tid.recv().unwrap();
            crate::test_common::wait_until("the locker asleep on the quiet hold", || {
                lock_waits(set, 0) == 1 && asleep(locker_tid)
            });
            let seen = set.sems[0].word.load(Ordering::Relaxed);
            set.sems[0].word.store(3, Ordering::Release);
            if seen != held {
                // Wake it ourselves, so that the scope can end, and fail.
                futex::wake(&set.sems[0].word, u32::MAX);
                locker.join().unwrap();
                panic!("a locker wrote {seen:#x} to a quietly held word");
            }
            let value = join_or_fail(
                locker,
                &set.sems[0].word,
                "the locker still slept after the quiet hold ended",
            );
            assert_eq!(value, 3);
        });
        assert_eq!(set.sems[0].word.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn global_entry_woken_before_a_locker_wakes_that_locker() {
        // The release wakes one sleeper, the first to sleep: global mode's
        // entry. It must not leave the locker behind it asleep on a word
        // that global mode never releases (the liveness stress test's hang).
        let set = SemSet::new(1).unwrap();
        let set = set.shared();
        let one = LockedSems::one(0);
        set.lock_sems(&one).unwrap();
        std::thread::scope(|s| {
            let (tids, tid) = std::sync::mpsc::channel();
            let entry = {
                let tids = tids.clone();
                s.spawn(move || {
                    // SAFETY: gettid has no preconditions.
                    tids.send(unsafe { libc::gettid() }).unwrap();
                    set.enter_global(0);
                })
            };
            let entry_tid = tid.recv().unwrap();
            crate::test_common::wait_until("global entry asleep on the word", || {
                set.sems[0].word.load(Ordering::Relaxed) & CONTENDED != 0 && asleep(entry_tid)
            });
            let locker = s.spawn(move || {
                // SAFETY: as above.
                tids.send(unsafe { libc::gettid() }).unwrap();
                set.lock_sems(&LockedSems::one(0))
            });
            let locker_tid = tid.recv().unwrap();
            crate::test_common::wait_until("the locker asleep behind it", || {
                lock_waits(set, 0) == 1 && asleep(locker_tid)
            });
            set.unlock_sems(&one, |_| false);
            entry.join().unwrap();
            let locked = join_or_fail(
                locker,
                &set.sems[0].word,
                "the locker still slept on the word after global mode took it",
            );
            // It found global mode (or, woken first, got the lock before it).
            if let Ok(()) = locked {
                panic!("the locker got the lock although global mode took the word");
            }
        });
        assert_eq!(set.sems[0].word.load(Ordering::Relaxed), GLOBAL);
    }
}

/// loom model of the word lock against a quiet hold, beside the private
/// algorithm it checks. Run with `RUSTFLAGS="--cfg loom" cargo test -p ksync
/// --release --lib sem_lock`.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::sem::SemSet;
    use loom::sync::Arc;

    /// A locker that waits out a quiet hold must not be a futex sleeper on
    /// the word. The main thread holds semaphore 0 quietly, releases it with
    /// a store, then takes and releases it as an ordinary holder, whose
    /// release wakes one futex sleeper of the word. A first locker starts
    /// during the quiet hold, a second during the ordinary one. Had the
    /// first napped in a futex wait on the word, the model's futex (where a
    /// timed sleeper can take a wake-up, as in the kernel) would let it take
    /// the wake-up meant for the second, asleep behind the ordinary holder,
    /// which would never wake: with such naps this model deadlocks.
    #[test]
    fn a_napper_does_not_take_the_wake_up_of_a_locker_asleep_behind_a_holder() {
        let mut model = loom::model::Builder::new();
        // The lockers' waits are spin loops, as in the models of `ksync::sem`.
        model.max_branches = 20_000;
        model.check(|| {
            let set = Arc::new(SemSet::new(1).unwrap());
            set.shared().sems[0]
                .word
                .store(LOCKED | QUIET, Ordering::Relaxed);
            let locker = |set: &Arc<SemSet>| {
                let set = Arc::clone(set);
                loom::thread::spawn(move || {
                    let one = LockedSems::one(0);
                    set.shared().lock_sems(&one).unwrap();
                    one.set_value(0, one.value(0) + 1);
                    set.shared().unlock_sems(&one, |_| false);
                })
            };
            // The first finds the quiet hold (or what follows it).
            let first = locker(&set);
            let shared = set.shared();
            // The quiet release (`release_quiet`), then an ordinary hold
            // that the second locker finds.
            shared.sems[0].word.store(0, Ordering::Release);
            let one = LockedSems::one(0);
            shared.lock_sems(&one).unwrap();
            let second = locker(&set);
            one.set_value(0, one.value(0) + 1);
            shared.unlock_sems(&one, |_| false);
            first.join().unwrap();
            second.join().unwrap();
            assert_eq!(shared.sems[0].word.load(Ordering::Relaxed), 3);
        });
    }
}
