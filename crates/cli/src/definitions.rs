//! `--model-config`, `--hardware-config` and `--hardware` of `blis validate`
//! and `blis fit`: a model or GPU used for every experiment;
//! and the server facts they may override for every experiment
//! (`--kv-offloading-size`, `--moe-kernel-compile`).

use std::path::PathBuf;

use blis_calibrate::validate::reproduce::Definitions;
use blis_engine::time::parse_duration;
use blis_scenario::deployment::{load_gpu_spec, load_model_config};
use blis_scenario::tiers::MAX_TIER_GIB;

use crate::error::BadInput;

/// Model and GPU files for experiments whose model or GPU BLIS does not bundle.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DefinitionArgs {
    /// HuggingFace config.json used for every experiment instead of its model's. [default: the bundled
    /// config of the model exp-config.yaml names, else model_configs/NAME/config.json in a parent directory]
    #[arg(long, value_name = "PATH")]
    pub model_config: Option<PathBuf>,
    /// GPU spec JSON (BLIS's fields, or a vendor datasheet with compute/memory/interconnect) used for every
    /// experiment instead of the GPU its server-facts.yaml names.
    #[arg(long, value_name = "PATH")]
    pub hardware_config: Option<PathBuf>,
    /// A bundled GPU, by name (`A100-80GB`, `L40S`, …), used for every experiment instead of the GPU its
    /// server facts name: for runs whose facts or log do not record it. With `fit --otel`: the traced
    /// server's GPU [default there: H100].
    #[arg(long, value_name = "GPU", conflicts_with = "hardware_config")]
    pub hardware: Option<String>,
    /// CPU KV tier (GiB, as `blis run --kv-offloading-size`) for every experiment whose
    /// server-facts.yaml says cpu_offload: true or unknown. [default: none]
    #[arg(long, value_name = "GIB", allow_negative_numbers = true)]
    pub kv_offloading_size: Option<f64>,
    /// What compiling one fused-MoE kernel specialization stalls each experiment's server (as
    /// `blis run --moe-kernel-compile`): a duration, or 0 for servers started with a warm Triton
    /// cache. [default: 950ms]
    #[arg(long, value_name = "DURATION")]
    pub moe_kernel_compile: Option<String>,
}

impl DefinitionArgs {
    /// These flags as given, for a fit's `provenance.command` (empty when
    /// none was).
    pub fn command_flags(&self) -> String {
        let mut flags = String::new();
        for (flag, path) in [("--model-config", &self.model_config), ("--hardware-config", &self.hardware_config)] {
            if let Some(p) = path {
                flags += &format!(" {flag} {}", p.display());
            }
        }
        if let Some(gpu) = &self.hardware {
            flags += &format!(" --hardware {gpu}");
        }
        if let Some(gib) = self.kv_offloading_size {
            flags += &format!(" --kv-offloading-size {gib}");
        }
        if let Some(stall) = &self.moe_kernel_compile {
            flags += &format!(" --moe-kernel-compile {stall}");
        }
        flags
    }

    /// The definitions, once their files are known to load (so a bad file
    /// is one error up front, not one per experiment).
    pub fn load(&self) -> Result<Definitions, BadInput> {
        if let Some(path) = &self.model_config {
            load_model_config(path)?;
        }
        if let Some(path) = &self.hardware_config {
            load_gpu_spec(path)?;
        }
        if let Some(gpu) = self.hardware.as_deref().filter(|g| blis_physics::catalog::find_gpu(g).is_none()) {
            return Err(BadInput(format!("--hardware {gpu}: {}", blis_physics::catalog::unknown_gpu(gpu))));
        }
        if let Some(gib) = self.kv_offloading_size.filter(|g| !(g.is_finite() && *g > 0.0)) {
            return Err(BadInput(format!("--kv-offloading-size {gib}: must be a positive number of GiB")));
        }
        if let Some(gib) = self.kv_offloading_size.filter(|g| *g > MAX_TIER_GIB) {
            return Err(BadInput(format!("--kv-offloading-size {gib:e}: must be at most {MAX_TIER_GIB:e} GiB (a PiB of host memory)")));
        }
        if let Some(text) = &self.moe_kernel_compile {
            parse_duration(text).map_err(|e| BadInput(format!("--moe-kernel-compile {e}")))?;
        }
        Ok(Definitions {
            model: self.model_config.clone(),
            gpu: self.hardware_config.clone(),
            gpu_name: self.hardware.clone(),
            kv_offloading_size: self.kv_offloading_size,
            moe_kernel_compile: self.moe_kernel_compile.clone(),
        })
    }
}
