//! Reproducing what really ran: the deployment from the server knobs and
//! facts, the workload from inference-perf's configuration (or, when
//! `requests.csv` is present, the exact sends and prompt lengths), and a
//! simulation observed the way the client observed the real run.

use std::sync::Arc;

use blis_data::catalog;
use blis_engine::hardware::{GpuSpec, KvSizing, kv_blocks};
use blis_engine::kv::VLLM_BLOCK_SIZES;
use blis_engine::instance::{Fanout, Instance, Observer};
use blis_engine::latency::LatencyModel;
use blis_engine::model::ModelConfig;
use blis_engine::request::{Request, RequestId, RequestMeta, RequestRecord, output_stream_seed};
use blis_engine::rng::subsystem_seed;
use blis_engine::scheduler::{InstanceConfig, PreemptionVictim, QueuePolicy, SchedulerConfig};
use blis_engine::driver::{Workload, run_single};
use blis_engine::time::Micros;
use blis_workload::concurrency::ConcurrencyGate;
use blis_workload::inference_perf::{StagePrompts, StagedWorkload};

use crate::client::ClientObserver;
use crate::error::ExperimentError;
use crate::experiment::{Experiment, recorded_outputs};

/// vLLM v1's defaults for knobs an experiment does not record (tp is always recorded).
const DEFAULTS: KvSizing = KvSizing::defaults(1);
const DEFAULT_GPU: &str = "H100";
/// Most KV blocks an experiment may declare (10^8 blocks of 16 tokens is far
/// beyond any GPU); bounds memory on absurd input.
const MAX_GPU_BLOCKS: u64 = 100_000_000;
/// Async scheduling when `server-facts.yaml` does not say: vLLM's default
/// since it was turned on by default (vLLM #27614, late 2025).
pub const DEFAULT_ASYNC_SCHEDULING: bool = true;

/// The deployment and workload constants of one experiment, resolved.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Model id (the bundled id when the model is bundled, else as `exp-config.yaml` names it).
    pub model_id: String,
    /// Architecture.
    pub model: ModelConfig,
    /// GPU name (bundled name, or the name in the given spec).
    pub gpu_name: String,
    /// GPU spec.
    pub gpu: GpuSpec,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Server knobs, KV blocks and the client timeout.
    pub instance: InstanceConfig,
    /// Whether the KV block count came from the server (else the memory formula).
    pub blocks_from_server: bool,
    /// Mean prompt length the server saw (successful rows of
    /// `requests.csv`, else the stages' mean prompt lengths), to which the
    /// data generator's prompts are scaled; `None` when nothing recorded it.
    pub measured_prompt_tokens: Option<f64>,
}

/// Model and GPU definitions for experiments BLIS does not bundle: given
/// once for every experiment (`--model-config`, `--hardware-config`).
#[derive(Clone, Debug, Default)]
pub struct Definitions {
    /// Used for every experiment instead of the config of the model its `exp-config.yaml` names.
    pub model: Option<ModelConfig>,
    /// Used for every experiment instead of the GPU its `server-facts.yaml` names.
    pub gpu: Option<GpuSpec>,
}

/// Directory name holding per-model `config.json` files next to experiment
/// directories, as in the ground-truth bundle (`model_configs/<name>/config.json`).
const MODEL_CONFIGS_DIR: &str = "model_configs";
/// How many parent directories of an experiment are searched for [`MODEL_CONFIGS_DIR`].
const MODEL_CONFIGS_SEARCH_DEPTH: usize = 4;

/// The `config.json` of `model_id` (or of its part after the last '/') in a
/// `model_configs/` directory within [`MODEL_CONFIGS_SEARCH_DEPTH`] parents
/// of `dir`, matched case-insensitively: the layout the ground truth ships.
fn find_sibling_model_config(dir: &std::path::Path, model_id: &str) -> Option<std::path::PathBuf> {
    let short = model_id.rsplit('/').next().unwrap_or(model_id);
    dir.ancestors().skip(1).take(MODEL_CONFIGS_SEARCH_DEPTH).find_map(|parent| {
        let mut entries: Vec<_> = std::fs::read_dir(parent.join(MODEL_CONFIGS_DIR)).ok()?.flatten().map(|e| e.path()).collect();
        entries.sort();
        entries.into_iter().find_map(|e| {
            let name = e.file_name()?.to_str()?;
            let config = e.join("config.json");
            (name.eq_ignore_ascii_case(short) && config.is_file()).then_some(config)
        })
    })
}

/// The model of `exp`: `defs.model`, else the bundled config of its model,
/// else a `model_configs/<name>/config.json` near the experiment.
fn resolve_model(exp: &Experiment, defs: &Definitions) -> Result<(String, ModelConfig), String> {
    let id = exp.exp_config.model.as_str();
    if let Some(model) = &defs.model {
        return Ok((id.to_string(), model.clone()));
    }
    if let Some(bundled) = catalog::find_model(id) {
        let model = ModelConfig::from_hf_json(bundled.config_json).map_err(|e| format!("bundled config of {}: {e}", bundled.id))?;
        return Ok((bundled.id.to_string(), model));
    }
    let Some(path) = find_sibling_model_config(&exp.dir, id) else {
        return Err(format!(
            "exp-config.yaml model `{id}` has no bundled config.json and no {MODEL_CONFIGS_DIR}/<name>/config.json was found above \
             the experiment; bundled: {}; or pass --model-config PATH",
            catalog::model_ids()
        ));
    };
    let text = blis_data::textfile::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let model = ModelConfig::from_hf_json(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((id.to_string(), model))
}

/// The GPU of `exp`: `defs.gpu`, else the bundled GPU `server-facts.yaml` names (H100 when silent).
fn resolve_gpu(exp: &Experiment, defs: &Definitions) -> Result<(String, GpuSpec), String> {
    if let Some(gpu) = &defs.gpu {
        return Ok((gpu.name.clone(), gpu.clone()));
    }
    let wanted = exp.facts.hardware.as_deref().unwrap_or(DEFAULT_GPU);
    let gpu = catalog::find_gpu(wanted).ok_or_else(|| {
        format!(
            "server-facts.yaml hardware `{wanted}` is not a bundled GPU; allowed: {}; or pass --hardware-config PATH",
            catalog::gpu_names()
        )
    })?;
    Ok((gpu.name.to_string(), gpu.spec()))
}

impl Setup {
    /// Resolves `exp`'s deployment: server facts over `exp-config.yaml` over
    /// vLLM's defaults; the KV block count from the server when recorded;
    /// the model and GPU as [`Definitions`] and the bundled catalogue say.
    pub fn of(exp: &Experiment, defs: &Definitions) -> Result<Setup, ExperimentError> {
        let unreproducible = |message: String| ExperimentError::Unreproducible { path: exp.dir.clone(), message };
        let (model_id, model) = resolve_model(exp, defs).map_err(unreproducible)?;
        let (gpu_name, gpu_spec) = resolve_gpu(exp, defs).map_err(unreproducible)?;
        let tp = exp.tp();
        model.check_tensor_parallel(tp).map_err(|e| unreproducible(format!("tensor-parallel size {tp} for {model_id}: {e}")))?;
        let f = &exp.facts;
        let c = &exp.exp_config;
        let block_size = f.block_size.unwrap_or(DEFAULTS.block_size_tokens);
        if !VLLM_BLOCK_SIZES.contains(&block_size) {
            return Err(unreproducible(format!("server-facts.yaml block_size = {block_size}: vLLM accepts {VLLM_BLOCK_SIZES:?} tokens")));
        }
        let max_num_seqs = f.max_num_seqs.or(c.max_num_seqs).unwrap_or(DEFAULTS.max_num_seqs);
        let max_num_batched_tokens = f.max_num_batched_tokens.or(c.max_num_batched_tokens).unwrap_or(DEFAULTS.max_num_batched_tokens);
        let (num_gpu_blocks, blocks_from_server) = match f.num_gpu_blocks {
            Some(b) if b > MAX_GPU_BLOCKS => {
                return Err(unreproducible(format!("server-facts.yaml num_gpu_blocks = {b}: at most {MAX_GPU_BLOCKS} are supported")));
            }
            Some(b) => (b, true),
            None => {
                let gpu_memory_utilization = f.gpu_memory_utilization.unwrap_or(DEFAULTS.gpu_memory_utilization);
                let sizing = KvSizing { tp, gpu_memory_utilization, block_size_tokens: block_size, max_num_batched_tokens, max_num_seqs };
                (kv_blocks(&model, &gpu_spec, &sizing).map_err(|e| unreproducible(e.to_string()))?, false)
            }
        };
        let instance = InstanceConfig {
            scheduler: SchedulerConfig {
                max_num_seqs,
                max_num_batched_tokens,
                max_model_len: f.max_model_len.or(c.max_model_len).unwrap_or(model.derived_max_model_len),
                enable_chunked_prefill: f.enable_chunked_prefill.unwrap_or(true),
                long_prefill_token_threshold: 0,
                async_scheduling: f.async_scheduling.unwrap_or(DEFAULT_ASYNC_SCHEDULING),
                queue_policy: QueuePolicy::Fcfs,
                preemption: PreemptionVictim::Tail,
            },
            num_gpu_blocks,
            block_size,
            enable_prefix_caching: f.enable_prefix_caching.unwrap_or(true),
            client_timeout: Some(exp.workload.client_timeout()),
        };
        instance.validate().map_err(|e| unreproducible(format!("server settings (server-facts.yaml over exp-config.yaml): {e}")))?;
        let measured_prompt_tokens = measured_prompt_tokens(exp);
        Ok(Setup { model_id, model, gpu_name, gpu: gpu_spec, tp, instance, blocks_from_server, measured_prompt_tokens })
    }
}

/// Mean prompt length the server saw: over the successful rows of
/// `requests.csv`, else over the stages' mean prompt lengths.
fn measured_prompt_tokens(exp: &Experiment) -> Option<f64> {
    let measured: Vec<f64> = match &exp.requests {
        Some(rows) => rows.iter().filter(|r| r.has_error == 0 && r.input_tokens > 0).map(|r| f64::from(r.input_tokens)).collect(),
        None => exp.stages.iter().filter_map(|s| s.successes.prompt_tokens().map(|p| p.mean)).collect(),
    };
    (!measured.is_empty()).then(|| measured.iter().sum::<f64>() / measured.len() as f64)
}

/// The requests of `requests.csv` as sent: exact send times and prompt
/// lengths; request n of a stage is the data generator's request n (shared
/// prefix: prompt n mod count; random and synthetic: lengths n mod
/// total_count, so `max_tokens` is drawn, not known), and a success whose
/// generated length was recorded generates exactly that. Failed rows record no
/// length; they get the length the same prompt had elsewhere in the run,
/// else the generator's own. Returns the requests (ids in send order) and
/// each one's CSV row.
fn replay(exp: &Experiment, prompts: &StagePrompts, seed: u64) -> (Vec<Request>, Vec<usize>) {
    let rows = exp.requests.as_deref().unwrap_or_default();
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| (rows[i].arrival_time_us, rows[i].index));
    let count = prompts.prompt_cycle();
    let mut in_stage = vec![0u64; exp.stages.len()];
    let positions: Vec<u64> = order
        .iter()
        .map(|&i| {
            let s = rows[i].stage as usize;
            in_stage[s] += 1;
            in_stage[s] - 1
        })
        .collect();
    let mut known_len = vec![None; count as usize];
    for (&i, &n) in order.iter().zip(&positions) {
        if rows[i].input_tokens > 0 {
            known_len[(n % count) as usize].get_or_insert(rows[i].input_tokens);
        }
    }
    let content_seed = subsystem_seed(seed, "replay/outputs");
    let requests = order
        .iter()
        .zip(&positions)
        .enumerate()
        .map(|(id, (&i, &n))| {
            let row = &rows[i];
            let len = if row.input_tokens > 0 { Some(row.input_tokens) } else { known_len[(n % count) as usize] };
            let id = RequestId(id as u64);
            let (prompt, drawn_output) = prompts.nth(n, id, len);
            let max_output_tokens = row.output_tokens.filter(|_| row.has_error == 0).unwrap_or(drawn_output);
            Request {
                id,
                arrival: Micros(row.arrival_time_us),
                prompt,
                max_output_tokens,
                output_seed: output_stream_seed(id, content_seed),
                meta: RequestMeta { stage: row.stage, ..RequestMeta::default() },
            }
        })
        .collect();
    (requests, order)
}

/// Recorded requests, each sent at its recorded time through its stage's
/// concurrency cap (inference-perf's `concurrent` load): when the simulated
/// server still holds every slot, a request goes the moment one frees, as
/// the real client's would have. Without caps, exactly the recorded times.
struct Recorded {
    requests: std::collections::VecDeque<Request>,
    /// Each stage's `concurrency_level` (`None`: a rate stage).
    caps: Vec<Option<u32>>,
    gate: ConcurrencyGate,
}

impl Workload for Recorded {
    fn peek_arrival(&mut self) -> Option<Micros> {
        let next = self.requests.front()?;
        self.gate.set_limit(self.caps.get(next.meta.stage as usize).copied().flatten());
        self.gate.send_time(next.arrival)
    }

    fn next_request(&mut self) -> Option<Request> {
        self.peek_arrival()?;
        let requests = &mut self.requests;
        self.gate.send(requests.front().map(|r| r.arrival), || requests.pop_front())
    }

    fn on_finish(&mut self, record: &RequestRecord) {
        self.gate.on_finish(record.finished);
    }
}

/// The simulated counterpart of an experiment.
#[derive(Clone, Debug)]
pub struct Simulated {
    /// What the client saw.
    pub client: ClientObserver,
    /// For each simulated request id, its row in `requests.csv` (replays only).
    pub csv_row_of: Vec<usize>,
    /// Scheduler steps executed.
    pub steps: u64,
    /// Requests preempted.
    pub preemptions: u64,
    /// Prompt tokens served from the prefix cache / looked up.
    pub prefix_hit_rate: f64,
    /// Mean generated length of a successful request: the recorded lengths'
    /// mean when every success has one, else the mean `max_tokens` of the
    /// data generator (what every request generates with a shared prefix,
    /// the mean of the drawn lengths otherwise). Converts E2E − TTFT into a
    /// per-token time.
    pub mean_output_tokens: f64,
    /// Whether each request's output length is known (recorded, or the same
    /// for every request), so that per-request comparisons with the
    /// recorded requests are like for like.
    pub fixed_output: bool,
}

/// Simulates `exp` on `setup` with `latency`, deterministic in `seed`;
/// `extra` sees every event too (fitting uses it to collect step features);
/// `token_gaps` keeps the inter-token gap distributions.
pub fn simulate(
    exp: &Experiment,
    setup: &Setup,
    latency: Arc<dyn LatencyModel>,
    seed: u64,
    token_gaps: bool,
    extra: &mut dyn Observer,
) -> Result<Simulated, ExperimentError> {
    let instance = Instance::new(0, setup.instance.clone(), latency)
        .map_err(|e| ExperimentError::Unreproducible { path: exp.dir.clone(), message: e.to_string() })?;
    let prompts = StagePrompts::new(&exp.workload.data, setup.measured_prompt_tokens, seed);
    let recorded = exp.requests.as_deref().and_then(recorded_outputs);
    let (mean_output_tokens, fixed_output) = match &recorded {
        Some(outputs) => (outputs.iter().map(|&n| f64::from(n)).sum::<f64>() / outputs.len() as f64, true),
        None => (prompts.mean_output_tokens(), prompts.fixed_output()),
    };
    let (mut workload, csv_row_of, num_requests): (Box<dyn Workload>, Vec<usize>, usize) = match &exp.requests {
        Some(rows) => {
            let (reqs, order) = replay(exp, &prompts, seed);
            let caps = exp.workload.load.stages.iter().map(|s| s.concurrency).collect();
            (Box::new(Recorded { requests: reqs.into(), caps, gate: ConcurrencyGate::new(None) }), order, rows.len())
        }
        None => {
            let n: u64 = exp.workload.load.stages.iter().map(|s| s.num_requests()).sum();
            (Box::new(StagedWorkload::with_prompts(&exp.workload, prompts, seed)), Vec::new(), n as usize)
        }
    };
    let mut client = ClientObserver::new(exp.stages.len(), num_requests, token_gaps);
    let (_, instance) = run_single(instance, workload.as_mut(), None, &mut Fanout::new(vec![&mut client, extra]));
    let stats = instance.stats();
    let prefix_hit_rate = if stats.prefix_query_tokens > 0 { stats.prefix_hit_tokens as f64 / stats.prefix_query_tokens as f64 } else { 0.0 };
    Ok(Simulated { client, csv_row_of, steps: stats.steps, preemptions: stats.preemptions, prefix_hit_rate, mean_output_tokens, fixed_output })
}

/// An observer that ignores everything.
pub struct NoObserver;

impl Observer for NoObserver {
    fn on_finish(&mut self, _record: &RequestRecord) {}
}
