//! Integration tests of blis-calibrate on the experiments shipped in
//! `validation/vllm-h100`, built into one binary.

mod dataset;
mod drawn;
mod logged;
mod refused;
mod reports;
mod vendored;

use std::path::{Path, PathBuf};

use blis_calibrate::experiment::Experiment;
use blis_calibrate::validate::reproduce::{Definitions, Setup, Simulated, simulate};
use blis_engine::instance::Observer;
use blis_engine::request::RequestRecord;
use blis_physics::coefficients::CoefficientSet;

/// An experiment copied under a scratch directory, removed on drop.
pub struct Copied {
    root: PathBuf,
    /// The copy.
    pub dir: PathBuf,
}

impl Drop for Copied {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A copy of the shipped experiment `source` under a fresh scratch
/// directory (one per call: tests run in parallel and may copy the same
/// variant), keeping its directory name. `place` sees each file's path
/// relative to the experiment (`results/config.yaml`) and its text, and
/// says where to write what (`None`: leave the file out).
pub fn copy_experiment(source: &str, tag: &str, place: impl Fn(&str, String) -> Option<(String, String)>) -> Copied {
    static COPIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let copy = COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../validation/vllm-h100").join(source);
    let root = std::env::temp_dir().join(format!("blis-calibrate-{}-{copy}-{tag}", std::process::id()));
    let dst = root.join(source);
    let results = std::fs::read_dir(src.join("results")).unwrap().map(|e| format!("results/{}", e.unwrap().file_name().to_string_lossy()));
    for rel in ["exp-config.yaml", "server-facts.yaml", "requests.csv"].into_iter().map(String::from).chain(results) {
        if let Some((to, text)) = place(&rel, std::fs::read_to_string(src.join(&rel)).unwrap()) {
            let path: &Path = &dst.join(to);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }
    Copied { root, dir: dst }
}

/// The shipped Llama-2-7B general run, whose data section the `drawn` and
/// `dataset` tests rewrite.
pub const GENERAL: &str = "20260217-231439-llama-2-7b-tp1-general";

/// The data section of [`GENERAL`]'s `results/config.yaml`.
pub const GENERAL_DATA: &str = "  type: shared_prefix
  path: null
  input_distribution: null
  output_distribution: null
  shared_prefix:
    num_groups: 10
    num_prompts_per_group: 10
    system_prompt_len: 100
    question_len: 447
    output_len: 248
";

/// A copy of [`GENERAL`] with its data section replaced by `data`, every
/// other file passed through `edit` (relative path, text; `None` leaves it out).
pub fn copy_general_with_data(tag: &str, data: &str, edit: impl Fn(&str, String) -> Option<String>) -> Copied {
    copy_experiment(GENERAL, tag, |rel, text| match rel {
        "results/config.yaml" => {
            assert!(text.contains(GENERAL_DATA), "the shipped config changed");
            Some((rel.into(), text.replace(GENERAL_DATA, data)))
        }
        _ => edit(rel, text).map(|t| (rel.into(), t)),
    })
}

/// Every finished request's record.
#[derive(Default)]
pub struct Records(Vec<RequestRecord>);

impl Observer for Records {
    fn on_finish(&mut self, record: &RequestRecord) {
        self.0.push(record.clone());
    }
}

/// Loads and simulates the experiment in `dir` with the bundled default
/// coefficients and seed 0: the experiment, the simulation, and every
/// request's record in id order.
pub fn simulate_dir(dir: &Path) -> (Experiment, Simulated, Vec<RequestRecord>) {
    let exp = Experiment::load(dir).unwrap();
    let setup = Setup::of(&exp, &Definitions::default()).unwrap();
    let latency = CoefficientSet::default_set()
        .latency_model(&setup.server.model, &setup.server.gpu, setup.server.tp, &setup.server.instance)
        .unwrap();
    let mut records = Records::default();
    let sim = simulate(&exp, &setup, latency, 0, false, &mut records).unwrap();
    records.0.sort_by_key(|r| r.id);
    (exp, sim, records.0)
}
