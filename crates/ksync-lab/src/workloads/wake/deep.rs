//! Kenneth Chen's deep wait list ("ipc semaphore optimization", LKML, June
//! 2003): one semaphore; `heads` sleepers queue first, each wanting
//! `-1000`, which never succeeds because the value never exceeds 1; behind
//! them `later` sleepers each want `-1` and queue again as soon as they
//! complete. A poster repeatedly posts (`semop +1`, or `SETVAL 1` as Chen's
//! profile suggests the database did) whenever the value is 0; each post
//! completes one later sleeper while the heads stay blocked. A *cycle* is
//! one post and the `-1` it completes. The 2.4 kernel woke the later
//! sleeper to retry and rescanned from the head each time; the 2.6 kernel
//! (and ksync) completes it in the waker's scan.

use super::{await_waiters, QUEUE_TIMEOUT, SLEEPER_STACK};
use crate::harness::crew::{Crew, FirstError};
use crate::peers::sem::{SemBackend, SemError, SemVisitor, SetCounters};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the deep-list heads want: more than the value ever reaches.
pub const HEAD_WANTS: i16 = 1000;
/// How the deep experiment's poster posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Post {
    Semop,
    SetVal,
}

impl Post {
    /// How options and records name it.
    pub fn name(self) -> &'static str {
        match self {
            Post::Semop => "semop",
            Post::SetVal => "setval",
        }
    }
}

/// One deep-list point.
#[derive(Debug, Clone)]
pub struct DeepOutcome {
    pub post: Post,
    pub heads: usize,
    pub later: usize,
    pub cycles: u64,
    pub elapsed: Duration,
    pub counters: Option<SetCounters>,
}

impl DeepOutcome {
    pub fn ns_per_cycle(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.cycles.max(1) as f64
    }
}

/// What the deep experiment's threads share.
struct DeepShared<B> {
    set: B,
    completed: AtomicU64,
    failure: FirstError,
}

/// Runs one point of the deep wait list on backend `B` for `run`.
pub fn deep<B: SemBackend>(
    heads: usize,
    later: usize,
    run: Duration,
    post: Post,
) -> Result<DeepOutcome, String> {
    let head_op = B::op(0, -HEAD_WANTS, false);
    let (down, up) = (B::op(0, -1, false), B::op(0, 1, false));
    let shared = Arc::new(DeepShared {
        set: B::create(1)?,
        completed: AtomicU64::new(0),
        failure: FirstError::default(),
    });
    let mut crew = Crew::new();
    let result = (|| -> Result<DeepOutcome, String> {
        let set = &shared.set;
        for i in 0..heads {
            let sh = Arc::clone(&shared);
            crew.spawn(format!("deep-head-{i}"), SLEEPER_STACK, move || {
                match sh.set.semop(&[head_op]) {
                    Err(SemError::Removed) => {}
                    Ok(()) => sh
                        .failure
                        .set(format!("head sleeper {i} completed its -{HEAD_WANTS}")),
                    Err(e) => sh.failure.set(format!("head sleeper {i}: {e}")),
                }
            })?;
            await_waiters(set, 0, i + 1)?;
        }
        for i in 0..later {
            let sh = Arc::clone(&shared);
            crew.spawn(format!("deep-later-{i}"), SLEEPER_STACK, move || loop {
                match sh.set.semop(&[down]) {
                    Ok(()) => {
                        sh.completed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(SemError::Removed) => break,
                    Err(e) => {
                        sh.failure.set(format!("later sleeper {i}: {e}"));
                        break;
                    }
                }
            })?;
        }
        await_waiters(set, 0, heads + later)?;
        let before = set.counters();
        let done_before = shared.completed.load(Ordering::Relaxed);
        let start = Instant::now();
        while start.elapsed() < run {
            if set.value(0)? == 0 {
                match post {
                    Post::Semop => set.semop(&[up]).map_err(|e| format!("post: {e}"))?,
                    Post::SetVal => set.set_value(0, 1)?,
                }
            } else {
                std::thread::yield_now();
            }
        }
        let elapsed = start.elapsed();
        let cycles = shared.completed.load(Ordering::Relaxed) - done_before;
        let counters = set.counters().zip(before).map(|(a, b)| a.since(b));
        Ok(DeepOutcome {
            post,
            heads,
            later,
            cycles,
            elapsed,
            counters,
        })
    })();
    // Every sleeper leaves with Removed.
    shared.set.remove();
    crew.join_within(QUEUE_TIMEOUT)
        .map_err(|e| format!("after removing the set: {e}"))?;
    let outcome = result?;
    if let Some(e) = shared.failure.take() {
        return Err(e);
    }
    Ok(outcome)
}

/// [`deep`] as a visitor, for a registry entry's backend.
pub struct DeepList {
    pub heads: usize,
    pub later: usize,
    pub run: Duration,
    pub post: Post,
}

impl SemVisitor for DeepList {
    type Out = Result<DeepOutcome, String>;
    fn visit<B: SemBackend>(self) -> Self::Out {
        deep::<B>(self.heads, self.later, self.run, self.post)
    }
}
