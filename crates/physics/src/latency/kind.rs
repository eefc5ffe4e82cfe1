//! The latency models by name, as `--latency-model` accepts them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{BlackboxBasis, FeatureBasis, PhysicsNormalizedBasis, TrainedPhysicsBasis, Unified5Basis};
use crate::hardware::GpuSpec;
use crate::model::ModelConfig;
use blis_engine::scheduler::InstanceConfig;

/// A latency model family: its `--latency-model` name, what it can do
/// (capabilities, so that no caller compares names), its coefficient names
/// and how it is fitted. In files it is written by name.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "&'static str")]
pub enum ModelKind {
    /// Analytical, no coefficients ([`super::Roofline`]).
    Roofline,
    /// Linear in token counts (`blis_engine::latency::Blackbox`).
    Blackbox,
    /// `latency-formulas.md` §3 ([`super::TrainedPhysics`]).
    TrainedPhysics,
    /// `latency-formulas.md` §2 ([`super::Unified5`]).
    Unified5,
    /// `latency-model-research.md` iterations 5–7 ([`super::PhysicsNormalized`]).
    PhysicsNormalized,
}

/// A name that is not a latency model.
#[derive(Debug, Error, PartialEq)]
#[error("unknown latency model `{0}`; allowed: {allowed}", allowed = ModelKind::ALL.map(ModelKind::name).join(", "))]
pub struct UnknownModelKind(pub String);

/// How `blis fit` learns a model's coefficients.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FitMethod {
    /// It has none (roofline).
    Unfitted,
    /// Non-negative least squares on the step features, then a simplex
    /// refinement that keeps every coefficient ≥ 0 (they are times and rates).
    NonNegative,
    /// Ridge regression with a cross-validated λ; coefficients may be negative.
    Ridge,
}

/// What a fit assumes about a model's coefficients before the data.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Priors {
    /// Nothing: the data alone.
    None,
    /// Physical scales: efficiency factors near 1, fixed costs of tens of µs.
    Physical,
    /// Physical scales, with the fixed per-layer and KV costs taken from the
    /// GPU's measured kernel profile where it has one.
    KernelProfiled,
}

impl ModelKind {
    /// Every model, in documentation order.
    pub const ALL: [ModelKind; 5] =
        [ModelKind::Roofline, ModelKind::Blackbox, ModelKind::TrainedPhysics, ModelKind::Unified5, ModelKind::PhysicsNormalized];

    /// The `--latency-model` name.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Roofline => "roofline",
            ModelKind::Blackbox => "blackbox",
            ModelKind::TrainedPhysics => "trained-physics",
            ModelKind::Unified5 => "unified-5",
            ModelKind::PhysicsNormalized => "physics-normalized",
        }
    }

    /// Names of its α coefficients, in order (none for roofline).
    pub fn alpha_names(self) -> &'static [&'static str] {
        match self {
            ModelKind::Roofline => &[],
            ModelKind::Blackbox => &super::blackbox::ALPHA_NAMES,
            ModelKind::TrainedPhysics => &super::trained_physics::ALPHA_NAMES,
            ModelKind::Unified5 => &super::unified5::ALPHA_NAMES,
            ModelKind::PhysicsNormalized => &super::physics_normalized::ALPHA_NAMES,
        }
    }

    /// Names of its β coefficients, in order (none for roofline).
    pub fn beta_names(self) -> &'static [&'static str] {
        match self {
            ModelKind::Roofline => &[],
            ModelKind::Blackbox => &super::blackbox::BETA_NAMES,
            ModelKind::TrainedPhysics => &super::trained_physics::BETA_NAMES,
            ModelKind::Unified5 => &super::unified5::BETA_NAMES,
            ModelKind::PhysicsNormalized => &super::physics_normalized::BETA_NAMES,
        }
    }

    /// Whether it takes coefficients at all (roofline is analytical).
    pub fn has_coefficients(self) -> bool {
        self != ModelKind::Roofline
    }

    /// Whether its coefficients are physical times and rates, which a fit
    /// keeps ≥ 0, so a negative one in a file was not fitted by BLIS.
    pub fn coefficients_are_physical(self) -> bool {
        matches!(self, ModelKind::TrainedPhysics | ModelKind::Unified5)
    }

    /// Whether it prices expert parallelism's all-to-all dispatch
    /// (`--enable-expert-parallel`); the others time such a step as
    /// tensor-parallel.
    pub fn prices_expert_parallelism(self) -> bool {
        matches!(self, ModelKind::TrainedPhysics | ModelKind::Roofline)
    }

    /// How `blis fit` learns its coefficients.
    pub fn fit_method(self) -> FitMethod {
        match self {
            ModelKind::Roofline => FitMethod::Unfitted,
            ModelKind::PhysicsNormalized => FitMethod::Ridge,
            ModelKind::Blackbox | ModelKind::TrainedPhysics | ModelKind::Unified5 => FitMethod::NonNegative,
        }
    }

    /// What its fit assumes before the data.
    pub fn priors(self) -> Priors {
        match self {
            ModelKind::TrainedPhysics => Priors::KernelProfiled,
            ModelKind::Unified5 => Priors::Physical,
            ModelKind::Roofline | ModelKind::Blackbox | ModelKind::PhysicsNormalized => Priors::None,
        }
    }

    /// The feature basis of a trained model for one deployment; `None` for
    /// the roofline model, which has no coefficients.
    pub fn basis(self, model: &ModelConfig, gpu: &GpuSpec, tp: u32, instance: &InstanceConfig) -> Option<Box<dyn FeatureBasis>> {
        match self {
            ModelKind::Roofline => None,
            ModelKind::Blackbox => Some(Box::new(BlackboxBasis)),
            ModelKind::TrainedPhysics => {
                Some(Box::new(TrainedPhysicsBasis::new(model, gpu, tp).with_expert_parallel(instance.expert_parallel)))
            }
            ModelKind::Unified5 => Some(Box::new(Unified5Basis::new(model, gpu, tp))),
            ModelKind::PhysicsNormalized => Some(Box::new(PhysicsNormalizedBasis::new(model, gpu, tp, instance))),
        }
    }
}

impl FromStr for ModelKind {
    type Err = UnknownModelKind;

    fn from_str(s: &str) -> Result<ModelKind, UnknownModelKind> {
        ModelKind::ALL.into_iter().find(|k| k.name() == s.trim()).ok_or_else(|| UnknownModelKind(s.to_string()))
    }
}

impl TryFrom<String> for ModelKind {
    type Error = UnknownModelKind;

    fn try_from(s: String) -> Result<ModelKind, UnknownModelKind> {
        s.parse()
    }
}

impl From<ModelKind> for &'static str {
    fn from(k: ModelKind) -> &'static str {
        k.name()
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in ModelKind::ALL {
            assert_eq!(k.name().parse::<ModelKind>(), Ok(k));
            assert_eq!(serde_json::to_value(k).unwrap(), k.name());
            assert_eq!(serde_json::from_value::<ModelKind>(serde_json::json!(k.name())).unwrap(), k);
        }
        assert!("physics".parse::<ModelKind>().is_err());
        let e = serde_json::from_value::<ModelKind>(serde_json::json!("physics")).unwrap_err().to_string();
        assert!(e.contains("unknown latency model `physics`; allowed: roofline, blackbox"), "{e}");
    }

    /// The names a kind lists are its basis's, in order, for every deployment.
    #[test]
    fn coefficient_names_are_the_bases() {
        use crate::catalog::{find_gpu, find_model};
        let model = ModelConfig::from_hf_json(find_model("Mixtral-8x7B-v0.1").unwrap().config_json).unwrap();
        let gpu = find_gpu("H100").unwrap().spec();
        let instance = InstanceConfig::basic(256, 8192, 4096, 1000);
        for k in ModelKind::ALL {
            match k.basis(&model, &gpu, 2, &instance) {
                Some(b) => {
                    assert_eq!((b.alpha_names(), b.beta_names()), (k.alpha_names(), k.beta_names()), "{k}");
                    assert_eq!(b.name(), k.name());
                    assert!(k.has_coefficients() && k.fit_method() != FitMethod::Unfitted);
                }
                None => assert!(!k.has_coefficients() && k.fit_method() == FitMethod::Unfitted && k.beta_names().is_empty()),
            }
        }
    }
}
