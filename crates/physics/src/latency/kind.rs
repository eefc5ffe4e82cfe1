//! The latency models by name, as `--latency-model` accepts them.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use super::{BlackboxBasis, FeatureBasis, PhysicsNormalizedBasis, TrainedPhysicsBasis, Unified5Basis};
use crate::hardware::GpuSpec;
use crate::model::ModelConfig;
use blis_engine::scheduler::InstanceConfig;

/// A latency model family.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ModelKind {
    /// Analytical, no coefficients ([`super::Roofline`]).
    Roofline,
    /// Linear in token counts ([`super::Blackbox`]).
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
#[error("unknown latency model `{0}`; allowed: roofline, blackbox, trained-physics, unified-5, physics-normalized")]
pub struct UnknownModelKind(pub String);

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
        }
        assert!("physics".parse::<ModelKind>().is_err());
    }
}
