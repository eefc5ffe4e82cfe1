//! `blis fit`: learn latency coefficients from real experiments.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use blis_data::coefficients::CoefficientSet;
use blis_calibrate::fit::{FitError, FitOptions, fit};
use blis_calibrate::suite::Suite;
use blis_net::client::{RunClock, rfc3339_utc};
use blis_engine::latency::ModelKind;

use crate::error::bad_input;
use crate::output::AtomicFile;

/// Learn latency-model coefficients from real experiments.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  blis fit validation/vllm-h100 --latency-model trained-physics -o trained-physics-h100.yaml\n  \
    blis fit validation/vllm-h100 --latency-model trained-physics --holdout-model Llama-2-70b-hf -o holdout.yaml")]
pub struct FitArgs {
    /// Experiment directories, or directories holding them.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,

    #[command(flatten)]
    pub definitions: crate::definitions::DefinitionArgs,

    /// Model to fit: blackbox, trained-physics, unified-5, physics-normalized.
    #[arg(long, default_value = "trained-physics")]
    pub latency_model: String,

    /// Coefficients of the first simulation round (any model). [default: the published set for --latency-model, else the bundled default]
    #[arg(long, value_name = "FILE")]
    pub start: Option<PathBuf>,

    /// Leave this model's experiments out of training (HuggingFace id or the part after '/') and report their errors.
    #[arg(long, value_name = "NAME")]
    pub holdout_model: Option<String>,

    /// Simulation seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Stage-one rounds (simulate, then linear fit).
    #[arg(long, default_value_t = 6)]
    pub rounds: usize,

    /// Stage-two (Nelder–Mead) objective evaluations; 0 skips stage two.
    #[arg(long, default_value_t = 150)]
    pub refine_evals: usize,

    /// Date recorded as `provenance.fitted_at` (YYYY-MM-DD). [default: today, UTC]
    #[arg(long, value_name = "DATE")]
    pub fitted_at: Option<String>,

    /// Write the coefficient file here instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Today's date (UTC) as YYYY-MM-DD.
fn today_utc() -> String {
    let mut date = rfc3339_utc(RunClock::start().start_unix_us());
    date.truncate(10);
    date
}

/// Whether `date` is a calendar date written YYYY-MM-DD.
fn is_calendar_date(date: &str) -> bool {
    let b = date.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r.clone()].iter().all(u8::is_ascii_digit).then(|| date[r].parse::<u32>().ok()).flatten();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let (Some(year), Some(month), Some(day)) = (digits(0..4), digits(5..7), digits(8..10)) else { return false };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&day)
}

/// Runs `blis fit`.
pub fn execute(args: FitArgs) -> anyhow::Result<()> {
    let kind: ModelKind = args.latency_model.parse().map_err(|e| bad_input!("--latency-model: {e}"))?;
    if args.rounds == 0 {
        return Err(bad_input!("--rounds 0: must be at least 1 (each round simulates, then fits)").into());
    }
    if let Some(d) = args.fitted_at.as_deref().filter(|d| !is_calendar_date(d)) {
        return Err(bad_input!("--fitted-at {d:?}: must be a date written YYYY-MM-DD").into());
    }
    let start = match &args.start {
        Some(p) => CoefficientSet::load(p).map_err(|e| bad_input!("--start {e}"))?,
        None => CoefficientSet::bundled(&format!("{kind}-published")).unwrap_or_else(CoefficientSet::default_set),
    };
    let suite = Suite::load(&args.dirs, &args.definitions.load()?).map_err(|e| bad_input!("{e}"))?;
    crate::output::warn(&suite.warnings());
    let mut output = args.output.as_deref().map(|p| AtomicFile::create("output", p)).transpose()?;
    crate::output::print_warnings();
    let opts = FitOptions {
        kind,
        start,
        holdout_model: args.holdout_model.clone(),
        seed: args.seed,
        linear_rounds: args.rounds,
        refine_evals: args.refine_evals,
    };
    let started = Instant::now();
    let outcome = fit(&suite, &opts, &mut |line| eprintln!("[{:7.1} s] {line}", started.elapsed().as_secs_f64())).map_err(|e| match e {
        FitError::Invalid(msg) => anyhow::Error::from(bad_input!("{msg}")),
        FitError::Experiment(e) => anyhow::Error::from(bad_input!("{e}")),
    })?;
    let mut set = outcome.set;
    let mut command = format!("blis fit {} --latency-model {kind} --seed {} --rounds {} --refine-evals {}", args.dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(" "), args.seed, args.rounds, args.refine_evals);
    if let Some(p) = &args.start {
        command += &format!(" --start {}", p.display());
    }
    if let Some(m) = &args.holdout_model {
        command += &format!(" --holdout-model {m}");
    }
    for (flag, path) in [("--model-config", &args.definitions.model_config), ("--hardware-config", &args.definitions.hardware_config)] {
        if let Some(p) = path {
            command += &format!(" {flag} {}", p.display());
        }
    }
    set.provenance.command = Some(command);
    set.provenance.fitted_at = Some(args.fitted_at.clone().unwrap_or_else(today_utc));
    eprintln!(
        "[{:7.1} s] done: fitting objective {:.3} after stage one, {:.3} after stage two; E2E MAPE + 0.3·TTFT MAPE on the training stages {:.3}",
        started.elapsed().as_secs_f64(),
        outcome.linear_loss,
        outcome.final_loss,
        outcome.train_loss
    );
    let yaml = format!("# Fitted by `blis fit`; regenerate with provenance.command.\n{}", set.to_yaml());
    match output.as_mut() {
        Some(f) => f.writer().write_all(yaml.as_bytes()).context("writing --output")?,
        None => std::io::stdout().lock().write_all(yaml.as_bytes()).context("writing to stdout")?,
    }
    if let Some(f) = output {
        f.commit()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::is_calendar_date;

    #[test]
    fn fitted_at_takes_calendar_dates_only() {
        for ok in ["2026-11-21", "2024-02-29", "2000-02-29", "1999-12-31"] {
            assert!(is_calendar_date(ok), "{ok}");
        }
        for bad in ["yesterday", "2026-13-45", "2026-02-29", "1900-02-29", "2026-04-31", "2026-1-01", "2026-11-21\n", "+026-11-21", "2026-00-10"] {
            assert!(!is_calendar_date(bad), "{bad:?}");
        }
    }
}
