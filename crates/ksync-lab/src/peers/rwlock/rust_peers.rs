//! The reader-writer locks of Rust's standard library and of the `spin`
//! crate.

use super::LabRwLock;

impl LabRwLock for std::sync::RwLock<u64> {
    fn new() -> Self {
        std::sync::RwLock::new(0)
    }
    #[inline(always)]
    fn read<T>(&self, f: impl FnOnce(&u64) -> T) -> T {
        f(&self
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
    #[inline(always)]
    fn write<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        f(&mut self
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// `spin::rwlock::RwLock`: the `spin` crate's reader-preferring spinning
/// reader-writer lock.
impl LabRwLock for spin::rwlock::RwLock<u64> {
    fn new() -> Self {
        spin::rwlock::RwLock::new(0)
    }
    #[inline(always)]
    fn read<T>(&self, f: impl FnOnce(&u64) -> T) -> T {
        f(&self.read())
    }
    #[inline(always)]
    fn write<T>(&self, f: impl FnOnce(&mut u64) -> T) -> T {
        f(&mut self.write())
    }
}
