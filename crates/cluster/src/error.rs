//! The cluster crate's errors.

use blis_engine::scheduler::InstanceConfigError;
use thiserror::Error;

/// A configuration value the cluster cannot use. `path` is the dotted key
/// path of the value in the policy bundle (e.g.
/// `routing.params.scorers.queue-dept`), so the message can name the file's
/// field; `message` says what is wrong and what is allowed.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{path}: {message}")]
pub struct ConfigError {
    /// Where the value is.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

impl ConfigError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError { path: path.into(), message: message.into() }
    }

    /// `value` is not one of `allowed`.
    pub fn unknown(path: impl Into<String>, what: &str, value: &str, allowed: &[impl AsRef<str>]) -> ConfigError {
        let list: Vec<&str> = allowed.iter().map(AsRef::as_ref).collect();
        ConfigError::new(path, format!("unknown {what} `{value}`; allowed: {}", list.join(", ")))
    }
}

/// Why a cluster could not be built.
#[derive(Debug, Error)]
pub enum ClusterError {
    /// A policy, SLO target or snapshot setting is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The instance configuration cannot run.
    #[error(transparent)]
    Instance(#[from] InstanceConfigError),
    /// Instance count out of range.
    #[error("--num-instances {0}: must be between 1 and {max}", max = crate::MAX_INSTANCES)]
    NumInstances(u32),
}
