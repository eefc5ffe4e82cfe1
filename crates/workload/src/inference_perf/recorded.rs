//! A recorded inference-perf run as `blis validate` reproduces it: with the
//! requests it recorded (`requests.csv`, or inference-perf's per-request
//! report), each is sent at its recorded time with its recorded prompt
//! length; without them, the run is issued as inference-perf issues it
//! ([`super::StagedWorkload`]).

use std::collections::VecDeque;

use blis_engine::driver::Workload;
use blis_engine::request::{Request, RequestId, RequestMeta, RequestRecord, output_stream_seed};
use blis_engine::rng::{subsystem_rng, subsystem_seed};
use blis_engine::time::Micros;

use super::config::{InferencePerfConfig, InferencePerfError, PROBE_STAGE, STAGE_START_OFFSET_S, Stage};
use super::measured::MeasuredLengths;
use super::prompts::StagePrompts;
use super::staged::StagedWorkload;
use super::timers::StageTimer;
use crate::RequestSource;
use crate::concurrency::ConcurrencyGate;
use crate::error::WorkloadError;

/// One request as the real client recorded it.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedSend {
    /// Position in send order (breaks ties between equal send times).
    pub index: u64,
    /// Load stage.
    pub stage: u32,
    /// Send time from the run's first request, µs.
    pub send_us: u64,
    /// Prompt tokens the server saw; 0 when unknown (no response).
    pub input_tokens: u32,
    /// Tokens the server generated, when recorded.
    pub output_tokens: Option<u32>,
    /// Whether the client saw an error (a timeout).
    pub failed: bool,
}

/// An inference-perf run to reproduce: its configuration, what its
/// reports measured of its lengths, and the requests it recorded.
#[derive(Clone, Debug)]
pub struct Reproduction {
    /// The configuration it ran.
    pub config: InferencePerfConfig,
    /// What its reports say of its lengths (see [`StagePrompts::new`]);
    /// default for a configuration that never ran.
    pub measured: MeasuredLengths,
    /// The requests it sent, as recorded (any order).
    pub recorded: Option<Vec<RecordedSend>>,
}

impl Reproduction {
    /// What the run's data generator sends, deterministic in `seed`; an
    /// error for a dataset whose lengths `measured` does not give.
    pub fn prompts(&self, seed: u64) -> Result<StagePrompts, InferencePerfError> {
        StagePrompts::new(&self.config.data, &self.measured, seed)
    }

    /// For each simulated request id, the index of the entry of `recorded`
    /// it replays, `None` for a sweep's probe (simulated, not replayed):
    /// the probe's requests first, then the recorded sends in the order they
    /// were sent. Empty without recorded sends. `seed` is the stream's.
    pub fn send_order(&self, seed: u64) -> Vec<Option<usize>> {
        let Some(sends) = &self.recorded else { return Vec::new() };
        let probe = self.probe_sends(seed).map_or(0, |(sends, _)| sends.len());
        std::iter::repeat_n(None, probe).chain(recorded_order(sends).into_iter().map(Some)).collect()
    }

    /// Requests the stream sends in all, deterministic in `seed`: the
    /// recorded ones, or the configured stages', and a sweep's probe.
    pub fn expected_requests(&self, seed: u64) -> u64 {
        let stages = match &self.recorded {
            Some(sends) => sends.len() as u64,
            None => self.config.load.stages.iter().map(Stage::num_requests).sum(),
        };
        stages + self.probe_sends(seed).map_or(0, |(sends, _)| sends.len() as u64)
    }

    /// The request stream, deterministic in `seed`.
    pub(crate) fn stream(&self, seed: u64) -> Result<Box<dyn RequestSource>, InferencePerfError> {
        let prompts = self.prompts(seed)?;
        Ok(match &self.recorded {
            Some(sends) => {
                let (mut requests, stage_zero) = match self.probe_sends(seed) {
                    Some((probe, cancel_at)) => (
                        self.probe_requests(&probe, cancel_at, &prompts, seed),
                        // Stage 0 starts after the probe has ended, as
                        // inference-perf starts it: one second for the
                        // cancelled probe's clean-up, one for the stage's start.
                        cancel_at + Micros::from_secs(1) + Micros::from_secs_f64(STAGE_START_OFFSET_S).unwrap_or(Micros::ZERO),
                    ),
                    None => (Vec::new(), Micros::ZERO),
                };
                requests.extend(self.recorded_requests(sends, &prompts, seed, requests.len() as u64, stage_zero));
                let caps = self.config.load.stages.iter().map(|s| s.concurrency).collect();
                Box::new(RecordedRun { requests: requests.into(), caps, gate: ConcurrencyGate::new(None) })
            }
            None => Box::new(StagedWorkload::with_prompts(&self.config, prompts, seed)),
        })
    }

    /// When a sweep's probe burst sends its requests before the recorded
    /// stages, as inference-perf's timer sends them (1 s after the probe
    /// starts at 0), and when its client cancels them (`timeout` after the
    /// start; nothing is sent from then on). `None` without a probe.
    fn probe_sends(&self, seed: u64) -> Option<(Vec<Micros>, Micros)> {
        let sweep = self.config.load.sweep.as_ref()?;
        let stage = sweep.probe_stage()?;
        let start = Micros::from_secs_f64(STAGE_START_OFFSET_S).unwrap_or(Micros::ZERO);
        let cancel_at = start + Micros::from_secs_f64(sweep.probe_timeout_s).unwrap_or(Micros::MAX);
        // The stream the staged run draws its probe from first: both paths send the same probe.
        let mut rng = subsystem_rng(seed, "inference-perf/arrivals");
        let mut timer = StageTimer::new(self.config.load.kind, &stage, &mut rng);
        let mut sends = Vec::new();
        while let Some(send) =
            timer.peek().map(|offset| start + Micros::from_secs_f64(offset).unwrap_or(Micros::MAX)).filter(|&t| t < cancel_at)
        {
            sends.push(send);
            timer.advance(&mut rng);
        }
        Some((sends, cancel_at))
    }

    /// The probe's requests, sent at `sends`: ids from 0, the data
    /// generator's first prompts, each cancelled at `cancel_at`.
    fn probe_requests(&self, sends: &[Micros], cancel_at: Micros, prompts: &StagePrompts, seed: u64) -> Vec<Request> {
        let content_seed = subsystem_seed(seed, "replay/probe-outputs");
        let meta = RequestMeta {
            stage: PROBE_STAGE,
            own_prompt_from: prompts.own_prompt_from(),
            cancel_at: Some(cancel_at),
            ..RequestMeta::default()
        };
        (0u64..)
            .zip(sends)
            .map(|(n, &arrival)| {
                let id = RequestId(n);
                let (prompt, max_output_tokens) = prompts.nth(n, id, None);
                Request { id, arrival, prompt, max_output_tokens, output_seed: output_stream_seed(id, content_seed), meta }
            })
            .collect()
    }

    /// The recorded requests as sent: exact send times and prompt lengths;
    /// request n of a stage is the data generator's request n (shared
    /// prefix: prompt n mod count; random and synthetic: lengths n mod
    /// total_count, so `max_tokens` is drawn, not known; a dataset: lengths
    /// drawn from the measured distributions), and a success whose generated
    /// length was recorded generates exactly that. Failed sends record no
    /// length; they get the length the same prompt had elsewhere in the run
    /// (prompts that recur), else the generator's own. Ids follow the send
    /// order from `first_id`; send times count from `time_zero`.
    fn recorded_requests(
        &self,
        sends: &[RecordedSend],
        prompts: &StagePrompts,
        seed: u64,
        first_id: u64,
        time_zero: Micros,
    ) -> Vec<Request> {
        let order = recorded_order(sends);
        let cycle = prompts.prompt_cycle();
        let mut in_stage = vec![0u64; self.config.load.stages.len()];
        let positions: Vec<u64> = order
            .iter()
            .map(|&i| {
                let s = sends[i].stage as usize;
                in_stage[s] += 1;
                in_stage[s] - 1
            })
            .collect();
        let mut known_len = vec![None; cycle.unwrap_or(0) as usize];
        if let Some(count) = cycle {
            for (&i, &n) in order.iter().zip(&positions) {
                if sends[i].input_tokens > 0 {
                    known_len[(n % count) as usize].get_or_insert(sends[i].input_tokens);
                }
            }
        }
        let content_seed = subsystem_seed(seed, "replay/outputs");
        order
            .iter()
            .zip(&positions)
            .enumerate()
            .map(|(id, (&i, &n))| {
                let send = &sends[i];
                let len =
                    if send.input_tokens > 0 { Some(send.input_tokens) } else { cycle.and_then(|count| known_len[(n % count) as usize]) };
                let id = RequestId(first_id + id as u64);
                let (prompt, drawn_output) = prompts.nth(n, id, len);
                let max_output_tokens = send.output_tokens.filter(|_| !send.failed).unwrap_or(drawn_output);
                Request {
                    id,
                    arrival: time_zero + Micros(send.send_us),
                    prompt,
                    max_output_tokens,
                    output_seed: output_stream_seed(id, content_seed),
                    meta: RequestMeta { stage: send.stage, own_prompt_from: prompts.own_prompt_from(), ..RequestMeta::default() },
                }
            })
            .collect()
    }
}

/// The indices of `sends` in the order they were sent (ties by position).
fn recorded_order(sends: &[RecordedSend]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sends.len()).collect();
    order.sort_by_key(|&i| (sends[i].send_us, sends[i].index));
    order
}

/// Recorded requests, each sent at its recorded time through its stage's
/// concurrency cap (inference-perf's `concurrent` load): when the simulated
/// server still holds every slot, a request goes the moment one frees, as
/// the real client's would have. Without caps, exactly the recorded times.
struct RecordedRun {
    requests: VecDeque<Request>,
    /// Each stage's `concurrency_level` (`None`: a rate stage).
    caps: Vec<Option<u32>>,
    gate: ConcurrencyGate,
}

impl Workload for RecordedRun {
    fn peek_arrival(&mut self) -> Option<Micros> {
        let next = self.requests.front()?;
        self.gate.set_limit(self.caps.get(next.meta.stage as usize).copied().flatten());
        self.gate.send_time(next.arrival)
    }

    fn next_request(&mut self) -> Option<Request> {
        self.peek_arrival()?;
        let requests = &mut self.requests;
        self.gate.send(requests.front().map(|r| r.arrival), || requests.pop_front())
    }

    fn on_finish(&mut self, record: &RequestRecord) {
        self.gate.on_finish(record.finished);
    }
}

impl RequestSource for RecordedRun {
    fn take_error(&mut self) -> Option<WorkloadError> {
        None
    }
}
