//! # blis-calibrate: BLIS against reality
//!
//! Real serving experiments (inference-perf result directories, see
//! [`experiment`]) are reproduced in simulation ([`reproduce`]), observed the
//! way the real client observed them ([`client`]), compared metric by metric
//! ([`compare`], [`stats`]) and reported ([`report`]). [`fit`] learns latency
//! coefficients from the same experiments, in the file format of
//! `blis_physics::coefficients`.
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
//! Reading order: [`experiment`], [`reproduce`], [`client`], [`compare`],
//! [`suite`], [`report`], [`fit`]. Calibration against a
//! live server (a trace recorded by `blis observe`, replayed by `blis
//! replay`) is [`live`], with the distribution statistics of
//! [`distribution`].
//!
//! ## Example
//!
//! ```no_run
//! use blis_calibrate::{compare::aggregate, suite::Suite};
//! use blis_physics::coefficients::CoefficientSet;
//!
//! let suite = Suite::load(&["validation/vllm-h100".into()], &Default::default()).unwrap();
//! let comparisons = suite.validate(&CoefficientSet::default_set(), 0).unwrap();
//! for a in aggregate(&comparisons) {
//!     println!("{}: mean APE {:.1}%", a.metric.name(), a.mean_ape);
//! }
//! ```

#![warn(missing_docs)]

pub mod client;
pub mod compare;
pub mod distribution;
pub mod error;
pub mod experiment;
pub mod facts;
pub mod fit;
pub mod kernels;
pub mod lengths;
pub mod live;
pub mod normalized;
pub mod observed;
pub mod optimize;
pub mod otel;
pub mod per_request;
pub mod report;
pub mod reproduce;
pub mod requests;
pub mod stats;
pub mod suite;
pub mod vllm_log;
