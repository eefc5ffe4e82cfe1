//! Control-plane policies: narrow traits that return decisions, built-in
//! templates chosen by name, parameters from a document tree (YAML in the
//! CLI) with unknown keys rejected and every value validated.
//!
//! * [`admission`]: admit or reject an arriving request ([`AdmissionPolicy`]);
//! * [`priority`]: a request's scheduling priority ([`PriorityPolicy`]);
//! * [`routing`]: the instance a request goes to ([`RoutingPolicy`]);
//! * [`scheduler`]: each instance's wait-queue order and preemption victim;
//! * [`bundle`]: all of them (plus SLO targets and snapshot staleness) in one document.
//!
//! Policies are built once per run and keep whatever state they like, as long
//! as it depends only on simulated time and their inputs (cluster-policy-plan §F.6).

pub mod admission;
pub mod bundle;
pub mod priority;
pub mod routing;
pub mod scheduler;

pub use admission::{Admission, AdmissionPolicy, AdmissionSpec, RejectReason};
pub use bundle::PolicyBundle;
pub use priority::{PriorityPolicy, PrioritySpec};
pub use routing::{RoutingPolicy, RoutingSpec, ScoreSheet};
pub use scheduler::SchedulerSpec;

use blis_engine::request::Labels;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ConfigError;
use crate::estimate::TtftEstimator;
use crate::slo::SloClasses;

/// What building a policy may depend on besides its parameters.
pub struct BuildContext<'a> {
    /// Names of tenants and SLO classes (parameters name them; policies use ids).
    pub labels: &'a Labels,
    /// SLO classes with targets and urgency.
    pub classes: &'a SloClasses,
    /// TTFT estimate calibrated on the simulated latency model.
    pub estimator: TtftEstimator,
}

/// Parameters of a template that takes none; any key is rejected.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// Deserialises a template's parameters (absent = every default), naming the
/// offending key path under `path` on error.
pub(crate) fn params<P: DeserializeOwned>(value: Option<&Value>, path: &str) -> Result<P, ConfigError> {
    let empty = Value::Object(serde_json::Map::new());
    let value = match value {
        None | Some(Value::Null) => &empty,
        Some(v) => v,
    };
    serde_path_to_error::deserialize(value).map_err(|e| {
        let inner = e.path().to_string();
        let at = if inner == "." { path.to_string() } else { format!("{path}.{inner}") };
        ConfigError::new(at, e.inner().to_string())
    })
}

/// Fails with `path.field: <value>: must be <allowed>` unless `ok`.
pub(crate) fn check(ok: bool, path: &str, field: &str, value: impl std::fmt::Display, allowed: &str) -> Result<(), ConfigError> {
    if ok { Ok(()) } else { Err(ConfigError::new(format!("{path}.{field}"), format!("{value}: must be {allowed}"))) }
}

/// Resolves a list of names to ids (unknown names are errors).
pub(crate) fn resolve_list(names: &[String], known: &[String], path: &str, what: &str) -> Result<Vec<u32>, ConfigError> {
    let map = names.iter().map(|n| (n.clone(), ())).collect();
    Ok(crate::slo::resolve_names(&map, known, path, what)?.into_iter().map(|(id, ())| id).collect())
}

/// Defines a policy kind: an enum of named templates, each holding its
/// parameter struct, with `NAMES`, `parse`, `name` and `params_json`.
macro_rules! policy_kind {
    ($(#[$meta:meta])* $kind:ident { $( $(#[$vmeta:meta])* $name:literal => $variant:ident($params:ty) ),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq)]
        pub enum $kind {
            $( $(#[$vmeta])* $variant($params), )*
        }

        impl $kind {
            /// Every template name, in documentation order.
            pub const NAMES: &'static [&'static str] = &[$($name),*];

            /// The template `name` with `params` (absent = defaults); `path`
            /// locates the section in errors.
            pub fn parse(name: &str, params: Option<&serde_json::Value>, path: &str) -> Result<Self, crate::error::ConfigError> {
                let params_path = format!("{path}.params");
                match name {
                    $( $name => Ok($kind::$variant(crate::policy::params(params, &params_path)?)), )*
                    other => Err(crate::error::ConfigError::unknown(format!("{path}.type"), "policy", other, Self::NAMES)),
                }
            }

            /// The template's name.
            pub fn name(&self) -> &'static str {
                match self { $( $kind::$variant(_) => $name, )* }
            }

            /// The parameters with every default filled in, for reports.
            pub fn params_json(&self) -> serde_json::Value {
                match self { $( $kind::$variant(p) => serde_json::to_value(p).unwrap_or(serde_json::Value::Null), )* }
            }
        }
    };
}
pub(crate) use policy_kind;
