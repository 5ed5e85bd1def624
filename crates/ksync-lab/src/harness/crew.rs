//! Threads a run starts by the hundreds and must get back within a bound.
//!
//! A semaphore experiment parks its sleepers in the primitive under test; a
//! lost wake-up there would leave a thread asleep for ever. [`Crew`] joins
//! its threads only once they have all ended, and otherwise leaves them
//! behind, detached, so that the run fails instead of hanging the lab.
//! [`FirstError`] collects the first failure any of them reports.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Threads that must all end within a bound (see the module documentation).
pub struct Crew<T> {
    handles: Vec<std::thread::JoinHandle<T>>,
    exited: Arc<AtomicUsize>,
}

/// Counts a crew thread's end, also when it unwinds.
struct Exit(Arc<AtomicUsize>);

impl Drop for Exit {
    fn drop(&mut self) {
        // Pairs with the acquire load in `Crew::join_within`: a thread
        // counted as exited has finished writing its result.
        self.0.fetch_add(1, Ordering::Release);
    }
}

impl<T: Send + 'static> Crew<T> {
    pub fn new() -> Self {
        Crew {
            handles: Vec::new(),
            exited: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Starts `f` on a thread called `name` with a stack of `stack` bytes.
    pub fn spawn(
        &mut self,
        name: String,
        stack: usize,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<(), String> {
        let exit = Exit(Arc::clone(&self.exited));
        let handle = std::thread::Builder::new()
            .name(name)
            .stack_size(stack)
            .spawn(move || {
                let _exit = exit;
                f()
            })
            .map_err(|e| {
                format!(
                    "could not create thread {} (after {} others): {e}",
                    self.handles.len(),
                    self.handles.len()
                )
            })?;
        self.handles.push(handle);
        Ok(())
    }

    /// Threads started so far.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// Joins every thread, however long they take: for a forked child,
    /// whose parent bounds its life (`harness::children`) and kills it
    /// rather than leave threads behind.
    pub fn join(self) -> Result<Vec<T>, String> {
        self.handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| "a benchmark thread panicked".to_string())
            })
            .collect()
    }

    /// Joins every thread if all end within `limit`; otherwise detaches
    /// them and says how many are stuck.
    pub fn join_within(self, limit: Duration) -> Result<Vec<T>, String> {
        let deadline = Instant::now() + limit;
        loop {
            // Pairs with the release increment in `Exit::drop`.
            let exited = self.exited.load(Ordering::Acquire);
            if exited >= self.handles.len() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} of {} threads never returned (a lost wake-up?); left behind",
                    self.handles.len() - exited,
                    self.handles.len()
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.join()
    }
}

impl<T: Send + 'static> Default for Crew<T> {
    fn default() -> Self {
        Crew::new()
    }
}

/// The first error any thread of a run reported, with a flag cheap enough
/// to poll in a measured loop.
#[derive(Default)]
pub struct FirstError {
    reported: AtomicBool,
    message: Mutex<Option<String>>,
}

impl FirstError {
    /// Keeps `message` unless an earlier one was reported.
    pub fn set(&self, message: String) {
        self.message
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(message);
        // Pairs with the acquire load in `is_set`.
        self.reported.store(true, Ordering::Release);
    }

    /// Whether any thread has reported an error.
    pub fn is_set(&self) -> bool {
        // Pairs with the release store in `set`.
        self.reported.load(Ordering::Acquire)
    }

    /// The first error, if there was one.
    pub fn take(&self) -> Option<String> {
        self.message
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crew_joins_in_order_or_leaves_stuck_threads_behind() {
        let mut crew = Crew::new();
        for i in 0..4u32 {
            crew.spawn(format!("t{i}"), 64 * 1024, move || i * 10)
                .unwrap();
        }
        assert_eq!(crew.len(), 4);
        assert_eq!(
            crew.join_within(Duration::from_secs(10)).unwrap(),
            [0, 10, 20, 30]
        );
        let gate = Arc::new(AtomicBool::new(false));
        let mut stuck = Crew::new();
        let g = Arc::clone(&gate);
        stuck
            .spawn("stuck".into(), 64 * 1024, move || {
                while !g.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
            .unwrap();
        let err = stuck.join_within(Duration::from_millis(20)).unwrap_err();
        assert!(err.contains("1 of 1 threads never returned"), "{err}");
        gate.store(true, Ordering::Release);
    }

    #[test]
    fn the_first_error_wins() {
        let e = FirstError::default();
        assert!(!e.is_set());
        e.set("first".into());
        e.set("second".into());
        assert!(e.is_set());
        assert_eq!(e.take().as_deref(), Some("first"));
    }
}
