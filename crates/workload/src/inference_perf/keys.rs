//! The keys inference-perf knows in the sections of its configuration BLIS
//! reads, so that a key no version has (a misspelt `load.intervall`) is
//! named instead of silently leaving a default in place.
//!
//! inference-perf itself ignores unknown keys (pydantic's default), and so
//! does BLIS: a key is reported, never refused. The lists are inference-perf's
//! fields as of late 2026 plus the older spellings BLIS still reads; keys of
//! sections BLIS does not read (`report`, `metrics`, `storage`, `tokenizer`)
//! are not checked. Length distributions are checked where they are read
//! (they refuse unknown keys).

use serde_json::Value;

/// The keys of one section, by its path (`load.stages[]` for every stage).
const SECTIONS: &[(&str, &[&str])] = &[
    ("", &["api", "data", "load", "metrics", "report", "storage", "server", "tokenizer", "circuit_breakers"]),
    ("api", &["type", "streaming", "headers", "slo_unit", "slo_tpot_header", "slo_ttft_header", "response_format"]),
    (
        "data",
        &[
            "type",
            "path",
            "input_distribution",
            "output_distribution",
            "shared_prefix",
            "multimodal",
            "trace",
            "otel_trace_replay",
            "conversation_replay",
        ],
    ),
    (
        "data.shared_prefix",
        &[
            "num_groups",
            "num_unique_system_prompts",
            "num_prompts_per_group",
            "num_users_per_system_prompt",
            "system_prompt_len",
            "question_len",
            "output_len",
            "seed",
            "question_distribution",
            "output_distribution",
            "enable_multi_turn_chat",
            "multimodal",
            "question_len_std",
            "question_len_min",
            "question_len_max",
            "output_len_std",
            "output_len_min",
            "output_len_max",
        ],
    ),
    (
        "load",
        &[
            "type",
            "interval",
            "stages",
            "sweep",
            "num_workers",
            "worker_max_concurrency",
            "worker_max_tcp_connections",
            "trace",
            "circuit_breakers",
            "request_timeout",
            "lora_traffic_split",
            "base_seed",
        ],
    ),
    (
        "load.stages[]",
        &["rate", "duration", "num_requests", "concurrency_level", "concurrent_sessions", "session_rate", "num_sessions", "timeout"],
    ),
    ("load.sweep", &["type", "num_requests", "timeout", "num_stages", "stage_duration", "saturation_percentile", "probe"]),
    ("server", &["type", "model_name", "base_url", "ignore_eos", "api_key", "cert_path", "key_path", "vllm"]),
];

/// Largest edit distance at which a known key is offered as the one meant.
const MAX_SUGGESTION_DISTANCE: usize = 2;

/// One line per key of a checked section that inference-perf does not
/// know, in document order: the key's path, and the known key it is
/// closest to (or the section's keys). Best effort: a document that does
/// not read as a generic tree is not checked.
pub(crate) fn unknown_keys(text: &str) -> Vec<String> {
    let Ok(tree) = blis_data::yaml::from_str::<Value>(text) else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    check(&tree, "", "", &mut lines);
    lines
}

/// Checks the mapping `value` at `path` (its section name `section`) and,
/// through it, the checked sections below.
fn check(value: &Value, section: &str, path: &str, lines: &mut Vec<String>) {
    let Some((_, known)) = SECTIONS.iter().find(|(name, _)| *name == section) else {
        return;
    };
    let Value::Object(map) = value else {
        return;
    };
    let join = |prefix: &str, key: &str| if prefix.is_empty() { key.to_string() } else { format!("{prefix}.{key}") };
    for (key, child) in map {
        if !known.contains(&key.as_str()) {
            lines.push(describe(&join(path, key), key, known));
            continue;
        }
        let child_section = join(section, key);
        match child {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    check(item, &format!("{child_section}[]"), &format!("{}[{i}]", join(path, key)), lines);
                }
            }
            _ => check(child, &child_section, &join(path, key), lines),
        }
    }
}

fn describe(path: &str, key: &str, known: &[&str]) -> String {
    let closest = known.iter().map(|k| (strsim::damerau_levenshtein(key, k), *k)).min();
    let hint = match closest {
        Some((d, k)) if d <= MAX_SUGGESTION_DISTANCE => format!("did you mean `{k}`?"),
        _ => format!("known keys here: {}", known.join(", ")),
    };
    format!("unknown key `{path}` ignored (inference-perf ignores it too); {hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_key_is_named_with_the_one_meant() {
        let lines = unknown_keys("load:\n  intervall: 5\n  stages:\n  - rate: 1\n    durration: 10\napi:\n  type: chat\n");
        assert_eq!(
            lines,
            [
                "unknown key `load.intervall` ignored (inference-perf ignores it too); did you mean `interval`?",
                "unknown key `load.stages[0].durration` ignored (inference-perf ignores it too); did you mean `duration`?",
            ]
        );
    }

    #[test]
    fn a_key_far_from_any_lists_the_section() {
        let lines = unknown_keys("server:\n  gpu: h100\n");
        assert_eq!(lines.len(), 1);
        assert!(lines[0].starts_with("unknown key `server.gpu` ignored"), "{}", lines[0]);
        assert!(lines[0].contains("known keys here: type, model_name"), "{}", lines[0]);
    }

    /// A document holding every known key of `section`, at its path.
    fn section_document(section: &str, keys: &[&str]) -> String {
        let (mut out, mut indent) = (String::new(), 0);
        for part in section.split('.').filter(|p| !p.is_empty()) {
            let (name, sequence) = part.strip_suffix("[]").map_or((part, false), |n| (n, true));
            out += &format!("{:indent$}{name}:\n", "");
            indent += 2;
            if sequence {
                out += &format!("{:indent$}-\n", "");
                indent += 2;
            }
        }
        out + &keys.iter().map(|k| format!("{:indent$}{k}: null\n", "")).collect::<String>()
    }

    #[test]
    fn every_known_key_and_unread_sections_pass() {
        for (section, keys) in SECTIONS {
            let text = section_document(section, keys);
            assert_eq!(unknown_keys(&text), Vec::<String>::new(), "{text}");
        }
        assert!(unknown_keys("report:\n  anything: 1\nstorage:\n  whatever: {}\n").is_empty());
    }

    #[test]
    fn a_document_that_is_not_a_tree_is_not_checked() {
        assert!(unknown_keys("load: [").is_empty());
        assert!(unknown_keys("- 1\n- 2\n").is_empty());
    }
}
