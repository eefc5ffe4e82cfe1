//! `blis convert servegen`: import a ServeGen data directory as a spec.

use std::path::PathBuf;

use blis_workload::servegen::{ServeGenOptions, convert};
use blis_workload::spec::to_yaml;

use crate::error::bad_input;
use crate::output::{output_dir, warn, write_checked_spec};

/// `blis convert` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ConvertCommand {
    /// Import a ServeGen data directory (chunk-*-trace.csv, chunk-*-dataset.json) as a workload spec.
    #[command(after_help = "Examples:\n  blis convert servegen --path examples/servegen/language-mini --output w.yaml\n  \
    blis convert servegen --path ServeGen/data/language/m-large --span-end 3600 --output w.yaml   (a ServeGen checkout)")]
    Servegen(ServeGenArgs),
}

/// `blis convert servegen`.
#[derive(clap::Args, Debug)]
pub struct ServeGenArgs {
    /// The ServeGen data directory.
    #[arg(long, value_name = "DIR")]
    path: PathBuf,
    /// The spec to write (dataset files are referenced relative to it).
    #[arg(long, short, value_name = "PATH")]
    output: PathBuf,
    /// Start of the imported span, seconds into the data. [default: 0]
    #[arg(long, value_name = "SECONDS")]
    span_start: Option<u64>,
    /// End of the imported span, seconds into the data. [default: the end of the data]
    #[arg(long, value_name = "SECONDS")]
    span_end: Option<u64>,
    /// The spec's aggregate_rate. [default: the data's mean rate over the span]
    #[arg(long, value_name = "REQ_PER_S", allow_negative_numbers = true)]
    rate: Option<f64>,
    /// The spec's seed. [default: 42]
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
}

/// Runs a `blis convert` subcommand.
pub fn execute(cmd: ConvertCommand) -> anyhow::Result<()> {
    let ConvertCommand::Servegen(a) = cmd;
    if let Some(r) = a.rate
        && !(r.is_finite() && r > 0.0)
    {
        return Err(bad_input!("--rate {r}: must be a positive number of requests per second").into());
    }
    let opts = ServeGenOptions { span_start_s: a.span_start, span_end_s: a.span_end, aggregate_rate: a.rate, seed: a.seed };
    let (spec, warnings) = convert(&a.path, &output_dir(&a.output), &opts).map_err(|e| bad_input!("{e}"))?;
    warn(&warnings);
    let comment = format!(
        "# Imported from the ServeGen data in {} by `blis convert servegen`.\n# Each client is one chunk; its lifecycle windows carry the recorded rate (rate_scale)\n# and fitted arrival process; lengths reference the dataset files.\n",
        a.path.display()
    );
    write_checked_spec(&a.output, &comment, &to_yaml(&spec))?;
    eprintln!("wrote {} ({} clients)", a.output.display(), spec.clients.len());
    Ok(())
}
