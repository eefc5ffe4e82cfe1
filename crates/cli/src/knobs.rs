//! The knobs on the command line: the table itself is
//! `blis_scenario::knobs` (clap arguments from its `clap` feature); here are
//! what only a command line needs: vLLM's negative flag spellings, which
//! knobs each subcommand hides and refuses, and errors that name the file a
//! value came from.

use std::path::Path;

use blis_scenario::knobs::{CLUSTER_KNOBS, KnobValues, Knobs, NEGATABLE_KNOBS, SERVER_KNOBS, WORKLOAD_KNOBS};
use blis_scenario::{Scenario, ScenarioError};

use crate::error::{BadInput, bad_input};

/// The scenario of a command line: its flags over its `--config` file (if
/// any) over the defaults; `trace_decisions` when decisions are written.
pub fn scenario(flags: &KnobValues, config: Option<&Path>) -> Result<Scenario, BadInput> {
    let files = match config {
        Some(path) => vec![(KnobValues::load(path)?, format!("--config {}", path.display()))],
        None => Vec::new(),
    };
    Ok(Scenario::from_values(flags, files))
}

impl From<ScenarioError> for BadInput {
    fn from(e: ScenarioError) -> BadInput {
        BadInput(e.to_string())
    }
}

/// An error about a knob, said of the file its value came from when it did
/// not come from a flag ([`Knobs::blame`]); any other error passes unchanged.
pub fn blame(err: anyhow::Error, scenario: &Scenario) -> anyhow::Error {
    match err.downcast::<ScenarioError>() {
        Ok(e) => scenario.knobs.blame(e, &scenario.files).into(),
        Err(other) => other,
    }
}

/// The knobs a command shares with `blis run` but does not use: they are
/// hidden from its help and refused when given ([`reject_unused`]).
pub fn unused_by(command: &str) -> Vec<&'static str> {
    let except = |list: &[&'static str], keep: &[&str]| list.iter().copied().filter(|k| !keep.contains(k)).collect::<Vec<_>>();
    match command {
        // A server takes requests from clients; only the answer length of clients without ignore_eos is a workload knob.
        "serve" => [
            except(&WORKLOAD_KNOBS, &["output-tokens", "output-tokens-stdev", "output-tokens-min", "output-tokens-max"]),
            CLUSTER_KNOBS.to_vec(),
        ]
        .concat(),
        // A load generator drives someone else's server: no server, latency or cluster knobs.
        // Tenants and SLO classes come from the spec's clients, which the trace records.
        "observe" => {
            [SERVER_KNOBS.to_vec(), CLUSTER_KNOBS.to_vec(), vec!["horizon", "client-timeout", "trace", "slo-class-mix", "tenant-mix"]]
                .concat()
        }
        // Replay takes its requests from the trace.
        "replay" => except(&WORKLOAD_KNOBS, &["trace", "num-requests", "horizon"]),
        _ => Vec::new(),
    }
}

/// Refuses knobs `command` does not use that were given by flag or file.
pub fn reject_unused(knobs: &Knobs, command: &str) -> Result<(), BadInput> {
    let report = knobs.report();
    for name in unused_by(command) {
        if report.get(name).is_some_and(|v| v["source"] != "default") {
            return Err(bad_input!("--{name} does not apply to `blis {command}`"));
        }
    }
    Ok(())
}

/// Rewrites vLLM's negative boolean flags (`--no-enable-chunked-prefill`)
/// into the form clap parses (`--enable-chunked-prefill=false`), so a vLLM
/// command line can be pasted as is. Everything else passes through
/// unchanged, including anything after a `--` separator.
pub fn accept_vllm_negations(args: impl IntoIterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut after_separator = false;
    args.into_iter()
        .map(|arg| {
            if after_separator {
                return arg;
            }
            after_separator = arg == "--";
            let negated = arg.to_str().and_then(|a| a.strip_prefix("--no-")).filter(|k| NEGATABLE_KNOBS.contains(k));
            match negated {
                Some(knob) => format!("--{knob}=false").into(),
                None => arg,
            }
        })
        .collect()
}

/// Hides the knobs each subcommand does not use from its `--help`.
pub fn hide_unused(mut cmd: clap::Command) -> clap::Command {
    for sub in ["serve", "observe", "replay"] {
        cmd = cmd.mut_subcommand(sub, |mut s| {
            for name in unused_by(sub) {
                // clap names arguments by field: `num-requests` is `num_requests`.
                s = s.mut_arg(name.replace('-', "_"), |a| a.hide(true));
            }
            s
        });
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(args: &[&str]) -> Vec<String> {
        accept_vllm_negations(args.iter().map(std::ffi::OsString::from)).into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    #[test]
    fn vllm_negations_become_explicit_false_values_and_nothing_else_changes() {
        assert_eq!(
            rewrite(&["blis", "run", "--no-enable-prefix-caching", "--no-async-scheduling", "--rate", "3"]),
            ["blis", "run", "--enable-prefix-caching=false", "--async-scheduling=false", "--rate", "3"]
        );
        // Unknown negations stay as they are (clap rejects them), and so does anything after `--`.
        assert_eq!(
            rewrite(&["blis", "--no-seed", "--", "--no-enable-chunked-prefill"]),
            ["blis", "--no-seed", "--", "--no-enable-chunked-prefill"]
        );
    }
}
