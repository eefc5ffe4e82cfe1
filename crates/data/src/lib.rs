//! # blis-data: how BLIS reads what users give it
//!
//! Every file a user names passes through here:
//!
//! * [`textfile`]: bounded reading of every file a user names;
//! * [`yaml`]: YAML parsed with memory proportional to the document;
//! * [`locate`]: one-line messages that say where in a document a value is wrong;
//! * [`DataError`]: a file that cannot be read or is not in its format.
//!
//! What BLIS ships (models, GPUs, coefficient sets) is `blis-physics`'
//! `catalog` and `coefficients`.
//!
//! ## Example
//!
//! ```
//! let doc: serde_json::Value = blis_data::yaml::from_str("rate: 5\nmodel: m\n").unwrap();
//! assert_eq!(doc["rate"], 5);
//! ```

#![warn(missing_docs)]

pub mod error;
pub mod locate;
pub mod textfile;
pub mod yaml;

pub use error::DataError;
