//! `blis`: the command-line front end of BLIS.
//!
//! Thin by design: it parses flags, resolves configuration, wires the
//! engine and workload crates together, and renders reports. Exit codes: 0
//! success, 1 failure while running, 2 bad input.

mod error;
mod fit;
mod knobs;
mod output;
mod plots;
mod report;
mod run;
mod setup;
mod validate;

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
    Run(Box<run::RunArgs>),
    /// Simulate real serving experiments (inference-perf result directories) and compare with their measurements.
    Validate(Box<validate::ValidateArgs>),
    /// Learn latency-model coefficients from real experiments (stage one: linear; stage two: simulator in the loop).
    Fit(Box<fit::FitArgs>),
    /// List the bundled models and GPUs.
    Models,
}

fn list_models() {
    println!("Bundled models (--model, case-insensitive; the part after '/' also works):");
    for m in blis_engine::catalog::MODELS {
        println!("  {}", m.id);
    }
    println!("Bundled GPUs (--hardware):");
    for g in blis_engine::catalog::GPUS {
        let spec = g.spec();
        println!("  {:<10} {} ({} TFLOP/s BF16, {} TB/s, {} GiB)", g.name, spec.name, spec.bf16_tflops, spec.hbm_tb_s, spec.memory_gib);
    }
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::execute(*args),
        Command::Validate(args) => validate::execute(*args),
        Command::Fit(args) => fit::execute(*args),
        Command::Models => {
            list_models();
            Ok(())
        }
    };
    if let Err(err) = result {
        eprintln!("error: {err:#}");
        std::process::exit(error::exit_code(&err));
    }
}
