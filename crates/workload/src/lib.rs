//! # blis-workload: request streams for BLIS
//!
//! Workloads are lazy, arrival-ordered iterators of [`blis_engine::request::Request`];
//! a run never materialises its requests. Every random draw comes from a
//! stream derived from the workload seed and a subsystem name
//! ([`blis_engine::rng::subsystem_rng`]), so the same seed gives the same
//! requests on every machine.
//!
//! * [`synthetic`]: the flag-driven workload of `blis run` (rate, Poisson or
//!   constant arrivals, fixed or Gaussian lengths, shared prefixes).
//! * [`inference_perf`]: inference-perf's configuration, shared-prefix prompt
//!   set and staged load, as `blis validate` reproduces real runs.

pub mod inference_perf;
pub mod synthetic;
