//! A shared set's post shares its wake-ups out with the sleepers it wakes,
//! in whatever process they sleep.
//!
//! A post that completes many sleepers owes each a futex wake, and a wake
//! onto another CPU costs the waker far more than one onto its own (on a
//! 2-CPU KVM guest, 2 to 3 us of its CPU against 0.6 to 0.7 us: the IPI is a
//! VM exit). The in-process sets let the sleepers they wake make most of
//! those wakes, each onto its own CPU (`crate::futex_batch::Spread`). A
//! process-shared set did not: its poster woke every sleeper itself, and at
//! sembench `-t 250 -w 64` on two CPUs it spent about 40% of its CPU in
//! `try_to_wake_up`, at 0.7x the kernel's burns per second.
//!
//! So a post that wakes several sleepers leaves some of the wakes in the
//! set's file, as marks in a bitmap per group of CPUs
//! (`crate::sem::owed_wakes`), each sleeper in the group of the CPU it
//! queued on ([`sleeper::CPU`]). Under [`SharingMode::Local`] (2 or 3 CPUs)
//! the poster wakes its own CPU's sleepers and the first
//! [`FIRST_PER_GROUP`] of every other group, and marks the rest; each
//! sleeper that returns drains the bitmap of its own CPU's group, so those
//! wakes are made on the CPU they wake onto. Under [`SharingMode::Any`] the
//! poster wakes the first sleeper and marks all the others in one bitmap,
//! which every returning sleeper helps drain. Meanwhile the poster claims
//! its own marks back, a few at a time, until none is left: nothing waits
//! for a helper the scheduler has not run.
//!
//! The mode is the process's own (`futex_batch::sharing_mode`,
//! `KSYNC_WAKE_SHARING`); processes that differ only share less well.

use super::layout::{sleeper, OWED_GROUPS};
use super::map::Mapping;
use crate::futex_batch::{sharing_mode, this_cpu, wake_all_in, Scope, SharingMode, UNKNOWN_CPU};
use crate::sem::owed_wakes::{claim_any, mark, Mine};
use crate::sync::{AtomicU32, Ordering};

/// Fewest sleepers a post wakes before it leaves any to others: with fewer
/// there is little to share, and one batched wake costs less than marks.
const SHARE_FROM: usize = 4;

/// Under [`SharingMode::Local`], sleepers of another CPU group the poster
/// wakes itself before it marks the rest for them: the first of them may
/// hold what the others wait for, so they are not left waiting for a
/// helper, and two make a helper likelier to run soon.
const FIRST_PER_GROUP: usize = 2;

/// Marks the poster claims back at a time: one batched wake each.
const POSTER_CHUNK: usize = 8;

/// Marks a helper claims at a time under [`SharingMode::Any`]: fewer than
/// the poster, so that the work spreads over the helpers.
const HELPER_CHUNK: usize = 4;

/// [`HELPER_CHUNK`] under [`SharingMode::Local`], where every mark a helper
/// claims sleeps on its own CPU: larger, for fewer system calls.
const LOCAL_HELPER_CHUNK: usize = 16;

/// The bitmap a sleeper on `cpu` is marked in, under `mode`; `None`: it is
/// not shared out (sharing off, or its CPU unknown under `Local`).
fn group(cpu: u32, mode: SharingMode) -> Option<usize> {
    match mode {
        SharingMode::Off => None,
        SharingMode::Any => Some(0),
        SharingMode::Local => (cpu != UNKNOWN_CPU).then_some(cpu as usize % OWED_GROUPS),
    }
}

/// Wakes the sleepers of `woken`, slots whose results were published before
/// the set's lock was released, sharing the wakes out as the module says.
/// Returns the system calls this thread made.
pub(super) fn wake(map: &Mapping, woken: &[usize]) -> usize {
    wake_as(map, woken, sharing_mode(), this_cpu())
}

/// [`wake`] under `mode`, from a poster on CPU `here`.
fn wake_as(map: &Mapping, woken: &[usize], mode: SharingMode, here: u32) -> usize {
    let Plan { first, owed } = plan(map, woken, mode, here);
    let layout = map.layout;
    let mut mine: Vec<(usize, Mine)> = Vec::new();
    for (g, slots) in owed.iter().enumerate() {
        if slots.is_empty() {
            continue;
        }
        // Marked before the first wake, so that the first sleepers woken
        // find them.
        // A bit this mark finds set stands for an earlier mark too, whose
        // one claim and wake-up come after this result was published
        // (`crate::sem::owed_wakes`): the wake-up owed for it will be made.
        let marked = mark(map.words(layout.owed(g)), slots.iter().copied(), |slot| {
            made(map, slot)
        });
        mine.push((g, marked));
    }
    let mut calls = wake_slots(map, &first);
    let mut batch = first;
    while !mine.is_empty() {
        mine.retain_mut(|(g, m)| {
            batch.clear();
            let claimed = m.claim(map.words(layout.owed(*g)), POSTER_CHUNK, &mut batch);
            calls += wake_slots(map, &batch);
            claimed > 0
        });
    }
    calls
}

/// Who wakes which of a post's sleepers.
#[derive(Debug, PartialEq, Eq)]
struct Plan {
    /// The poster's first batch: sleepers of other CPU groups first, so
    /// that their helpers start while it wakes the rest.
    first: Vec<usize>,
    /// Per group, the sleepers marked owed a wake.
    owed: [Vec<usize>; OWED_GROUPS],
}

/// The [`Plan`] for `woken` under `mode`, from a poster on CPU `here`.
fn plan(map: &Mapping, woken: &[usize], mode: SharingMode, here: u32) -> Plan {
    let mut owed: [Vec<usize>; OWED_GROUPS] = Default::default();
    if woken.len() < SHARE_FROM {
        return Plan {
            first: woken.to_vec(),
            owed,
        };
    }
    let mut first = Vec::with_capacity(woken.len());
    match mode {
        SharingMode::Off => first.extend_from_slice(woken),
        SharingMode::Any => {
            first.push(woken[0]);
            owed[0].extend_from_slice(&woken[1..]);
        }
        SharingMode::Local => {
            let here = group(here, mode);
            let mut own = Vec::new();
            let mut seen = [0usize; OWED_GROUPS];
            for &slot in woken {
                let cpu = map.load(map.layout.sleeper(slot, sleeper::CPU));
                match group(cpu, mode) {
                    Some(g) if Some(g) != here => {
                        if seen[g] < FIRST_PER_GROUP {
                            seen[g] += 1;
                            first.push(slot);
                        } else {
                            owed[g].push(slot);
                        }
                    }
                    _ => own.push(slot),
                }
            }
            first.append(&mut own);
        }
    }
    Plan { first, owed }
}

/// Drains the marks of the calling thread's CPU group, a few at a time,
/// waking each batch it claims; for a sleeper whose call just completed.
/// Returns the system calls it made.
pub(super) fn help(map: &Mapping) -> usize {
    help_as(map, sharing_mode(), this_cpu())
}

/// [`help`] under `mode`, from CPU `cpu`.
fn help_as(map: &Mapping, mode: SharingMode, cpu: u32) -> usize {
    let Some(g) = group(cpu, mode) else {
        return 0;
    };
    let chunk = if mode == SharingMode::Local {
        LOCAL_HELPER_CHUNK
    } else {
        HELPER_CHUNK
    };
    let bitmap = map.words(map.layout.owed(g));
    let mut calls = 0;
    let mut batch = Vec::new();
    loop {
        batch.clear();
        if claim_any(bitmap, chunk, &mut batch) == 0 {
            return calls;
        }
        calls += wake_slots(map, &batch);
    }
}

/// Wakes the sleepers of `slots` (their status words), batched; returns the
/// system calls made.
fn wake_slots(map: &Mapping, slots: &[usize]) -> usize {
    if slots.is_empty() {
        return 0;
    }
    let layout = map.layout;
    let words: Vec<*const AtomicU32> = slots
        .iter()
        .map(|&slot| map.word(layout.sleeper(slot, sleeper::STATUS)) as *const AtomicU32)
        .collect();
    // SAFETY: status words of our live mapping, which sleepers wait on
    // with shared futex waits (a reused or idle slot's wake is spurious).
    let calls = unsafe { wake_all_in(Scope::Shared, &words) };
    for &slot in slots {
        made(map, slot);
    }
    calls
}

/// Counts a wake-up owed to sleeper slot `slot` as made
/// ([`sleeper::WAKES_DUE`]), once it was.
fn made(map: &Mapping, slot: usize) {
    // Release pairs with the acquire load in `Locked::sweep`: a sweep that
    // reads what this leaves finds the wake-up made.
    map.word(map.layout.sleeper(slot, sleeper::WAKES_DUE))
        .fetch_sub(1, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::super::set::tests::Scratch;
    use super::*;
    use crate::sync::Ordering;

    /// Notes CPU `cpu` in each slot of `slots`, as their sleepers would.
    fn queued_on(map: &Mapping, cpu: u32, slots: impl IntoIterator<Item = usize>) {
        for slot in slots {
            map.word(map.layout.sleeper(slot, sleeper::CPU))
                .store(cpu, Ordering::Relaxed);
        }
    }

    fn owed_anywhere(map: &Mapping) -> Vec<usize> {
        let mut slots = Vec::new();
        for g in 0..OWED_GROUPS {
            for (w, word) in map.words(map.layout.owed(g)).iter().enumerate() {
                let bits = word.load(Ordering::Relaxed);
                slots.extend((0..32).filter(|b| bits & 1 << b != 0).map(|b| w * 32 + b));
            }
        }
        slots
    }

    #[test]
    fn under_local_the_poster_wakes_its_own_cpus_and_two_of_each_other_and_marks_the_rest() {
        let set = Scratch::new(1);
        let map = &set.0.map;
        queued_on(map, 1, 0..10);
        queued_on(map, 0, 10..13);
        queued_on(map, UNKNOWN_CPU, 13..15);
        queued_on(map, 3, 15..18);
        let woken: Vec<usize> = (0..18).collect();
        let p = plan(map, &woken, SharingMode::Local, 0);
        assert_eq!(p.first, [0, 1, 15, 16, 10, 11, 12, 13, 14]);
        assert_eq!(p.owed[1], (2..10).collect::<Vec<_>>());
        assert_eq!(p.owed[3], [17]);
        assert_eq!(p.owed.iter().map(Vec::len).sum::<usize>(), 9);
    }

    #[test]
    fn under_any_the_poster_wakes_the_first_and_marks_the_rest_in_one_bitmap() {
        let set = Scratch::new(1);
        let woken = [7, 3, 900, 12];
        let p = plan(&set.0.map, &woken, SharingMode::Any, 0);
        assert_eq!(p.first, [7]);
        assert_eq!(p.owed[0], [3, 900, 12]);
        // Too few to share, or sharing off: the poster wakes them all.
        for (woken, mode) in [
            (&woken[..3], SharingMode::Any),
            (&woken[..], SharingMode::Off),
        ] {
            let p = plan(&set.0.map, woken, mode, 0);
            assert_eq!(p.first, woken);
            assert!(p.owed.iter().all(Vec::is_empty));
        }
    }

    #[test]
    fn a_post_that_shares_out_leaves_no_mark_behind_even_with_nobody_to_help() {
        let set = Scratch::new(1);
        let map = &set.0.map;
        queued_on(map, 1, 0..40);
        let woken: Vec<usize> = (0..40).collect();
        for mode in [SharingMode::Local, SharingMode::Any] {
            // Nobody sleeps in these slots: every wake finds nobody.
            assert!(wake_as(map, &woken, mode, 0) > 0);
            assert_eq!(owed_anywhere(map), Vec::<usize>::new(), "{mode:?}");
        }
    }

    #[test]
    fn a_helper_drains_its_own_groups_marks_and_leaves_the_others() {
        let set = Scratch::new(1);
        let map = &set.0.map;
        mark(map.words(map.layout.owed(1)), [4, 5, 6, 40, 1000], |_| ());
        mark(map.words(map.layout.owed(2)), [8], |_| ());
        assert!(help_as(map, SharingMode::Local, 1) > 0);
        assert_eq!(owed_anywhere(map), [8]);
        assert_eq!(help_as(map, SharingMode::Off, 2), 0);
        assert_eq!(help_as(map, SharingMode::Local, UNKNOWN_CPU), 0);
        assert!(help_as(map, SharingMode::Local, 2 + OWED_GROUPS as u32) > 0);
        assert_eq!(owed_anywhere(map), Vec::<usize>::new());
    }
}
