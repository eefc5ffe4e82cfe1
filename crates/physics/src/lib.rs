//! # blis-physics: what is simulated, and how long its steps take
//!
//! The kernel (`blis-engine`) schedules requests and moves KV blocks; it
//! asks a [`blis_engine::latency::LatencyModel`] how long each step takes
//! and knows nothing else about models or GPUs. This crate is everything
//! behind that one trait, and everything a deployment is resolved from:
//!
//! * [`model`]: a model's architecture from its HuggingFace `config.json`
//!   (attention, MoE, MLA, sliding windows, weight precision per class);
//! * [`hardware`]: GPU specs (peaks, memory, links, kernel efficiencies) and
//!   KV sizing; [`vllm`]: vLLM's defaults and memory rules;
//! * [`latency`]: the latency models, their feature bases for fitting, and
//!   [`latency::ModelKind`], which names each and says what it can do;
//! * [`coefficients`]: coefficient sets as data, and the bundled ones;
//! * [`catalog`]: the models and GPUs compiled in from `data/`.
//!
//! Reading order: [`model`], [`hardware`], [`vllm`], [`latency`],
//! [`coefficients`], [`catalog`].
//!
//! ## Example
//!
//! ```
//! use blis_engine::scheduler::InstanceConfig;
//! use blis_physics::{catalog, coefficients::CoefficientSet, model::ModelConfig};
//!
//! let model = ModelConfig::from_hf_json(catalog::find_model("llama-3.1-8b-instruct").unwrap().config_json).unwrap();
//! let gpu = catalog::find_gpu("H100").unwrap().spec();
//! let latency = CoefficientSet::default_set().latency_model(&model, &gpu, 1, &InstanceConfig::basic(256, 8192, 4096, 1000)).unwrap();
//! assert_eq!(latency.name(), "trained-physics");
//! ```

#![warn(missing_docs)]

pub mod catalog;
pub mod coefficients;
pub mod hardware;
pub mod latency;
pub mod model;
mod shallow_json;
pub mod vllm;
