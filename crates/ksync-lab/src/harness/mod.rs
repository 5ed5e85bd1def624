//! What every experiment runs on, knowing nothing of locks, experiments or
//! output: where threads run ([`affinity`]), threads that must come back
//! within a bound ([`crew`]), clocks and busy work ([`clock`]), the futex
//! calls the lab makes itself ([`futex`]), and the machine a result came
//! from ([`machine`]).

pub mod affinity;
pub mod clock;
pub mod crew;
pub mod futex;
pub mod machine;
