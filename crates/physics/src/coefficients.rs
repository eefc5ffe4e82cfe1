//! Coefficient sets as data: which latency model, its α and β, and where
//! they came from. Files are YAML (or JSON, which is valid YAML):
//!
//! ```yaml
//! latency_model: trained-physics      # roofline | blackbox | trained-physics | unified-5 | physics-normalized
//! alpha: [15563.2, 777.3, 45.9]       # in the model's documented order
//! beta: [0.152, 0.0, 1.36, ...]
//! provenance:                          # optional; only `hardware` affects the simulation (see CoefficientSet::carry_to)
//!   source: blis fit                   # or e.g. "published: latency-formulas.md §3"
//!   hardware: H100
//!   measured_on: [A100-80GB, H100]     # where that is not just `hardware` (a fit in `hardware`'s terms of runs on other GPUs)
//!   fitted_on: [experiment, ...]
//!   holdout: [experiment, ...]
//!   fitted_at: 2026-03-01
//!   command: blis fit validation/vllm-h100 ...
//!   loss: 4.2                          # E2E MAPE + 0.3 · TTFT MAPE over active training stages, %
//!   train_errors: {e2e_mean_ms: 3.1, ...}     # mean APE per metric over training stages, %
//!   holdout_errors: {e2e_mean_ms: 7.9, ...}
//!   notes: free text
//! ```
//!
//! The sets BLIS ships are compiled in from `data/coefficients/`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use blis_data::DataError;
use blis_engine::latency::{LatencyModel, QueueingInput, StepBatch};
use blis_engine::scheduler::InstanceConfig;
use serde::{Deserialize, Serialize};

use crate::catalog;
use crate::hardware::{Carry, GpuSpec, KernelEfficiency};
use crate::latency::trained_physics::{PUBLISHED_ALPHA_LEN, PUBLISHED_BETA_LEN};
use crate::latency::{FeatureBasis, ModelKind, Roofline, TrainedPhysics};
use crate::model::ModelConfig;

/// The kernel efficiencies of `gpu`: its own, else those of the bundled GPU
/// of its name (a vendor datasheet of a bundled GPU carries none), as
/// [`catalog::completed`] fills them in.
pub fn kernels_of(gpu: &GpuSpec) -> Option<KernelEfficiency> {
    catalog::completed(gpu.clone()).kernels
}

/// The β of fixed kernel costs (per layer, per tensor-parallel collective;
/// [`FeatureBasis::beta_names`](blis_engine::latency::FeatureBasis::beta_names)),
/// scaled by the per-layer overhead ratio when a set is carried to another GPU.
const FIXED_COST_BETAS: [&str; 2] = ["per_layer_us", "allreduce_call_us"];

/// A feature basis as a set carried to another GPU sees it
/// ([`CoefficientSet::basis`]): each β's feature times that β's carry factor
/// (the per-layer overhead ratio for [`FIXED_COST_BETAS`], else 1), and each
/// β times its factor in the model, so that features · β is the carried
/// model's step time for fitting and simulating alike.
struct CarriedBasis {
    inner: Box<dyn FeatureBasis>,
    /// Factor of each β, in [`FeatureBasis::beta_names`] order.
    scale: Vec<f64>,
}

impl FeatureBasis for CarriedBasis {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn alpha_names(&self) -> &'static [&'static str] {
        self.inner.alpha_names()
    }
    fn beta_names(&self) -> &'static [&'static str] {
        self.inner.beta_names()
    }
    fn step_features(&self, batch: &StepBatch<'_>, out: &mut [f64]) {
        self.inner.step_features(batch, out);
        out.iter_mut().zip(&self.scale).for_each(|(f, s)| *f *= s);
    }
    fn alpha_features(&self, arrival: &QueueingInput, output_tokens: u32, ttft: &mut [f64], e2e: &mut [f64]) {
        self.inner.alpha_features(arrival, output_tokens, ttft, e2e);
    }
    fn alpha_queueing_features(&self, arrival: &QueueingInput, out: &mut [f64]) -> bool {
        self.inner.alpha_queueing_features(arrival, out)
    }
    /// The trait's checks (on the coefficients as given) come first.
    fn with_coefficients_unchecked(&self, alpha: &[f64], beta: &[f64]) -> Arc<dyn LatencyModel> {
        let carried: Vec<f64> = beta.iter().zip(&self.scale).map(|(b, s)| b * s).collect();
        self.inner.with_coefficients_unchecked(alpha, &carried)
    }
}

/// Where a coefficient set came from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// "blis fit", or the publication the numbers come from.
    #[serde(default)]
    pub source: String,
    /// GPU the data was measured on: the set prices work in its terms, and
    /// is carried to any other ([`CoefficientSet::carry_to`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<String>,
    /// The GPUs the fit's runs were measured on, where that is not just
    /// `hardware` (runs on other GPUs, fitted in `hardware`'s terms through
    /// their kernel efficiencies): what the set was fitted on rather than
    /// extrapolates to. Empty: `hardware`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measured_on: Vec<String>,
    /// Experiments the set was fitted on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fitted_on: Vec<String>,
    /// Experiments held out of the fit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holdout: Vec<String>,
    /// Date of the fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fitted_at: Option<String>,
    /// The command that produced the set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Final loss, E2E MAPE + 0.3 · TTFT MAPE over active training stages (%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// Mean APE per metric over training stages (%).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub train_errors: BTreeMap<String, f64>,
    /// Mean APE per metric over held-out stages (%).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub holdout_errors: BTreeMap<String, f64>,
    /// Anything else worth knowing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
}

/// A latency model and its coefficients.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoefficientSet {
    /// The model family (written by its `--latency-model` name).
    pub latency_model: ModelKind,
    /// α, in the model's order.
    #[serde(default)]
    pub alpha: Vec<f64>,
    /// β, in the model's order.
    #[serde(default)]
    pub beta: Vec<f64>,
    /// Where they came from.
    #[serde(default)]
    pub provenance: Provenance,
}

/// A coefficient set BLIS ships.
#[derive(Copy, Clone, Debug)]
pub struct BundledSet {
    /// Name (the file stem under `data/coefficients/`).
    pub name: &'static str,
    /// File text.
    pub text: &'static str,
}

macro_rules! bundled {
    ($($name:literal),* $(,)?) => {
        &[$(BundledSet { name: $name, text: include_str!(concat!("../../../data/coefficients/", $name, ".yaml")) }),*]
    };
}

/// Every bundled set.
pub const BUNDLED: &[BundledSet] =
    bundled!["trained-physics-h100", "unified-5-h100", "physics-normalized-h100", "trained-physics-published", "unified-5-published",];

/// The set `blis run` and `blis validate` use when told nothing: the one that
/// validates best on `validation/vllm-h100` (see `validation/REPORT.md`).
pub const DEFAULT_SET: &str = "trained-physics-h100";

impl CoefficientSet {
    /// Parses YAML or JSON text; `origin` names the source in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<CoefficientSet, DataError> {
        let mut set: CoefficientSet =
            blis_data::yaml::from_str(text).map_err(|e| DataError::Format { path: origin.to_path_buf(), message: e.to_string() })?;
        set.widen_published_layout(origin)?;
        Ok(set)
    }

    /// Reads a trained-physics set's β and α in the published formula's
    /// layout (eleven β: collectives per HBM byte and no βcall; three α: no
    /// queueing per running request) as BLIS's ([`TrainedPhysics::beta_from_published_layout`],
    /// [`TrainedPhysics::alpha_from_published_layout`]); any other vector,
    /// or another model's, is left as it is, so reading twice changes
    /// nothing. `origin` names the source in errors.
    pub fn widen_published_layout(&mut self, origin: &Path) -> Result<(), DataError> {
        if self.latency_model != ModelKind::TrainedPhysics {
            return Ok(());
        }
        if let Ok(published) = <[f64; PUBLISHED_BETA_LEN]>::try_from(self.beta.as_slice()) {
            self.beta = TrainedPhysics::beta_from_published_layout(&published, &self.published_layout_gpu(origin)?).to_vec();
        }
        if let Ok(published) = <[f64; PUBLISHED_ALPHA_LEN]>::try_from(self.alpha.as_slice()) {
            self.alpha = TrainedPhysics::alpha_from_published_layout(&published).to_vec();
        }
        Ok(())
    }

    /// The GPU an eleven-β trained-physics set (the published formula's
    /// layout) was fitted on, whose all-reduce over HBM bandwidth converts
    /// its β4 and βEP: `provenance.hardware`, the H100 (the published
    /// formula's) when it names none.
    fn published_layout_gpu(&self, origin: &Path) -> Result<GpuSpec, DataError> {
        let name = self.provenance.hardware.as_deref().unwrap_or("H100");
        let gpu = catalog::find_gpu(name).ok_or_else(|| DataError::Format {
            path: origin.to_path_buf(),
            message: format!(
                "field `provenance.hardware`: `{name}` is not a bundled GPU ({}); an eleven-β trained-physics set (the published layout) is converted by its GPU's all-reduce bandwidth",
                catalog::gpu_names()
            ),
        })?;
        Ok(gpu.spec())
    }

    /// Reads a coefficient file.
    pub fn load(path: &Path) -> Result<CoefficientSet, DataError> {
        let text = blis_data::textfile::read(path).map_err(|e| DataError::Io { path: path.to_path_buf(), message: e.to_string() })?;
        CoefficientSet::parse(&text, path)
    }

    /// A bundled set by name.
    pub fn bundled(name: &str) -> Option<CoefficientSet> {
        let b = BUNDLED.iter().find(|b| b.name == name)?;
        // Bundled files are parsed by a unit test, so this cannot fail at run time.
        Some(CoefficientSet::parse(b.text, Path::new(b.name)).unwrap_or_else(|e| panic!("bundled coefficients {}: {e}", b.name)))
    }

    /// The default set ([`DEFAULT_SET`]).
    pub fn default_set() -> CoefficientSet {
        CoefficientSet::bundled(DEFAULT_SET).unwrap_or_else(|| panic!("bundled default {DEFAULT_SET} missing"))
    }

    /// The bundled set for `kind`: the fitted one, else the published one;
    /// `None` for models BLIS ships no coefficients for (blackbox). Roofline
    /// gets an empty set.
    pub fn bundled_for(kind: ModelKind) -> Option<CoefficientSet> {
        if !kind.has_coefficients() {
            return Some(CoefficientSet { latency_model: kind, alpha: vec![], beta: vec![], provenance: Provenance::default() });
        }
        ["h100", "published"].iter().find_map(|suffix| CoefficientSet::bundled(&format!("{}-{suffix}", kind.name())))
    }

    /// The latency model of these coefficients for one deployment; the error
    /// says which coefficient is wrong. A set fitted on one GPU
    /// (`provenance.hardware`) times another as carried there
    /// ([`CoefficientSet::basis`]).
    pub fn latency_model(
        &self,
        model: &ModelConfig,
        gpu: &GpuSpec,
        tp: u32,
        instance: &InstanceConfig,
    ) -> Result<Arc<dyn LatencyModel>, String> {
        let kind = self.latency_model;
        match self.basis(model, gpu, tp, instance)? {
            None if !(self.alpha.is_empty() && self.beta.is_empty()) => Err(format!(
                "{kind} takes no coefficients (it times every step from the GPU's peaks), but alpha has {} and beta {}; leave both out",
                self.alpha.len(),
                self.beta.len()
            )),
            None => Ok(Arc::new(Roofline::new(model, gpu, tp).with_expert_parallel(instance.expert_parallel))),
            Some(basis) => basis.with_coefficients(&self.alpha, &self.beta).map_err(|e| e.to_string()),
        }
    }

    /// The feature basis of this set's model for one deployment, as the set
    /// sees it (`None` for roofline, which has no coefficients). On a GPU
    /// the set was not fitted on, the basis sees the GPU carried there
    /// ([`CoefficientSet::carry_to`]) and scales the fixed kernel costs
    /// (per layer, per collective) by the per-layer overhead ratio. The
    /// GPU comes with the kernel efficiencies [`kernels_of`] gives it, the
    /// same the carry goes by: a datasheet of a bundled GPU prices its
    /// collectives with that GPU's measured all-reduce, not the unmeasured
    /// mean. Features · β are the step time of
    /// [`CoefficientSet::latency_model`], which is what lets `blis fit`
    /// learn one set from runs on several GPUs.
    pub fn basis(
        &self,
        model: &ModelConfig,
        gpu: &GpuSpec,
        tp: u32,
        instance: &InstanceConfig,
    ) -> Result<Option<Box<dyn FeatureBasis>>, String> {
        let kind = self.latency_model;
        let carry = self.carry_to(gpu);
        let resolved = GpuSpec { kernels: kernels_of(gpu), ..gpu.clone() };
        let seen = match carry {
            Some(c) => resolved.carried(c),
            None => resolved,
        };
        let Some(basis) = kind.basis(model, &seen, tp, instance) else { return Ok(None) };
        Ok(Some(match carry {
            Some(c) => {
                let scale = basis.beta_names().iter().map(|name| if FIXED_COST_BETAS.contains(name) { c.per_layer } else { 1.0 }).collect();
                Box::new(CarriedBasis { inner: basis, scale })
            }
            None => basis,
        }))
    }

    /// How this set is carried to `gpu` when it was fitted on another GPU:
    /// the ratios of the two GPUs' measured kernel efficiencies scale the
    /// peaks its β price work against and its fixed kernel costs (per layer,
    /// per collective)
    /// (`docs/fidelity.md`, "Kernel profiles"). A GPU spec without
    /// efficiencies gets those of the bundled GPU of its name, else
    /// [`catalog::unprofiled_kernels`]. `None` (the set is
    /// used as it is) when the set names no bundled GPU with measured
    /// efficiencies, or when the efficiencies are the same.
    pub fn carry_to(&self, gpu: &GpuSpec) -> Option<Carry> {
        let fitted_on = catalog::find_gpu(self.provenance.hardware.as_deref()?)?.spec().kernels?;
        let here = kernels_of(gpu).unwrap_or_else(catalog::unprofiled_kernels);
        let carry = fitted_on.carry_to(&here);
        (carry != Carry { compute: 1.0, memory: 1.0, per_layer: 1.0 }).then_some(carry)
    }

    /// The set as YAML.
    pub fn to_yaml(&self) -> String {
        serde_yaml_ng::to_string(self).unwrap_or_else(|e| panic!("a coefficient set always serialises: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{find_gpu, find_model};

    fn instance() -> InstanceConfig {
        InstanceConfig::basic(128, 2048, 4096, 1000)
    }

    #[test]
    fn every_bundled_set_parses_and_builds_for_every_bundled_model() {
        let gpu = find_gpu("H100").unwrap().spec();
        for b in BUNDLED {
            let set = CoefficientSet::bundled(b.name).unwrap();
            for m in crate::catalog::MODELS {
                let model = ModelConfig::from_hf_json(m.config_json).unwrap();
                set.latency_model(&model, &gpu, 2, &instance()).unwrap_or_else(|e| panic!("{} on {}: {e}", b.name, m.id));
            }
        }
        assert!(CoefficientSet::bundled(DEFAULT_SET).is_some());
        for kind in [ModelKind::Roofline, ModelKind::TrainedPhysics, ModelKind::Unified5, ModelKind::PhysicsNormalized] {
            assert!(CoefficientSet::bundled_for(kind).is_some(), "{kind}");
        }
    }

    #[test]
    fn bad_files_name_the_field() {
        let p = Path::new("c.yaml");
        let e = CoefficientSet::parse("latency_model: nope\nalpha: []\nbeta: []\n", p).unwrap_err();
        assert!(e.to_string().contains("latency_model") && e.to_string().contains("allowed: roofline"), "{e}");
        let e = CoefficientSet::parse("latency_model: unified-5\nalpha: [1, x]\n", p).unwrap_err();
        assert!(e.to_string().contains("alpha"), "{e}");
        let e = CoefficientSet::parse("latency_model: unified-5\nbogus: 1\n", p).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        let set = CoefficientSet::parse("latency_model: unified-5\nalpha: [1, 2]\nbeta: [1, 2, 3, 4, 5]\n", p).unwrap();
        let model = ModelConfig::from_hf_json(find_model("Llama-2-7b-hf").unwrap().config_json).unwrap();
        let e = set.latency_model(&model, &find_gpu("H100").unwrap().spec(), 1, &instance()).err().unwrap();
        assert!(e.contains("3 alpha"), "{e}");
        let json = CoefficientSet::parse(r#"{"latency_model": "roofline"}"#, p).unwrap();
        assert_eq!(json.latency_model, ModelKind::Roofline);
    }

    /// A set fitted on the H100 times an A100 as the same set would with the
    /// A100's peaks scaled by the ratio of measured kernel efficiencies and
    /// β5 and βcall by the ratio of layer overheads; the H100 and a set that names no
    /// GPU are untouched, and a GPU without a profile gets the profiled mean.
    #[test]
    fn a_set_is_carried_to_another_gpu_by_the_ratio_of_kernel_efficiencies() {
        use blis_engine::latency::{BatchEntry, InstanceLoad, StepBatch};
        let set = CoefficientSet::default_set();
        assert_eq!(set.provenance.hardware.as_deref(), Some("H100"));
        let (h100, a100) = (find_gpu("H100").unwrap().spec(), find_gpu("A100-80GB").unwrap().spec());
        let (kh, ka) = (h100.kernels.clone().unwrap(), a100.kernels.clone().unwrap());
        assert_eq!(set.carry_to(&h100), None);
        let carry = set.carry_to(&a100).unwrap();
        assert_eq!(
            carry,
            Carry {
                compute: ka.gemm_compute / kh.gemm_compute,
                memory: ka.gemm_memory / kh.gemm_memory,
                per_layer: ka.layer_overhead_us / kh.layer_overhead_us
            }
        );
        assert!(carry.memory < 1.0 && carry.per_layer > 1.0, "the A100 streams weights less efficiently than the H100: {carry:?}");

        let model = ModelConfig::from_hf_json(find_model("Llama-2-7b-hf").unwrap().config_json).unwrap();
        let entries: Vec<BatchEntry> =
            (0..32).map(|i| BatchEntry { computed_tokens: 500 + i, new_tokens: 1, prompt_tokens: 400 }).collect();
        let batch = StepBatch { entries: &entries, load: InstanceLoad::default(), preempted: 0 };
        let step = |set: &CoefficientSet, gpu: &GpuSpec| set.latency_model(&model, gpu, 2, &instance()).unwrap().step_time(&batch);
        let anonymous = CoefficientSet { provenance: Provenance::default(), ..set.clone() };
        let mut by_hand = anonymous.clone();
        by_hand.beta[4] *= carry.per_layer;
        by_hand.beta[11] *= carry.per_layer;
        assert!(set.beta[11] > 0.0, "the bundled set prices collective calls");
        assert_eq!(step(&set, &a100), step(&by_hand, &a100.carried(carry)));
        assert!(step(&set, &a100) > step(&anonymous, &a100), "carried, the decode step is slower than by the peaks alone");
        assert_eq!(step(&set, &h100), step(&anonymous, &h100));

        let datasheet = GpuSpec { kernels: None, ..a100.clone() };
        assert_eq!(set.carry_to(&datasheet), Some(carry), "a datasheet of a bundled GPU gets its efficiencies");
        assert_eq!(step(&set, &datasheet), step(&set, &a100), "and its measured all-reduce");
        let unprofiled = GpuSpec { kernels: None, name: "NVIDIA B300".into(), ..a100.clone() };
        let mean = crate::catalog::unprofiled_kernels();
        assert_eq!(set.carry_to(&unprofiled).unwrap().memory, mean.gemm_memory / kh.gemm_memory);
        assert_eq!(anonymous.carry_to(&a100), None);
    }

    /// What `blis fit` learns from: the carried basis's features · β are
    /// the carried model's step time, on the GPU the set is in terms of
    /// and on one it is carried to, so a fit on runs on several GPUs
    /// solves for the β the simulation will use. Neither is the uncarried
    /// A100's.
    #[test]
    fn a_carried_basis_prices_a_step_as_the_carried_model_does() {
        use blis_engine::latency::{BatchEntry, InstanceLoad, StepBatch};
        let set = CoefficientSet::default_set();
        let model = ModelConfig::from_hf_json(find_model("Mixtral-8x7B-v0.1").unwrap().config_json).unwrap();
        let entries: Vec<BatchEntry> = (0..40)
            .map(|i| BatchEntry { computed_tokens: 300 + 7 * i, new_tokens: if i < 2 { 200 } else { 1 }, prompt_tokens: 350 })
            .collect();
        let batch = StepBatch { entries: &entries, load: InstanceLoad::default(), preempted: 0 };
        let priced = |set: &CoefficientSet, gpu: &GpuSpec| {
            let basis = set.basis(&model, gpu, 2, &instance()).unwrap().unwrap();
            let mut f = vec![0.0; basis.beta_names().len()];
            basis.step_features(&batch, &mut f);
            let by_features: f64 = f.iter().zip(&set.beta).map(|(f, b)| f * b).sum();
            (by_features, set.latency_model(&model, gpu, 2, &instance()).unwrap().step_time(&batch).as_us() as f64)
        };
        let (h100, a100) = (find_gpu("H100").unwrap().spec(), find_gpu("A100-80GB").unwrap().spec());
        let anonymous = CoefficientSet { provenance: Provenance::default(), ..set.clone() };
        for gpu in [&h100, &a100] {
            let (by_features, simulated) = priced(&set, gpu);
            assert!((by_features - simulated).abs() <= 1.0, "{}: {by_features} µs by features, {simulated} µs simulated", gpu.name);
        }
        let (carried, _) = priced(&set, &a100);
        let (uncarried, _) = priced(&anonymous, &a100);
        assert!(carried > 1.05 * uncarried, "carried {carried} µs, by the A100's peaks alone {uncarried} µs");
    }

    /// A trained-physics file with the published formula's eleven β prices
    /// no tensor-parallel collective calls, and its β4 and βEP, per HBM
    /// byte, become per bus byte of its GPU's all-reduce: on that GPU it
    /// times every step as the published formula does. Its three α leave
    /// the queueing delay flat in the running batch.
    #[test]
    fn a_trained_physics_set_in_the_published_layout_is_converted_to_blis_basis() {
        let published = CoefficientSet::bundled("trained-physics-published").unwrap();
        let text = include_str!("../../../data/coefficients/trained-physics-published.yaml");
        let file: CoefficientSet = blis_data::yaml::from_str(text).unwrap();
        assert_eq!(file.beta.len(), 11, "the file is the published layout");
        assert_eq!(published.beta.len(), 12);
        let h100 = find_gpu("H100").unwrap().spec();
        let per_bus_byte = h100.allreduce_bus_bytes_per_s(4) / h100.hbm_bytes_per_s();
        assert!(per_bus_byte > 0.15 && per_bus_byte < 0.25, "{per_bus_byte}");
        for (i, (got, was)) in published.beta.iter().zip(&file.beta).enumerate() {
            let want = if i == 3 || i == 10 { was * per_bus_byte } else { *was };
            assert!((got - want).abs() <= 1e-15 * want.abs(), "β{i}: {got} vs {want}");
        }
        assert_eq!(published.beta[11], 0.0);
        assert_eq!((file.alpha.len(), &published.alpha[..3], published.alpha[3]), (3, &file.alpha[..], 0.0));
        // A GPU the file names converts by its own bandwidths.
        let mut a100_file = file.clone();
        a100_file.provenance.hardware = Some("A100-80GB".into());
        let a100 = find_gpu("A100-80GB").unwrap().spec();
        let a100_set = CoefficientSet::parse(&a100_file.to_yaml(), Path::new("a100.yaml")).unwrap();
        assert!((a100_set.beta[3] - file.beta[3] * a100.allreduce_bus_bytes_per_s(2) / a100.hbm_bytes_per_s()).abs() < 1e-12);
        a100_file.provenance.hardware = Some("TPU v9".into());
        let e = CoefficientSet::parse(&a100_file.to_yaml(), Path::new("tpu.yaml")).unwrap_err().to_string();
        assert!(e.contains("tpu.yaml") && e.contains("provenance.hardware") && e.contains("TPU v9"), "{e}");
        let mut ten = file;
        ten.beta.truncate(10);
        let model = ModelConfig::from_hf_json(find_model("Llama-2-7b-hf").unwrap().config_json).unwrap();
        let e = CoefficientSet::parse(&ten.to_yaml(), Path::new("ten.yaml")).unwrap().latency_model(
            &model,
            &find_gpu("H100").unwrap().spec(),
            1,
            &instance(),
        );
        assert!(e.is_err_and(|e| e.contains("12") && e.contains("10")), "only the published length is read as the old layout");
    }

    #[test]
    fn yaml_round_trips() {
        let set = CoefficientSet::bundled("trained-physics-published").unwrap();
        assert_eq!(CoefficientSet::parse(&set.to_yaml(), Path::new("x")).unwrap(), set);
    }
}
