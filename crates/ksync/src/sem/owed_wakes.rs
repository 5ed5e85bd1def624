//! Sleepers owed a wake-up, as bits in memory that several processes share:
//! a poster marks them, and the poster and the sleepers it woke claim them,
//! each mark once, and wake what they claimed.
//!
//! A process-shared set cannot share a post's wake-ups out the way the
//! in-process sets do (`crate::futex_batch::Spread`): its board and its
//! handles are pointers, which mean nothing in another process. A bitmap in
//! the set's file can be read from every mapping: bit `s % 32` of word
//! `s / 32` stands for sleeper slot `s`, whose status word every process
//! can wake by its file offset.
//!
//! The rule that makes it safe: **a poster marks a slot only after it has
//! published the slot's result, and whoever clears a marked bit wakes that
//! slot afterwards.** So every published result is followed by a wake of its
//! slot, made by whoever claimed the mark, in whatever process. Each mark is
//! cleared by exactly one `fetch_and` (the one whose old value held it). A
//! mark that finds its bit still set (an earlier mark not claimed yet, of a
//! slot whose sleeper has since left and been replaced) stands for both:
//! the one claim comes after both results were published. A wake that finds
//! its slot reused, or nobody asleep on it, is spurious, and a sleeper
//! re-checks its status after every wake-up.
//!
//! Nobody waits for anybody: the poster claims what is left of its own marks
//! until none is left, so its call ends when every mark it made is claimed,
//! by it or by a helper. A helper the scheduler stops between its claim and
//! its wake delays the few slots it claimed, never the poster or the rest;
//! one that dies there leaves them to the set's next sweep, which wakes
//! every sleeper whose result is published but not collected (a timed
//! sleeper of the set sweeps every 100 ms).
//!
//! Barriers: the release `fetch_or` in [`mark`] pairs with the acquire
//! `fetch_and` in [`claim`], so a claimer's wake comes after the poster's
//! publication of the result it wakes for (the sleeper's futex wait orders
//! the rest).

use crate::sync::{AtomicU32, Ordering};

/// Slots per bitmap word.
pub(crate) const BITS: usize = 32;

/// Word and bit of `slot`.
fn place(slot: usize) -> (usize, u32) {
    (slot / BITS, 1 << (slot % BITS))
}

/// Marks each slot of `slots` owed a wake in `bitmap`, one `fetch_or` per
/// word they fall in, and returns them as the poster's own marks, to claim
/// back; calls `merged` with each slot whose bit it found set already (an
/// earlier mark not claimed yet, which now stands for both). Call only
/// after publishing each slot's result.
pub(crate) fn mark(
    bitmap: &[AtomicU32],
    slots: impl IntoIterator<Item = usize>,
    mut merged: impl FnMut(usize),
) -> Mine {
    let mut masks = vec![0; bitmap.len()];
    for slot in slots {
        let (w, bit) = place(slot);
        masks[w] |= bit;
    }
    for (w, (word, &bits)) in bitmap.iter().zip(&masks).enumerate() {
        if bits != 0 {
            let mut found = word.fetch_or(bits, Ordering::Release) & bits;
            while found != 0 {
                merged(w * BITS + found.trailing_zeros() as usize);
                found &= found - 1;
            }
        }
    }
    Mine { masks }
}

/// What one [`claim`] on a word found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Claimed {
    /// The bits this claim cleared: the caller wakes their slots.
    pub(crate) got: u32,
    /// The bits of `within` known cleared now, by this claim or an earlier
    /// one of anybody's: nobody need claim them again.
    pub(crate) settled: u32,
}

/// Claims at most `max` of the bits of `within` still marked in `word`, the
/// lowest first.
pub(crate) fn claim(word: &AtomicU32, within: u32, max: u32) -> Claimed {
    let marked = word.load(Ordering::Relaxed) & within;
    let take = lowest(marked, max);
    if take == 0 {
        return Claimed {
            got: 0,
            settled: within & !marked,
        };
    }
    // Acquire pairs with the release in `mark`.
    let got = word.fetch_and(!take, Ordering::Acquire) & take;
    Claimed {
        got,
        settled: (within & !marked) | take,
    }
}

/// The lowest `n` set bits of `bits`.
fn lowest(mut bits: u32, n: u32) -> u32 {
    let mut out = 0;
    for _ in 0..n {
        if bits == 0 {
            break;
        }
        let bit = bits & bits.wrapping_neg();
        out |= bit;
        bits &= !bit;
    }
    out
}

/// Claims up to `max` marked slots anywhere in `bitmap` and appends them to
/// `out`; returns how many it claimed (0: none was marked when it looked).
pub(crate) fn claim_any(bitmap: &[AtomicU32], max: usize, out: &mut Vec<usize>) -> usize {
    let mut claimed = 0;
    for (w, word) in bitmap.iter().enumerate() {
        if claimed == max {
            break;
        }
        let c = claim(word, u32::MAX, (max - claimed) as u32);
        claimed += push_slots(w, c.got, out);
    }
    claimed
}

/// A poster's own marks ([`mark`]), per word of one bitmap, as it claims
/// them back.
pub(crate) struct Mine {
    masks: Vec<u32>,
}

impl Mine {
    /// Claims up to `max` of its marks still unclaimed in `bitmap`, appends
    /// their slots to `out`, and returns how many. 0 once every mark is
    /// settled, claimed by this poster or by anybody else.
    pub(crate) fn claim(
        &mut self,
        bitmap: &[AtomicU32],
        max: usize,
        out: &mut Vec<usize>,
    ) -> usize {
        let mut claimed = 0;
        for (w, mask) in self.masks.iter_mut().enumerate() {
            while *mask != 0 && claimed < max {
                let c = claim(&bitmap[w], *mask, (max - claimed) as u32);
                *mask &= !c.settled;
                claimed += push_slots(w, c.got, out);
            }
        }
        claimed
    }
}

/// Appends the slots of `bits` in word `w` to `out`; returns how many.
fn push_slots(w: usize, mut bits: u32, out: &mut Vec<usize>) -> usize {
    let n = bits.count_ones() as usize;
    while bits != 0 {
        out.push(w * BITS + bits.trailing_zeros() as usize);
        bits &= bits - 1;
    }
    n
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn bitmap(words: usize) -> Vec<AtomicU32> {
        (0..words).map(|_| AtomicU32::new(0)).collect()
    }

    #[test]
    fn marks_land_on_their_slots_bits() {
        let b = bitmap(3);
        mark(&b, [0, 31, 32, 33, 95], |_| ());
        let words: Vec<u32> = b.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        assert_eq!(words, [1 | 1 << 31, 0b11, 1 << 31]);
    }

    #[test]
    fn a_mark_names_the_slots_an_earlier_mark_still_stands_for() {
        let b = bitmap(2);
        mark(&b, [3, 40], |_| ());
        let mut merged = Vec::new();
        mark(&b, [3, 4, 40, 41], |slot| merged.push(slot));
        assert_eq!(merged, [3, 40]);
        let mut none = Vec::new();
        mark(&bitmap(2), [3, 40], |slot| none.push(slot));
        assert_eq!(none, Vec::<usize>::new());
    }

    #[test]
    fn a_claim_takes_the_lowest_marked_bits_within_its_mask() {
        let word = AtomicU32::new(0b1011_0110);
        let c = claim(&word, 0b1111_0100, 2);
        assert_eq!(c.got, 0b0001_0100);
        // Bit 6 was not marked: settled too; bits 5 and 7 are still owed.
        assert_eq!(c.settled, 0b0101_0100);
        assert_eq!(word.load(Ordering::Relaxed), 0b1010_0010);
        let nothing = claim(&word, 0b0000_0100, 4);
        assert_eq!(
            nothing,
            Claimed {
                got: 0,
                settled: 0b0100
            }
        );
    }

    #[test]
    fn a_poster_claims_back_only_its_own_marks_and_stops_when_all_are_settled() {
        let b = bitmap(2);
        let slots = [1, 5, 40, 41, 63];
        let mut mine = mark(&b, slots, |_| ());
        // Somebody else's mark, which the poster leaves alone.
        mark(&b, [7], |_| ());
        // A helper claims two of them first.
        let mut helped = Vec::new();
        assert_eq!(claim_any(&b, 2, &mut helped), 2);
        assert_eq!(helped, [1, 5]);
        let mut out = Vec::new();
        assert_eq!(mine.claim(&b, 2, &mut out), 2);
        assert_eq!(mine.claim(&b, 2, &mut out), 1);
        assert_eq!(mine.claim(&b, 2, &mut out), 0);
        assert_eq!(out, [40, 41, 63]);
        // Slot 7 is still owed, to whoever helps next.
        let mut rest = Vec::new();
        assert_eq!(claim_any(&b, 8, &mut rest), 1);
        assert_eq!(rest, [7]);
        assert!(b.iter().all(|w| w.load(Ordering::Relaxed) == 0));
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;

    /// A poster marks three slots and claims them back while a helper
    /// claims from the same bitmap: every slot is claimed exactly once, and
    /// the poster ends only when none is left. (A claim made of a load and
    /// a store instead of the `fetch_and` claims a slot twice here.)
    #[test]
    fn every_mark_is_claimed_exactly_once() {
        loom::model(|| {
            let b: Arc<Vec<AtomicU32>> = Arc::new((0..2).map(|_| AtomicU32::new(0)).collect());
            let helper = {
                let b = Arc::clone(&b);
                loom::thread::spawn(move || {
                    let mut got = Vec::new();
                    claim_any(&b, 2, &mut got);
                    got
                })
            };
            let slots = [3, 33, 34];
            let mut mine = mark(&b, slots, |_| ());
            let mut got = Vec::new();
            while mine.claim(&b, 1, &mut got) > 0 {}
            got.extend(helper.join().unwrap());
            got.sort_unstable();
            assert_eq!(got, slots);
            assert!(b.iter().all(|w| w.load(Ordering::Relaxed) == 0));
        });
    }

    /// A claimer sees what the poster published before its mark.
    #[test]
    fn a_claim_sees_the_result_published_before_the_mark() {
        loom::model(|| {
            let result = Arc::new(AtomicU32::new(0));
            let b: Arc<Vec<AtomicU32>> = Arc::new(vec![AtomicU32::new(0)]);
            let poster = {
                let (result, b) = (Arc::clone(&result), Arc::clone(&b));
                loom::thread::spawn(move || {
                    result.store(1, Ordering::Relaxed);
                    mark(&b, [0], |_| ());
                })
            };
            let mut got = Vec::new();
            if claim_any(&b, 1, &mut got) == 1 {
                assert_eq!(result.load(Ordering::Relaxed), 1);
            }
            poster.join().unwrap();
        });
    }
}
