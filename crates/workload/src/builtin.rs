//! Built-in workloads: presets (typical applications) and scenarios (edge
//! cases for policy research), written in the spec language itself so
//! `blis workload show NAME` prints a starting point to edit. Their
//! distributions are documented in each file and in `docs/workloads.md`.

use crate::error::WorkloadError;

/// A built-in workload spec.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Builtin {
    /// `preset` or `scenario`.
    pub kind: &'static str,
    /// Name after the colon.
    pub name: &'static str,
    /// The spec, with comments.
    pub yaml: &'static str,
}

macro_rules! builtin {
    ($kind:literal, $name:literal) => {
        Builtin { kind: $kind, name: $name, yaml: include_str!(concat!("../builtin/", $name, ".yaml")) }
    };
}

/// Every built-in, presets first.
pub const BUILTINS: &[Builtin] = &[
    builtin!("preset", "chatbot"),
    builtin!("preset", "contentgen"),
    builtin!("preset", "summarization"),
    builtin!("preset", "multidoc"),
    builtin!("scenario", "bursty-traffic"),
    builtin!("scenario", "diurnal-cycle"),
    builtin!("scenario", "unfair-tenants"),
    builtin!("scenario", "prefix-heavy"),
    builtin!("scenario", "mixed-slo"),
];

impl Builtin {
    /// `kind:name`, as the CLI accepts it.
    pub fn reference(&self) -> String {
        format!("{}:{}", self.kind, self.name)
    }
}

/// Resolves `preset:NAME` / `scenario:NAME`; `Ok(None)` for anything else
/// (a file path), an error naming the allowed names for an unknown one.
pub fn lookup(reference: &str) -> Result<Option<&'static Builtin>, WorkloadError> {
    let Some((kind, name)) = reference.split_once(':') else { return Ok(None) };
    if kind != "preset" && kind != "scenario" {
        return Ok(None);
    }
    if let Some(b) = BUILTINS.iter().find(|b| b.kind == kind && b.name == name) {
        return Ok(Some(b));
    }
    let allowed: Vec<String> = BUILTINS.iter().filter(|b| b.kind == kind).map(Builtin::reference).collect();
    Err(WorkloadError::spec(reference, ".", format!("unknown {kind}; allowed: {}", allowed.join(", "))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::load;

    #[test]
    fn every_builtin_plans_and_generates() {
        for b in BUILTINS {
            let plan = load(&b.reference()).unwrap().plan().unwrap_or_else(|e| panic!("{}: {e}", b.name));
            assert!(plan.warnings.is_empty(), "{}: {:?}", b.name, plan.warnings);
            let n = plan.generator().take(200).count();
            assert_eq!(n, 200, "{}", b.name);
        }
        assert!(lookup("preset:nope").unwrap_err().to_string().contains("preset:chatbot"));
        assert_eq!(lookup("some/file.yaml").unwrap(), None);
    }
}
