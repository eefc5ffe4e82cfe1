//! The server facts a `normalized.json` records: the one-file summary the
//! shared ground truth keeps beside each inference-perf run (its
//! `vllm_config_known`, `hardware`, `tp` and `status`). An experiment
//! directory that has one reads from it what neither `server-facts.yaml`
//! nor `vllm.log` gives, so a run delivered without `server-facts.yaml` is
//! still simulated on its own GPU, block count and offloading.
//!
//! What is read, as `server-facts.yaml` keys:
//!
//! | `normalized.json` | fact |
//! | --- | --- |
//! | `hardware`, else `hardware_detail` up to ` (` (the first a bundled GPU name) | `hardware` |
//! | `vllm_config_known.tensor_parallel_size`, else `tp` | `tensor_parallel_size` |
//! | `vllm_config_known.{max_num_seqs, max_num_batched_tokens, max_model_len}`, else the top-level ones | the same |
//! | `vllm_config_known.kv_blocks_total_gpu` | `num_gpu_blocks` |
//! | `vllm_config_known.block_size`, `gpu_memory_utilization` | the same |
//! | `vllm_config_known.cpu_kv_offload`: `true`, `false`, `null` (not recorded) | `cpu_offload`: `true`, `false`, `unknown` |
//! | `vllm_config_known.{prefix_caching, chunked_prefill}` when `true`/`false` (a note is no fact) | `enable_prefix_caching`, `enable_chunked_prefill` |
//! | `vllm_config_known.async_scheduling` when `true`/`false`, else the default of its `vllm_version` (on since 0.14) | `async_scheduling` |
//! | `vllm_config_known.{enable_prefix_caching, enable_chunked_prefill, enable_expert_parallel}` when `true`/`false` | the same |
//! | `vllm_config_known.{kv_cache_dtype, quantization}` when strings, `data_parallel_size` when a count | the same |
//! | `status`: `active`, `overload-excluded` | `status` |
//!
//! Its `config_json_dir` and `model_short` also name the run's model
//! configuration under a `model_configs/` directory above it, where the
//! model's own short name does not.
//!
//! Every other field is left alone. A field of the shared layout read with
//! the wrong type is an error naming it; the vLLM flag names, which the
//! shared files do not carry, are read only when they have the flag's type.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::experiment::facts::{CpuOffloadFact, ServerFacts, Status};

/// The file name.
pub const NORMALIZED: &str = "normalized.json";

/// The top level of `normalized.json`, as far as it is read; a field left
/// out is `None`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Normalized {
    hardware: Option<String>,
    hardware_detail: Option<String>,
    tp: Option<u32>,
    max_num_seqs: Option<u32>,
    max_num_batched_tokens: Option<u32>,
    max_model_len: Option<u32>,
    status: Option<Status>,
    config_json_dir: Option<String>,
    model_short: Option<String>,
    vllm_config_known: Option<Known>,
}

/// What a `normalized.json` says about its run's server.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NormalizedRun {
    /// The server's facts, as `server-facts.yaml` keys.
    pub facts: ServerFacts,
    /// Names of the model's directory under a `model_configs/` above the
    /// run (`config_json_dir`, then `model_short`), as given.
    pub model_config_dirs: Vec<String>,
}

/// `vllm_config_known`, as far as it is read.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Known {
    tensor_parallel_size: Option<u32>,
    max_num_seqs: Option<u32>,
    max_num_batched_tokens: Option<u32>,
    max_model_len: Option<u32>,
    kv_blocks_total_gpu: Option<u64>,
    block_size: Option<u32>,
    gpu_memory_utilization: Option<f64>,
    #[serde(deserialize_with = "offload")]
    cpu_kv_offload: Option<CpuOffloadFact>,
    prefix_caching: Option<Value>,
    chunked_prefill: Option<Value>,
    async_scheduling: Option<Value>,
    vllm_version: Option<Value>,
    enable_prefix_caching: Option<Value>,
    enable_chunked_prefill: Option<Value>,
    enable_expert_parallel: Option<Value>,
    kv_cache_dtype: Option<Value>,
    quantization: Option<Value>,
    data_parallel_size: Option<Value>,
}

/// `cpu_kv_offload`: a boolean, or `null` for "not recorded".
fn offload<'de, D: Deserializer<'de>>(d: D) -> Result<Option<CpuOffloadFact>, D::Error> {
    match Option::<bool>::deserialize(d)? {
        Some(true) => Ok(Some(CpuOffloadFact::On)),
        Some(false) => Ok(Some(CpuOffloadFact::Off)),
        None => Ok(Some(CpuOffloadFact::Unknown)),
    }
}

/// What the text of a `normalized.json` records (see the module
/// documentation); an error names the field that could not be read.
pub fn read(text: &str) -> Result<NormalizedRun, String> {
    // serde reads a struct from a sequence too (`[]` would be every default).
    if !text.trim_start_matches('\u{feff}').trim_start().starts_with('{') {
        return Err("the top level is not a JSON object".into());
    }
    let n: Normalized = serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(text))
        .map_err(|e| blis_data::locate::json_message(text, &e))?;
    let k = n.vllm_config_known.unwrap_or_default();
    // The short name may be one the catalogue does not know (`ampere-big`) where the detail is (`NVIDIA A100-SXM4-80GB (...)`).
    let detail = n.hardware_detail.as_deref().and_then(|d| d.split(" (").next()).map(str::trim).filter(|d| !d.is_empty());
    let known = |name: &&str| blis_physics::catalog::find_gpu(name).is_some();
    let hardware = n.hardware.as_deref().map(str::trim).filter(|h| !h.is_empty());
    let hardware = hardware.filter(known).or(detail.filter(known)).or(hardware).map(str::to_string);
    let facts =
        ServerFacts {
            hardware,
            tensor_parallel_size: k.tensor_parallel_size.or(n.tp),
            max_num_seqs: k.max_num_seqs.or(n.max_num_seqs),
            max_num_batched_tokens: k.max_num_batched_tokens.or(n.max_num_batched_tokens),
            max_model_len: k.max_model_len.or(n.max_model_len),
            num_gpu_blocks: k.kv_blocks_total_gpu,
            block_size: k.block_size,
            gpu_memory_utilization: k.gpu_memory_utilization,
            cpu_offload: k.cpu_kv_offload,
            enable_prefix_caching: k.enable_prefix_caching.as_ref().or(k.prefix_caching.as_ref()).and_then(Value::as_bool),
            enable_chunked_prefill: k.enable_chunked_prefill.as_ref().or(k.chunked_prefill.as_ref()).and_then(Value::as_bool),
            enable_expert_parallel: k.enable_expert_parallel.as_ref().and_then(Value::as_bool),
            kv_cache_dtype: k.kv_cache_dtype.as_ref().and_then(Value::as_str).map(str::to_string),
            quantization: k.quantization.as_ref().and_then(Value::as_str).map(str::to_string),
            data_parallel_size: k.data_parallel_size.as_ref().and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok()),
            async_scheduling: k.async_scheduling.as_ref().and_then(Value::as_bool).or_else(|| {
                k.vllm_version.as_ref().and_then(Value::as_str).and_then(crate::experiment::vllm_log::async_scheduling_by_default)
            }),
            status: n.status,
            ..ServerFacts::default()
        };
    Ok(NormalizedRun { facts, model_config_dirs: n.config_json_dir.into_iter().chain(n.model_short).filter(|d| !d.is_empty()).collect() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(text: &str) -> Result<ServerFacts, String> {
        read(text).map(|n| n.facts)
    }

    #[test]
    fn the_shared_layout_is_read() {
        let text = r#"{"name": "x", "hardware": "H100", "hardware_detail": "NVIDIA H100 80GB HBM3 SXM (per a README)", "tp": 2,
            "max_model_len": 4096, "status": "overload-excluded", "stages": [{"rate": 4}],
            "vllm_config_known": {"tensor_parallel_size": 2, "kv_blocks_total_gpu": 27510, "block_size": 16,
              "gpu_memory_utilization": null, "cpu_kv_offload": true, "prefix_caching": "vLLM V1 default (enabled) assumed; not recorded",
              "chunked_prefill": false, "vllm_version": null}}"#;
        let f = facts(text).unwrap();
        assert_eq!(f.hardware.as_deref(), Some("H100"));
        assert_eq!((f.tensor_parallel_size, f.max_model_len, f.num_gpu_blocks, f.block_size), (Some(2), Some(4096), Some(27510), Some(16)));
        assert_eq!((f.gpu_memory_utilization, f.cpu_offload, f.status), (None, Some(CpuOffloadFact::On), Some(Status::OverloadExcluded)));
        assert_eq!((f.enable_prefix_caching, f.enable_chunked_prefill), (None, Some(false)));
        assert_eq!(f.async_scheduling, None, "vllm_version null: not recorded");
        let version = |v: &str| facts(&format!(r#"{{"vllm_config_known": {{"vllm_version": "{v}"}}}}"#)).unwrap().async_scheduling;
        assert_eq!((version("0.11.0"), version("v0.14.1"), version("unknown")), (Some(false), Some(true), None));
        let said = facts(r#"{"vllm_config_known": {"vllm_version": "0.11.0", "async_scheduling": true}}"#).unwrap();
        assert_eq!(said.async_scheduling, Some(true), "the recorded setting wins over the version's default");
        let flags = facts(r#"{"vllm_config_known": {"enable_expert_parallel": true, "kv_cache_dtype": "fp8", "quantization": null, "data_parallel_size": 2, "enable_chunked_prefill": false}}"#).unwrap();
        assert_eq!(
            (flags.enable_expert_parallel, flags.kv_cache_dtype.as_deref(), flags.quantization, flags.data_parallel_size),
            (Some(true), Some("fp8"), None, Some(2))
        );
        assert_eq!(flags.enable_chunked_prefill, Some(false));
        let unrecorded = facts(r#"{"vllm_config_known": {"cpu_kv_offload": null}}"#).unwrap();
        assert_eq!(unrecorded.cpu_offload, Some(CpuOffloadFact::Unknown));
        assert_eq!(read("{}").unwrap(), NormalizedRun::default());
        let dirs = read(r#"{"config_json_dir": "Mixtral-8x7B-v0.1", "model_short": "mixtral-8x7b"}"#).unwrap().model_config_dirs;
        assert_eq!(dirs, ["Mixtral-8x7B-v0.1", "mixtral-8x7b"]);
    }

    #[test]
    fn the_detail_names_the_gpu_the_short_name_does_not() {
        let f = facts(r#"{"hardware": "ampere-big", "hardware_detail": "NVIDIA A100-SXM4-80GB (8 per node)"}"#).unwrap();
        assert_eq!(f.hardware.as_deref(), Some("NVIDIA A100-SXM4-80GB"));
        // Neither known: the short name stays, for the error to name.
        let f = facts(r#"{"hardware": "Z9", "hardware_detail": "a card"}"#).unwrap();
        assert_eq!(f.hardware.as_deref(), Some("Z9"));
    }

    #[test]
    fn a_field_of_the_wrong_type_is_named() {
        for (text, field) in [
            (r#"{"vllm_config_known": {"kv_blocks_total_gpu": "many"}}"#, "vllm_config_known.kv_blocks_total_gpu"),
            (r#"{"vllm_config_known": {"cpu_kv_offload": "yes"}}"#, "vllm_config_known.cpu_kv_offload"),
            (r#"{"status": "fine"}"#, "status"),
            (r#"{"tp": -1}"#, "tp"),
        ] {
            let e = facts(text).unwrap_err();
            assert!(e.contains(field), "{text}: {e}");
        }
        for not_an_object in ["[1]", "[]", "null", ""] {
            assert_eq!(facts(not_an_object).unwrap_err(), "the top level is not a JSON object");
        }
        assert_eq!(facts(r#"{"hardware": " ", "hardware_detail": ""}"#).unwrap().hardware, None);
    }
}
