//! A validation suite: experiments loaded once, then simulated in parallel
//! (one experiment per task; each simulation stays single-threaded and
//! deterministic, so results do not depend on the number of threads).

use std::path::PathBuf;
use std::sync::Arc;

use blis_engine::latency::LatencyModel;
use rayon::prelude::*;

use crate::coefficients::CoefficientSet;
use crate::compare::ExperimentComparison;
use crate::error::ExperimentError;
use crate::experiment::{Experiment, discover};
use crate::reproduce::{Definitions, NoObserver, Setup, simulate};

/// An experiment with its resolved deployment.
#[derive(Clone, Debug)]
pub struct Case {
    /// The measurements.
    pub experiment: Experiment,
    /// The deployment and workload constants.
    pub setup: Setup,
}

impl Case {
    /// `set`'s latency model for this case's model, GPU, tp and server knobs.
    pub fn latency(&self, set: &CoefficientSet) -> Result<Arc<dyn LatencyModel>, ExperimentError> {
        let s = &self.setup;
        set.latency_model(&s.model, &s.gpu, s.tp, &s.instance)
            .map_err(|message| ExperimentError::Unreproducible { path: self.experiment.dir.clone(), message })
    }
}

/// Experiments of a suite, in path order.
#[derive(Clone, Debug, Default)]
pub struct Suite {
    /// The cases.
    pub cases: Vec<Case>,
}

impl Suite {
    /// Loads every experiment at or below each path (in parallel), taking
    /// models and GPUs BLIS does not bundle from `defs`.
    pub fn load(paths: &[PathBuf], defs: &Definitions) -> Result<Suite, ExperimentError> {
        let mut dirs = Vec::new();
        for p in paths {
            dirs.extend(discover(p)?);
        }
        dirs.sort();
        dirs.dedup();
        let cases = dirs
            .par_iter()
            .map(|d| {
                let experiment = Experiment::load(d)?;
                let setup = Setup::of(&experiment, defs)?;
                Ok(Case { experiment, setup })
            })
            .collect::<Result<Vec<_>, ExperimentError>>()?;
        Ok(Suite { cases })
    }

    /// Simulates every case with `set` (seeded with `seed`) and compares.
    pub fn validate(&self, set: &CoefficientSet, seed: u64) -> Result<Vec<ExperimentComparison>, ExperimentError> {
        self.cases
            .par_iter()
            .map(|c| {
                let s = &c.setup;
                let sim = simulate(&c.experiment, s, c.latency(set)?, seed, true, &mut NoObserver)?;
                Ok(ExperimentComparison::new(&c.experiment, &s.model_id, s.output_len, &sim))
            })
            .collect()
    }
}
