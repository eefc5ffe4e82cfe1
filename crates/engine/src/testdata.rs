//! Bundled models and GPUs for the engine's own unit tests, read from
//! `data/` directly: the catalog that finds them by name lives in
//! `blis-data`, which depends on this crate.

use crate::hardware::GpuSpec;

/// A bundled `config.json`.
pub(crate) struct Model {
    pub config_json: &'static str,
}

/// The bundled config of `id` (the few the tests use).
pub(crate) fn find_model(id: &str) -> Option<Model> {
    let config_json = match id {
        "meta-llama/Llama-2-7b-hf" => include_str!("../../../data/models/meta-llama/Llama-2-7b-hf.json"),
        "meta-llama/Llama-2-70b-hf" => include_str!("../../../data/models/meta-llama/Llama-2-70b-hf.json"),
        "mistralai/Mixtral-8x7B-v0.1" => include_str!("../../../data/models/mistralai/Mixtral-8x7B-v0.1.json"),
        "Qwen/Qwen3-30B-A3B" => include_str!("../../../data/models/Qwen/Qwen3-30B-A3B.json"),
        "deepseek-ai/DeepSeek-V2-Lite" => include_str!("../../../data/models/deepseek-ai/DeepSeek-V2-Lite.json"),
        "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic" => {
            include_str!("../../../data/models/RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic.json")
        }
        _ => return None,
    };
    Some(Model { config_json })
}

/// A bundled GPU spec file.
pub(crate) struct Gpu(&'static str);

impl Gpu {
    /// The parsed spec.
    pub fn spec(&self) -> GpuSpec {
        GpuSpec::from_json(self.0).unwrap()
    }
}

/// The bundled spec of `name` (the few the tests use).
pub(crate) fn find_gpu(name: &str) -> Option<Gpu> {
    match name {
        "H100" => Some(Gpu(include_str!("../../../data/hardware/H100.json"))),
        "H100-NVL" => Some(Gpu(include_str!("../../../data/hardware/H100-NVL.json"))),
        "L40S" => Some(Gpu(include_str!("../../../data/hardware/L40S.json"))),
        "A100-80GB" => Some(Gpu(include_str!("../../../data/hardware/A100-80GB.json"))),
        "H200" => Some(Gpu(include_str!("../../../data/hardware/H200.json"))),
        _ => None,
    }
}
