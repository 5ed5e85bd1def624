//! Reader-writer semaphores.
