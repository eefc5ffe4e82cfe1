//! A validation suite: experiments loaded once, then simulated in parallel
//! (one experiment per task; each simulation stays single-threaded and
//! deterministic, so results do not depend on the number of threads).

use std::path::PathBuf;
use std::sync::Arc;

use blis_engine::latency::LatencyModel;
use rayon::prelude::*;

use crate::error::ExperimentError;
use crate::experiment::{Experiment, discover};
use crate::validate::compare::ExperimentComparison;
use crate::validate::reproduce::{Definitions, NoObserver, Setup, simulate};
use blis_physics::coefficients::CoefficientSet;

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
        let s = &self.setup.server;
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
    /// models and GPUs BLIS does not bundle from `defs`. The first
    /// experiment (in path order) that fails to load fails the suite.
    pub fn load(paths: &[PathBuf], defs: &Definitions) -> Result<Suite, ExperimentError> {
        let (suite, failed) = Suite::load_each(paths, defs)?;
        all_or_first_error(suite, failed)
    }

    /// Like [`Suite::load`], but an experiment that fails to load is set
    /// aside with its error (in path order) instead of failing the suite, so
    /// one broken directory does not hide the others. Finding no experiment
    /// at all, or a path that cannot be read, is still an error.
    pub fn load_each(paths: &[PathBuf], defs: &Definitions) -> Result<(Suite, Vec<ExperimentError>), ExperimentError> {
        let mut dirs = Vec::new();
        for p in paths {
            dirs.extend(discover(p)?);
        }
        dirs.sort();
        dirs.dedup();
        let (cases, failed) = split(dirs.par_iter().map(|d| {
            let experiment = Experiment::load(d)?;
            let setup = Setup::of(&experiment, defs)?;
            Ok(Case { experiment, setup })
        }));
        Ok((Suite { cases }, failed))
    }

    /// What the user should know about the cases before trusting the
    /// comparison: each experiment's [`Experiment::warnings`], whether its
    /// GPU had to be assumed, whether its KV block count had to be derived,
    /// and block counts its files contradict, in case order.
    pub fn warnings(&self) -> Vec<String> {
        self.cases
            .iter()
            .flat_map(|c| {
                let assumed_gpu = (!c.setup.gpu_named).then(|| {
                    format!(
                        "{}; simulating {}, BLIS's default GPU (record the GPU as `hardware:` in server-facts.yaml, or pass --hardware NAME or --hardware-config PATH)",
                        c.experiment.missing_fact("hardware"),
                        c.setup.server.gpu_name
                    )
                });
                let derived = (!c.setup.blocks_from_server).then(|| {
                    format!(
                        "{}; simulating {} KV blocks derived as vLLM's memory profiler would (the server \
                         log's \"GPU KV cache size\" in tokens over the block size is the real count)",
                        c.experiment.missing_fact("num_gpu_blocks"),
                        c.setup.server.instance.num_gpu_blocks
                    )
                });
                c.experiment.warnings().into_iter().chain(assumed_gpu).chain(derived).chain(c.setup.block_count_notes.iter().cloned())
            })
            .collect()
    }

    /// Simulates every case with `set` (seeded with `seed`) and compares;
    /// the first case that cannot be simulated fails the whole suite.
    pub fn validate(&self, set: &CoefficientSet, seed: u64) -> Result<Vec<ExperimentComparison>, ExperimentError> {
        let (comparisons, failed) = self.validate_each(set, seed);
        all_or_first_error(comparisons, failed)
    }

    /// Simulates every case with `set` (seeded with `seed`) and compares:
    /// the comparisons, and the errors of the cases that could not be
    /// simulated, each in case order.
    pub fn validate_each(&self, set: &CoefficientSet, seed: u64) -> (Vec<ExperimentComparison>, Vec<ExperimentError>) {
        split(self.cases.par_iter().map(|c| {
            let s = &c.setup;
            let sim = simulate(&c.experiment, s, c.latency(set)?, seed, true, &mut NoObserver)?;
            Ok(ExperimentComparison::new(&c.experiment, &s.server.model_name, &sim))
        }))
    }
}

/// Per-experiment results, in order, split into successes and errors.
fn split<T: Send>(results: impl IndexedParallelIterator<Item = Result<T, ExperimentError>>) -> (Vec<T>, Vec<ExperimentError>) {
    let results: Vec<Result<T, ExperimentError>> = results.collect();
    let (mut ok, mut failed) = (Vec::new(), Vec::new());
    for r in results {
        match r {
            Ok(v) => ok.push(v),
            Err(e) => failed.push(e),
        }
    }
    (ok, failed)
}

/// `value` when nothing failed, else the first error.
fn all_or_first_error<T>(value: T, failed: Vec<ExperimentError>) -> Result<T, ExperimentError> {
    match failed.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(value),
    }
}
