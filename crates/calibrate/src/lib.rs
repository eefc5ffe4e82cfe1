//! # blis-calibrate: BLIS against reality
//!
//! Three parts, one folder each:
//!
//! - [`experiment`]: what a real serving experiment is (an inference-perf
//!   result directory, the server's facts and log, its per-request rows);
//! - [`validate`]: reproducing it in simulation ([`validate::reproduce`]),
//!   observed the way the real client observed it ([`validate::client`]),
//!   compared metric by metric ([`validate::compare`], [`validate::stats`])
//!   and reported ([`validate::report`]);
//! - [`fit`]: learning latency coefficients from the same experiments, in the
//!   file format of `blis_physics::coefficients`.
//!
//! ```text
//!  experiment dir ──► Experiment ──► Setup (model, GPU, knobs, KV blocks, prompt lengths)
//!                                      │  + CoefficientSet ──► LatencyModel
//!                                      ▼
//!                      simulate (replay requests.csv, or inference-perf's stages)
//!                                      │ ClientObserver (inference-perf's view)
//!                                      ▼
//!                      ExperimentComparison ──► tables, CSV, aggregate APE
//! ```
//!
//! Reading order: [`experiment`], [`validate::reproduce`],
//! [`validate::client`], [`validate::compare`], [`validate::suite`],
//! [`validate::report`], [`fit`]. Calibration against a live server (a trace
//! recorded by `blis observe`, replayed by `blis replay`) is
//! [`validate::live`], with the distribution statistics of
//! [`validate::distribution`].
//!
//! ## Example
//!
//! ```no_run
//! use blis_calibrate::{validate::compare::aggregate, validate::suite::Suite};
//! use blis_physics::coefficients::CoefficientSet;
//!
//! let suite = Suite::load(&["validation/vllm-h100".into()], &Default::default()).unwrap();
//! let comparisons = suite.validate(&CoefficientSet::default_set(), 0).unwrap();
//! for a in aggregate(&comparisons) {
//!     println!("{}: mean APE {:.1}%", a.metric.name(), a.mean_ape);
//! }
//! ```

#![warn(missing_docs)]

pub mod error;
pub mod experiment;
pub mod fit;
pub mod validate;
