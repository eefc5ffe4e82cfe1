//! `blis evaluate`: scores candidate policy files on one scenario, for a
//! search loop (GEPA's adapter evaluates a batch and reflects on traces;
//! OpenEvolve calls an evaluator per program). One JSON document: a list
//! with, per candidate in the order given, its score, fitness components,
//! metrics, anomalies, decision-trace excerpts and error
//! ([`blis_scenario::evaluate`]).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use blis_scenario::knobs::KnobValues;
use rayon::prelude::*;

use crate::error::bad_input;

/// Score candidate policy files on a scenario (fitness, metrics, decision-trace excerpts) for a policy search.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  blis evaluate --model meta-llama/llama-3.1-8b-instruct --num-instances 4 --rate 60 --num-requests 3000 \\\n    --candidate a.yaml --candidate b.yaml"
)]
pub struct EvaluateArgs {
    #[command(flatten)]
    pub knobs: KnobValues,

    /// Read knob values (the scenario) from a YAML file whose keys are the flag names; flags win.
    #[arg(long, value_name = "PATH", help_heading = "Evaluate")]
    pub config: Option<PathBuf>,

    /// A candidate policy file (--policy-config's schema); repeat for a batch.
    #[arg(long, value_name = "PATH", required = true, help_heading = "Evaluate")]
    pub candidate: Vec<PathBuf>,

    /// Routing decisions quoted per candidate (those furthest above the least-loaded instance).
    #[arg(long, default_value_t = 5, value_name = "N", help_heading = "Evaluate")]
    pub excerpts: usize,

    /// Write the JSON here instead of stdout.
    #[arg(long, short, value_name = "PATH", help_heading = "Evaluate")]
    pub output: Option<PathBuf>,
}

/// Runs `blis evaluate`.
pub fn execute(args: EvaluateArgs) -> anyhow::Result<()> {
    if args.knobs.policy_config.is_some() {
        return Err(bad_input!("--policy-config does not apply to `blis evaluate`: each --candidate is the policy file").into());
    }
    let files = match &args.config {
        Some(path) => vec![(KnobValues::load(path)?, format!("--config {}", path.display()))],
        None => Vec::new(),
    };
    // A flag or file the scenario cannot run with is the caller's error, not every candidate's.
    blis_scenario::evaluate::check(&args.knobs, &files)?;
    let output = args.output.as_deref().map(|p| crate::output::AtomicFile::create("output", p)).transpose()?;
    let mut results: Vec<serde_json::Value> =
        args.candidate.par_iter().map(|c| blis_scenario::evaluate::evaluate(c, &args.knobs, &files, args.excerpts)).collect();
    // A broken candidate's error reads as `blis run` would print it for the same file.
    let readable = |m: &str| crate::error::tidy_numbers(&crate::error::plain_types(m));
    for r in &mut results {
        if let Some(e) = r["error"].as_str().map(readable) {
            r["trace"] = serde_json::json!([format!("the candidate did not run: {e}")]);
            r["error"] = e.into();
        }
    }
    let text = serde_json::to_string_pretty(&results).context("rendering the results")?;
    match output {
        Some(mut file) => {
            writeln!(file.writer(), "{text}").context("writing --output")?;
            file.commit()
        }
        None => {
            println!("{text}");
            Ok(())
        }
    }
}
