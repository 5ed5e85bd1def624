//! The mutexes of Rust's standard library and of the `spin` crate.

use super::{Data, LabLock, LockKind};

type StdMutex<D> = std::sync::Mutex<D>;
kind!(
    /// `std::sync::Mutex`.
    Std => StdMutex
);

impl<D: Data> LabLock<D> for std::sync::Mutex<D> {
    fn new() -> Self {
        std::sync::Mutex::new(D::default())
    }

    #[inline(always)]
    fn with<T: Send>(&self, f: impl FnOnce(&mut D) -> T + Send) -> T {
        f(&mut self
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

type SpinTas<D> = spin::mutex::SpinMutex<D>;
kind!(
    /// `spin::mutex::SpinMutex`: the `spin` crate's test-and-set lock.
    SpinCrate => SpinTas
);

impl<D: Data> LabLock<D> for spin::mutex::SpinMutex<D> {
    fn new() -> Self {
        spin::mutex::SpinMutex::new(D::default())
    }

    #[inline(always)]
    fn with<T: Send>(&self, f: impl FnOnce(&mut D) -> T + Send) -> T {
        f(&mut self.lock())
    }
}

type SpinTicket<D> = spin::mutex::TicketMutex<D>;
kind!(
    /// `spin::mutex::TicketMutex`: the `spin` crate's ticket lock.
    SpinCrateTicket => SpinTicket
);

impl<D: Data> LabLock<D> for spin::mutex::TicketMutex<D> {
    fn new() -> Self {
        spin::mutex::TicketMutex::new(D::default())
    }

    #[inline(always)]
    fn with<T: Send>(&self, f: impl FnOnce(&mut D) -> T + Send) -> T {
        f(&mut self.lock())
    }
}
