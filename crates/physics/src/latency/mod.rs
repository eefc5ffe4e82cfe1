//! The latency models BLIS prices steps with, on the kernel's step-time
//! interface ([`blis_engine::latency::LatencyModel`]): analytical
//! ([`Roofline`]), and trained ones, each a [`FeatureBasis`] (features
//! computed from the step and the arrival, physics-normalised by the
//! deployment) plus coefficients; [`ModelKind`] names them for
//! `--latency-model`, builds them and says what each can do. Adding a model
//! means a module here and a `ModelKind` variant; nothing outside this crate
//! changes.

mod basis;
mod blackbox;
mod expert_load;
mod kind;
pub mod moe_tiles;
pub mod physics_normalized;
mod roofline;
pub mod trained_physics;
pub mod unified5;

pub use blackbox::BlackboxBasis;
pub use kind::{FitMethod, ModelKind, Priors, UnknownModelKind};
pub use physics_normalized::{PhysicsNormalized, PhysicsNormalizedBasis};
pub use roofline::Roofline;
pub use trained_physics::{TrainedPhysics, TrainedPhysicsBasis};
pub use unified5::{Unified5, Unified5Basis};

use std::sync::Arc;

use blis_engine::latency::{LatencyModel, MIN_STEP, QueueingInput, StepBatch, overhead_micros, step_micros};
use blis_engine::time::Micros;
use thiserror::Error;

/// β·f rounded by [`step_micros`]: the step time of a model linear in its
/// features. An empty step takes 1 µs without computing them.
pub(crate) fn linear_step_time<const N: usize>(batch: &StepBatch<'_>, beta: &[f64; N], features: impl FnOnce() -> [f64; N]) -> Micros {
    if batch.entries.is_empty() {
        return MIN_STEP;
    }
    step_micros(features().iter().zip(beta).map(|(x, b)| x * b).sum())
}

/// Coefficients that do not fit a model.
#[derive(Debug, Error, PartialEq)]
pub enum CoefficientError {
    /// The vector has the wrong number of entries.
    #[error("{model} needs {expected} {which} coefficients ({names}), got {got}")]
    WrongLength {
        /// Model name.
        model: &'static str,
        /// "alpha" or "beta".
        which: &'static str,
        /// Required count.
        expected: usize,
        /// Given count.
        got: usize,
        /// The coefficient names, comma-separated.
        names: String,
    },
    /// An entry is NaN or infinite.
    #[error("{model} {which} coefficient {index} ({name}) = {value} is not a finite number")]
    NotFinite {
        /// Model name.
        model: &'static str,
        /// "alpha" or "beta".
        which: &'static str,
        /// Position in the vector.
        index: usize,
        /// Its name.
        name: &'static str,
        /// The value.
        value: f64,
    },
}

/// A latency model family that is linear in its coefficients: the step time
/// is β·f(step) and the client-visible offsets of a request's TTFT and E2E
/// are α·u(request). Fitting (`blis fit`) works on any basis through this
/// trait.
///
/// Guarantees expected of implementations: features are finite, computed in
/// O(entries) without allocation, and `with_coefficients` builds a model whose
/// `step_time` of a non-empty batch is `step_micros(β·step_features)`.
pub trait FeatureBasis: Send + Sync {
    /// Model name, as accepted by `--latency-model`.
    fn name(&self) -> &'static str;

    /// Names of the α coefficients, in order.
    fn alpha_names(&self) -> &'static [&'static str];

    /// Names of the β coefficients, in order.
    fn beta_names(&self) -> &'static [&'static str];

    /// Writes the β features of a step into `out` (length = β count).
    fn step_features(&self, batch: &StepBatch<'_>, out: &mut [f64]);

    /// Writes how each α coefficient enters one request's client-side TTFT
    /// and E2E (µs per unit coefficient) given its arrival view and output
    /// length (lengths = α count).
    fn alpha_features(&self, arrival: &QueueingInput, output_tokens: u32, ttft: &mut [f64], e2e: &mut [f64]);

    /// Writes how each α coefficient enters the arrival-to-queue delay alone
    /// (µs per unit coefficient, length = α count) and returns true; false
    /// (and `out` untouched) when the model does not price that delay
    /// separately from the other client-side overheads.
    fn alpha_queueing_features(&self, _arrival: &QueueingInput, _out: &mut [f64]) -> bool {
        false
    }

    /// The model with these coefficients; lengths were checked by the caller.
    fn with_coefficients_unchecked(&self, alpha: &[f64], beta: &[f64]) -> Arc<dyn LatencyModel>;

    /// The model with these coefficients, after checking their count and finiteness.
    fn with_coefficients(&self, alpha: &[f64], beta: &[f64]) -> Result<Arc<dyn LatencyModel>, CoefficientError> {
        for (which, names, values) in [("alpha", self.alpha_names(), alpha), ("beta", self.beta_names(), beta)] {
            if values.len() != names.len() {
                return Err(CoefficientError::WrongLength {
                    model: self.name(),
                    which,
                    expected: names.len(),
                    got: values.len(),
                    names: names.join(", "),
                });
            }
            if let Some((index, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
                return Err(CoefficientError::NotFinite { model: self.name(), which, index, name: names[index], value });
            }
        }
        Ok(self.with_coefficients_unchecked(alpha, beta))
    }
}

/// Copies a checked coefficient slice into a fixed-size array.
pub(crate) fn coefficient_array<const N: usize>(v: &[f64]) -> [f64; N] {
    let mut a = [0.0; N];
    a.copy_from_slice(v);
    a
}
