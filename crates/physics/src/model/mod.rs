//! Model architecture, read from a HuggingFace `config.json`.
//!
//! [`ModelConfig::from_hf_json`] accepts the config of any decoder-only
//! transformer in the HuggingFace format: dense (Llama, Qwen, Mistral), GQA and
//! MHA attention, mixture-of-experts (Mixtral, Qwen3-MoE, DeepSeek, Llama-4),
//! multi-head latent attention (DeepSeek-V2, GLM-5), and multimodal wrappers
//! whose language model sits under `text_config`. Field names follow the
//! notation table of `latency-formulas.md`, with their aliases.
//!
//! Everything derived from the architecture (parameter counts, weight bytes,
//! KV bytes per token, FLOPs per token) lives here, so every latency model and
//! the KV capacity estimate use the same numbers.

use serde_json::{Map, Value};
use thiserror::Error;

mod attention;
mod weights;

pub use attention::{AttentionMix, AttentionSpan, LocalAttention};
pub use weights::{PerWeightClass, QuantFormat, WeightClass, WeightPrecision};
use weights::{flattened_modelopt, fp8_kv_cache_checkpoint, quantized_weights};

/// Why a `config.json` could not be used.
#[derive(Debug, Error, PartialEq)]
pub enum ModelConfigError {
    /// The text is not JSON, or not a JSON object.
    #[error("not a JSON object: {0}")]
    NotJson(String),
    /// A top-level field appears twice (JSON parsers differ on which counts).
    #[error("field `{0}` is given twice; give each field once")]
    DuplicateField(String),
    /// A required field is absent (under any of its alias names).
    #[error("missing field `{field}` (also accepted: {aliases})")]
    Missing {
        /// Canonical field name.
        field: &'static str,
        /// Other names accepted for it.
        aliases: &'static str,
    },
    /// A field is present but unusable.
    #[error("field `{field}` = {value} is invalid: {reason}")]
    Invalid {
        /// Field name.
        field: &'static str,
        /// The offending value as written.
        value: String,
        /// What is allowed.
        reason: &'static str,
    },
    /// A count that must divide another does not.
    #[error("field `{field}` = {value} does not divide `{of}` = {total}: {why}")]
    NotDivisor {
        /// Field name of the divisor.
        field: &'static str,
        /// Its value.
        value: u32,
        /// Field name of the count it must divide.
        of: &'static str,
        /// That count.
        total: u32,
        /// Why it must.
        why: &'static str,
    },
}

/// Why a model cannot be split over a tensor-parallel degree, with vLLM's
/// own rules (`ModelConfig.verify_with_parallel_config`, `QKVParallelLinear`).
#[derive(Debug, Error, PartialEq)]
pub enum TensorParallelError {
    /// Attention heads are sharded across ranks, so tp must divide them.
    #[error("{heads} attention heads are not divisible by tensor-parallel size {tp}; use a tp that divides {heads}")]
    HeadsNotDivisible {
        /// `num_attention_heads`.
        heads: u32,
        /// The requested degree.
        tp: u32,
    },
    /// KV heads are sharded when tp < KVH (tp must divide them) and
    /// replicated when tp ≥ KVH (KVH must divide tp).
    #[error("{kv_heads} KV heads cannot be split over tensor-parallel size {tp}: tp must divide {kv_heads}, or be a multiple of it")]
    KvHeadsIncompatible {
        /// `num_key_value_heads`.
        kv_heads: u32,
        /// The requested degree.
        tp: u32,
    },
}

/// Why a server cannot quantize a model with the `--quantization` method
/// asked, by vLLM's rules (`ModelConfig._verify_quantization`).
#[derive(Debug, Error, PartialEq)]
pub enum QuantizationError {
    /// A quantized checkpoint runs with its own method (or that method's
    /// Marlin kernels), never another.
    #[error("`{asked}`: the checkpoint is quantized with {checkpoint}, and vLLM refuses another method for it; allowed: {allowed}")]
    Mismatch {
        /// The method asked for.
        asked: String,
        /// `quantization_config.quant_method`.
        checkpoint: String,
        /// The methods vLLM accepts for it.
        allowed: String,
    },
    /// A half-precision checkpoint quantized at load: only FP8 is simulated.
    #[error(
        "`{asked}`: of the methods that quantize a half-precision checkpoint at load, BLIS simulates fp8 (one-byte weights, \
         multiplied in FP8 where the GPU has FP8 tensor cores); pre-quantized methods (awq, gptq, compressed-tensors, ...) \
         come with their checkpoint's config.json"
    )]
    NotOnline {
        /// The method asked for.
        asked: String,
    },
}

/// Mixture-of-experts layout.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    /// Routed experts per MoE layer (`num_local_experts`, `num_experts`, `n_routed_experts`).
    pub num_experts: u32,
    /// Experts each token is routed to (`num_experts_per_tok`).
    pub experts_per_token: u32,
    /// FFN width of one routed expert (`moe_intermediate_size`, else `intermediate_size`).
    pub expert_intermediate_size: u32,
    /// Total FFN width of the always-active shared experts (0 when none).
    pub shared_intermediate_size: u32,
    /// Number of layers whose FFN is a MoE block; the rest are dense.
    pub num_moe_layers: u32,
    /// Whether MoE layers alternate with dense ones (`interleave_moe_layer_step`, Llama-4).
    pub interleaved: bool,
}

/// Multi-head latent attention (DeepSeek-V2 style): the KV cache stores one
/// compressed latent per token and layer instead of per-head keys and values.
#[derive(Clone, Debug, PartialEq)]
pub struct MlaConfig {
    /// Width of the compressed KV latent (`kv_lora_rank`).
    pub kv_lora_rank: u32,
    /// Width of the decoupled rotary key (`qk_rope_head_dim`).
    pub qk_rope_head_dim: u32,
    /// Width of the compressed query (`q_lora_rank`); None when the query is
    /// projected from the hidden state directly (DeepSeek-V2-Lite).
    pub q_lora_rank: Option<u32>,
    /// Per-head width of the non-rotary query and key (`qk_nope_head_dim`).
    pub qk_nope_head_dim: u32,
    /// Per-head width of the value (`v_head_dim`).
    pub v_head_dim: u32,
}

impl MlaConfig {
    /// Parameters of one layer's attention projections, for hidden size
    /// `d` and `heads` heads.
    fn projection_params(&self, d: f64, heads: f64) -> MlaProjections {
        let (nope, rope, v, kv_lora) =
            (f64::from(self.qk_nope_head_dim), f64::from(self.qk_rope_head_dim), f64::from(self.v_head_dim), f64::from(self.kv_lora_rank));
        let q_out = heads * (nope + rope);
        MlaProjections {
            q_a: self.q_lora_rank.map_or(0.0, |r| d * f64::from(r)),
            q_b: self.q_lora_rank.map_or(d * q_out, |r| f64::from(r) * q_out),
            kv_a: d * (kv_lora + rope),
            kv_b: kv_lora * heads * (nope + v),
            o: heads * v * d,
        }
    }
}

/// One layer's latent-attention projection parameters, by vLLM's module names.
struct MlaProjections {
    /// `q_a_proj`: the query's down-projection (0 without `q_lora_rank`).
    q_a: f64,
    /// `q_b_proj` (or `q_proj` without `q_lora_rank`): every head's query.
    q_b: f64,
    /// `kv_a_proj_with_mqa`: the latent and the rotary key.
    kv_a: f64,
    /// `kv_b_proj`: the latent up-projected to every head's key and value.
    kv_b: f64,
    /// `o_proj`.
    o: f64,
}

impl MlaProjections {
    fn total(&self) -> f64 {
        self.q_a + self.q_b + self.kv_a + self.kv_b + self.o
    }
}

/// The architecture facts BLIS needs about a model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// `architectures[0]`, e.g. `LlamaForCausalLM`.
    pub architecture: String,
    /// L: `num_hidden_layers` (`n_layer`, `num_layers`).
    pub num_layers: u32,
    /// d: `hidden_size` (`n_embd`, `d_model`).
    pub hidden_size: u32,
    /// H: `num_attention_heads` (`n_head`).
    pub num_attention_heads: u32,
    /// KVH: `num_key_value_heads` (`num_kv_heads`, `multi_query_group_num`); H when absent.
    pub num_kv_heads: u32,
    /// dH: `head_dim` when present, else d / H.
    pub head_dim: u32,
    /// dFF of dense layers: `intermediate_size` (`intermediate_size_mlp` for Llama-4).
    pub intermediate_size: u32,
    /// V: `vocab_size`.
    pub vocab_size: u32,
    /// Whether the LM head shares the embedding matrix.
    pub tie_word_embeddings: bool,
    /// Bytes per activation element (BPP): 2 for bf16/fp16 (also for fp32
    /// checkpoints, which vLLM serves in half precision).
    pub dtype_bytes: f64,
    /// Bytes per KV-cache element: BPP unless the server stores its cache in
    /// another dtype ([`ModelConfig::with_kv_cache_dtype`]).
    pub kv_dtype_bytes: f64,
    /// The checkpoint quantises its KV cache to 8-bit floats (NVIDIA
    /// ModelOpt's `kv_cache_quant_algo: FP8`), which vLLM stores when
    /// `--kv-cache-dtype` is `auto`.
    pub fp8_kv_checkpoint: bool,
    /// The quantization method of the weights: the checkpoint's
    /// `quantization_config.quant_method` (lower-case), or the method the
    /// server applied at load ([`ModelConfig::with_quantization`]); None for
    /// half-precision weights.
    pub quant_method: Option<String>,
    /// How each class of weights is stored (wBPP, and which are 8-bit floats).
    pub weights: WeightPrecision,
    /// The longest context the config allows, derived as vLLM derives it:
    /// the smallest of its length fields (`max_position_embeddings`,
    /// `n_positions`, `max_seq_len`, `seq_length`, `model_max_length`,
    /// `max_sequence_length`, `max_seq_length`, `seq_len`; 2048 when none is
    /// present), times `rope_scaling.factor` unless the RoPE type already
    /// counts it (`llama3`, `longrope`, `su`; `yarn` scales
    /// `original_max_position_embeddings`). vLLM's default `--max-model-len`
    /// and the most it accepts without `VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`.
    pub derived_max_model_len: u32,
    /// Present for mixture-of-experts models.
    pub moe: Option<MoeConfig>,
    /// Present for multi-head latent attention models.
    pub mla: Option<MlaConfig>,
    /// Layers that read only a window or chunk of the context (sliding
    /// windows, Llama-4's chunked attention); `None` when every layer reads
    /// all of it.
    pub local_attention: Option<LocalAttention>,
}

/// Looks up the first present alias; `null` counts as absent.
fn field<'a>(obj: &'a Map<String, Value>, names: &[&str]) -> Option<&'a Value> {
    names.iter().find_map(|n| obj.get(*n).filter(|v| !v.is_null()))
}

fn positive_u32(obj: &Map<String, Value>, names: &[&str], canonical: &'static str) -> Result<Option<u32>, ModelConfigError> {
    match field(obj, names) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 && n <= u64::from(u32::MAX) => Ok(Some(n as u32)),
            _ => Err(ModelConfigError::Invalid { field: canonical, value: v.to_string(), reason: "must be a positive integer" }),
        },
    }
}

/// The most layers a config may have: far above any real model's (the
/// deepest have a few hundred), low enough that per-layer work stays small.
const MAX_LAYERS: u32 = 100_000;

/// vLLM's model length when a config names none.
const DEFAULT_DERIVED_MAX_MODEL_LEN: u32 = 2048;

/// The longest context a config allows, as vLLM's `_get_and_verify_max_len`
/// derives it (see [`ModelConfig::derived_max_model_len`]).
fn derived_max_model_len(obj: &Map<String, Value>) -> Result<u32, ModelConfigError> {
    const LENGTH_FIELDS: [&str; 8] = [
        "max_position_embeddings",
        "n_positions",
        "max_seq_len",
        "seq_length",
        "model_max_length",
        "max_sequence_length",
        "max_seq_length",
        "seq_len",
    ];
    // Any positive number: vLLM takes a float or a huge length as it is.
    // `label` names the field in errors.
    let positive = |obj: &Map<String, Value>, key: &str, label: &'static str| -> Result<Option<f64>, ModelConfigError> {
        field(obj, &[key])
            .map(|v| {
                v.as_f64().filter(|x| x.is_finite() && *x > 0.0).ok_or(ModelConfigError::Invalid {
                    field: label,
                    value: v.to_string(),
                    reason: "must be a positive number",
                })
            })
            .transpose()
    };
    let mut derived = f64::INFINITY;
    for name in LENGTH_FIELDS {
        derived = derived.min(positive(obj, name, name)?.unwrap_or(f64::INFINITY));
    }
    if derived.is_infinite() {
        derived = f64::from(DEFAULT_DERIVED_MAX_MODEL_LEN);
    }
    if let Some(rope) = field(obj, &["rope_scaling"]).and_then(Value::as_object) {
        let kind = field(rope, &["rope_type", "type"]).and_then(Value::as_str).unwrap_or("default");
        if !matches!(kind, "llama3" | "longrope" | "su") {
            if kind == "yarn"
                && let Some(original) = positive(rope, "original_max_position_embeddings", "rope_scaling.original_max_position_embeddings")?
            {
                derived = original;
            }
            derived *= positive(rope, "factor", "rope_scaling.factor")?.unwrap_or(1.0);
        }
    }
    Ok(derived.clamp(1.0, f64::from(u32::MAX)) as u32)
}

fn required_u32(obj: &Map<String, Value>, names: &[&'static str], aliases: &'static str) -> Result<u32, ModelConfigError> {
    positive_u32(obj, names, names[0])?.ok_or(ModelConfigError::Missing { field: names[0], aliases })
}

impl ModelConfig {
    /// Parses the text of a HuggingFace `config.json`.
    ///
    /// Guarantees: every count is positive; `num_kv_heads` divides
    /// `num_attention_heads`; a MoE model has `experts_per_token ≤ num_experts`.
    pub fn from_hf_json(text: &str) -> Result<ModelConfig, ModelConfigError> {
        // Read shallowly: memory about the text's size, whatever it carries.
        let root = crate::shallow_json::object(text, &["text_config"]).map_err(|e| match e {
            crate::shallow_json::ObjectError::Syntax(e) => ModelConfigError::NotJson(e),
            crate::shallow_json::ObjectError::NotObject => ModelConfigError::NotJson("top level is not an object".into()),
            crate::shallow_json::ObjectError::Duplicate(key) => ModelConfigError::DuplicateField(key),
        })?;
        let root = &root;
        // Multimodal wrappers (Llama-4, Qwen-VL) keep the language model under `text_config`.
        let text_cfg = root.get("text_config").and_then(Value::as_object);
        let obj = text_cfg.unwrap_or(root);

        let architecture = match field(root, &["architectures"]) {
            None => "unknown",
            Some(Value::Array(classes)) if classes.iter().all(Value::is_string) => {
                classes.first().and_then(Value::as_str).unwrap_or("unknown")
            }
            Some(other) => {
                return Err(ModelConfigError::Invalid {
                    field: "architectures",
                    value: other.to_string().chars().take(60).collect(),
                    reason: "must be a list of model class names, e.g. [\"LlamaForCausalLM\"]",
                });
            }
        }
        .to_string();
        let num_layers = required_u32(obj, &["num_hidden_layers", "n_layer", "num_layers"], "n_layer, num_layers")?;
        if num_layers > MAX_LAYERS {
            return Err(ModelConfigError::Invalid {
                field: "num_hidden_layers",
                value: num_layers.to_string(),
                reason: "must be at most 100000",
            });
        }
        let hidden_size = required_u32(obj, &["hidden_size", "n_embd", "d_model"], "n_embd, d_model")?;
        let num_attention_heads = required_u32(obj, &["num_attention_heads", "n_head"], "n_head")?;
        let num_kv_heads = positive_u32(obj, &["num_key_value_heads", "num_kv_heads", "multi_query_group_num"], "num_key_value_heads")?
            .unwrap_or(num_attention_heads);
        if num_kv_heads > num_attention_heads {
            return Err(ModelConfigError::Invalid {
                field: "num_key_value_heads",
                value: num_kv_heads.to_string(),
                reason: "must not exceed num_attention_heads",
            });
        }
        // Grouped-query attention: every KV head serves the same number of
        // query heads (HF's `repeat_kv`, vLLM's attention layer asserts it).
        if num_attention_heads % num_kv_heads != 0 {
            return Err(ModelConfigError::NotDivisor {
                field: "num_key_value_heads",
                value: num_kv_heads,
                of: "num_attention_heads",
                total: num_attention_heads,
                why: "grouped-query attention shares each KV head among an equal number of query heads",
            });
        }
        let head_dim = match positive_u32(obj, &["head_dim"], "head_dim")? {
            Some(h) => h,
            None if hidden_size % num_attention_heads == 0 => hidden_size / num_attention_heads,
            None => {
                return Err(ModelConfigError::Invalid {
                    field: "hidden_size",
                    value: hidden_size.to_string(),
                    reason: "must be divisible by num_attention_heads when head_dim is absent",
                });
            }
        };
        let ffn = positive_u32(obj, &["intermediate_size", "ffn_hidden_size", "n_inner"], "intermediate_size")?;
        // Llama-4 names the dense-layer FFN `intermediate_size_mlp` and the expert FFN `intermediate_size`.
        let dense_ffn = positive_u32(obj, &["intermediate_size_mlp"], "intermediate_size_mlp")?;
        let vocab_size = required_u32(obj, &["vocab_size", "padded_vocab_size"], "padded_vocab_size")?;
        let derived_max_model_len = derived_max_model_len(obj)?;
        let tie_word_embeddings = match field(obj, &["tie_word_embeddings"]).or_else(|| field(root, &["tie_word_embeddings"])) {
            None => false,
            Some(v) => v.as_bool().ok_or_else(|| ModelConfigError::Invalid {
                field: "tie_word_embeddings",
                value: v.to_string(),
                reason: "must be true or false",
            })?,
        };

        let moe = Self::parse_moe(obj, num_layers, ffn)?;
        let intermediate_size = match (&moe, dense_ffn, ffn) {
            (_, Some(d), _) => d,
            (_, None, Some(f)) => f,
            (None, None, None) => {
                return Err(ModelConfigError::Missing { field: "intermediate_size", aliases: "ffn_hidden_size, n_inner" });
            }
            // A MoE model without any dense width: dense layers (if any) use the expert width.
            (Some(m), None, None) => m.expert_intermediate_size,
        };
        let mla = match positive_u32(obj, &["kv_lora_rank"], "kv_lora_rank")? {
            Some(kv_lora_rank) => {
                let qk_nope_head_dim = positive_u32(obj, &["qk_nope_head_dim"], "qk_nope_head_dim")?.unwrap_or(head_dim);
                Some(MlaConfig {
                    kv_lora_rank,
                    qk_rope_head_dim: positive_u32(obj, &["qk_rope_head_dim"], "qk_rope_head_dim")?.unwrap_or(64),
                    q_lora_rank: positive_u32(obj, &["q_lora_rank"], "q_lora_rank")?,
                    qk_nope_head_dim,
                    v_head_dim: positive_u32(obj, &["v_head_dim"], "v_head_dim")?.unwrap_or(qk_nope_head_dim),
                })
            }
            None => None,
        };

        // Half precision unless the checkpoint says fp8/int8 for activations is
        // irrelevant here: vLLM computes in bf16/fp16 and stores KV in the
        // model dtype by default.
        let dtype_bytes = 2.0;
        let quant = field(root, &["quantization_config"]).or_else(|| field(obj, &["quantization_config"])).map(flattened_modelopt);
        let quant = quant.as_deref();
        let (quant_method, format) = quant.map(quantized_weights).transpose()?.unwrap_or((None, None));
        let fp8_kv_checkpoint = quant.is_some_and(fp8_kv_cache_checkpoint);

        let local_attention = LocalAttention::from_config(obj, num_layers, &architecture);
        let mut config = ModelConfig {
            architecture,
            num_layers,
            hidden_size,
            num_attention_heads,
            num_kv_heads,
            head_dim,
            intermediate_size,
            vocab_size,
            tie_word_embeddings,
            dtype_bytes,
            kv_dtype_bytes: if fp8_kv_checkpoint { 1.0 } else { dtype_bytes },
            fp8_kv_checkpoint,
            quant_method,
            weights: WeightPrecision::half(dtype_bytes),
            derived_max_model_len,
            moe,
            mla,
            local_attention,
        };
        if let Some(q) = quant {
            if let Some(parts) = config.mixed_precision(q)? {
                config.weights = WeightPrecision::mixed(dtype_bytes, &parts);
            } else if let Some(format) = format {
                config.weights = WeightPrecision::quantized(dtype_bytes, format, config.kept_in_half_precision(q)?);
            }
        }
        Ok(config)
    }

    fn parse_moe(obj: &Map<String, Value>, num_layers: u32, ffn: Option<u32>) -> Result<Option<MoeConfig>, ModelConfigError> {
        let experts = positive_u32(obj, &["num_local_experts", "num_experts", "n_routed_experts"], "num_local_experts")?;
        let num_experts = match experts {
            Some(n) if n >= 2 => n,
            _ => return Ok(None),
        };
        let experts_per_token = positive_u32(obj, &["num_experts_per_tok", "moe_topk", "top_k"], "num_experts_per_tok")?.unwrap_or(1);
        if experts_per_token > num_experts {
            return Err(ModelConfigError::Invalid {
                field: "num_experts_per_tok",
                value: experts_per_token.to_string(),
                reason: "must not exceed the number of experts",
            });
        }
        let expert_intermediate_size = match positive_u32(obj, &["moe_intermediate_size"], "moe_intermediate_size")?.or(ffn) {
            Some(f) => f,
            None => return Err(ModelConfigError::Missing { field: "moe_intermediate_size", aliases: "intermediate_size" }),
        };
        let shared_intermediate_size = match positive_u32(obj, &["shared_expert_intermediate_size"], "shared_expert_intermediate_size")? {
            Some(s) => s,
            None => {
                let n_shared = positive_u32(obj, &["n_shared_experts", "num_shared_experts"], "n_shared_experts")?.unwrap_or(0);
                // Llama-4 always has one shared expert of the expert width.
                let llama4_shared = u32::from(field(obj, &["interleave_moe_layer_step"]).is_some());
                n_shared.max(llama4_shared) * expert_intermediate_size
            }
        };
        // Which layers are MoE: DeepSeek/GLM keep the first k dense; Llama-4
        // makes every s-th layer MoE (HF: range(s-1, L, s)); Qwen-MoE uses a
        // sparse step and an explicit dense list.
        let first_dense = positive_u32(obj, &["first_k_dense_replace"], "first_k_dense_replace")?.unwrap_or(0).min(num_layers);
        let interleave_step = positive_u32(obj, &["interleave_moe_layer_step"], "interleave_moe_layer_step")?;
        let num_moe_layers = if let Some(step) = interleave_step {
            num_layers / step
        } else if let Some(step) = positive_u32(obj, &["decoder_sparse_step", "moe_layer_freq"], "decoder_sparse_step")? {
            let dense_listed = field(obj, &["mlp_only_layers"]).and_then(Value::as_array).map_or(0, Vec::len) as u32;
            ((num_layers - first_dense) / step).saturating_sub(dense_listed)
        } else {
            num_layers - first_dense
        };
        Ok(Some(MoeConfig {
            num_experts,
            experts_per_token,
            expert_intermediate_size,
            shared_intermediate_size,
            num_moe_layers,
            interleaved: interleave_step.is_some(),
        }))
    }

    /// Number of layers with a dense FFN.
    pub fn num_dense_layers(&self) -> u32 {
        self.num_layers - self.moe.as_ref().map_or(0, |m| m.num_moe_layers)
    }

    /// Width of the query projection output, H·dH.
    pub fn q_dim(&self) -> f64 {
        f64::from(self.num_attention_heads) * f64::from(self.head_dim)
    }

    /// Width of the key (or value) projection output, dKV = KVH·dH.
    pub fn kv_dim(&self) -> f64 {
        f64::from(self.num_kv_heads) * f64::from(self.head_dim)
    }

    /// Parameters of one layer's attention block: the q, k, v, o
    /// projections, or latent attention's ([`MlaConfig`]: the query's, the
    /// latent's down- and up-projections, and o).
    pub fn attention_params_per_layer(&self) -> f64 {
        let d = f64::from(self.hidden_size);
        match &self.mla {
            Some(m) => m.projection_params(d, f64::from(self.num_attention_heads)).total(),
            None => 2.0 * d * self.q_dim() + 2.0 * d * self.kv_dim(),
        }
    }

    /// How the layers' attention blends, for the latency models: `None`
    /// when every layer reads its whole context.
    pub fn attention_mix(&self) -> Option<AttentionMix> {
        self.local_attention.map(|local| AttentionMix::new(local, self.num_layers))
    }

    /// FLOPs of attention scores per query·key pair and head, over 4: the
    /// mean of the query·key and the weight·value widths. dH for ordinary
    /// attention. Latent attention (vLLM's MLA backends) runs prefill as
    /// ordinary attention over keys and values up-projected from the
    /// latent, (qk_nope + qk_rope + v)/2, and decode over the latent itself
    /// with the up-projections absorbed into the query and output,
    /// (2·kv_lora + qk_rope)/2. Returns (prefill, decode).
    pub fn attention_pair_width(&self) -> (f64, f64) {
        match &self.mla {
            Some(m) => (
                f64::from(m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) / 2.0,
                f64::from(2 * m.kv_lora_rank + m.qk_rope_head_dim) / 2.0,
            ),
            None => (f64::from(self.head_dim), f64::from(self.head_dim)),
        }
    }

    /// Parameters per layer that latent attention applies again to every
    /// cached token of a prefill's context: `kv_b_proj` up-projects the
    /// cached latents to keys and values (vLLM's MLA prefill); 0 for
    /// ordinary attention, whose cache holds the keys and values.
    pub fn context_upprojection_params_per_layer(&self) -> f64 {
        self.mla.as_ref().map_or(0.0, |m| m.projection_params(f64::from(self.hidden_size), f64::from(self.num_attention_heads)).kv_b)
    }

    /// Parameters of one dense SwiGLU FFN (gate, up, down: 3·d·dFF).
    pub fn dense_ffn_params(&self) -> f64 {
        3.0 * f64::from(self.hidden_size) * f64::from(self.intermediate_size)
    }

    /// Parameters of one MoE layer's FFN: all routed experts, shared experts and the router.
    pub fn moe_ffn_params(&self) -> f64 {
        let Some(m) = &self.moe else { return 0.0 };
        let d = f64::from(self.hidden_size);
        3.0 * d * f64::from(m.expert_intermediate_size) * f64::from(m.num_experts)
            + 3.0 * d * f64::from(m.shared_intermediate_size)
            + d * f64::from(m.num_experts)
    }

    /// Total parameter count: embeddings, LM head (unless tied), attention,
    /// norms, dense and MoE FFNs (the `latency-formulas.md` §5 breakdown).
    pub fn total_params(&self) -> f64 {
        let d = f64::from(self.hidden_size);
        let v = f64::from(self.vocab_size);
        let l = f64::from(self.num_layers);
        let embeddings = v * d * if self.tie_word_embeddings { 1.0 } else { 2.0 };
        embeddings
            + l * (self.attention_params_per_layer() + 2.0 * d)
            + f64::from(self.num_dense_layers()) * self.dense_ffn_params()
            + self.moe.as_ref().map_or(0.0, |m| f64::from(m.num_moe_layers)) * self.moe_ffn_params()
            + d
    }

    /// Bytes of all weights (whole model, summed over GPUs).
    pub fn weight_bytes(&self) -> f64 {
        let half = self.weights.half_bytes();
        // Half-precision bytes, less what each class's quantized share saves.
        let stored = self.stored_params_by_class();
        let saved: f64 = WeightClass::ALL.iter().map(|&c| stored.get(c) * (half - self.weights.bytes_per_param(c))).sum();
        self.total_params() * half - saved
    }

    /// Parameters of each class of weights the model stores (a tied LM head
    /// is the embedding matrix, stored once in half precision: none).
    pub fn stored_params_by_class(&self) -> PerWeightClass<f64> {
        let d = f64::from(self.hidden_size);
        let moe_layers = self.moe.as_ref().map_or(0.0, |m| f64::from(m.num_moe_layers));
        PerWeightClass {
            attention: f64::from(self.num_layers) * self.attention_params_per_layer(),
            dense_ffn: f64::from(self.num_dense_layers()) * self.dense_ffn_params(),
            routed_experts: self
                .moe
                .as_ref()
                .map_or(0.0, |m| moe_layers * 3.0 * d * f64::from(m.expert_intermediate_size) * f64::from(m.num_experts)),
            shared_experts: self.moe.as_ref().map_or(0.0, |m| moe_layers * 3.0 * d * f64::from(m.shared_intermediate_size)),
            lm_head: if self.tie_word_embeddings { 0.0 } else { f64::from(self.vocab_size) * d },
        }
    }

    /// Checks that vLLM could shard this model over `tp` GPUs: tp divides the
    /// attention heads, and (for ordinary attention) either divides the KV
    /// heads or is a multiple of them, in which case each KV head is
    /// replicated on tp / KVH ranks. Latent attention stores one latent per
    /// rank, so only the heads rule applies to it.
    pub fn check_tensor_parallel(&self, tp: u32) -> Result<(), TensorParallelError> {
        let (heads, kv_heads) = (self.num_attention_heads, self.num_kv_heads);
        if tp == 0 || !heads.is_multiple_of(tp) {
            return Err(TensorParallelError::HeadsNotDivisible { heads, tp });
        }
        let kv_ok = if tp >= kv_heads { tp.is_multiple_of(kv_heads) } else { kv_heads.is_multiple_of(tp) };
        if self.mla.is_none() && !kv_ok {
            return Err(TensorParallelError::KvHeadsIncompatible { kv_heads, tp });
        }
        Ok(())
    }

    /// This model as a server started with `--quantization method` loads
    /// it. A quantized checkpoint accepts its own method, or its Marlin
    /// kernels' name (`awq_marlin`, `gptq_marlin`), and is unchanged; a
    /// half-precision one is quantized at load, of which vLLM's online FP8
    /// (`fp8`) is simulated: one-byte float weights, multiplied at the FP8
    /// peak where the GPU has one (an A100 runs them weight-only).
    pub fn with_quantization(self, method: &str) -> Result<ModelConfig, QuantizationError> {
        match &self.quant_method {
            Some(checkpoint) => {
                let marlin = ["awq", "gptq"].contains(&checkpoint.as_str()).then(|| format!("{checkpoint}_marlin"));
                if method == checkpoint || marlin.as_deref() == Some(method) {
                    Ok(self)
                } else {
                    let allowed = marlin.map_or_else(|| checkpoint.clone(), |m| format!("{checkpoint}, {m}"));
                    Err(QuantizationError::Mismatch { asked: method.to_string(), checkpoint: checkpoint.clone(), allowed })
                }
            }
            None if method == "fp8" => {
                // Every linear layer and expert, never the LM head.
                let kept_half = PerWeightClass { lm_head: 1.0, ..PerWeightClass::default() };
                let weights = WeightPrecision::quantized(self.dtype_bytes, QuantFormat { bytes_per_param: 1.0, fp8: true }, kept_half);
                Ok(ModelConfig { quant_method: Some(method.to_string()), weights, ..self })
            }
            None => Err(QuantizationError::NotOnline { asked: method.to_string() }),
        }
    }

    /// Whether its KV cache stores each element in fewer bytes than its
    /// activations (an FP8 cache).
    pub fn fp8_kv_cache(&self) -> bool {
        self.kv_dtype_bytes < self.dtype_bytes
    }

    /// This model served with its KV cache stored as `dtype` (vLLM
    /// `--kv-cache-dtype`): only the cache's element size changes. `auto`
    /// stores the model's dtype, or FP8 for a checkpoint whose KV cache is
    /// quantised ([`ModelConfig::fp8_kv_checkpoint`]).
    pub fn with_kv_cache_dtype(self, dtype: crate::vllm::KvCacheDtype) -> ModelConfig {
        let auto_bytes = if self.fp8_kv_checkpoint { 1.0 } else { self.dtype_bytes };
        ModelConfig { kv_dtype_bytes: dtype.bytes(auto_bytes), ..self }
    }

    /// Bytes of KV cache one token occupies, summed over all layers, with
    /// each KV head counted once: 2·L·KVH·dH·kvBPP, or L·(kv_lora_rank + rope
    /// dim)·kvBPP for latent attention (kvBPP: [`ModelConfig::kv_dtype_bytes`]). What the GPUs of a tensor-parallel
    /// instance store together can be more (replicated heads and latents; see
    /// [`ModelConfig::kv_bytes_per_token_per_gpu`]).
    pub fn kv_bytes_per_token(&self) -> f64 {
        let l = f64::from(self.num_layers);
        match &self.mla {
            Some(m) => l * f64::from(m.kv_lora_rank + m.qk_rope_head_dim) * self.kv_dtype_bytes,
            None => 2.0 * l * self.kv_dim() * self.kv_dtype_bytes,
        }
    }

    /// KV bytes per token stored on each GPU under tensor parallelism `tp`:
    /// KV heads are sharded across ranks but never below one head per rank
    /// (vLLM replicates them when tp > KVH), MLA latents are replicated.
    pub fn kv_bytes_per_token_per_gpu(&self, tp: u32) -> f64 {
        match &self.mla {
            Some(_) => self.kv_bytes_per_token(),
            None => {
                let heads_per_gpu = (f64::from(self.num_kv_heads) / f64::from(tp.max(1))).max(1.0);
                self.kv_bytes_per_token() * heads_per_gpu / f64::from(self.num_kv_heads)
            }
        }
    }

    /// Dense-equivalent matmul FLOPs per token through the transformer stack,
    /// excluding attention-score work and the LM head: 2 FLOPs per active
    /// weight (attention projections, dense FFN, the `k` routed experts plus
    /// shared experts and router of MoE layers).
    pub fn linear_flops_per_token(&self) -> f64 {
        let f = self.stack_gemm_flops_per_token_by_class();
        f.attention + f.dense_ffn + f.routed_experts + f.shared_experts
    }

    /// [`ModelConfig::gemm_flops_per_token_by_class`] through the
    /// transformer stack: the LM head's (one row per sampled token, not
    /// per token) counted as 0.
    pub fn stack_gemm_flops_per_token_by_class(&self) -> PerWeightClass<f64> {
        PerWeightClass { lm_head: 0.0, ..self.gemm_flops_per_token_by_class() }
    }

    /// GEMM FLOPs per token of each class of weights: 2 per active weight
    /// (the `k` routed experts with the router; the LM head's, for one
    /// sampled token).
    pub fn gemm_flops_per_token_by_class(&self) -> PerWeightClass<f64> {
        let d = f64::from(self.hidden_size);
        let moe_layers = self.moe.as_ref().map_or(0.0, |m| f64::from(m.num_moe_layers));
        PerWeightClass {
            attention: 2.0 * f64::from(self.num_layers) * self.attention_params_per_layer(),
            dense_ffn: 2.0 * f64::from(self.num_dense_layers()) * self.dense_ffn_params(),
            routed_experts: self.moe.as_ref().map_or(0.0, |m| {
                2.0 * moe_layers
                    * (3.0 * d * f64::from(m.expert_intermediate_size) * f64::from(m.experts_per_token) + d * f64::from(m.num_experts))
            }),
            shared_experts: self.moe.as_ref().map_or(0.0, |m| 2.0 * moe_layers * 3.0 * d * f64::from(m.shared_intermediate_size)),
            lm_head: self.lm_head_flops(),
        }
    }

    /// FLOPs of the LM head for one sampled token: 2·d·V.
    pub fn lm_head_flops(&self) -> f64 {
        2.0 * f64::from(self.hidden_size) * f64::from(self.vocab_size)
    }

    /// Peak activation bytes per GPU of vLLM's memory-profiling run, which
    /// sizes the KV cache: a forward pass over `tokens` tokens
    /// (`--max-num-batched-tokens`), then a sampler pass over
    /// min(`seqs`, `tokens`) rows (`--max-num-seqs`) with top-k and top-p on.
    /// The larger of the two:
    ///
    /// ```text
    /// forward = tokens · BPP · (3·d + (H + 2·KVH)·dH/tp + FFN)
    ///           FFN = 3·dFF/tp (dense: gate/up output and its activated half)
    ///               = k·(3·dFF_e/tp + d) + 3·dFF_sh/tp (MoE: per routed copy, plus shared experts)
    /// sampler = rows · V · 20 bytes   (fp32 logits gathered on every rank, their sorted
    ///                                  values, int64 sort indices, fp32 probabilities)
    /// ```
    ///
    /// 3·d counts the residual stream, the normalised input and the layer
    /// output that are alive together; a model with both dense and MoE
    /// layers takes the wider FFN.
    pub fn profile_activation_bytes_per_gpu(&self, tp: u32, tokens: u32, seqs: u32) -> f64 {
        const SAMPLER_BYTES_PER_LOGIT: f64 = 20.0;
        let tp = f64::from(tp.max(1));
        let d = f64::from(self.hidden_size);
        let dense_ffn = if self.num_dense_layers() > 0 { 3.0 * f64::from(self.intermediate_size) / tp } else { 0.0 };
        let moe_ffn = self.moe.as_ref().map_or(0.0, |m| {
            f64::from(m.experts_per_token) * (3.0 * f64::from(m.expert_intermediate_size) / tp + d)
                + 3.0 * f64::from(m.shared_intermediate_size) / tp
        });
        let width = 3.0 * d + (self.q_dim() + 2.0 * self.kv_dim()) / tp + dense_ffn.max(moe_ffn);
        let forward = f64::from(tokens) * self.dtype_bytes * width;
        let sampler = f64::from(seqs.min(tokens)) * f64::from(self.vocab_size) * SAMPLER_BYTES_PER_LOGIT;
        forward.max(sampler)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA2_7B: &str = r#"{"architectures":["LlamaForCausalLM"],"hidden_size":4096,"intermediate_size":11008,
        "num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":32,"vocab_size":32000,
        "max_position_embeddings":4096,"torch_dtype":"float16","tie_word_embeddings":false}"#;

    #[test]
    fn architectures_must_be_a_list_of_class_names() {
        let with = |v: &str| ModelConfig::from_hf_json(&LLAMA2_7B.replacen(r#"["LlamaForCausalLM"]"#, v, 1));
        assert_eq!(with(r#"[]"#).unwrap().architecture, "unknown");
        assert_eq!(with("null").unwrap().architecture, "unknown");
        for bad in ["0", r#""LlamaForCausalLM""#, "[1]", r#"{"a": 1}"#] {
            let e = with(bad).unwrap_err();
            assert!(matches!(e, ModelConfigError::Invalid { field: "architectures", .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn llama2_7b_counts_match_the_published_size() {
        let m = ModelConfig::from_hf_json(LLAMA2_7B).unwrap();
        assert_eq!(m.head_dim, 128);
        assert_eq!(m.num_kv_heads, 32);
        // Llama-2-7B has 6.74 B parameters.
        assert!((m.total_params() / 1e9 - 6.738).abs() < 0.01, "{}", m.total_params());
        // 2 · 32 layers · 4096 · 2 bytes = 512 KiB of KV per token.
        assert_eq!(m.kv_bytes_per_token(), 524_288.0);
    }

    #[test]
    fn aliases_and_defaults() {
        let m = ModelConfig::from_hf_json(r#"{"n_layer":2,"n_embd":64,"n_head":4,"n_inner":256,"vocab_size":100}"#).unwrap();
        assert_eq!((m.num_layers, m.hidden_size, m.num_kv_heads, m.head_dim, m.intermediate_size), (2, 64, 4, 16, 256));
        assert_eq!(m.architecture, "unknown");
    }

    #[test]
    fn moe_and_quantisation() {
        let m = ModelConfig::from_hf_json(
            r#"{"hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,
                "intermediate_size":14336,"num_local_experts":8,"num_experts_per_tok":2,"vocab_size":32000}"#,
        )
        .unwrap();
        let moe = m.moe.as_ref().unwrap();
        assert_eq!((moe.num_experts, moe.experts_per_token, moe.num_moe_layers), (8, 2, 32));
        // Mixtral-8x7B has 46.7 B parameters.
        assert!((m.total_params() / 1e9 - 46.70).abs() < 0.05, "{}", m.total_params());
        let fp8 = ModelConfig::from_hf_json(
            r#"{"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":10,
                "quantization_config":{"quant_method":"fp8"}}"#,
        )
        .unwrap();
        assert_eq!(fp8.weights.format(), Some(QuantFormat { bytes_per_param: 1.0, fp8: true }));
        // Integer weights are multiplied in half precision: 4-bit AWQ, 8-bit GPTQ, compressed-tensors int8.
        let quantized = |q: &str| {
            let json = format!(
                r#"{{"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":10,"quantization_config":{q}}}"#
            );
            let f = ModelConfig::from_hf_json(&json).unwrap().weights.format().unwrap();
            (f.bytes_per_param, f.fp8)
        };
        assert_eq!(quantized(r#"{"quant_method":"awq","bits":4}"#), (0.5, false));
        assert_eq!(quantized(r#"{"quant_method":"gptq","bits":8}"#), (1.0, false));
        let group = |kind: &str| {
            format!(r#"{{"quant_method":"compressed-tensors","config_groups":{{"g":{{"weights":{{"num_bits":8,"type":"{kind}"}}}}}}}}"#)
        };
        assert_eq!(quantized(&group("int")), (1.0, false));
        assert_eq!(quantized(&group("float")), (1.0, true), "Llama-4-Scout FP8-dynamic's shape");
        // A width without a kernel was read as another one (bits 0 as 4-bit GPTQ).
        for (q, field) in [
            (r#"{"quant_method":"gptq","bits":0}"#, "quantization_config.bits"),
            (r#"{"quant_method":"gptq","bits":3}"#, "quantization_config.bits"),
            (r#"{"quant_method":"awq","bits":"4"}"#, "quantization_config.bits"),
            (&group("int").replace("\"num_bits\":8", "\"num_bits\":2"), "num_bits"),
        ] {
            let json = format!(
                r#"{{"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":10,"quantization_config":{q}}}"#
            );
            let e = ModelConfig::from_hf_json(&json).unwrap_err().to_string();
            assert!(e.contains(field) && e.contains("4- and 8-bit"), "{q}: {e}");
        }
    }

    /// Latent attention's projections, counted as vLLM's MLA modules hold
    /// them, give the published sizes: DeepSeek-V2-Lite 15.7 B parameters,
    /// GLM-5 744 B (less its sparse-attention indexer and its
    /// multi-token-prediction layer, which BLIS does not count).
    #[test]
    fn latent_attention_counts_match_the_published_sizes() {
        let lite = ModelConfig::from_hf_json(include_str!("../../../../data/models/deepseek-ai/DeepSeek-V2-Lite.json")).unwrap();
        // q_proj 2048·16·192, kv_a 2048·576, kv_b 512·16·256, o 16·128·2048.
        assert_eq!(lite.attention_params_per_layer(), 6_291_456.0 + 1_179_648.0 + 2_097_152.0 + 4_194_304.0);
        assert!((lite.total_params() / 1e9 - 15.7).abs() < 0.05, "{}", lite.total_params());
        assert_eq!(lite.attention_pair_width(), ((128.0 + 64.0 + 128.0) / 2.0, (2.0 * 512.0 + 64.0) / 2.0));
        assert_eq!(lite.context_upprojection_params_per_layer(), 2_097_152.0);
        let kv_b = lite.named_module("model.layers.4.self_attn.kv_b_proj").unwrap();
        assert_eq!((kv_b.class, kv_b.share), (WeightClass::Attention, 2_097_152.0 / lite.attention_params_per_layer()));
        let glm = ModelConfig::from_hf_json(include_str!("../../../../data/models/zai-org/GLM-5.2-FP8.json")).unwrap();
        assert!((glm.total_params() / 1e9 - 744.0).abs() < 2.0, "{}", glm.total_params());
        let plain = ModelConfig::from_hf_json(LLAMA2_70B).unwrap();
        assert_eq!((plain.attention_pair_width(), plain.context_upprojection_params_per_layer()), ((128.0, 128.0), 0.0));
    }

    /// `--quantization fp8` quantizes a half-precision checkpoint at load to
    /// what an FP8 checkpoint is; a quantized checkpoint takes only its own
    /// method (or its Marlin kernels) and stays as it is.
    #[test]
    fn quantization_at_load_follows_vllms_rules() {
        let plain = ModelConfig::from_hf_json(LLAMA2_70B).unwrap();
        let checkpoint = |q: &str| {
            ModelConfig::from_hf_json(&format!(
                r#"{{"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":10,"quantization_config":{q}}}"#
            ))
            .unwrap()
        };
        let fp8 = plain.clone().with_quantization("fp8").unwrap();
        assert_eq!(fp8.quant_method.as_deref(), Some("fp8"));
        let fp8_checkpoint = LLAMA2_70B.replacen('{', r#"{"quantization_config":{"quant_method":"fp8"},"#, 1);
        assert_eq!(fp8.weights, ModelConfig::from_hf_json(&fp8_checkpoint).unwrap().weights, "online FP8 is what an FP8 checkpoint is");
        assert!(fp8.weight_bytes() < 0.52 * plain.weight_bytes());
        let prequantized = checkpoint(r#"{"quant_method":"fp8"}"#);
        let awq = checkpoint(r#"{"quant_method":"AWQ","bits":4}"#);
        assert_eq!(awq.clone().with_quantization("awq"), Ok(awq.clone()));
        assert_eq!(awq.clone().with_quantization("awq_marlin"), Ok(awq.clone()));
        assert_eq!(
            awq.with_quantization("fp8").unwrap_err().to_string(),
            "`fp8`: the checkpoint is quantized with awq, and vLLM refuses another method for it; allowed: awq, awq_marlin"
        );
        assert_eq!(
            prequantized.clone().with_quantization("gptq").unwrap_err(),
            QuantizationError::Mismatch { asked: "gptq".into(), checkpoint: "fp8".into(), allowed: "fp8".into() }
        );
        assert!(matches!(plain.with_quantization("bitsandbytes"), Err(QuantizationError::NotOnline { .. })));
    }

    /// vLLM's `_get_and_verify_max_len` on hand-written length fields.
    #[test]
    fn derived_max_model_len_follows_vllm() {
        let with = |extra: &str| {
            let json = format!(
                r#"{{"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":10{extra}}}"#
            );
            ModelConfig::from_hf_json(&json).map(|m| m.derived_max_model_len)
        };
        assert_eq!(with("").unwrap(), 2048);
        assert_eq!(with(r#","max_position_embeddings":4096"#).unwrap(), 4096);
        // The smallest length field wins.
        assert_eq!(with(r#","max_position_embeddings":4096,"n_positions":1024,"seq_length":8192"#).unwrap(), 1024);
        // A float or astronomically large length field is taken as vLLM takes it.
        assert_eq!(with(r#","max_position_embeddings":4096,"model_max_length":1e30"#).unwrap(), 4096);
        assert_eq!(with(r#","seq_length":1e30"#).unwrap(), u32::MAX);
        // Linear / dynamic scaling (legacy `type` key) multiplies by the factor.
        assert_eq!(with(r#","max_position_embeddings":4096,"rope_scaling":{"type":"linear","factor":2.0}"#).unwrap(), 8192);
        // yarn scales the original length (DeepSeek-V2-Lite: 4096 · 40).
        let yarn =
            r#","max_position_embeddings":163840,"rope_scaling":{"type":"yarn","factor":40,"original_max_position_embeddings":4096}"#;
        assert_eq!(with(yarn).unwrap(), 163_840);
        let qwen =
            r#","max_position_embeddings":32768,"rope_scaling":{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32768}"#;
        assert_eq!(with(qwen).unwrap(), 131_072);
        // llama3 RoPE already counts its factor in max_position_embeddings.
        assert_eq!(with(r#","max_position_embeddings":131072,"rope_scaling":{"rope_type":"llama3","factor":8.0}"#).unwrap(), 131_072);
        // A rope type without a factor leaves the length alone.
        assert_eq!(with(r#","max_position_embeddings":4096,"rope_scaling":{"rope_type":"default"}"#).unwrap(), 4096);
        let e = with(r#","max_position_embeddings":4096,"rope_scaling":{"type":"linear","factor":-2}"#).unwrap_err();
        assert!(e.to_string().contains("rope_scaling.factor"), "{e}");
    }

    #[test]
    fn errors_name_the_field() {
        let e = ModelConfig::from_hf_json(r#"{"hidden_size":64}"#).unwrap_err();
        assert_eq!(e.to_string(), "missing field `num_hidden_layers` (also accepted: n_layer, num_layers)");
        let e = ModelConfig::from_hf_json(r#"{"hidden_size":-1,"num_hidden_layers":2}"#).unwrap_err();
        assert!(e.to_string().contains("hidden_size"), "{e}");
        assert!(matches!(ModelConfig::from_hf_json("[1]"), Err(ModelConfigError::NotJson(_))));
        assert!(matches!(ModelConfig::from_hf_json("{"), Err(ModelConfigError::NotJson(_))));
        // Absurdly deep models are refused before any per-layer work (a `re:` ignore entry is matched layer by layer).
        let deep = LLAMA2_70B.replace(
            r#""num_hidden_layers":80"#,
            r#""num_hidden_layers":400000000,"quantization_config":{"quant_method":"fp8","ignore":["re:.*"]}"#,
        );
        assert_eq!(
            ModelConfig::from_hf_json(&deep).unwrap_err(),
            ModelConfigError::Invalid { field: "num_hidden_layers", value: "400000000".into(), reason: "must be at most 100000" }
        );
        // KV heads that do not divide the query heads (fuzzing found 64 over 6 accepted).
        let e = ModelConfig::from_hf_json(&LLAMA2_70B.replace(r#""num_key_value_heads":8"#, r#""num_key_value_heads":6"#)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "field `num_key_value_heads` = 6 does not divide `num_attention_heads` = 64: grouped-query attention shares each KV head among an equal number of query heads"
        );
        // A field given twice is refused, not read as its last value (fuzzing: a second num_hidden_layers won).
        let twice = LLAMA2_70B.replacen('{', r#"{"num_hidden_layers":100000,"#, 1);
        assert_eq!(ModelConfig::from_hf_json(&twice).unwrap_err(), ModelConfigError::DuplicateField("num_hidden_layers".into()));
        // Whether the LM head shares the embedding's weights is a boolean, not any value (fuzzing: "abc" read as false).
        let e =
            ModelConfig::from_hf_json(&LLAMA2_70B.replace(r#""vocab_size":32000"#, r#""vocab_size":32000,"tie_word_embeddings":"abc""#))
                .unwrap_err();
        assert!(e.to_string().contains("tie_word_embeddings") && e.to_string().contains("true or false"), "{e}");
    }

    pub(super) const LLAMA2_70B: &str = r#"{"hidden_size":8192,"intermediate_size":28672,"num_attention_heads":64,
        "num_hidden_layers":80,"num_key_value_heads":8,"vocab_size":32000,"torch_dtype":"float16"}"#;

    #[test]
    fn tensor_parallel_follows_vllms_sharding_rules() {
        let m = ModelConfig::from_hf_json(LLAMA2_70B).unwrap();
        // 64 heads, 8 KV heads: tp must divide 64 and divide or be a multiple of 8.
        for tp in [1, 2, 4, 8, 16, 32, 64] {
            assert_eq!(m.check_tensor_parallel(tp), Ok(()), "tp {tp}");
        }
        assert_eq!(m.check_tensor_parallel(3), Err(TensorParallelError::HeadsNotDivisible { heads: 64, tp: 3 }));
        assert_eq!(m.check_tensor_parallel(0), Err(TensorParallelError::HeadsNotDivisible { heads: 64, tp: 0 }));
        // 48 heads, 16 KV heads: tp 12 and 24 divide the heads, but 12 does not
        // divide 16 and 24 is not a multiple of it.
        let odd = ModelConfig::from_hf_json(
            r#"{"hidden_size":1536,"num_hidden_layers":2,"num_attention_heads":48,"num_key_value_heads":16,"intermediate_size":64,"vocab_size":10}"#,
        )
        .unwrap();
        assert_eq!(odd.check_tensor_parallel(8), Ok(()));
        assert_eq!(odd.check_tensor_parallel(12), Err(TensorParallelError::KvHeadsIncompatible { kv_heads: 16, tp: 12 }));
        assert_eq!(odd.check_tensor_parallel(24), Err(TensorParallelError::KvHeadsIncompatible { kv_heads: 16, tp: 24 }));
    }

    /// An FP8 KV cache (vLLM `--kv-cache-dtype fp8`) takes one byte per
    /// element, for grouped and latent attention alike; a half-precision
    /// one is what `auto` gives; nothing else about the model changes.
    #[test]
    fn an_fp8_kv_cache_halves_the_bytes_of_every_cached_token() {
        use crate::vllm::KvCacheDtype;
        let dense = ModelConfig::from_hf_json(LLAMA2_70B).unwrap();
        let mla = ModelConfig::from_hf_json(crate::catalog::find_model("deepseek-ai/DeepSeek-V2-Lite").unwrap().config_json).unwrap();
        assert!(mla.mla.is_some());
        for m in [dense, mla] {
            let fp8 = m.clone().with_kv_cache_dtype(KvCacheDtype::Fp8);
            for tp in [1, 2, 8] {
                assert_eq!(fp8.kv_bytes_per_token_per_gpu(tp) * 2.0, m.kv_bytes_per_token_per_gpu(tp));
            }
            assert_eq!(ModelConfig { kv_dtype_bytes: m.kv_dtype_bytes, ..fp8.clone() }, m, "only the cache's element size changes");
            assert_eq!(m.clone().with_kv_cache_dtype(KvCacheDtype::Auto), m);
            assert_eq!(fp8.with_kv_cache_dtype(KvCacheDtype::Half), m);
        }
        for (name, want) in [
            ("auto", KvCacheDtype::Auto),
            ("bfloat16", KvCacheDtype::Half),
            ("fp8_e5m2", KvCacheDtype::Fp8),
            ("fp8_inc", KvCacheDtype::Fp8),
        ] {
            assert_eq!(name.parse::<KvCacheDtype>(), Ok(want));
        }
        for refused in ["fp8_ds_mla", "int8", "FP8", ""] {
            assert!(refused.parse::<KvCacheDtype>().unwrap_err().contains("allowed: auto, bfloat16"), "{refused}");
        }
    }

    #[test]
    fn kv_heads_are_replicated_once_tp_exceeds_them() {
        let m = ModelConfig::from_hf_json(LLAMA2_70B).unwrap();
        // 2 · 80 layers · 128 · 2 bytes = 40 KiB per KV head per token.
        let per_head = 2.0 * 80.0 * 128.0 * 2.0;
        assert_eq!(m.kv_bytes_per_token(), 8.0 * per_head);
        assert_eq!(m.kv_bytes_per_token_per_gpu(4), 2.0 * per_head);
        assert_eq!(m.kv_bytes_per_token_per_gpu(8), per_head);
        // tp 16: each of the 8 heads lives on two ranks, one head per GPU.
        assert_eq!(m.kv_bytes_per_token_per_gpu(16), per_head);
    }

    #[test]
    fn profiling_activation_peak_is_the_larger_of_forward_and_sampler() {
        // Llama-2-7B, tp 1, 2048 tokens: 2048 · 2 · (3·4096 + 3·4096 + 3·11008) bytes.
        let llama = ModelConfig::from_hf_json(LLAMA2_7B).unwrap();
        assert_eq!(llama.profile_activation_bytes_per_gpu(1, 2048, 128), 235_929_600.0);
        // Mixtral-8x7B, tp 2: 2048 · 2 · (3·4096 + (4096 + 2·1024)/2 + 2·(3·14336/2 + 4096)).
        let mixtral = ModelConfig::from_hf_json(
            r#"{"hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,
                "intermediate_size":14336,"num_local_experts":8,"num_experts_per_tok":2,"vocab_size":32000}"#,
        )
        .unwrap();
        assert_eq!(mixtral.profile_activation_bytes_per_gpu(2, 2048, 128), 272_629_760.0);
        // A 128k vocabulary at 1024 sequences: the sampler's 1024 · 128256 · 20 bytes dominate.
        let big_vocab = LLAMA2_7B.replace("32000", "128256");
        let m = ModelConfig::from_hf_json(&big_vocab).unwrap();
        assert_eq!(m.profile_activation_bytes_per_gpu(1, 2048, 1024), 2_626_682_880.0);
        // Rows are capped by the tokens: 512 tokens sample at most 512 rows.
        assert_eq!(m.profile_activation_bytes_per_gpu(1, 512, 1024), 512.0 * 128_256.0 * 20.0);
    }
}
