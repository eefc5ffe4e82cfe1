//! vLLM's rules, applied once: the knobs of a deployment (given by flags, a
//! file, an experiment's records, or defaulted) become the model, the GPU,
//! one instance's configuration and its KV capacity ([`Server`]), and with
//! a coefficient set its latency model ([`Deployment`]). `blis run`,
//! `serve`, `replay`, `validate` and `fit` all resolve servers here.

use std::path::Path;
use std::sync::Arc;

use blis_engine::kv::{KvGroups, VLLM_BLOCK_SIZES};
use blis_engine::latency::LatencyModel;
use blis_engine::scheduler::{HybridKv, InstanceConfig, InstanceConfigError, PreemptionVictim, QueuePolicy, SchedulerConfig};
use blis_engine::time::{MAX_SPAN_S, Micros, parse_duration};
use blis_engine::warmup::{MEASURED_MOE_KERNEL_COMPILE, MoeKernelWarmup};
use blis_physics::catalog;
use blis_physics::coefficients::{CoefficientSet, DEFAULT_SET};
use blis_physics::hardware::{self, GpuSpec, KvBudget, KvSizing};
use blis_physics::latency::ModelKind;
use blis_physics::model::ModelConfig;
use blis_physics::vllm::{ALLOW_LONG_MAX_MODEL_LEN, KvCacheDtype};

use crate::error::{ScenarioError, invalid};
use crate::knobs::{ConfigReport, KnobId, Knobs, Source, report_entry};

/// What to do with a `--max-model-len` longer than the model's config allows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LongContext {
    /// Refuse it, as vLLM does.
    Refused,
    /// Accept it with a warning, as vLLM does with `VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`.
    Allowed,
    /// Accept it: a real server ran with it (an experiment's records).
    Recorded,
}

impl LongContext {
    /// [`LongContext::Allowed`] when `VLLM_ALLOW_LONG_MAX_MODEL_LEN=1` is set, as vLLM reads it; else refused.
    pub fn from_env() -> LongContext {
        if std::env::var(ALLOW_LONG_MAX_MODEL_LEN).is_ok_and(|v| v.trim() == "1") { LongContext::Allowed } else { LongContext::Refused }
    }
}

/// One vLLM server (an instance), resolved.
#[derive(Clone, Debug)]
pub struct Server {
    /// Model id as reported: the bundled id, or the name given with a config file.
    pub model_name: String,
    /// Its architecture.
    pub model: ModelConfig,
    /// GPU name as reported.
    pub gpu_name: String,
    /// The GPU.
    pub gpu: GpuSpec,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Instance knobs, KV blocks included.
    pub instance: InstanceConfig,
    /// How one GPU's memory was split when the KV block count was derived
    /// (`None` when it was given).
    pub kv_budget: Option<KvBudget>,
}

/// A server and the model that times its steps.
#[derive(Clone)]
pub struct Deployment {
    /// The server.
    pub server: Server,
    /// The step-time model.
    pub latency: Arc<dyn LatencyModel>,
    /// Where its coefficients came from ("bundled NAME", a file, plus flag overrides).
    pub coefficients: String,
}

fn read_file(flag: &str, path: &Path) -> Result<String, ScenarioError> {
    blis_data::textfile::read(path).map_err(|e| invalid!("cannot read --{flag} {}: {e}", path.display()))
}

/// Reads `--model-config PATH`: a HuggingFace `config.json`.
pub fn load_model_config(path: &Path) -> Result<ModelConfig, ScenarioError> {
    let text = read_file("model-config", path)?;
    ModelConfig::from_hf_json(&text).map_err(|e| invalid!(knob: model_config, "{}: {e}", path.display()))
}

/// Reads `--hardware-config PATH`: a GPU spec in BLIS's or a datasheet's
/// shape, completed from the bundled board of its name ([`catalog::completed`]).
pub fn load_gpu_spec(path: &Path) -> Result<GpuSpec, ScenarioError> {
    let text = read_file("hardware-config", path)?;
    let gpu = GpuSpec::from_json(&text).map_err(|e| invalid!(knob: hardware_config, "{}: {e}", path.display()))?;
    Ok(catalog::completed(gpu))
}

/// Converts a seconds knob to microseconds, rejecting NaN, values below
/// one microsecond (the clock's tick) and values above [`MAX_SPAN_S`].
pub fn seconds(knob: KnobId, value: f64) -> Result<Micros, ScenarioError> {
    in_seconds(value).map_err(|m| ScenarioError::knob(knob, m))
}

/// [`seconds`] for a command's own flag `--{flag}`, which is not a knob.
pub fn flag_seconds(flag: &str, value: f64) -> Result<Micros, ScenarioError> {
    in_seconds(value).map_err(|m| invalid!("--{flag} {m}"))
}

fn in_seconds(value: f64) -> Result<Micros, String> {
    match Micros::from_secs_f64(value) {
        Some(t) if (1e-6..=MAX_SPAN_S).contains(&value) => Ok(t),
        _ => Err(format!("{value:?}: must be a number of seconds in [1e-6, {MAX_SPAN_S:e}] (the simulated clock counts microseconds)")),
    }
}

fn resolve_model(k: &Knobs) -> Result<(String, ModelConfig), ScenarioError> {
    if let Some(path) = &k.model_config.value {
        let model = load_model_config(path)?;
        let name = k.model.value.clone().unwrap_or_else(|| path.display().to_string());
        return Ok((name, model));
    }
    let name = k.model.value.clone().ok_or_else(
        || invalid!(knob: model, "is required (a bundled model such as meta-llama/llama-3.1-8b-instruct; `blis models` lists them)"),
    )?;
    let bundled = catalog::find_model(&name).ok_or_else(|| match catalog::similar_models(&name).as_slice() {
        [] => invalid!(
            knob: model,
            "{name}: no bundled config.json for this model; bundled: {}; or pass --model-config PATH",
            catalog::model_ids()
        ),
        similar => {
            invalid!(knob: model, "{name}: no bundled model has this name; did you mean {}? (or pass --model-config PATH)", similar.join(" or "))
        }
    })?;
    let model = ModelConfig::from_hf_json(bundled.config_json).map_err(|e| invalid!("bundled config for {}: {e}", bundled.id))?;
    Ok((bundled.id.to_string(), model))
}

/// The GPU: `--hardware-config`'s file, or the bundled `--hardware`. When
/// both are given, the one given at higher precedence (a flag over a file)
/// wins; both at the same level is ambiguous and refused.
fn resolve_gpu(k: &Knobs) -> Result<(String, GpuSpec), ScenarioError> {
    if let Some(path) = &k.hardware_config.value {
        let named = k.hardware.source;
        if named == k.hardware_config.source {
            let gpu = &k.hardware.value;
            let place = if named == Source::Flag { "as flags" } else { "in the same file" };
            return Err(invalid!(knob: hardware, "{gpu} and --hardware-config {}: both given {place}; pass one", path.display()));
        }
        if !(named == Source::Flag && k.hardware_config.source == Source::File) {
            let gpu = load_gpu_spec(path)?;
            return Ok((gpu.name.clone(), gpu));
        }
    }
    let name = k.hardware.value.clone();
    let g = catalog::find_gpu(&name)
        .ok_or_else(|| invalid!(knob: hardware, "{name}: {}; or pass --hardware-config PATH", catalog::unknown_gpu(&name)))?;
    Ok((g.name.to_string(), g.spec()))
}

impl Server {
    /// Resolves model, GPU, instance knobs and KV capacity as vLLM would:
    /// a tensor-parallel degree that splits the heads, a block size vLLM
    /// accepts, `--max-model-len` from the model's config (and not above
    /// it, unless `long_context` allows), without chunked prefill a default
    /// token budget grown to `--max-model-len`, and the KV block count of
    /// vLLM's memory profiler unless given. Derived values are added to
    /// `report`; warnings to `warnings`. Errors name the knob as its flag.
    pub fn resolve(
        k: &Knobs,
        long_context: LongContext,
        report: &mut ConfigReport,
        warnings: &mut Vec<String>,
    ) -> Result<Server, ScenarioError> {
        let (model_name, model) = resolve_model(k)?;
        let (gpu_name, gpu) = resolve_gpu(k)?;
        let kv_cache_dtype = k.kv_cache_dtype.value.clone();
        let dtype = kv_cache_dtype.parse().map_err(|e| invalid!(knob: kv_cache_dtype, "{e}"))?;
        // vLLM resolves `auto` to what the checkpoint quantised its cache to.
        if dtype == KvCacheDtype::Auto && model.fp8_kv_checkpoint {
            report_entry(report, "kv-cache-dtype", &"fp8_e4m3", Source::Derived);
        }
        let mut model = model.with_kv_cache_dtype(dtype);
        if let Some(method) = &k.quantization.value {
            model = model.with_quantization(method).map_err(|e| invalid!(knob: quantization, "{e}"))?;
        }
        if let (Some(method), None) = (&model.quant_method, model.weights.format()) {
            warnings.push(format!(
                "{model_name}: quantization_config.quant_method `{method}` gives no weight width BLIS knows (no bits, num_bits or FP8 format): \
                 its weights are sized and timed in half precision"
            ));
        }
        let tp = k.tp.value;
        if !(1..=64).contains(&tp) {
            return Err(invalid!(knob: tp, "{tp}: must be between 1 and 64"));
        }
        model.check_tensor_parallel(tp).map_err(|e| invalid!(knob: tp, "{tp}: {model_name}: {e}"))?;
        let util = k.gpu_memory_utilization.value;
        if !(util > 0.0 && util <= 1.0) {
            return Err(invalid!(knob: gpu_memory_utilization, "{util:?}: must be in (0, 1]"));
        }
        let mut block_size = k.block_size.value;
        if !VLLM_BLOCK_SIZES.contains(&block_size) {
            return Err(invalid!(knob: block_size, "{block_size}: vLLM accepts {VLLM_BLOCK_SIZES:?} tokens"));
        }
        // vLLM's latent-attention kernels on Hopper and Blackwell take blocks of one size only, and vLLM forces it.
        if let Some(forced) = model.mla.as_ref().and_then(|_| gpu.mla_block_size())
            && forced != block_size
        {
            if k.block_size.source != Source::Default {
                warnings.push(format!(
                    "--block-size {block_size}: vLLM runs {model_name}'s latent attention on {gpu_name} with blocks of {forced} tokens and forces that size; simulating {forced}"
                ));
            }
            block_size = forced;
            report_entry(report, "block-size", &block_size, Source::Derived);
        }

        let max_model_len = match k.max_model_len.value {
            Some(v) if v > model.derived_max_model_len => {
                let why = format!(
                    "--max-model-len {v} is longer than the {} tokens {model_name}'s config.json allows (its length fields and rope_scaling)",
                    model.derived_max_model_len
                );
                match long_context {
                    LongContext::Refused => {
                        return Err(invalid!("{why}; vLLM refuses it unless {ALLOW_LONG_MAX_MODEL_LEN}=1 is set, and so does BLIS"));
                    }
                    LongContext::Allowed => warnings.push(format!("{why}; allowed by {ALLOW_LONG_MAX_MODEL_LEN}=1")),
                    LongContext::Recorded => {}
                }
                v
            }
            Some(v) => v,
            None => {
                report_entry(report, "max-model-len", &model.derived_max_model_len, Source::Derived);
                model.derived_max_model_len
            }
        };
        let enable_chunked_prefill = k.enable_chunked_prefill.value;
        // Not given: vLLM's defaults for this GPU.
        let batch = gpu.batch_defaults();
        let max_num_batched_tokens = match k.max_num_batched_tokens.value {
            Some(v) => v,
            // As vLLM does: without chunked prefill the default budget grows to hold a whole prompt.
            None if !enable_chunked_prefill && batch.max_num_batched_tokens < max_model_len => {
                report_entry(report, "max-num-batched-tokens", &max_model_len, Source::Derived);
                max_model_len
            }
            None => {
                report_entry(report, "max-num-batched-tokens", &batch.max_num_batched_tokens, Source::Default);
                batch.max_num_batched_tokens
            }
        };
        let max_num_seqs = match k.max_num_seqs.value {
            Some(v) => v,
            // As vLLM does, a default that would outnumber a smaller token budget given is capped by it.
            None if (1..batch.max_num_seqs).contains(&max_num_batched_tokens) => {
                report_entry(report, "max-num-seqs", &max_num_batched_tokens, Source::Derived);
                max_num_batched_tokens
            }
            None => {
                report_entry(report, "max-num-seqs", &batch.max_num_seqs, Source::Default);
                batch.max_num_seqs
            }
        };
        let offload = crate::tiers::resolve(k, &model, &gpu, tp, block_size, report)?;
        // vLLM turns its hybrid KV cache manager off with a KV connector.
        let hybrid = !k.disable_hybrid_kv_cache_manager.value && offload.is_none();
        let sizing = KvSizing {
            tp,
            gpu_memory_utilization: util,
            block_size_tokens: block_size,
            max_num_batched_tokens,
            max_num_seqs,
            hybrid_kv: hybrid,
        };
        let budget = |hybrid_kv: bool| {
            hardware::kv_budget(&model, &gpu, &KvSizing { hybrid_kv, ..sizing })
                .map_err(|e| invalid!("{model_name} on {tp} × {gpu_name}: {e}"))
        };
        let (groups, group_layers) = hardware::kv_groups(&model, hybrid);
        let (num_gpu_blocks, kv_budget, unified_blocks) = match k.num_gpu_blocks.value {
            Some(b) if b < 2 => {
                return Err(
                    invalid!(knob: num_gpu_blocks, "{b}: the KV cache needs at least 2 blocks (one is vLLM's reserved null block)"),
                );
            }
            Some(b) => {
                // vLLM's override is taken as it is, and allocated: a cache that outgrows the
                // memory left beside the weights would not start.
                if let Ok(fits) = budget(hybrid)
                    && b > fits.blocks.saturating_mul(OVERRIDE_SLACK)
                {
                    warnings.push(format!(
                        "--num-gpu-blocks {b}: more than {OVERRIDE_SLACK} × the {} blocks {model_name} leaves room for on {tp} × {gpu_name} at --gpu-memory-utilization {util} \
                         ({:.1} GiB per GPU for the KV cache); vLLM would allocate them and run out of memory",
                        fits.blocks, fits.kv_cache_gib
                    ));
                }
                (b, None, b)
            }
            None => {
                let b = budget(hybrid)?;
                // vLLM refuses to start a server whose KV cache cannot hold one request of the model length.
                let usable = b.blocks.saturating_sub(1);
                let needed = groups.peak_blocks(u64::from(max_model_len), max_num_batched_tokens, block_size);
                if needed > usable {
                    let kv_tokens = groups.longest_request(usable, max_num_batched_tokens, block_size);
                    let hint =
                        format!("lower --max-model-len (to at most {kv_tokens}), or raise the TP degree or --gpu-memory-utilization");
                    return Err(if groups == KvGroups::FULL {
                        invalid!(
                            "{model_name} on {tp} × {gpu_name}: the KV cache holds {kv_tokens} tokens, fewer than one request of --max-model-len {max_model_len}, so vLLM would not start; {hint}"
                        )
                    } else {
                        invalid!(
                            "{model_name} on {tp} × {gpu_name}: the KV cache's {usable} blocks, shared by {groups} groups, are fewer than the {needed} one request of --max-model-len {max_model_len} holds at its peak, so vLLM would not start; {hint}"
                        )
                    });
                }
                report_entry(report, "num-gpu-blocks", &b.blocks, Source::Derived);
                let unified = if groups.full > 0 && groups != KvGroups::FULL { budget(false)?.blocks } else { b.blocks };
                (b.blocks, Some(b), unified)
            }
        };
        let hybrid_kv = (groups != KvGroups::FULL).then_some(HybridKv { groups, unified_blocks });
        if hybrid_kv.is_some() {
            report_entry(report, "kv-cache-groups", &format!("{groups}, {group_layers} layers each"), Source::Derived);
        }

        // On only where it changes something, so that what reads the instance need not ask again.
        let mut expert_parallel = k.enable_expert_parallel.value;
        if expert_parallel && (model.moe.is_none() || tp == 1) {
            let why = if model.moe.is_none() {
                format!("{model_name} has no experts")
            } else {
                String::from("at --tp 1 every expert is on the one GPU")
            };
            warnings.push(format!("--enable-expert-parallel has no effect: {why}"));
            expert_parallel = false;
        }
        let moe_kernel_compile = match &k.moe_kernel_compile.value {
            Some(text) => parse_duration(text).map_err(|e| invalid!(knob: moe_kernel_compile, "{e}"))?,
            None => {
                if model.moe.is_some() {
                    report_entry(
                        report,
                        "moe-kernel-compile",
                        &format!("{}ms", MEASURED_MOE_KERNEL_COMPILE.as_us() / 1000),
                        Source::Derived,
                    );
                }
                MEASURED_MOE_KERNEL_COMPILE
            }
        };
        let moe_kernel_warmup = model.moe.as_ref().filter(|_| moe_kernel_compile > Micros::ZERO).map(|moe| MoeKernelWarmup {
            compile: moe_kernel_compile,
            experts: moe.num_experts,
            experts_per_token: moe.experts_per_token,
        });
        let instance = InstanceConfig {
            scheduler: SchedulerConfig {
                max_num_seqs,
                max_num_batched_tokens,
                max_model_len,
                enable_chunked_prefill,
                long_prefill_token_threshold: k.long_prefill_token_threshold.value,
                async_scheduling: k.async_scheduling.value,
                queue_policy: QueuePolicy::Fcfs,
                preemption: PreemptionVictim::Tail,
            },
            num_gpu_blocks,
            block_size,
            enable_prefix_caching: k.enable_prefix_caching.value,
            client_timeout: k.client_timeout.value.map(|s| seconds(KnobId::client_timeout, s)).transpose()?,
            offload,
            kv_transfer: None,
            kv_events: false,
            expert_parallel,
            hybrid_kv,
            moe_kernel_warmup,
        };
        instance.validate().map_err(instance_error)?;
        Ok(Server { model_name, model, gpu_name, gpu, tp, instance, kv_budget })
    }

    /// The latency model of `set` for this server; the error names the coefficient.
    pub fn latency_model(&self, set: &CoefficientSet, origin: &str) -> Result<Arc<dyn LatencyModel>, ScenarioError> {
        set.latency_model(&self.model, &self.gpu, self.tp, &self.instance).map_err(|e| invalid!("coefficients ({origin}): {e}"))
    }
}

/// An instance configuration vLLM would refuse, as an error about the knob
/// at fault.
fn instance_error(e: InstanceConfigError) -> ScenarioError {
    match e.flag().and_then(KnobId::from_flag) {
        Some(knob) => ScenarioError::knob(knob, e.detail()),
        None => invalid!("{e}"),
    }
}

/// How many times the blocks the memory holds `--num-gpu-blocks` may ask for
/// before a warning: BLIS's memory accounting is an estimate, and a recorded
/// server's real count may exceed it somewhat.
const OVERRIDE_SLACK: u64 = 2;

impl Deployment {
    /// [`Server::resolve`] and the latency model the knobs choose
    /// ([`choose_coefficients`]); adds the derived choices to `report`.
    pub fn resolve(
        k: &Knobs,
        long_context: LongContext,
        report: &mut ConfigReport,
        warnings: &mut Vec<String>,
    ) -> Result<Deployment, ScenarioError> {
        let server = Server::resolve(k, long_context, report, warnings)?;
        let chosen = choose_coefficients(
            k.latency_model.value.as_deref(),
            k.coefficients.value.as_deref(),
            k.alpha_coeffs.value.as_deref(),
            k.beta_coeffs.value.as_deref(),
        )?;
        let latency = server.latency_model(&chosen.set, &chosen.origin)?;
        if k.latency_model.value.is_none() {
            report_entry(report, "latency-model", &chosen.set.latency_model, Source::Derived);
        }
        report_entry(report, "coefficients", &chosen.origin, Source::Derived);
        if k.alpha_coeffs.value.is_some() {
            let negative: Vec<String> =
                chosen.set.alpha.iter().enumerate().filter(|(_, a)| **a < 0.0).map(|(i, a)| format!("α{i} = {a}")).collect();
            if !negative.is_empty() {
                warnings.push(format!(
                    "--alpha-coeffs: {} negative; a request's overhead that sums below 0 µs is taken as 0, never as negative time",
                    negative.join(", ")
                ));
            }
        }
        // A fitted trained-physics or unified-5 set is non-negative (times
        // and rates); a file with negative terms was edited or made elsewhere.
        let physical = chosen.set.latency_model.coefficients_are_physical();
        if let (Some(path), true) = (&k.coefficients.value, physical) {
            let alpha = chosen.set.alpha.iter().enumerate().filter(|(_, a)| **a < 0.0).map(|(i, a)| format!("α{i} = {a}"));
            let beta = chosen.set.beta.iter().enumerate().filter(|(_, b)| **b < 0.0).map(|(i, b)| format!("β{i} = {b}"));
            let negative: Vec<String> = alpha.chain(beta).collect();
            if !negative.is_empty() {
                warnings.push(format!(
                    "--coefficients {}: {} negative; {}'s terms are times and rates, which blis fit keeps ≥ 0, and a step or overhead that sums below 0 µs is taken as 0",
                    path.display(),
                    negative.join(", "),
                    chosen.set.latency_model
                ));
            }
        }
        if let Some(w) = hardware_mismatch(&chosen.set, &server.gpu, &server.gpu_name, server.tp, &chosen.origin) {
            warnings.push(w);
        }
        if server.instance.expert_parallel && !chosen.set.latency_model.prices_expert_parallelism() {
            warnings.push(format!(
                "--enable-expert-parallel: the {} latency model has no expert-dispatch term, so it times the step as tensor-parallel; trained-physics and roofline price the all-to-all",
                chosen.set.latency_model
            ));
        }
        Ok(Deployment { server, latency, coefficients: chosen.origin })
    }
}

/// Parses "a,b,c" into finite numbers.
pub fn parse_coeffs(knob: KnobId, text: &str) -> Result<Vec<f64>, ScenarioError> {
    text.split(',')
        .map(|p| p.trim().parse::<f64>().ok().filter(|v| v.is_finite()))
        .collect::<Option<_>>()
        .ok_or_else(|| invalid!(knob = knob, "{text:?}: expected comma-separated finite numbers"))
}

/// A coefficient set and a description of where it came from.
pub struct ChosenCoefficients {
    /// The set.
    pub set: CoefficientSet,
    /// "FILE", "bundled NAME", plus any flag overrides.
    pub origin: String,
}

/// Chooses the coefficient set: `--coefficients FILE`; else the bundled set
/// for `--latency-model` (roofline needs none); else the bundled default.
/// `--alpha-coeffs` and `--beta-coeffs` replace the chosen set's vectors.
pub fn choose_coefficients(
    latency_model: Option<&str>,
    file: Option<&Path>,
    alpha: Option<&str>,
    beta: Option<&str>,
) -> Result<ChosenCoefficients, ScenarioError> {
    let kind = latency_model.map(|m| m.parse::<ModelKind>().map_err(|e| invalid!(knob: latency_model, ": {e}"))).transpose()?;
    let (mut set, mut origin) = match (file, kind) {
        (Some(path), _) => {
            let set = CoefficientSet::load(path).map_err(|e| invalid!(knob: coefficients, "{e}"))?;
            if let Some(k) = kind
                && set.latency_model != k
            {
                return Err(invalid!(knob: coefficients, "{}: is for {}, but --latency-model is {k}", path.display(), set.latency_model));
            }
            (set, path.display().to_string())
        }
        (None, Some(k)) => match CoefficientSet::bundled_for(k) {
            Some(set) => (set, format!("bundled {k}")),
            None if alpha.is_some() && beta.is_some() => {
                let empty = CoefficientSet { latency_model: k, alpha: vec![], beta: vec![], provenance: Default::default() };
                (empty, String::from("flags"))
            }
            None => {
                return Err(invalid!(
                    knob: latency_model,
                    "{k}: BLIS ships no coefficients for it (they are per model and GPU); pass --coefficients FILE \
                     (`blis fit DIR --latency-model {k} -o FILE` learns them from your runs) or --alpha-coeffs and --beta-coeffs"
                ));
            }
        },
        (None, None) => (CoefficientSet::default_set(), format!("bundled {DEFAULT_SET}")),
    };
    if let Some(a) = alpha {
        set.alpha = parse_coeffs(KnobId::alpha_coeffs, a)?;
        origin += " with --alpha-coeffs";
    }
    if let Some(b) = beta {
        set.beta = parse_coeffs(KnobId::beta_coeffs, b)?;
        origin += " with --beta-coeffs";
    }
    set.widen_published_layout(Path::new(&origin)).map_err(|e| invalid!("{e}"))?;
    Ok(ChosenCoefficients { set, origin })
}

/// A warning when coefficients measured on one GPU time another, saying how
/// they were carried ([`CoefficientSet::carry_to`]): the β of the trained
/// models price work against the GPU's peaks, scaled by the measured kernel
/// efficiencies of both GPUs, but the α and per-step overheads are absolute,
/// so the prediction extrapolates. At `tp` > 1 it also says which link the
/// all-reduces cross and at what measured bus bandwidth, beside the GPU the
/// set was fitted on. `None` when the set names no GPU, or was measured on
/// this one (by name or alias): its `hardware`, or one of its
/// `measured_on` when a fit on several GPUs, or on another than the one
/// it is in terms of, names them.
pub fn hardware_mismatch(set: &CoefficientSet, gpu: &GpuSpec, simulated: &str, tp: u32, origin: &str) -> Option<String> {
    let fitted_on = set.provenance.hardware.as_deref()?;
    let measured = &set.provenance.measured_on;
    if measured.iter().map(String::as_str).chain(measured.is_empty().then_some(fitted_on)).any(|m| catalog::same_gpu(m, simulated)) {
        return None;
    }
    let (measured_on, overheads) = match measured.as_slice() {
        [] => (fitted_on.to_string(), format!("{fitted_on}'s")),
        gpus => (format!("{} (in {fitted_on}'s terms)", gpus.join(" and ")), String::from("those of the servers measured")),
    };
    let profiled = catalog::PROFILED_GPUS.iter().any(|p| catalog::same_gpu(p, simulated));
    let how = match (set.carry_to(gpu), blis_physics::coefficients::kernels_of(gpu)) {
        (None, _) if catalog::same_gpu(fitted_on, simulated) => format!("they are in {simulated}'s terms, so nothing is carried"),
        (Some(c), Some(k)) => format!(
            "carried there by the two GPUs' kernel efficiencies (compute peak ×{:.3}, bandwidth ×{:.3}, per-layer overhead ×{:.3}; {simulated}'s {})",
            c.compute,
            c.memory,
            c.per_layer,
            if profiled { String::from("measured") } else { k.source }
        ),
        (Some(c), None) => format!(
            "{simulated} has no kernel profile, so it is carried by the profiled GPUs' mean efficiencies (compute peak ×{:.3}, bandwidth ×{:.3}, \
             per-layer overhead ×{:.3}; about ±7 % on layer time)",
            c.compute, c.memory, c.per_layer
        ),
        (None, Some(k)) => format!("its kernels are taken as efficient as {fitted_on}'s ({})", k.source),
        (None, None) => String::from("only the peaks scale"),
    };
    let links = if tp > 1 {
        let link = |g: &GpuSpec| format!("{} at {:.0} GB/s", g.allreduce_link(tp).name(), g.allreduce_bus_bytes_per_s(tp) / 1e9);
        let there = catalog::find_gpu(fitted_on).map_or(String::new(), |g| format!(" ({fitted_on}: {})", link(&g.spec())));
        format!("; its TP {tp} all-reduces cross {} of bus bandwidth{there}", link(gpu))
    } else {
        String::new()
    };
    Some(format!(
        "coefficients ({origin}) were fitted on {measured_on} measurements; timing {simulated} with them extrapolates: {how}{links}; per-step and host overheads stay {overheads}"
    ))
}
