//! What every experiment runs on, knowing nothing of locks, experiments or
//! output: where threads run ([`affinity`]), threads that must come back
//! within a bound ([`crew`]), processes forked for a run and reaped on every
//! path ([`children`]), memory they share with it ([`shared_mem`]), clocks
//! and busy work ([`clock`]), the futex calls the lab makes itself
//! ([`futex`]), the machine a result came from ([`machine`]) and how long
//! a cache line takes between two of its CPUs ([`line_trip`]), and the
//! process's CPU time and context switches ([`rusage`]).

pub mod affinity;
pub mod children;
pub mod clock;
pub mod crew;
pub mod futex;
pub mod line_trip;
pub mod machine;
pub mod rusage;
pub mod shared_mem;
