//! Validation: a real experiment reproduced in simulation and compared with
//! what was measured.
//!
//! [`reproduce`] builds and runs the simulated twin of an
//! [`Experiment`](crate::experiment::Experiment); [`client`] observes it the
//! way inference-perf observed the real server; [`compare`] and [`stats`]
//! put the two side by side metric by metric; [`suite`] does this for a set
//! of experiments and [`report`] prints it. [`live`] compares a replayed
//! trace recorded from a live server, with the distribution statistics of
//! [`distribution`].

pub mod client;
pub mod compare;
pub mod distribution;
pub mod live;
pub mod report;
pub mod reproduce;
pub mod stats;
pub mod suite;
