//! `blis serve`: an OpenAI-compatible server driven by the simulator.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use blis_net::kv_events::KvEventsConfig;
use blis_net::serve::{ServeConfig, ServeTimeouts, StartError, run_until_interrupted};
use blis_scenario::Scenario;
use blis_scenario::count::parse_count;
use blis_scenario::deployment::Deployment;
use blis_scenario::knobs::KnobValues;

use crate::error::bad_input;
use crate::output::warn;

/// Serve the OpenAI API with timing from the simulator (no GPU needed).
#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  blis serve --model meta-llama/llama-3.1-8b-instruct --port 8000 --time-scale 1.0\n\n\
    The --output-tokens* flags set the length of answers whose client does not send ignore_eos (capped by max_tokens).")]
pub struct ServeArgs {
    #[command(flatten)]
    pub knobs: KnobValues,

    /// Read knob values from a YAML file whose keys are the flag names; flags win.
    #[arg(long, value_name = "PATH", help_heading = "Run")]
    pub config: Option<PathBuf>,

    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1", help_heading = "Server")]
    pub host: IpAddr,

    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8000, help_heading = "Server")]
    pub port: u16,

    /// Simulated seconds per wall-clock second, in (0, 1e6]: 10 replays the simulated server ten times faster than real time.
    #[arg(long, default_value_t = 1.0, value_name = "FACTOR", allow_negative_numbers = true, help_heading = "Server")]
    pub time_scale: f64,

    /// Fraction of requests that fail: HTTP 429, HTTP 503 or a connection dropped mid-response, equally likely.
    #[arg(long, default_value_t = 0.0, value_name = "FRACTION", allow_negative_numbers = true, help_heading = "Server")]
    pub failure_rate: f64,

    /// Model name clients must send. [default: the resolved model id]
    #[arg(long, value_name = "NAME", help_heading = "Server")]
    pub served_model_name: Option<String>,

    /// Largest request body accepted, bytes, from 1 to 1Gi (e.g. 4Mi or 1e6); a request declaring a larger
    /// Content-Length is answered 413 at once.
    #[arg(long, default_value_t = 4 << 20, value_name = "BYTES", value_parser = parse_count::<u64>, allow_negative_numbers = true, help_heading = "Server")]
    pub max_body_bytes: u64,

    /// Close a connection whose request head is still incomplete this long after it was accepted or the head began.
    #[arg(long, default_value_t = ServeTimeouts::DEFAULT.header_read_ms, value_name = "MS", value_parser = parse_count::<u64>, allow_negative_numbers = true, help_heading = "Server")]
    pub header_timeout_ms: u64,

    /// Answer 408 and close the connection when a request body is still incomplete this long after its head.
    #[arg(long, default_value_t = ServeTimeouts::DEFAULT.body_read_ms, value_name = "MS", value_parser = parse_count::<u64>, allow_negative_numbers = true, help_heading = "Server")]
    pub body_timeout_ms: u64,

    /// Close a kept-alive connection that sends no new request for this long.
    #[arg(long, default_value_t = ServeTimeouts::DEFAULT.keep_alive_idle_ms, value_name = "MS", value_parser = parse_count::<u64>, allow_negative_numbers = true, help_heading = "Server")]
    pub idle_timeout_ms: u64,

    /// Publish KV-cache events as vLLM does: its --kv-events-config JSON, e.g.
    /// '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557", "topic": "kv-events"}'
    /// (a ZeroMQ PUB socket; msgpack batches of BlockStored, BlockRemoved, AllBlocksCleared).
    #[arg(long, value_name = "JSON", help_heading = "Server")]
    pub kv_events_config: Option<String>,

    /// On Ctrl-C, SIGTERM or SIGHUP, let requests in flight run on this long, then end them (streams with an error event and [DONE]).
    #[arg(long, default_value_t = ServeTimeouts::DEFAULT.shutdown_grace_ms, value_name = "MS", value_parser = parse_count::<u64>, allow_negative_numbers = true, help_heading = "Server")]
    pub shutdown_grace_ms: u64,
}

/// Runs `blis serve` until Ctrl-C, SIGTERM or SIGHUP.
pub fn execute(args: ServeArgs) -> anyhow::Result<()> {
    let scenario = crate::knobs::scenario(&args.knobs, args.config.as_deref())?;
    serve_with(&args, &scenario).map_err(|e| crate::knobs::blame(e, &scenario))
}

fn serve_with(args: &ServeArgs, scenario: &Scenario) -> anyhow::Result<()> {
    let knobs = &scenario.knobs;
    crate::knobs::reject_unused(knobs, "serve")?;
    let (mut report, mut warnings) = (knobs.report(), Vec::new());
    let deployment = Deployment::resolve(knobs, scenario.long_context, &mut report, &mut warnings)?;
    warn(&warnings);
    let natural_output = blis_scenario::workload::output_length(knobs);
    let model_name = args.served_model_name.clone().unwrap_or_else(|| deployment.server.model_name.clone());
    let config = ServeConfig {
        model_name: model_name.clone(),
        instance: deployment.server.instance.clone(),
        latency: deployment.latency.clone(),
        time_scale: args.time_scale,
        failure_rate: args.failure_rate,
        seed: knobs.seed.value,
        natural_output: Some(natural_output),
        // Beyond usize (a 32-bit host): over the limit, which start() refuses naming the flag.
        max_body_bytes: usize::try_from(args.max_body_bytes).unwrap_or(usize::MAX),
        timeouts: ServeTimeouts {
            header_read_ms: args.header_timeout_ms,
            body_read_ms: args.body_timeout_ms,
            keep_alive_idle_ms: args.idle_timeout_ms,
            shutdown_grace_ms: args.shutdown_grace_ms,
        },
        kv_events: args.kv_events_config.as_deref().map(KvEventsConfig::parse).transpose().map_err(|e| bad_input!("{e}"))?,
    };
    let addr = SocketAddr::new(args.host, args.port);
    run_until_interrupted(config, addr, |bound, kv_events| {
        crate::output::print_warnings();
        if let Some(endpoint) = kv_events {
            eprintln!("blis serve: publishing KV events on {endpoint}");
        }
        eprintln!(
            "blis serve: {model_name} ({} on {} × {}, {} KV blocks), time scale {}, listening on http://{bound}",
            deployment.latency.name(),
            deployment.server.tp,
            deployment.server.gpu_name,
            grouped(deployment.server.instance.num_gpu_blocks),
            readable(args.time_scale)
        );
    })
    .map_err(|e| match e {
        StartError::Config(c) => anyhow::Error::new(bad_input!("{c}")),
        StartError::Io(io) => anyhow::Error::new(bad_input!("cannot listen on {addr}: {io}")),
    })
}

/// `n` with thousands separators: `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// `x` as written in the flag's range, (0, 1e6]: plainly (`0.5`, `1000000`),
/// or in exponent form below 0.001, where the plain form runs to hundreds of
/// digits (`1e-300`).
fn readable(x: f64) -> String {
    if x >= 1e-3 { x.to_string() } else { format!("{x:e}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fuzzing finding: the banner printed huge block counts and tiny time scales digit by digit.
    #[test]
    fn banner_numbers_are_readable() {
        for (n, text) in [
            (0, "0"),
            (999, "999"),
            (1_000, "1,000"),
            (29_000, "29,000"),
            (1_234_567, "1,234,567"),
            (u64::MAX, "18,446,744,073,709,551,615"),
        ] {
            assert_eq!(grouped(n), text);
        }
        for (x, text) in [(1.0, "1"), (0.5, "0.5"), (1e6, "1000000"), (0.001, "0.001"), (1e-300, "1e-300"), (2.5e-7, "2.5e-7")] {
            assert_eq!(readable(x), text);
        }
    }
}
