//! How a checkpoint stores its weights: half precision, or a quantized
//! format for some classes of weights and half precision for the rest, read
//! from `quantization_config` as vLLM loads it.

use std::borrow::Cow;

use serde_json::Value;

use super::{ModelConfig, ModelConfigError};

/// The kinds of weights a quantized checkpoint may store at different
/// precisions. Embeddings are not among them: vLLM never quantizes them,
/// and a step gathers only its tokens' rows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WeightClass {
    /// Q/K/V/O projections of every layer.
    Attention,
    /// Gate, up and down projections of the dense FFN layers.
    DenseFfn,
    /// The routed experts of the MoE layers. Their routers stay in half
    /// precision (vLLM never quantizes them); their few FLOPs are counted
    /// with the experts'.
    RoutedExperts,
    /// The always-active shared experts of the MoE layers.
    SharedExperts,
    /// The LM head.
    LmHead,
}

impl WeightClass {
    /// Every class, in the order of [`PerWeightClass`]'s fields.
    pub const ALL: [WeightClass; 5] =
        [WeightClass::Attention, WeightClass::DenseFfn, WeightClass::RoutedExperts, WeightClass::SharedExperts, WeightClass::LmHead];
}

/// One value for each [`WeightClass`].
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct PerWeightClass<T> {
    /// [`WeightClass::Attention`]'s.
    pub attention: T,
    /// [`WeightClass::DenseFfn`]'s.
    pub dense_ffn: T,
    /// [`WeightClass::RoutedExperts`]'s.
    pub routed_experts: T,
    /// [`WeightClass::SharedExperts`]'s.
    pub shared_experts: T,
    /// [`WeightClass::LmHead`]'s.
    pub lm_head: T,
}

impl PerWeightClass<f64> {
    /// Σ over classes of this value times `other`'s.
    pub fn weighted_sum(&self, other: &PerWeightClass<f64>) -> f64 {
        WeightClass::ALL.iter().map(|&c| self.get(c) * other.get(c)).sum()
    }
}

impl<T> PerWeightClass<T> {
    /// The value `f` gives each class.
    pub fn from_fn(mut f: impl FnMut(WeightClass) -> T) -> PerWeightClass<T> {
        PerWeightClass {
            attention: f(WeightClass::Attention),
            dense_ffn: f(WeightClass::DenseFfn),
            routed_experts: f(WeightClass::RoutedExperts),
            shared_experts: f(WeightClass::SharedExperts),
            lm_head: f(WeightClass::LmHead),
        }
    }

    /// The value of `class`.
    pub fn get(&self, class: WeightClass) -> &T {
        match class {
            WeightClass::Attention => &self.attention,
            WeightClass::DenseFfn => &self.dense_ffn,
            WeightClass::RoutedExperts => &self.routed_experts,
            WeightClass::SharedExperts => &self.shared_experts,
            WeightClass::LmHead => &self.lm_head,
        }
    }

    fn get_mut(&mut self, class: WeightClass) -> &mut T {
        match class {
            WeightClass::Attention => &mut self.attention,
            WeightClass::DenseFfn => &mut self.dense_ffn,
            WeightClass::RoutedExperts => &mut self.routed_experts,
            WeightClass::SharedExperts => &mut self.shared_experts,
            WeightClass::LmHead => &mut self.lm_head,
        }
    }
}

/// A quantized weight format.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct QuantFormat {
    /// Bytes per weight: 1 for 8-bit, 0.5 for 4-bit, 0.53125 for MXFP4
    /// (4-bit with a scale per 32), 0.5625 for NVFP4 (a scale per 16).
    pub bytes_per_param: f64,
    /// Whether the weights are 8-bit floats, which vLLM multiplies in FP8
    /// where the GPU has FP8 tensor cores. Integer 8- and 4-bit weights
    /// (GPTQ, AWQ, compressed-tensors int) are taken as dequantised to half
    /// precision for the product (Marlin's W8A16 and W4A16 kernels).
    pub fp8: bool,
}

/// How a checkpoint stores its weights: in half precision, or partly in a
/// quantized format. As vLLM loads it, the LM head stays in half precision
/// (only GPTQ's `lm_head: true` quantizes it), and so do the modules a
/// checkpoint's `ignore` / `modules_to_not_convert` / `ignored_layers` list
/// names (Llama-4-Scout's FP8 checkpoint keeps all its attention in BF16).
///
/// A checkpoint may store parts of its weights in different formats
/// (compressed-tensors groups of different widths, ModelOpt's
/// `MIXED_PRECISION`): each format has its share of every class.
///
/// Guarantees: every share is in [0, 1], a class's shares sum to at most 1,
/// and there are none without a format.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct WeightPrecision {
    half_bytes: f64,
    /// The formats, the checkpoint's main one first, each with its shares.
    parts: [Option<(QuantFormat, PerWeightClass<f64>)>; MAX_FORMATS],
}

/// Most distinct weight formats one checkpoint is read with.
const MAX_FORMATS: usize = 3;

impl WeightPrecision {
    /// Every weight in half precision (`half_bytes` per weight).
    pub fn half(half_bytes: f64) -> WeightPrecision {
        WeightPrecision { half_bytes, parts: [None; MAX_FORMATS] }
    }

    /// Every weight but the LM head in `format`, less the shares of each
    /// class `kept_half` says stay in half precision (each clamped to [0, 1]).
    pub(super) fn quantized(half_bytes: f64, format: QuantFormat, kept_half: PerWeightClass<f64>) -> WeightPrecision {
        let share = PerWeightClass::from_fn(|c| 1.0 - kept_half.get(c).clamp(0.0, 1.0));
        WeightPrecision::mixed(half_bytes, &[(format, share)])
    }

    /// Weights in several formats, each with the share of every class it
    /// holds; an earlier part takes a class first (later shares are cut to
    /// what is left), parts of one format are merged, and formats past the
    /// third are left in half precision.
    pub(super) fn mixed(half_bytes: f64, parts: &[FormatPart]) -> WeightPrecision {
        let mut out = WeightPrecision::half(half_bytes);
        let mut taken = PerWeightClass::<f64>::default();
        for (format, share) in parts {
            let share = PerWeightClass::from_fn(|c| share.get(c).clamp(0.0, 1.0).min(1.0 - taken.get(c)).max(0.0));
            let slot = out.parts.iter().position(|p| p.is_none_or(|(f, _)| f == *format));
            let Some(slot) = slot else { continue };
            let (_, held) = out.parts[slot].get_or_insert((*format, PerWeightClass::default()));
            *held = PerWeightClass::from_fn(|c| held.get(c) + share.get(c));
            taken = PerWeightClass::from_fn(|c| taken.get(c) + share.get(c));
        }
        out
    }

    /// The quantized format, if any weights are in one: the main one of a
    /// checkpoint with several.
    pub fn format(&self) -> Option<QuantFormat> {
        self.parts[0].map(|(f, _)| f)
    }

    /// The share of `class`'s weights stored in a quantized format.
    pub fn quantized_share(&self, class: WeightClass) -> f64 {
        self.parts.iter().flatten().map(|(_, share)| share.get(class)).sum()
    }

    /// Mean bytes per weight of `class`.
    pub fn bytes_per_param(&self, class: WeightClass) -> f64 {
        let quantized: f64 = self.parts.iter().flatten().map(|(f, share)| share.get(class) * f.bytes_per_param).sum();
        quantized + (1.0 - self.quantized_share(class)) * self.half_bytes
    }

    /// [`WeightPrecision::bytes_per_param`] of every class.
    pub fn bytes_per_param_by_class(&self) -> PerWeightClass<f64> {
        PerWeightClass::from_fn(|c| self.bytes_per_param(c))
    }

    /// The share of `class`'s weights that are 8-bit floats, multiplied at
    /// the GPU's FP8 peak.
    pub fn fp8_share(&self, class: WeightClass) -> f64 {
        self.parts.iter().flatten().filter(|(f, _)| f.fp8).map(|(_, share)| share.get(class)).sum()
    }

    /// Bytes per weight of the whole model in half precision.
    pub fn half_bytes(&self) -> f64 {
        self.half_bytes
    }
}

/// What a `quantization_config` says of the weights: its `quant_method`
/// (lower-case), and the quantized format if it names a precision: 8-bit
/// floats (an FP8 method or format, or compressed-tensors weights of type
/// float), MXFP4 (gpt-oss), NVFP4 (ModelOpt, compressed-tensors
/// `nvfp4-pack-quantized`), or integers (GPTQ, AWQ, compressed-tensors int);
/// NVIDIA ModelOpt's by its `quant_algo`.
pub(super) fn quantized_weights(q: &Value) -> Result<(Option<String>, Option<QuantFormat>), ModelConfigError> {
    // A width the kernels do not have would silently read as another one.
    let groups = q.get("config_groups").and_then(Value::as_object).into_iter().flat_map(|g| g.values());
    let group_bits =
        groups.filter_map(|g| g.get("weights")?.get("num_bits")).map(|b| ("quantization_config.config_groups.*.weights.num_bits", Some(b)));
    for (field, bits) in std::iter::once(("quantization_config.bits", q.get("bits"))).chain(group_bits) {
        if let Some(b) = bits
            && !b.as_u64().is_some_and(|b| b == 4 || b == 8)
        {
            return Err(ModelConfigError::Invalid { field, value: b.to_string(), reason: "BLIS simulates 4- and 8-bit weights" });
        }
    }
    let method = q.get("quant_method").and_then(Value::as_str).map(str::to_ascii_lowercase);
    Ok((method.clone(), quant_format(q, method.as_deref().unwrap_or(""))))
}

/// The weights section of a compressed-tensors config's first group
/// (every group quantises weights to the same width and type in practice).
fn group_weights(q: &Value) -> Option<&Value> {
    q.get("config_groups").and_then(Value::as_object).and_then(|groups| groups.values().find_map(|g| g.get("weights")))
}

/// A format and the share of each class of weights stored in it.
pub(super) type FormatPart = (QuantFormat, PerWeightClass<f64>);

/// Bytes per MXFP4 weight: a 4-bit value plus its share of the 8-bit
/// scale of each block of 32, (32·4 + 8)/32 bits.
const MXFP4_BYTES_PER_PARAM: f64 = (32.0 * 4.0 + 8.0) / 32.0 / 8.0;

/// Bytes per NVFP4 weight: a 4-bit float plus its share of the FP8 (E4M3)
/// scale of each block of 16, (16·4 + 8)/16 bits.
const NVFP4_BYTES_PER_PARAM: f64 = (16.0 * 4.0 + 8.0) / 16.0 / 8.0;

/// The weight format of NVIDIA ModelOpt's `quant_algo` (`FP8`,
/// `FP8_PER_CHANNEL_PER_TOKEN`, `NVFP4`, `W4A16_NVFP4`, `W4A8_AWQ`, …), as
/// vLLM's `modelopt` method loads it. `None` for `MIXED_PRECISION` (a width
/// per layer) and algorithms it does not name.
fn modelopt_format(algo: &str) -> Option<QuantFormat> {
    let algo = algo.to_ascii_uppercase();
    if algo.contains("NVFP4") || algo.contains("FP4") {
        // Hopper and older GPUs run it as W4A16 (Marlin): half-precision products.
        Some(QuantFormat { bytes_per_param: NVFP4_BYTES_PER_PARAM, fp8: false })
    } else if algo.starts_with("FP8") {
        Some(QuantFormat { bytes_per_param: 1.0, fp8: true })
    } else if algo.contains("INT4") || algo.starts_with("W4") {
        Some(QuantFormat { bytes_per_param: 0.5, fp8: false })
    } else if algo.contains("INT8") || algo.starts_with("W8") {
        Some(QuantFormat { bytes_per_param: 1.0, fp8: false })
    } else {
        None
    }
}

/// Whether a `quantization_config` of `method` names 8-bit floats (its
/// method or its `fmt`).
fn fp8_named(q: &Value, method: &str) -> bool {
    let fmt = q.get("fmt").and_then(Value::as_str).unwrap_or("").to_ascii_lowercase();
    method.contains("fp8") || fmt.starts_with("e4m3") || fmt.starts_with("e5m2")
}

/// Bytes per weight of a width BLIS simulates (8 or 4 bits).
fn bytes_of_bits(bits: u64) -> Option<f64> {
    match bits {
        8 => Some(1.0),
        4 => Some(0.5),
        _ => None,
    }
}

/// A format of `bytes_per_param`, multiplied in FP8 when it is 8-bit floats.
fn width(bytes_per_param: f64, float: bool) -> QuantFormat {
    QuantFormat { bytes_per_param, fp8: float && bytes_per_param == 1.0 }
}

/// The format of a compressed-tensors group's `weights` section:
/// `num_bits` of `type` (`float` or int); 4-bit floats with an 8-bit scale
/// per block are NVFP4 (blocks of 16, `nvfp4-pack-quantized`) and MXFP4
/// (blocks of 32).
fn group_format(w: &Value, fp8_named: bool) -> Option<QuantFormat> {
    let b = w.get("num_bits").and_then(Value::as_u64).and_then(bytes_of_bits)?;
    let float = w.get("type").and_then(Value::as_str) == Some("float");
    Some(match (float && b == 0.5).then(|| w.get("group_size").and_then(Value::as_u64)).flatten() {
        Some(16) => width(NVFP4_BYTES_PER_PARAM, false),
        Some(32) => width(MXFP4_BYTES_PER_PARAM, false),
        _ => width(b, float || fp8_named),
    })
}

/// The quantized format of a `quantization_config` of `method` ([`quantized_weights`]).
fn quant_format(q: &Value, method: &str) -> Option<QuantFormat> {
    if method.starts_with("modelopt") {
        return q.get("quant_algo").and_then(Value::as_str).and_then(modelopt_format);
    }
    let fp8_named = fp8_named(q, method);
    if let Some(b) = q.get("bits").and_then(Value::as_u64).and_then(bytes_of_bits) {
        return Some(width(b, fp8_named));
    }
    if let Some(f) = group_weights(q).and_then(|w| group_format(w, fp8_named)) {
        return Some(f);
    }
    if fp8_named {
        Some(width(1.0, true))
    } else if method == "mxfp4" {
        // OCP microscaling: 4-bit floats with one 8-bit scale per 32, which
        // Hopper and older GPUs dequantise to half precision for the product.
        Some(width(MXFP4_BYTES_PER_PARAM, false))
    } else if method.contains("awq") || method.contains("gptq") || method.contains("int4") {
        Some(width(0.5, false))
    } else {
        None
    }
}

/// A `quantization_config` in the shape of ModelOpt's `hf_quant_config.json`
/// (`producer.name: modelopt`, the settings under `quantization`), flattened
/// to the shape NVIDIA's newer `config.json` files carry (`quant_method:
/// modelopt`, `quant_algo`, `kv_cache_quant_algo`, `exclude_modules` at the
/// top), as vLLM reads both; any other config unchanged.
pub(super) fn flattened_modelopt(q: &Value) -> Cow<'_, Value> {
    let producer = q.get("producer").and_then(|p| p.get("name")).and_then(Value::as_str);
    let method = q.get("quant_method").and_then(Value::as_str);
    let modelopt = producer.is_some_and(|p| p.eq_ignore_ascii_case("modelopt"))
        || method.is_some_and(|m| m.to_ascii_lowercase().starts_with("modelopt"));
    match (q.as_object(), q.get("quantization").and_then(Value::as_object)) {
        (Some(outer), Some(inner)) if modelopt => {
            let mut flat = outer.clone();
            flat.remove("quantization");
            flat.extend(inner.iter().map(|(k, v)| (k.clone(), v.clone())));
            flat.entry("quant_method").or_insert_with(|| Value::from("modelopt"));
            Cow::Owned(Value::Object(flat))
        }
        _ => Cow::Borrowed(q),
    }
}

/// Whether a (flattened) `quantization_config` quantises the KV cache to
/// 8-bit floats, which vLLM's `--kv-cache-dtype auto` then stores
/// (`resolve_kv_cache_dtype_string`: ModelOpt's `kv_cache_quant_algo: FP8`,
/// or a static 8-bit float `kv_cache_scheme`, become `fp8_e4m3`). vLLM
/// reads this of ModelOpt checkpoints only and falls back to the model's
/// dtype for any other algorithm; a compressed-tensors `kv_cache_scheme`
/// gives its scales but needs `--kv-cache-dtype fp8` to be used.
pub(super) fn fp8_kv_cache_checkpoint(q: &Value) -> bool {
    let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("");
    if !method.to_ascii_lowercase().starts_with("modelopt") {
        return false;
    }
    match q.get("kv_cache_scheme").filter(|v| !v.is_null()).or_else(|| q.get("kv_cache_quant_algo")) {
        Some(Value::String(algo)) => algo.eq_ignore_ascii_case("fp8"),
        Some(scheme @ Value::Object(_)) => {
            scheme.get("dynamic") == Some(&Value::Bool(false))
                && scheme.get("num_bits").and_then(Value::as_u64) == Some(8)
                && scheme.get("type").and_then(Value::as_str) == Some("float")
        }
        _ => false,
    }
}

/// The keys of a `quantization_config` that list modules left in half
/// precision: compressed-tensors' and ModelOpt's `ignore`, Hugging Face's
/// (FP8, AWQ) `modules_to_not_convert`, vLLM FP8's `ignored_layers`,
/// ModelOpt's older `exclude_modules`.
const KEPT_HALF_KEYS: [&str; 4] = ["ignore", "modules_to_not_convert", "ignored_layers", "exclude_modules"];

/// Words in a module name that place it outside the language model (a
/// multimodal checkpoint's vision tower or projector).
const NOT_LANGUAGE_MODEL: [&str; 6] = ["vision", "visual", "image", "audio", "multi_modal", "mm_projector"];

/// A module an ignore list names, as a share of its class's weights.
#[derive(Debug, PartialEq)]
pub(super) struct NamedModule {
    pub(super) class: WeightClass,
    /// The layer, or None for every layer.
    pub(super) layer: Option<u32>,
    /// The share of one layer's weights of the class (of one expert's, for a
    /// numbered expert: the share is then divided among the experts).
    pub(super) share: f64,
}

impl ModelConfig {
    /// What a module name means for precision, read by its words as vLLM's
    /// model code names modules (`model.layers.3.self_attn.q_proj`,
    /// `block_sparse_moe.experts.0.w1`, `mlp.shared_expert.down_proj`,
    /// `lm_head`); None for routers, norms, embeddings, the vision tower and
    /// names it cannot place.
    pub(super) fn named_module(&self, name: &str) -> Option<NamedModule> {
        let words: Vec<&str> = name.split('.').collect();
        if words.iter().any(|w| NOT_LANGUAGE_MODEL.iter().any(|n| w.contains(n))) {
            return None;
        }
        let last = *words.last()?;
        let layer = words.windows(2).find(|w| ["layers", "layer", "h", "blocks"].contains(&w[0])).and_then(|w| w[1].parse().ok());
        let ffn_share = match last {
            "gate_proj" | "up_proj" | "down_proj" | "w1" | "w2" | "w3" => 1.0 / 3.0,
            "gate_up_proj" | "w13" => 2.0 / 3.0,
            "fc1" | "fc2" | "c_fc" | "c_proj" | "dense_h_to_4h" | "dense_4h_to_h" => 0.5,
            _ => 1.0,
        };
        let module = |class, share| Some(NamedModule { class, layer, share });
        if words.contains(&"lm_head") {
            return module(WeightClass::LmHead, 1.0);
        }
        if words.iter().any(|w| w.starts_with("shared_expert")) {
            return module(WeightClass::SharedExperts, ffn_share);
        }
        if let Some(i) = words.iter().position(|w| *w == "experts") {
            let one_expert = words.get(i + 1).is_some_and(|w| w.parse::<u32>().is_ok());
            let experts = self.moe.as_ref().map_or(1.0, |m| f64::from(m.num_experts));
            return module(WeightClass::RoutedExperts, if one_expert { ffn_share / experts } else { ffn_share });
        }
        if let Some(mla) = &self.mla
            && words.iter().any(|w| w.contains("attn") || w.contains("attention"))
        {
            let p = mla.projection_params(f64::from(self.hidden_size), f64::from(self.num_attention_heads));
            let share = match last {
                "q_a_proj" => p.q_a,
                "q_b_proj" | "q_proj" => p.q_b,
                "kv_a_proj_with_mqa" => p.kv_a,
                "kv_b_proj" => p.kv_b,
                "o_proj" => p.o,
                _ => p.total(),
            } / p.total();
            return module(WeightClass::Attention, share);
        }
        if words.iter().any(|w| w.contains("attn") || w.contains("attention")) {
            let (q, kv) = (self.q_dim(), self.kv_dim());
            let share = match last {
                "q_proj" | "query" | "o_proj" | "out_proj" | "dense" | "c_proj" => q,
                "k_proj" | "v_proj" | "key" | "value" => kv,
                "qkv_proj" | "query_key_value" | "c_attn" | "Wqkv" | "W_pack" => q + 2.0 * kv,
                _ => 2.0 * q + 2.0 * kv,
            } / (2.0 * q + 2.0 * kv);
            return module(WeightClass::Attention, share);
        }
        let in_ffn = words.iter().any(|w| ["mlp", "feed_forward", "ffn", "block_sparse_moe"].contains(w));
        (in_ffn && !["gate", "router"].contains(&last)).then_some(NamedModule { class: WeightClass::DenseFfn, layer, share: ffn_share })
    }

    /// Module names of every class, in the Llama naming, that a `re:`
    /// ignore entry is matched against.
    fn canonical_module_names(&self) -> Vec<String> {
        let mut names = vec!["lm_head".to_string()];
        for i in 0..self.num_layers {
            let mut ffn =
                |prefix: &str| names.extend(["gate_proj", "up_proj", "down_proj"].map(|p| format!("model.layers.{i}.{prefix}.{p}")));
            ffn("mlp");
            if self.moe.is_some() {
                ffn("mlp.experts");
                ffn("mlp.shared_experts");
            }
            names.extend(["q_proj", "k_proj", "v_proj", "o_proj"].map(|p| format!("model.layers.{i}.self_attn.{p}")));
        }
        names
    }

    /// The share of each class of weights a checkpoint's
    /// `quantization_config` leaves in half precision: the LM head (unless
    /// GPTQ's `lm_head` is true), what its [`KEPT_HALF_KEYS`] lists name,
    /// and what compressed-tensors' `config_groups` do not target. An entry
    /// prefixed `re:` is a regular expression matched from the start of a
    /// module name, as compressed-tensors matches it.
    pub(super) fn kept_in_half_precision(&self, q: &Value) -> Result<PerWeightClass<f64>, ModelConfigError> {
        let listed = kept_half_list(q);
        let mut kept = self.named_shares(listed, "quantization_config.ignore")?;
        if let Some(targets) = narrow_targets(q) {
            let targeted = self.named_shares(targets.into_iter(), "quantization_config.config_groups.*.targets")?;
            // Targets that match none of the names BLIS knows (patterns in
            // another model's naming) are taken as every linear layer, not none.
            if WeightClass::ALL.iter().any(|&c| *targeted.get(c) > 0.0) {
                // Ignore lists name modules within the targets, so the two add up.
                kept = PerWeightClass::from_fn(|c| (kept.get(c) + 1.0 - targeted.get(c)).clamp(0.0, 1.0));
            }
        }
        let lm_head_quantized = q.get("lm_head").and_then(Value::as_bool) == Some(true);
        kept.lm_head = if lm_head_quantized { 0.0 } else { 1.0 };
        Ok(kept)
    }

    /// The formats of a checkpoint whose weights take several widths, each
    /// with its share of every class, or `None` when they take one:
    /// compressed-tensors `config_groups` of different widths (each its
    /// `targets`, the first group taking a module first), or ModelOpt's
    /// `MIXED_PRECISION` (`quantized_layers`: a `quant_algo` per module).
    /// What the ignore lists name stays in half precision, taken from the
    /// parts in proportion, and so does the LM head unless `lm_head` is true.
    pub(super) fn mixed_precision(&self, q: &Value) -> Result<Option<Vec<FormatPart>>, ModelConfigError> {
        let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("").to_ascii_lowercase();
        // (format, the modules it holds: names, `re:` patterns, or a class such as `Linear`).
        let mut named: Vec<(QuantFormat, Vec<&str>)> = Vec::new();
        if method.starts_with("modelopt") {
            if q.get("quant_algo").and_then(Value::as_str).is_none_or(|a| !a.eq_ignore_ascii_case("MIXED_PRECISION")) {
                return Ok(None);
            }
            let Some(layers) = q.get("quantized_layers").and_then(Value::as_object) else { return Ok(None) };
            for (module, spec) in layers {
                let Some(format) = spec.get("quant_algo").and_then(Value::as_str).and_then(modelopt_format) else { continue };
                match named.iter_mut().find(|(f, _)| *f == format) {
                    Some((_, modules)) => modules.push(module),
                    None => named.push((format, vec![module])),
                }
            }
        } else if let Some(groups) = q.get("config_groups").and_then(Value::as_object) {
            let fp8_named = fp8_named(q, &method);
            for group in groups.values() {
                let Some(format) = group.get("weights").and_then(|w| group_format(w, fp8_named)) else { continue };
                let targets = group.get("targets").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str);
                match named.iter_mut().find(|(f, _)| *f == format) {
                    Some((_, modules)) => modules.extend(targets),
                    None => named.push((format, targets.collect())),
                }
            }
            if named.len() < 2 {
                return Ok(None);
            }
        } else {
            return Ok(None);
        }
        // As compressed-tensors matches them, a module's name or pattern wins over its class.
        named.sort_by_key(|(_, modules)| modules.iter().any(|m| is_layer_class(m)));
        let lm_head_quantized = q.get("lm_head").and_then(Value::as_bool) == Some(true);
        let mut taken = PerWeightClass::<f64>::default();
        let mut parts = Vec::new();
        for (format, modules) in named {
            let mut share = if modules.iter().any(|m| is_layer_class(m)) {
                PerWeightClass::from_fn(|_| 1.0)
            } else {
                self.named_shares(modules.into_iter(), "quantization_config.config_groups.*.targets")?
            };
            if !lm_head_quantized {
                share.lm_head = 0.0;
            }
            // A module an earlier part holds is that part's.
            share = PerWeightClass::from_fn(|c| share.get(c).min(1.0 - taken.get(c)).max(0.0));
            taken = PerWeightClass::from_fn(|c| taken.get(c) + share.get(c));
            parts.push((format, share));
        }
        let listed = kept_half_list(q);
        let kept = self.named_shares(listed, "quantization_config.ignore")?;
        // Ignore lists name modules within the parts: each keeps its proportion of what is left.
        let scale =
            PerWeightClass::from_fn(|c| if *taken.get(c) > 0.0 { (taken.get(c) - kept.get(c)).max(0.0) / taken.get(c) } else { 0.0 });
        Ok(Some(parts.into_iter().map(|(f, share)| (f, PerWeightClass::from_fn(|c| share.get(c) * scale.get(c)))).collect()))
    }

    /// The share of each class of weights that `entries` name: module
    /// names, or `re:` patterns matched against every canonical module
    /// name. `field` names the list in errors.
    fn named_shares<'a>(
        &self,
        entries: impl Iterator<Item = &'a str>,
        field: &'static str,
    ) -> Result<PerWeightClass<f64>, ModelConfigError> {
        let mut names: Vec<String> = Vec::new();
        let mut patterns = Vec::new();
        for entry in entries {
            match entry.strip_prefix("re:") {
                None => names.push(entry.to_string()),
                Some(pattern) => {
                    regex::Regex::new(pattern).map_err(|_| ModelConfigError::Invalid {
                        field,
                        value: entry.to_string(),
                        reason: "a `re:` entry must be a regular expression",
                    })?;
                    patterns.push(format!("^(?:{pattern})"));
                }
            }
        }
        if !patterns.is_empty() {
            // One pass over the canonical names, whatever the number of patterns.
            let set = regex::RegexSet::new(&patterns).map_err(|_| ModelConfigError::Invalid {
                field,
                value: format!("{} `re:` entries", patterns.len()),
                reason: "its regular expressions together must fit regex's size limit",
            })?;
            names.extend(self.canonical_module_names().into_iter().filter(|n| set.is_match(n)));
        }
        // A module named twice counts once; each (class, layer) at most whole.
        names.sort_unstable();
        names.dedup();
        let mut modules: Vec<NamedModule> = names.iter().filter_map(|n| self.named_module(n)).collect();
        modules.sort_by_key(|m| (m.class as u8, m.layer));
        let mut per_layer: Vec<(WeightClass, Option<u32>, f64)> = Vec::new();
        for m in modules {
            match per_layer.last_mut() {
                Some((class, layer, share)) if (*class, *layer) == (m.class, m.layer) => *share = (*share + m.share).min(1.0),
                _ => per_layer.push((m.class, m.layer, m.share.min(1.0))),
            }
        }
        let moe_layers = self.moe.as_ref().map_or(0, |m| m.num_moe_layers);
        let layers = PerWeightClass {
            attention: self.num_layers,
            dense_ffn: self.num_dense_layers(),
            routed_experts: moe_layers,
            shared_experts: moe_layers,
            lm_head: 1,
        };
        // Layers' worth of each class named, divided once: 80 whole layers of 80 are exactly 1.
        let mut named_layers = PerWeightClass::<f64>::default();
        for (class, layer, share) in per_layer {
            let n = f64::from(*layers.get(class));
            *named_layers.get_mut(class) += if layer.is_some() && class != WeightClass::LmHead { share } else { share * n };
        }
        Ok(PerWeightClass::from_fn(|c| {
            let n = f64::from(*layers.get(c));
            if n > 0.0 { named_layers.get(c) / n } else { 0.0 }
        }))
    }
}

/// Whether a compressed-tensors target names a layer class (`Linear`, by
/// its capital) rather than modules.
fn is_layer_class(target: &str) -> bool {
    target.chars().next().is_some_and(|c| c.is_ascii_uppercase())
}

/// The modules a `quantization_config`'s [`KEPT_HALF_KEYS`] lists name.
fn kept_half_list(q: &Value) -> impl Iterator<Item = &str> {
    KEPT_HALF_KEYS.iter().flat_map(|key| q.get(*key).and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str))
}

/// The modules compressed-tensors' `config_groups` quantize, when narrower
/// than every linear layer: their `targets`, module names or `re:`
/// patterns. `None` without groups or when a target is a layer class
/// (`Linear`, by its capital), which takes every linear layer.
fn narrow_targets(q: &Value) -> Option<Vec<&str>> {
    let groups = q.get("config_groups")?.as_object()?;
    let targets: Vec<&str> = groups.values().filter_map(|g| g.get("targets")?.as_array()).flatten().filter_map(Value::as_str).collect();
    (!targets.is_empty() && !targets.iter().any(|t| is_layer_class(t))).then_some(targets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::LLAMA2_70B;

    /// Llama-2-70B's config with `quantization_config` `q`.
    fn with_quant(q: &str) -> ModelConfig {
        ModelConfig::from_hf_json(&LLAMA2_70B.replacen('{', &format!(r#"{{"quantization_config":{q},"#), 1)).unwrap()
    }

    /// gpt-oss-20b's `config.json` (its architecture fields and
    /// `quantization_config` as published; 24 layers alternating 128-token
    /// sliding windows and full attention).
    const GPT_OSS_20B: &str = include_str!("../../tests/fixtures/gpt-oss-20b.json");

    /// MXFP4 (gpt-oss): the experts take 4.25 bits per weight, attention,
    /// routers, embeddings and LM head stay in BF16, as `modules_to_not_convert`
    /// says. OpenAI's model card gives 20.91 B parameters and a 12.8 GiB
    /// checkpoint; counted here from the architecture alone.
    #[test]
    fn gpt_oss_mxfp4_experts_take_four_and_a_quarter_bits() {
        let m = ModelConfig::from_hf_json(GPT_OSS_20B).unwrap();
        assert_eq!(m.weights.format(), Some(QuantFormat { bytes_per_param: 0.53125, fp8: false }));
        assert_eq!(m.weights.bytes_per_param(WeightClass::RoutedExperts), 0.53125);
        assert_eq!(m.weights.bytes_per_param(WeightClass::Attention), 2.0);
        assert_eq!(m.weights.bytes_per_param(WeightClass::LmHead), 2.0);
        let params_b = m.total_params() / 1e9;
        assert!((params_b - 20.91).abs() < 0.02 * 20.91, "{params_b} B parameters");
        let gib = m.weight_bytes() / f64::from(1u32 << 30);
        assert!((gib - 12.8).abs() < 0.02 * 12.8, "{gib} GiB");
        assert_eq!(m.local_attention.map(|l| (l.span, l.layers)), Some((crate::model::AttentionSpan::Sliding { window_tokens: 128 }, 12)));
    }

    /// NVIDIA ModelOpt checkpoints (`quant_method: modelopt`) by their
    /// `quant_algo`: FP8 is one byte multiplied at the FP8 peak, NVFP4 a
    /// 4-bit float plus an FP8 scale per 16 (4.5 bits), what `ignore` or the
    /// older `exclude_modules` names (with `*` wildcards) stays in BF16; a
    /// per-layer `MIXED_PRECISION` map names no one width. compressed-tensors'
    /// 4-bit floats in blocks of 16 are NVFP4 too.
    #[test]
    fn modelopt_checkpoints_take_the_width_of_their_algorithm() {
        let fp8 = with_quant(r#"{"quant_method":"modelopt","quant_algo":"FP8","kv_cache_quant_algo":"FP8","exclude_modules":["lm_head"]}"#);
        assert_eq!(fp8.weights.format(), Some(QuantFormat { bytes_per_param: 1.0, fp8: true }));
        assert_eq!((fp8.weights.bytes_per_param(WeightClass::Attention), fp8.weights.fp8_share(WeightClass::DenseFfn)), (1.0, 1.0));
        assert_eq!(fp8.weights.bytes_per_param(WeightClass::LmHead), 2.0);
        let nvfp4 = with_quant(
            r#"{"quant_method":"modelopt","quant_algo":"NVFP4","group_size":16,"ignore":["lm_head","model.layers.*.self_attn*"]}"#,
        );
        assert_eq!(nvfp4.weights.format(), Some(QuantFormat { bytes_per_param: 0.5625, fp8: false }));
        assert_eq!(
            (nvfp4.weights.bytes_per_param(WeightClass::DenseFfn), nvfp4.weights.bytes_per_param(WeightClass::Attention)),
            (0.5625, 2.0)
        );
        assert_eq!(
            with_quant(r#"{"quant_method":"modelopt","quant_algo":"W4A16_NVFP4"}"#).weights.format().unwrap().bytes_per_param,
            0.5625
        );
        assert_eq!(
            with_quant(r#"{"quant_method":"modelopt","quant_algo":"MIXED_PRECISION","quantized_layers":{}}"#).weights.format(),
            None
        );
        let ct = |group: u32| {
            let q = format!(
                r#"{{"quant_method":"compressed-tensors","config_groups":{{"g":{{"targets":["Linear"],"weights":{{"num_bits":4,"type":"float","group_size":{group}}}}}}}}}"#
            );
            with_quant(&q).weights.format().unwrap().bytes_per_param
        };
        assert_eq!((ct(16), ct(32), ct(128)), (0.5625, 0.53125, 0.5));
    }

    /// ModelOpt's KV cache quantisation sets what vLLM's `auto` cache
    /// stores: FP8 for `kv_cache_quant_algo: FP8` (any case) or a static
    /// 8-bit float `kv_cache_scheme`, in `config.json`'s flat shape or
    /// `hf_quant_config.json`'s nested one (whose weights are read too); any
    /// other algorithm, or another method's scheme, leaves the model's
    /// dtype; a `--kv-cache-dtype` given wins.
    #[test]
    fn modelopt_kv_cache_quantisation_sets_what_auto_stores() {
        let kv_bytes = |q: &str| with_quant(q).kv_dtype_bytes;
        for fp8 in [
            r#"{"quant_method":"modelopt","quant_algo":"FP8","kv_cache_quant_algo":"FP8"}"#,
            r#"{"quant_method":"modelopt","quant_algo":"NVFP4","kv_cache_quant_algo":"fp8"}"#,
            r#"{"quant_method":"modelopt_fp4","kv_cache_scheme":{"dynamic":false,"num_bits":8,"type":"float"}}"#,
        ] {
            assert_eq!(kv_bytes(fp8), 1.0, "{fp8}");
        }
        for half in [
            r#"{"quant_method":"modelopt","quant_algo":"FP8"}"#,
            r#"{"quant_method":"modelopt","quant_algo":"FP8","kv_cache_quant_algo":"NVFP4"}"#,
            r#"{"quant_method":"modelopt","quant_algo":"FP8","kv_cache_quant_algo":null}"#,
            r#"{"quant_method":"modelopt","kv_cache_scheme":{"dynamic":true,"num_bits":8,"type":"float"}}"#,
            r#"{"quant_method":"compressed-tensors","kv_cache_scheme":{"dynamic":false,"num_bits":8,"type":"float"}}"#,
            r#"{"quant_method":"fp8","kv_cache_quant_algo":"FP8"}"#,
        ] {
            assert_eq!(kv_bytes(half), 2.0, "{half}");
        }
        let nested = with_quant(
            r#"{"producer":{"name":"modelopt","version":"0.19.0"},"quantization":{"quant_algo":"FP8","kv_cache_quant_algo":"FP8","exclude_modules":["lm_head"]}}"#,
        );
        assert_eq!((nested.kv_dtype_bytes, nested.quant_method.as_deref()), (1.0, Some("modelopt")));
        assert_eq!(
            (nested.weights.bytes_per_param(WeightClass::Attention), nested.weights.bytes_per_param(WeightClass::LmHead)),
            (1.0, 2.0)
        );
        use crate::vllm::KvCacheDtype;
        let dtype = |d: KvCacheDtype| nested.clone().with_kv_cache_dtype(d).kv_dtype_bytes;
        assert_eq!((dtype(KvCacheDtype::Auto), dtype(KvCacheDtype::Half), dtype(KvCacheDtype::Fp8)), (1.0, 2.0, 1.0));
    }

    /// Checkpoints with several widths: compressed-tensors groups (a
    /// module's name or pattern winning over its class, ignore lists taken
    /// from the parts) and ModelOpt's per-layer `MIXED_PRECISION`.
    #[test]
    fn mixed_precision_checkpoints_give_each_class_its_width() {
        let ct = |groups: &str, ignore: &str| {
            with_quant(&format!(r#"{{"quant_method":"compressed-tensors","config_groups":{{{groups}}},"ignore":{ignore}}}"#))
        };
        let w8_attention = r#""a":{"targets":["re:.*self_attn.*"],"weights":{"num_bits":8,"type":"float"}}"#;
        let by_class = |m: &ModelConfig| {
            let w = &m.weights;
            (
                w.bytes_per_param(WeightClass::Attention),
                w.bytes_per_param(WeightClass::DenseFfn),
                w.bytes_per_param(WeightClass::LmHead),
                w.fp8_share(WeightClass::Attention),
                w.fp8_share(WeightClass::DenseFfn),
            )
        };
        let mlp_w4 = r#""b":{"targets":["re:.*mlp.*"],"weights":{"num_bits":4,"type":"int"}}"#;
        assert_eq!(by_class(&ct(&format!("{w8_attention},{mlp_w4}"), "[]")), (1.0, 0.5, 2.0, 1.0, 0.0));
        // Every Linear in 4 bits but attention, which its pattern puts in FP8.
        let linear_w4 = r#""b":{"targets":["Linear"],"weights":{"num_bits":4,"type":"int"}}"#;
        let m = ct(&format!("{linear_w4},{w8_attention}"), r#"["lm_head"]"#);
        assert_eq!(by_class(&m), (1.0, 0.5, 2.0, 1.0, 0.0));
        assert_eq!(m.weights.format(), Some(QuantFormat { bytes_per_param: 1.0, fp8: true }), "the named part first");
        // Layer 0's attention ignored: 79 of 80 layers' attention in FP8.
        let m = ct(&format!("{w8_attention},{mlp_w4}"), r#"["model.layers.0.self_attn"]"#);
        assert!((m.weights.fp8_share(WeightClass::Attention) - 79.0 / 80.0).abs() < 1e-12, "{:?}", m.weights);
        // ModelOpt: NVFP4 MLPs, FP8 attention, layer by layer.
        let layers: Vec<String> = (0..80)
            .flat_map(|i| {
                let mlp =
                    ["gate_proj", "up_proj", "down_proj"].map(|p| format!(r#""model.layers.{i}.mlp.{p}":{{"quant_algo":"W4A16_NVFP4"}}"#));
                let attn =
                    ["q_proj", "k_proj", "v_proj", "o_proj"].map(|p| format!(r#""model.layers.{i}.self_attn.{p}":{{"quant_algo":"FP8"}}"#));
                mlp.into_iter().chain(attn)
            })
            .collect();
        let m = with_quant(&format!(
            r#"{{"quant_method":"modelopt","quant_algo":"MIXED_PRECISION","quantized_layers":{{{}}}}}"#,
            layers.join(",")
        ));
        let (attention, ffn, lm_head, fp8_attention, fp8_ffn) = by_class(&m);
        assert!((attention - 1.0).abs() < 1e-12 && (ffn - 0.5625).abs() < 1e-12, "{attention} {ffn}");
        assert_eq!((lm_head, fp8_attention, fp8_ffn), (2.0, 1.0, 0.0));
    }

    /// compressed-tensors quantizes only what its groups target: a layer
    /// class (`Linear`) takes every linear layer, module patterns only those
    /// they match (here the MLPs), and the ignore list is kept out of them.
    #[test]
    fn compressed_tensors_quantizes_only_its_targets() {
        let with_targets = |targets: &str, ignore: &str| {
            let q = format!(
                r#"{{"quant_method":"compressed-tensors","config_groups":{{"g":{{"targets":{targets},"weights":{{"num_bits":8,"type":"float"}}}}}},"ignore":{ignore}}}"#
            );
            let m = ModelConfig::from_hf_json(&LLAMA2_70B.replacen('{', &format!(r#"{{"quantization_config":{q},"#), 1)).unwrap();
            (m.weights.bytes_per_param(WeightClass::Attention), m.weights.bytes_per_param(WeightClass::DenseFfn))
        };
        assert_eq!(with_targets(r#"["Linear"]"#, "[]"), (1.0, 1.0));
        assert_eq!(with_targets(r#"["re:.*mlp.*"]"#, "[]"), (2.0, 1.0));
        assert_eq!(with_targets(r#"["re:.*self_attn.*", "re:.*mlp.*"]"#, "[]"), (1.0, 1.0));
        // A pattern in a naming BLIS does not know matches nothing it knows: every layer, as before.
        assert_eq!(with_targets(r#"["re:.*block_sparse_moe.*"]"#, "[]"), (1.0, 1.0));
        // Every MLP targeted but the first 40 of 80 layers' ignored: half the FFN stays in half precision.
        let first_half: Vec<String> = (0..40)
            .map(|i| format!(r#""model.layers.{i}.mlp.gate_proj","model.layers.{i}.mlp.up_proj","model.layers.{i}.mlp.down_proj""#))
            .collect();
        let (attention, ffn) = with_targets(r#"["re:.*mlp.*"]"#, &format!("[{}]", first_half.join(",")));
        assert_eq!(attention, 2.0);
        assert!((ffn - 1.5).abs() < 1e-12, "{ffn}");
    }

    /// A quantized checkpoint's weight bytes, counted by an independent sum
    /// of its parts: the LM head and embeddings stay in half precision as
    /// vLLM loads them (GPTQ's `lm_head: true` aside), and so does what its
    /// ignore list names.
    #[test]
    fn quantized_checkpoints_keep_the_lm_head_and_ignored_modules_in_half_precision() {
        let plain = ModelConfig::from_hf_json(LLAMA2_70B).unwrap();
        assert_eq!(plain.weights, WeightPrecision::half(2.0));
        assert_eq!(plain.weight_bytes(), plain.total_params() * 2.0, "half precision is every parameter at 2 bytes, exactly");
        let (l, d, v) = (80.0, 8192.0, 32000.0);
        let attention = l * (2.0 * d * d + 2.0 * d * 1024.0);
        let ffn = l * 3.0 * d * 28672.0;
        let rest = plain.total_params() - attention - ffn; // embeddings, LM head, norms
        let with_quant = |q: &str| {
            let json = LLAMA2_70B.replacen('{', &format!(r#"{{"quantization_config":{q},"#), 1);
            ModelConfig::from_hf_json(&json).unwrap()
        };
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b;
        let fp8 = with_quant(r#"{"quant_method":"fp8"}"#);
        assert!(close(fp8.weight_bytes(), attention + ffn + rest * 2.0), "{}", fp8.weight_bytes());
        assert_eq!((fp8.weights.bytes_per_param(WeightClass::LmHead), fp8.weights.fp8_share(WeightClass::LmHead)), (2.0, 0.0));
        assert_eq!((fp8.weights.bytes_per_param(WeightClass::Attention), fp8.weights.fp8_share(WeightClass::Attention)), (1.0, 1.0));
        // GPTQ may quantize its LM head too.
        let gptq = with_quant(r#"{"quant_method":"gptq","bits":4,"lm_head":true}"#);
        assert!(close(gptq.weight_bytes(), (attention + ffn + v * d) * 0.5 + (rest - v * d) * 2.0));
        // Every layer's q and k projections, by name (k counted once though named twice), and layer 0's MLP.
        let names: Vec<String> = (0..80)
            .flat_map(|i| [format!(r#""model.layers.{i}.self_attn.q_proj""#), format!(r#""model.layers.{i}.self_attn.k_proj""#)])
            .chain([r#""model.layers.7.self_attn.k_proj""#.to_string(), r#""model.layers.0.mlp""#.to_string(), r#""lm_head""#.to_string()])
            .collect();
        let partial = with_quant(&format!(
            r#"{{"quant_method":"compressed-tensors","config_groups":{{"g":{{"weights":{{"num_bits":8,"type":"float"}}}}}},"ignore":[{}]}}"#,
            names.join(",")
        ));
        let kept_attention = l * (d * d + d * 1024.0);
        let kept_ffn = 3.0 * d * 28672.0;
        let expected = (attention - kept_attention + ffn - kept_ffn) + (kept_attention + kept_ffn + rest) * 2.0;
        assert!(close(partial.weight_bytes(), expected), "{} vs {expected}", partial.weight_bytes());
        // The same with regular expressions, and a vision tower's modules are not the language model's.
        let regex = with_quant(
            r#"{"quant_method":"fp8","ignored_layers":["re:.*self_attn\\.[qk]_proj$","re:model\\.layers\\.0\\.mlp\\..*","vision_model.layers.3.self_attn.o_proj"]}"#,
        );
        assert!(close(regex.weight_bytes(), expected), "{} vs {expected}", regex.weight_bytes());
        let bad = LLAMA2_70B.replacen('{', r#"{"quantization_config":{"quant_method":"fp8","ignore":["re:(unclosed"]},"#, 1);
        assert!(ModelConfig::from_hf_json(&bad).unwrap_err().to_string().contains("quantization_config.ignore"));
    }

    /// Llama-4-Scout's FP8 checkpoint: experts and shared experts in FP8,
    /// every layer's attention, the routers and the LM head in BF16.
    #[test]
    fn llama4_scout_fp8_keeps_its_attention_in_bf16() {
        let scout =
            ModelConfig::from_hf_json(include_str!("../../../../data/models/RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic.json"))
                .unwrap();
        let w = &scout.weights;
        let classes = [WeightClass::Attention, WeightClass::RoutedExperts, WeightClass::SharedExperts, WeightClass::LmHead];
        assert_eq!(classes.map(|c| (w.bytes_per_param(c), w.fp8_share(c))), [(2.0, 0.0), (1.0, 1.0), (1.0, 1.0), (2.0, 0.0)]);
        assert_eq!(scout.num_dense_layers(), 0, "every layer is MoE");
        // A numbered expert is one expert's share of its layer.
        let one = scout.named_module("language_model.model.layers.5.feed_forward.experts.3.down_proj").unwrap();
        assert_eq!((one.class, one.layer, one.share), (WeightClass::RoutedExperts, Some(5), 1.0 / 3.0 / 16.0));
        assert_eq!(scout.named_module("language_model.model.layers.5.feed_forward.router"), None);
    }
}
