//! Reproducing what really ran: the deployment from the server facts and
//! `exp-config.yaml`, resolved by the same rules as `blis run`
//! ([`blis_scenario::deployment::Server::resolve`]); the workload from
//! inference-perf's configuration (or, when requests were recorded, the
//! exact sends and prompt lengths) through the same entry point
//! ([`blis_workload::open`]); and a simulation observed the way the client
//! observed the real run.

use std::path::PathBuf;
use std::sync::Arc;

use blis_engine::instance::Observer;
use blis_engine::latency::LatencyModel;
use blis_engine::request::RequestRecord;
use blis_physics::catalog;
use blis_scenario::deployment::{Deployment, LongContext, Server};
use blis_scenario::knob_file::FileOrigins;
use blis_scenario::knobs::{KnobValues, Knobs, Source};
use blis_scenario::{Outputs, ResolvedScenario};
use blis_workload::inference_perf::{MeasuredLengths, RecordedSend, Reproduction};
use blis_workload::{OpenOptions, WorkloadInput};

use crate::error::ExperimentError;
use crate::experiment::facts::MAX_GPU_BLOCKS;
use crate::experiment::requests::RequestRow;
use crate::experiment::{CpuOffloadFact, Experiment, ServerFacts};
use crate::validate::client::ClientObserver;

/// The deployment and workload constants of one experiment, resolved.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The server: model (the bundled id when bundled, else as
    /// `exp-config.yaml` names it), GPU, knobs, KV blocks and the client timeout.
    pub server: Server,
    /// Whether the KV block count came from the server (else the memory formula).
    pub blocks_from_server: bool,
    /// Whether the GPU was named (`server-facts.yaml`'s `hardware`, or
    /// `--hardware-config`), else the default GPU was assumed.
    pub gpu_named: bool,
    /// Engine replicas of the server (`--data-parallel-size`), each a copy
    /// of `server`'s instance behind vLLM's load balancer.
    pub data_parallel_size: u32,
    /// Where a file gives both the server's KV block count and the cache
    /// size it logged (`kv_cache_tokens`) and the two disagree by more
    /// than a block (one group's reading, [`crate::experiment::facts::one_group_blocks`];
    /// a model whose cache vLLM groups is read from the size instead): one
    /// line each, naming the file and both counts.
    pub block_count_notes: Vec<String>,
    /// What the run's records say of its lengths
    /// ([`Experiment::measured_lengths`]): the mean prompt length the
    /// server saw, to which the data generator's prompts are scaled, and a
    /// dataset run's length distributions.
    pub measured: MeasuredLengths,
}

/// Model and GPU definitions for experiments BLIS does not bundle: given
/// once for every experiment (`--model-config`, `--hardware-config`).
#[derive(Clone, Debug, Default)]
pub struct Definitions {
    /// A HuggingFace `config.json` used for every experiment instead of the
    /// config of the model its `exp-config.yaml` names.
    pub model: Option<PathBuf>,
    /// A GPU spec used for every experiment instead of the GPU its `server-facts.yaml` names.
    pub gpu: Option<PathBuf>,
    /// A bundled GPU's name, used for every experiment instead of the GPU its facts name.
    pub gpu_name: Option<String>,
    /// CPU KV tier (GiB, `--kv-offloading-size`) given to every experiment
    /// whose `server-facts.yaml` says `cpu_offload: true` or `unknown`.
    pub kv_offloading_size: Option<f64>,
    /// What compiling one fused-MoE kernel specialization stalls every
    /// experiment's server (`--moe-kernel-compile`, a duration); `None`: the
    /// measured default.
    pub moe_kernel_compile: Option<String>,
}

/// Directory name holding per-model `config.json` files next to experiment
/// directories, as in the ground-truth bundle (`model_configs/<name>/config.json`).
const MODEL_CONFIGS_DIR: &str = "model_configs";
/// How many parent directories of an experiment are searched for [`MODEL_CONFIGS_DIR`].
const MODEL_CONFIGS_SEARCH_DEPTH: usize = 4;

/// The `config.json` of `model_id` (or of its part after the last '/') in a
/// `model_configs/` directory within [`MODEL_CONFIGS_SEARCH_DEPTH`] parents
/// of `dir`, matched case-insensitively, under the model's name or its
/// current one ([`catalog::current_model_name`]) or one of `also` (what a
/// `normalized.json` names it): the layout the ground truth ships.
fn find_sibling_model_config(dir: &std::path::Path, model_id: &str, also: &[String]) -> Option<PathBuf> {
    let short = |id: &str| id.rsplit('/').next().unwrap_or(id).to_string();
    let names: Vec<String> =
        [short(model_id), short(&catalog::current_model_name(model_id))].into_iter().chain(also.iter().cloned()).collect();
    dir.ancestors().skip(1).take(MODEL_CONFIGS_SEARCH_DEPTH).find_map(|parent| {
        let mut entries: Vec<_> = std::fs::read_dir(parent.join(MODEL_CONFIGS_DIR)).ok()?.flatten().map(|e| e.path()).collect();
        entries.sort();
        entries.into_iter().find_map(|e| {
            let name = e.file_name()?.to_str()?;
            let config = e.join("config.json");
            (names.iter().any(|n| name.eq_ignore_ascii_case(n)) && config.is_file()).then_some(config)
        })
    })
}

/// The experiment's knobs, as layers: the command line's definitions, then
/// `server-facts.yaml`, then the server log, then `exp-config.yaml`, then
/// what a server recorded without saying ran with; each layer with how
/// errors name it.
fn layers(exp: &Experiment, defs: &Definitions) -> Result<Vec<(KnobValues, Source, String)>, String> {
    let id = exp.exp_config.model.as_str();
    let model_config = match &defs.model {
        Some(path) => Some(path.clone()),
        None if catalog::find_model(id).is_some() => None,
        None => Some(find_sibling_model_config(&exp.dir, id, exp.normalized.as_ref().map_or(&[], |n| &n.model_config_dirs)).ok_or_else(
            || {
                format!(
                    "{} `{id}` has no bundled config.json and no {MODEL_CONFIGS_DIR}/<name>/config.json was found above \
                 the experiment; bundled: {}; or pass --model-config PATH",
                    exp.model_from.describe(),
                    catalog::model_ids()
                )
            },
        )?),
    };
    let kv_offloading_size = defs.kv_offloading_size.filter(|_| exp.fact(|f| f.cpu_offload).is_some_and(CpuOffloadFact::may_be_on));
    let given = KnobValues {
        model_config,
        hardware_config: defs.gpu.clone(),
        hardware: defs.gpu_name.clone(),
        kv_offloading_size,
        moe_kernel_compile: defs.moe_kernel_compile.clone(),
        ..KnobValues::default()
    };
    let blocks = |f: &ServerFacts| f.num_gpu_blocks;
    if let Some(b) = exp.fact(blocks).filter(|&b| b > MAX_GPU_BLOCKS) {
        return Err(format!("{} num_gpu_blocks = {b}: at most {MAX_GPU_BLOCKS} are supported", exp.fact_file(blocks)));
    }
    let c = &exp.exp_config;
    let exp_config = KnobValues {
        model: Some(c.model.clone()),
        tp: exp.exp_config_tp(),
        max_model_len: c.max_model_len,
        max_num_batched_tokens: c.max_num_batched_tokens,
        max_num_seqs: c.max_num_seqs,
        ..KnobValues::default()
    };
    let facts = exp.fact_sources().map(|(f, file)| (fact_knobs(f), Source::File, file.to_string()));
    Ok(std::iter::once((given, Source::Flag, String::new()))
        .chain(facts)
        .chain([(exp_config, Source::File, exp.model_from.file().into())])
        .collect())
}

/// The knobs a server's facts set.
fn fact_knobs(f: &ServerFacts) -> KnobValues {
    KnobValues {
        hardware: f.hardware.clone(),
        tp: f.tensor_parallel_size,
        data_parallel_size: f.data_parallel_size,
        num_gpu_blocks: f.num_gpu_blocks,
        block_size: f.block_size,
        kv_cache_dtype: f.kv_cache_dtype.clone(),
        quantization: f.quantization.clone(),
        gpu_memory_utilization: f.gpu_memory_utilization,
        enable_prefix_caching: f.enable_prefix_caching,
        enable_chunked_prefill: f.enable_chunked_prefill,
        async_scheduling: f.async_scheduling,
        enable_expert_parallel: f.enable_expert_parallel,
        max_num_seqs: f.max_num_seqs,
        max_num_batched_tokens: f.max_num_batched_tokens,
        max_model_len: f.max_model_len,
        ..KnobValues::default()
    }
}

/// [`Setup::block_count_notes`]: none for a server whose KV cache vLLM
/// groups (its logged size is the grouped pool's, read instead).
fn block_count_notes(exp: &Experiment, server: &Server) -> Vec<String> {
    if server.instance.hybrid_kv.is_some() {
        return Vec::new();
    }
    let (block_size, len) = (server.instance.block_size, server.instance.scheduler.max_model_len);
    exp.fact_sources()
        .filter_map(|(f, file)| {
            let (tokens, blocks) = (f.kv_cache_tokens?, f.num_gpu_blocks?);
            let read = crate::experiment::facts::one_group_blocks(tokens, block_size, Some(len));
            (read.abs_diff(blocks) > 1).then(|| {
                format!(
                    "{}: {file} num_gpu_blocks = {blocks} but its kv_cache_tokens = {tokens} are {read} blocks of {block_size} tokens; simulating {} blocks",
                    exp.dir.display(),
                    server.instance.num_gpu_blocks
                )
            })
        })
        .collect()
}

impl Setup {
    /// Resolves `exp`'s deployment: server facts over `exp-config.yaml` over
    /// vLLM's defaults (async scheduling on, as servers recorded since late
    /// 2025 ran), by the rules every BLIS command applies; the KV block
    /// count from the server when recorded; the model and GPU as
    /// [`Definitions`] and the bundled catalogue say.
    pub fn of(exp: &Experiment, defs: &Definitions) -> Result<Setup, ExperimentError> {
        let unreproducible = |message: String| ExperimentError::Unreproducible { path: exp.dir.clone(), message };
        let mut layers = layers(exp, defs).map_err(unreproducible)?;
        let resolve = |layers: &[(KnobValues, Source, String)]| {
            let knobs = Knobs::layered(&layers.iter().map(|(values, source, _)| (values, *source)).collect::<Vec<_>>());
            let files: FileOrigins =
                layers.iter().filter(|(_, _, name)| !name.is_empty()).map(|(values, _, name)| (values.keys(), name.clone())).collect();
            let server = Server::resolve(&knobs, LongContext::Recorded, &mut knobs.report(), &mut Vec::new())
                .map_err(|e| unreproducible(knobs.blame(e, &files).to_string()))?;
            Ok::<_, ExperimentError>((knobs, server))
        };
        let (mut knobs, mut server) = resolve(&layers)?;
        // A grouped KV cache's logged size stands for more blocks than one group's.
        if let Some(hybrid) = server.instance.hybrid_kv {
            let facts = exp.fact_sources().map(|(f, _)| f);
            let s = &server.instance;
            if let Some((i, pool)) = facts.enumerate().find(|(_, f)| f.num_gpu_blocks.is_some()).and_then(|(i, f)| {
                Some((
                    i,
                    f.grouped_pool_blocks(hybrid.groups, s.block_size, s.scheduler.max_model_len, s.scheduler.max_num_batched_tokens)?,
                ))
            }) {
                // Layer 0 holds the flags; the facts follow in the same order.
                if pool > MAX_GPU_BLOCKS {
                    let file = &layers[1 + i].2;
                    return Err(unreproducible(format!(
                        "{file} kv_cache_tokens: a pool of {pool} KV blocks; at most {MAX_GPU_BLOCKS} are supported"
                    )));
                }
                layers[1 + i].0.num_gpu_blocks = Some(pool);
                (knobs, server) = resolve(&layers)?;
            }
        }
        server.instance.client_timeout = Some(exp.workload.client_timeout());
        let measured = exp.measured_lengths().map_err(|message| {
            unreproducible(format!(
                "{message}: a dataset run (data.type shareGPT, …) is simulated with the prompt and output lengths its reports measured"
            ))
        })?;
        if let Some(why) = unservable(exp, &server) {
            return Err(unreproducible(why));
        }
        let gpu_named = exp.fact(|f| f.hardware.clone()).is_some() || defs.gpu.is_some() || defs.gpu_name.is_some();
        let data_parallel_size = knobs.data_parallel_size.value.unwrap_or(1);
        if data_parallel_size == 0 || data_parallel_size > blis_cluster::MAX_INSTANCES {
            let file = exp.fact_file(|f| f.data_parallel_size);
            return Err(unreproducible(format!(
                "{file} data_parallel_size = {data_parallel_size}: must be between 1 and {}",
                blis_cluster::MAX_INSTANCES
            )));
        }
        let block_count_notes = block_count_notes(exp, &server);
        Ok(Setup {
            server,
            blocks_from_server: exp.fact(|f| f.num_gpu_blocks).is_some(),
            gpu_named,
            data_parallel_size,
            block_count_notes,
            measured,
        })
    }
}

/// Why `server` could not have served the run `exp` recorded, naming the
/// files and fields: a KV cache the server reported too small for one
/// request of the model length, with which vLLM does not start
/// (`check_enough_kv_cache_memory`; one block is its null block), or a
/// request recorded as served that is longer than the model length, which
/// vLLM refuses.
fn unservable(exp: &Experiment, server: &Server) -> Option<String> {
    let max_model_len = server.instance.scheduler.max_model_len;
    let length_file = if exp.fact(|f| f.max_model_len).is_some() {
        exp.fact_file(|f| f.max_model_len)
    } else if exp.exp_config.max_model_len.is_some() {
        "exp-config.yaml"
    } else {
        "the model's config.json"
    };
    let model_len = format!("max_model_len = {max_model_len} ({length_file})");
    let blocks = |f: &ServerFacts| f.num_gpu_blocks;
    if exp.fact(blocks).is_some() {
        let kv_tokens = blis_engine::kv::request_kv_tokens(server.instance.num_gpu_blocks, server.instance.block_size);
        if kv_tokens < u64::from(max_model_len) {
            return Some(format!(
                "{} num_gpu_blocks = {} of {} tokens hold {kv_tokens} tokens besides vLLM's null block, fewer than one request of {model_len}: \
                 vLLM does not start with such a KV cache; correct num_gpu_blocks or max_model_len",
                exp.fact_file(blocks),
                server.instance.num_gpu_blocks,
                server.instance.block_size
            ));
        }
    }
    let longest_prompt =
        exp.run_successes().and_then(|(path, s)| Some((path, s.prompt_tokens()?.quantiles.iter().map(|&(_, v)| v).fold(0.0, f64::max))));
    if let Some((path, prompt)) = longest_prompt.filter(|&(_, p)| p > f64::from(max_model_len)) {
        return Some(format!(
            "{} records a successful prompt of {prompt} tokens, longer than {model_len}, which vLLM refuses; correct max_model_len",
            path.display()
        ));
    }
    let tokens = |r: &RequestRow| u64::from(r.input_tokens) + u64::from(exp.generated_tokens(r).unwrap_or(0));
    exp.requests.iter().flatten().filter(|r| r.has_error == 0).find(|r| tokens(r) > u64::from(max_model_len)).map(|r| {
        format!(
            "recorded request {} succeeded with {} tokens (prompt and output), more than {model_len}, which vLLM refuses; correct max_model_len",
            r.index,
            tokens(r)
        )
    })
}

/// The simulated counterpart of an experiment.
#[derive(Clone, Debug)]
pub struct Simulated {
    /// What the client saw.
    pub client: ClientObserver,
    /// For each simulated request id, its row in `requests.csv` (replays
    /// only; `None` for a sweep's simulated probe).
    pub csv_row_of: Vec<Option<usize>>,
    /// Scheduler steps executed.
    pub steps: u64,
    /// Requests preempted.
    pub preemptions: u64,
    /// Steps that stalled to compile a fused-MoE kernel (a MoE server started cold).
    pub moe_kernel_compiles: u64,
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

/// The run `exp` recorded, to reproduce: its configuration, its measured
/// prompt lengths and its recorded sends.
fn reproduction(exp: &Experiment, setup: &Setup) -> Reproduction {
    let recorded = exp.requests.as_ref().map(|rows| {
        rows.iter()
            .map(|r| RecordedSend {
                index: r.index,
                stage: r.stage,
                send_us: r.arrival_time_us,
                input_tokens: r.input_tokens,
                output_tokens: exp.generated_tokens(r),
                failed: r.has_error != 0,
            })
            .collect()
    });
    Reproduction { config: exp.workload.clone(), measured: setup.measured.clone(), recorded }
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
    let unreproducible = |message: String| ExperimentError::Unreproducible { path: exp.dir.clone(), message };
    let run = reproduction(exp, setup);
    let (mean_output_tokens, fixed_output) = match exp.recorded_outputs() {
        Some(outputs) => (outputs.iter().map(|&n| f64::from(n)).sum::<f64>() / outputs.len() as f64, true),
        None => {
            let prompts = run.prompts(seed).map_err(|e| unreproducible(e.to_string()))?;
            (prompts.mean_output_tokens(), prompts.fixed_output())
        }
    };
    let csv_row_of = run.send_order(seed);
    let workload = blis_workload::open(&WorkloadInput::InferencePerf(Box::new(run)), &OpenOptions { seed, ..OpenOptions::default() })
        .map_err(|e| unreproducible(e.to_string()))?;
    let mut client = ClientObserver::new(exp.stages.len(), workload.expected_requests as usize, token_gaps);
    let deployment = Deployment { server: setup.server.clone(), latency, coefficients: String::new() };
    let resolved = ResolvedScenario::one_server(deployment, setup.data_parallel_size, workload, seed);
    let outputs = Outputs { observers: vec![&mut client, extra], decisions: None };
    let report = blis_scenario::simulate(resolved, outputs).map_err(|e| unreproducible(e.to_string()))?;
    let s = &report.summary;
    Ok(Simulated {
        client,
        csv_row_of,
        steps: s.batch.steps,
        preemptions: s.kv_cache.preemptions,
        moe_kernel_compiles: s.batch.moe_kernel_compiles,
        prefix_hit_rate: s.kv_cache.prefix_hit_rate,
        mean_output_tokens,
        fixed_output,
    })
}

/// An observer that ignores everything.
pub struct NoObserver;

impl Observer for NoObserver {
    fn on_finish(&mut self, _record: &RequestRecord) {}

    fn observes_tokens(&self) -> bool {
        false
    }
}
