//! # blis-data: what BLIS ships, and how it reads what users give it
//!
//! The engine knows nothing about files; this crate is where data meets it:
//!
//! * [`catalog`]: the HuggingFace `config.json`s and GPU specs compiled in
//!   from `data/models/` and `data/hardware/`, found by name;
//! * [`coefficients`]: the coefficient-set file format and the sets
//!   compiled in from `data/coefficients/`, and the latency model a set
//!   builds for a deployment;
//! * [`textfile`]: bounded reading of every file a user names;
//! * [`yaml`]: YAML parsed with memory proportional to the document;
//! * [`locate`]: one-line messages that say where in a document a value is wrong.
//!
//! ## Example
//!
//! ```
//! use blis_data::{catalog, coefficients::CoefficientSet};
//! use blis_engine::{model::ModelConfig, scheduler::InstanceConfig};
//!
//! let model = ModelConfig::from_hf_json(catalog::find_model("llama-3.1-8b-instruct").unwrap().config_json).unwrap();
//! let gpu = catalog::find_gpu("H100").unwrap().spec();
//! let latency = CoefficientSet::default_set().latency_model(&model, &gpu, 1, &InstanceConfig::basic(256, 8192, 4096, 1000)).unwrap();
//! assert_eq!(latency.name(), "trained-physics");
//! ```

#![warn(missing_docs)]

pub mod catalog;
pub mod coefficients;
pub mod error;
pub mod locate;
pub mod textfile;
pub mod yaml;

pub use error::DataError;
