//! `blis`: the command-line front end of BLIS.
//!
//! Thin by design: it parses flags, resolves configuration, wires the
//! engine and workload crates together, and renders reports. Exit codes: 0
//! success, 1 failure while running, 2 bad input.

mod calibrate;
mod compose;
mod convert;
mod definitions;
mod error;
mod evaluate;
mod fit;
mod kernels;
mod knobs;
mod observe;
mod output;
mod plan;
mod plot;
mod replay;
mod report_html;
mod run;
mod serve;
mod simulate;
mod sweep;
mod table;
mod validate;
mod workload_cmd;

use clap::{Parser, Subcommand};

/// BLIS: a fast, deterministic discrete-event simulator of LLM inference serving.
#[derive(Parser, Debug)]
#[command(name = "blis", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Simulate a vLLM deployment serving a workload and report latency, throughput and cache behaviour.
    #[command(after_help = blis_scenario::count::HELP)]
    Run(Box<run::RunArgs>),
    /// Serve the OpenAI API (completions, chat, SSE streaming, /metrics) with timing from the simulator.
    #[command(after_help = blis_scenario::count::HELP)]
    Serve(Box<serve::ServeArgs>),
    /// Drive a live OpenAI-compatible server with a workload and record a trace v2 of what it did.
    #[command(after_help = blis_scenario::count::HELP)]
    Observe(Box<observe::ObserveArgs>),
    /// Simulate a recorded trace v2 at its recorded send times, with the server config from its header.
    #[command(after_help = blis_scenario::count::HELP)]
    Replay(Box<replay::ReplayArgs>),
    /// Compare a recorded trace with its simulated replay: per-request and distribution statistics, plots.
    Calibrate(Box<calibrate::CalibrateArgs>),
    /// Simulate real serving experiments (inference-perf result directories) and compare with their measurements.
    Validate(Box<validate::ValidateArgs>),
    /// Learn latency-model coefficients from real experiments (stage one: linear; stage two: simulator in the loop).
    Fit(Box<fit::FitArgs>),
    /// Fit GEMM efficiencies that carry across GPUs, and check all-reduce curves, on measured kernel profiles.
    Kernels(Box<kernels::KernelsArgs>),
    /// Sweep a scenario over a grid of knob values on every core: one CSV row per point, resumable.
    #[command(after_help = blis_scenario::count::HELP)]
    Sweep(Box<sweep::SweepArgs>),
    /// Find the cheapest deployment (GPU, TP, replicas, knobs) that meets an SLO for a workload.
    #[command(after_help = blis_scenario::count::HELP)]
    Plan(Box<plan::PlanArgs>),
    /// Score candidate policy files on a scenario (fitness, metrics, decision-trace excerpts) for a policy search.
    #[command(after_help = blis_scenario::count::HELP)]
    Evaluate(Box<evaluate::EvaluateArgs>),
    /// List the bundled models and GPUs.
    Models,
    /// Inspect workloads: generate a trace from a spec, measure it, list and show the built-ins.
    #[command(subcommand)]
    Workload(workload_cmd::WorkloadCommand),
    /// Convert other workload descriptions into a spec, or vLLM traces into a trace v2.
    #[command(subcommand)]
    Convert(convert::ConvertCommand),
    /// Merge workload specs into one whose clients keep their rates, seeds and requests.
    Compose(compose::ComposeArgs),
}

fn list_models() -> anyhow::Result<()> {
    use crate::output::outln;
    use blis_physics::model::ModelConfig;
    outln!("Bundled models (--model, case-insensitive; the part after '/' also works):")?;
    let width = blis_physics::catalog::MODELS.iter().map(|m| m.id.len()).max().unwrap_or(0);
    outln!("  {:<width$}  {:>8}  {:>9}  {:<18}  {:>9}  layout", "id", "params", "weights", "quantization", "context")?;
    for m in blis_physics::catalog::MODELS {
        let Ok(c) = ModelConfig::from_hf_json(m.config_json) else {
            outln!("  {}", m.id)?;
            continue;
        };
        let mut layout = match &c.moe {
            Some(moe) => format!("MoE, {} experts, {} per token", moe.num_experts, moe.experts_per_token),
            None => "dense".to_string(),
        };
        if c.mla.is_some() {
            layout += ", latent attention";
        }
        if let Some(local) = c.local_attention {
            layout += &format!(", {} in {} of {} layers", local.span, local.layers, c.num_layers);
        }
        outln!(
            "  {:<width$}  {:>6.1} B  {:>5.1} GiB  {:<18}  {:>9}  {layout}",
            m.id,
            c.total_params() / 1e9,
            c.weight_bytes() / f64::from(1u32 << 30),
            c.quant_method.as_deref().unwrap_or("none"),
            c.derived_max_model_len,
        )?;
    }
    outln!("Bundled GPUs (--hardware; any name of the board works, e.g. as nvidia-smi prints it):")?;
    let width = blis_physics::catalog::GPUS.iter().map(|g| g.name.len()).max().unwrap_or(0);
    for g in blis_physics::catalog::GPUS {
        let spec = g.spec();
        outln!("  {:<width$} {} ({} TFLOP/s BF16, {} TB/s, {} GiB)", g.name, spec.name, spec.bf16_tflops, spec.hbm_tb_s, spec.memory_gib)?;
    }
    Ok(())
}

/// Parses the command line; usage errors become one line on stderr and exit
/// code 2 (help and version go to stdout with exit code 0, as usual).
fn parse_cli() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let args = knobs::accept_vllm_negations(std::env::args_os());
    let parsed = knobs::hide_unused(Cli::command()).try_get_matches_from(args).and_then(|m| Cli::from_arg_matches(&m));
    match parsed {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            let text = e.render().to_string();
            let parts: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .collect();
            let message = parts.join("; ");
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            eprintln!("error: {} (see `blis --help`)", error::one_line(message));
            std::process::exit(2);
        }
    }
}

/// Lets a write to a closed pipe end the process quietly, as it does for
/// every Unix filter (`blis models | head` exits with SIGPIPE instead of
/// panicking in `println!`). Rust ignores SIGPIPE by default; `serve` and
/// `observe` keep it ignored, since a peer closing a socket is theirs to
/// handle.
fn die_quietly_on_closed_pipes() {
    #[cfg(unix)]
    // SAFETY: restoring a signal's default disposition before any thread
    // is started; no handler runs Rust code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Makes Ctrl-C, SIGTERM and SIGHUP remove the outputs being written
/// before the process ends (exit code 130, as a shell reports an
/// interrupted command), so a stopped command leaves no partial file.
/// `serve` and `observe` handle these signals themselves, to shut down
/// gracefully.
fn clean_up_when_stopped() {
    // The handler runs on ctrlc's own thread, not in signal context. If it
    // cannot be installed, the default disposition (end at once) stays.
    let _ = ctrlc::set_handler(|| {
        output::discard_open_outputs();
        eprintln!("error: stopped by a signal; outputs not yet complete were removed");
        std::process::exit(130);
    });
}

fn main() {
    let cli = parse_cli();
    if !matches!(cli.command, Command::Serve(_) | Command::Observe(_)) {
        die_quietly_on_closed_pipes();
        clean_up_when_stopped();
    }
    let result = match cli.command {
        Command::Run(args) => run::execute(*args),
        Command::Serve(args) => serve::execute(*args),
        Command::Observe(args) => observe::execute(*args),
        Command::Replay(args) => replay::execute(*args),
        Command::Calibrate(args) => calibrate::execute(*args),
        Command::Validate(args) => validate::execute(*args),
        Command::Fit(args) => fit::execute(*args),
        Command::Kernels(args) => kernels::execute(*args),
        Command::Models => list_models(),
        Command::Workload(cmd) => workload_cmd::execute(cmd),
        Command::Convert(cmd) => convert::execute(cmd),
        Command::Compose(args) => compose::execute(args),
        Command::Sweep(args) => sweep::execute(*args),
        Command::Plan(args) => plan::execute(*args),
        Command::Evaluate(args) => evaluate::execute(*args),
    };
    match result {
        Ok(()) => output::print_warnings(),
        Err(err) => {
            eprintln!("error: {}", error::one_line(&error::tidy_numbers(&error::plain_types(&format!("{err:#}")))));
            std::process::exit(error::exit_code(&err));
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Every knob a subcommand hides exists in it (clap's own consistency checks pass).
    #[test]
    fn the_command_line_definition_is_consistent() {
        knobs::hide_unused(Cli::command()).debug_assert();
    }

    /// clap checks its definitions only in debug builds, and the tests run
    /// in release: two arguments of one command sharing a name (`fit` had
    /// two `--hardware`) would parse as one of them, unnoticed.
    #[test]
    fn no_two_arguments_of_a_command_share_a_name() {
        fn check(cmd: &clap::Command, path: &str) {
            let mut names = std::collections::BTreeSet::new();
            for a in cmd.get_arguments() {
                let long = a.get_long().into_iter().chain(a.get_all_aliases().into_iter().flatten()).map(|l| format!("--{l}"));
                let short = a.get_short().into_iter().chain(a.get_all_short_aliases().into_iter().flatten()).map(|c| format!("-{c}"));
                for name in std::iter::once(format!("id {}", a.get_id())).chain(long).chain(short) {
                    assert!(names.insert(name.clone()), "`{path}` has two arguments named {name}");
                }
            }
            for sub in cmd.get_subcommands() {
                check(sub, &format!("{path} {}", sub.get_name()));
            }
        }
        check(&knobs::hide_unused(Cli::command()), "blis");
    }
}
