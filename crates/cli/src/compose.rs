//! `blis compose`: merge workload specs.

use std::path::{Path, PathBuf};

use blis_workload::compose::compose;
use blis_workload::spec::{self, to_yaml};

use crate::error::bad_input;
use crate::output::{output_dir, refuse_overwriting_inputs, warn, write_checked_spec};

/// `blis compose`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  blis compose --from a.yaml --from preset:chatbot --output merged.yaml")]
pub struct ComposeArgs {
    /// A spec to include (a YAML file, or preset:NAME / scenario:NAME); repeat for each.
    #[arg(long = "from", value_name = "SPEC", required = true)]
    from: Vec<String>,
    /// The merged spec to write.
    #[arg(long, short, value_name = "PATH")]
    output: PathBuf,
}

/// Runs `blis compose`.
pub fn execute(a: ComposeArgs) -> anyhow::Result<()> {
    let inputs: Vec<(&str, Option<&Path>)> = a.from.iter().map(|f| ("from", Some(Path::new(f)))).collect();
    refuse_overwriting_inputs(&[("output", Some(&a.output))], &inputs)?;
    let parts = a.from.iter().map(|r| spec::load(r)).collect::<Result<Vec<_>, _>>().map_err(|e| bad_input!("{e}"))?;
    let (merged, warnings) = compose(&parts, &output_dir(&a.output)).map_err(|e| bad_input!("{e}"))?;
    warn(&warnings);
    let comment = format!("# Composed by `blis compose` from {}.\n", a.from.join(", "));
    write_checked_spec(&a.output, &comment, &to_yaml(&merged))?;
    eprintln!("wrote {} ({} clients)", a.output.display(), merged.clients.len());
    Ok(())
}
