//! Knob values from files (`--config`, a sweep's base, an experiment's
//! records): reading them, and saying an error about a knob of the file
//! its value came from.

use std::path::Path;

use serde_json::Value;

use crate::count::parse_count;
use crate::error::{ScenarioError, invalid};
use crate::knobs::{KnobId, KnobValues, Knobs, Source};

impl KnobValues {
    /// Reads a YAML (or JSON) knob file. Keys are flag names; `snake_case`
    /// spellings and vLLM's names are accepted too. Unknown keys are errors
    /// naming the key. Relative paths in it are relative to the file's folder.
    pub fn load(path: &Path) -> Result<KnobValues, ScenarioError> {
        let text = blis_data::textfile::read(path).map_err(|e| invalid!("cannot read --config {}: {e}", path.display()))?;
        let raw: Value = blis_data::yaml::from_str(&text).map_err(|e| invalid!("--config {}: not valid YAML: {e}", path.display()))?;
        let file = KnobValues::from_yaml(raw, &format!("--config {}", path.display()))?;
        Ok(file.rebased(path.parent().unwrap_or(Path::new(""))))
    }

    /// Reads knobs from a YAML mapping of flag names (or their `snake_case`
    /// spellings, or vLLM's names of the flags that have an alias) to
    /// values; `origin` names it in errors.
    pub fn from_yaml(raw: Value, origin: &str) -> Result<KnobValues, ScenarioError> {
        let Value::Object(map) = raw else {
            return Err(invalid!("{origin}: expected a mapping of flag names to values"));
        };
        let mut normalized = serde_json::Map::new();
        for (key, v) in map {
            let key = key.replace('_', "-");
            let knob = KnobId::from_flag(&key);
            let key = KnobId::of_alias(&key).map_or(key, |k| k.flag().to_string());
            let takes_count = knob.is_some_and(KnobId::takes_count);
            let count = |text: &str| {
                parse_count::<u64>(text).map(|n| Value::Number(n.into())).map_err(|e| invalid!("{origin}: field `{key}`: {e}"))
            };
            let v = match v {
                // `max-model-len: 32k` and `num-requests: 1e6` (a YAML float), as on the command line.
                Value::String(s) if takes_count => count(&s)?,
                Value::Number(n) if takes_count && n.is_f64() => count(&format!("{:e}", n.as_f64().unwrap_or(f64::NAN)))?,
                other => other,
            };
            if normalized.insert(key.clone(), v).is_some() {
                return Err(invalid!("{origin}: `{key}` is given twice (under its own name and vLLM's, or in two spellings)"));
            }
        }
        serde_path_to_error::deserialize(Value::Object(normalized))
            .map_err(|e| invalid!("{origin}: {}", blis_data::locate::located_message(&e)))
    }
}

/// The files knob values were read from: for each, the knob names it set
/// and how messages name it (`--config run.yaml`).
pub type FileOrigins = Vec<(Vec<String>, String)>;

impl Knobs {
    /// How errors name the `--policy-config` file (`--policy-config
    /// f.yaml`; empty without one).
    pub fn policy_origin(&self) -> String {
        self.policy_config.value.as_ref().map(|p| format!("--policy-config {}", p.display())).unwrap_or_default()
    }
}

impl Knobs {
    /// `err` as the user should read it: an error about a knob whose value
    /// came from a file (not the command line) names that file and its key
    /// (`--config run.yaml: rate -1: ...`) instead of the flag; any other
    /// passes unchanged.
    pub fn blame(&self, err: ScenarioError, files: &FileOrigins) -> ScenarioError {
        let Some(knob) = err.knob.filter(|&k| self.source(k) == Source::File && err.file.is_none()) else { return err };
        match files.iter().find(|(keys, _)| keys.iter().any(|k| k == knob.flag())) {
            Some((_, origin)) => err.from_file(origin),
            None => err,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(yaml: &str) -> Result<KnobValues, ScenarioError> {
        KnobValues::from_yaml(blis_data::yaml::from_str(yaml).unwrap(), "--config f.yaml")
    }

    #[test]
    fn config_files_take_vllm_names_and_snake_case_but_not_one_knob_twice() {
        let f = file("tensor-parallel-size: 2\nnum_gpu_blocks_override: 5000\nmax_num_seqs: 64\n").unwrap();
        assert_eq!((f.tp, f.num_gpu_blocks, f.max_num_seqs), (Some(2), Some(5000), Some(64)));
        assert_eq!(file("gpu: A100-80GB\n").unwrap().hardware.as_deref(), Some("A100-80GB"));
        for twice in ["tp: 2\ntensor_parallel_size: 2\n", "max-num-seqs: 1\nmax_num_seqs: 2\n", "gpu: H100\nhardware: H100\n"] {
            let e = file(twice).unwrap_err().to_string();
            assert!(e.contains("f.yaml") && e.contains("given twice"), "{e}");
        }
        let f = file("max-model-len: 32k\nnum-requests: 1e6\nseed: 7\nhardware: '1k'\n").unwrap();
        assert_eq!((f.max_model_len, f.num_requests, f.seed, f.hardware.as_deref()), (Some(32_000), Some(1_000_000), Some(7), Some("1k")));
        let e = file("max-num-seqs: 64M\n").unwrap_err().to_string();
        assert!(e.contains("f.yaml: field `max-num-seqs`") && e.contains("ambiguous"), "{e}");
        let e = file("dtype: bfloat16\n").unwrap_err().to_string();
        assert!(e.contains("unknown field `dtype`") && e.contains("max-num-seqs"), "{e}");
    }
}
