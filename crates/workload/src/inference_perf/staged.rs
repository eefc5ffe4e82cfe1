//! A whole inference-perf run, lazily: stage after stage, each after the
//! previous one drained, with multi-turn chat's conversations.

use std::collections::BTreeMap;

use blis_engine::driver::Workload;
use blis_engine::request::{Request, RequestId, RequestMeta, RequestRecord, TokenRun, TokenSeq, output_stream_seed};
use blis_engine::rng::{SimRng, subsystem_rng, subsystem_seed};
use blis_engine::time::Micros;

use super::config::{InferencePerfConfig, InferencePerfError, LoadKind, PROBE_STAGE, STAGE_START_OFFSET_S, Stage};
use super::measured::MeasuredLengths;
use super::prompts::StagePrompts;
use super::timers::StageTimer;
use crate::concurrency::ConcurrencyGate;

/// One user's conversation (multi-turn chat).
#[derive(Clone, Debug, Default)]
struct Conversation {
    /// The last round's prompt, its output stream seed and output length.
    last: Option<(TokenSeq, u64, u32)>,
    /// Rounds sent so far.
    rounds: u32,
    /// A round is in flight: later rounds wait (the session lock).
    busy: bool,
    /// Rounds the timer fired while one was in flight: (scheduled send, stage).
    blocked: std::collections::VecDeque<(Micros, u32)>,
}

/// The whole inference-perf run as a lazy workload: stage after stage, each
/// starting `interval` after the previous one drained, prompts cycled per
/// stage, `max_tokens` per request as the data generator sets it, `meta.stage` set. With
/// multi-turn chat, request `n` is a round of user `n mod prompts`, sent
/// when its timer fires or, if the user's previous round is still running,
/// when that round finishes; `meta.session` is `(user, round)`. A sweep
/// first sends its probe burst ([`Sweep::probe_stage`](super::Sweep::probe_stage), stage
/// [`PROBE_STAGE`]), whose requests the client cancels `timeout` after the
/// probe starts; stage 0 starts when the probe has drained.
pub struct StagedWorkload {
    kind: LoadKind,
    /// The stages run, the probe's first when there is one.
    stages: Vec<Stage>,
    /// The probe's cancellation, after its start, when `stages[0]` is a probe.
    probe_timeout: Option<Micros>,
    interval: Micros,
    prompts: StagePrompts,
    rng: SimRng,
    content_seed: u64,
    stage: usize,
    stage_start: Micros,
    /// The current stage's send offsets, drawn as they are sent.
    timer: StageTimer,
    /// Sends of the current stage so far.
    next_in_stage: usize,
    outstanding: BTreeMap<u32, u64>,
    next_id: u64,
    conversations: Option<Vec<Conversation>>,
    /// Released rounds: (send time, sequence, user, stage), earliest first.
    ready: std::collections::BinaryHeap<std::cmp::Reverse<(Micros, u64, usize, u32)>>,
    released: u64,
    /// The current stage's concurrency cap (concurrent loads).
    gate: ConcurrencyGate,
}

impl StagedWorkload {
    /// The run of `cfg`, deterministic in `seed`, its prompts as `measured`
    /// says (see [`StagePrompts::new`]).
    pub fn new(cfg: &InferencePerfConfig, measured: &MeasuredLengths, seed: u64) -> Result<StagedWorkload, InferencePerfError> {
        Ok(StagedWorkload::with_prompts(cfg, StagePrompts::new(&cfg.data, measured, seed)?, seed))
    }

    /// The run of `cfg` sending `prompts` (built by [`StagePrompts::new`]
    /// from `cfg.data` and the same `seed`), deterministic in `seed`.
    pub fn with_prompts(cfg: &InferencePerfConfig, prompts: StagePrompts, seed: u64) -> StagedWorkload {
        let conversations = match (&prompts, cfg.shared_prefix()) {
            (StagePrompts::Shared(prompts), Some(sp)) if sp.enable_multi_turn_chat => Some(vec![Conversation::default(); prompts.len()]),
            _ => None,
        };
        let probe = cfg.load.sweep.as_ref().and_then(|s| Some((s.probe_stage()?, s.probe_timeout_s)));
        let mut w = StagedWorkload {
            kind: cfg.load.kind,
            stages: probe.iter().map(|(stage, _)| *stage).chain(cfg.load.stages.iter().cloned()).collect(),
            probe_timeout: probe.map(|(_, timeout_s)| Micros::from_secs_f64(timeout_s).unwrap_or(Micros::MAX)),
            interval: Micros::from_secs_f64(cfg.load.interval).unwrap_or(Micros::ZERO),
            prompts,
            rng: subsystem_rng(seed, "inference-perf/arrivals"),
            content_seed: subsystem_seed(seed, "inference-perf/outputs"),
            stage: 0,
            stage_start: Micros::ZERO,
            timer: StageTimer::done(),
            next_in_stage: 0,
            outstanding: BTreeMap::new(),
            next_id: 0,
            conversations,
            ready: std::collections::BinaryHeap::new(),
            released: 0,
            gate: ConcurrencyGate::new(None),
        };
        w.begin_stage(0, Micros::ZERO);
        w
    }

    fn begin_stage(&mut self, stage: usize, start: Micros) {
        self.stage = stage;
        self.stage_start = start + Micros::from_secs_f64(STAGE_START_OFFSET_S).unwrap_or(Micros::ZERO);
        self.timer = StageTimer::new(self.kind, &self.stages[stage], &mut self.rng);
        self.next_in_stage = 0;
        self.gate.set_limit(self.stages[stage].concurrency);
        // A stage that sends nothing (a probe cancelled before its first
        // send) has nothing to drain: the next one starts with it.
        if self.stage_sent_everything() && stage + 1 < self.stages.len() {
            self.begin_stage(stage + 1, start);
        }
    }

    /// `meta.stage` of the requests of `self.stages[stage]`.
    fn label(&self, stage: usize) -> u32 {
        match (self.probe_timeout, stage) {
            (Some(_), 0) => PROBE_STAGE,
            (Some(_), s) => s as u32 - 1,
            (None, s) => s as u32,
        }
    }

    /// When the client cancels what is left of the current stage: the
    /// probe's timeout after its start; `None` for other stages.
    fn cancel_at(&self) -> Option<Micros> {
        self.probe_timeout.filter(|_| self.label(self.stage) == PROBE_STAGE).map(|timeout| self.stage_start + timeout)
    }

    fn stage_sent_everything(&self) -> bool {
        self.next_timer().is_none()
    }

    /// Send time of the stage's next timer event; none once the stage is
    /// cancelled (the requests a cancelled probe had yet to send are never sent).
    fn next_timer(&self) -> Option<Micros> {
        let offset = self.timer.peek()?;
        let send = self.stage_start + Micros::from_secs_f64(offset).unwrap_or(Micros::MAX);
        self.cancel_at().is_none_or(|cancel| send < cancel).then_some(send)
    }

    /// Multi-turn: timer events of busy users are parked until their round
    /// finishes, so the next send is the next free user's or a released one.
    fn park_busy_users(&mut self) {
        let stage = self.label(self.stage);
        while let Some(t) = self.next_timer() {
            let Some(convs) = self.conversations.as_mut() else { return };
            let user = self.next_in_stage % convs.len();
            if !convs[user].busy {
                return;
            }
            convs[user].blocked.push_back((t, stage));
            *self.outstanding.entry(stage).or_default() += 1;
            self.timer.advance(&mut self.rng);
            self.next_in_stage += 1;
        }
    }

    fn request(&mut self, arrival: Micros, n: u64, stage: u32) -> Request {
        let id = RequestId(self.next_id);
        self.next_id += 1;
        let output_seed = output_stream_seed(id, self.content_seed);
        let (prompt, max_output_tokens, session) = match (self.conversations.as_mut(), &self.prompts) {
            (Some(convs), StagePrompts::Shared(prompts)) => {
                let user = (n % convs.len() as u64) as usize;
                let output_len = prompts.output_tokens(n);
                let conv = &mut convs[user];
                let round = conv.rounds;
                let prompt = match &conv.last {
                    None => prompts.prompt(n, None),
                    Some((prev, prev_seed, prev_len)) => {
                        let mut p = prev.clone();
                        p.push(TokenRun::synthetic(*prev_seed, *prev_len));
                        p.push(TokenRun::synthetic(prompts.question_seed(user, round), prompts.question_tokens(n)));
                        p
                    }
                };
                conv.rounds += 1;
                conv.busy = true;
                conv.last = Some((prompt.clone(), output_seed, output_len));
                (prompt, output_len, Some((user as u64, round)))
            }
            _ => {
                let (prompt, max_output_tokens) = self.prompts.nth(n, id, None);
                (prompt, max_output_tokens, None)
            }
        };
        // Sessions come only with shared-prefix prompts, which promise nothing.
        let own_prompt_from = self.prompts.own_prompt_from();
        let cancel_at = self.cancel_at().filter(|_| stage == PROBE_STAGE);
        Request {
            id,
            arrival,
            prompt,
            max_output_tokens,
            output_seed,
            meta: RequestMeta { stage, session, own_prompt_from, cancel_at, ..RequestMeta::default() },
        }
    }

    /// When the next request is due: its timer fired, or (multi-turn) its
    /// user's previous round ended.
    fn next_due(&mut self) -> Option<Micros> {
        self.park_busy_users();
        let ready = self.ready.peek().map(|r| r.0.0);
        [self.next_timer(), ready].into_iter().flatten().min()
    }
}

impl Workload for StagedWorkload {
    fn peek_arrival(&mut self) -> Option<Micros> {
        let due = self.next_due()?;
        self.gate.send_time(due)
    }

    fn next_request(&mut self) -> Option<Request> {
        let due = self.next_due()?;
        let sent = self.gate.send_time(due)?;
        self.gate.on_send();
        if let Some(std::cmp::Reverse((t, _, user, stage))) = self.ready.peek().copied()
            && t == due
            && self.next_timer().is_none_or(|timer| t <= timer)
        {
            self.ready.pop();
            return Some(self.request(sent, user as u64, stage));
        }
        let n = self.next_in_stage as u64;
        self.timer.advance(&mut self.rng);
        self.next_in_stage += 1;
        let stage = self.label(self.stage);
        *self.outstanding.entry(stage).or_default() += 1;
        Some(self.request(sent, n, stage))
    }

    fn on_finish(&mut self, record: &RequestRecord) {
        self.gate.on_finish(record.finished);
        if let (Some(convs), Some((user, _))) = (self.conversations.as_mut(), record.meta.session) {
            let conv = &mut convs[user as usize];
            conv.busy = false;
            if record.outcome != blis_engine::request::Outcome::Completed {
                conv.last = None; // a failed round ends the conversation's context
            }
            // The next parked round goes when its timer fired or now, whichever is later.
            if let Some((scheduled, stage)) = conv.blocked.pop_front() {
                self.released += 1;
                self.ready.push(std::cmp::Reverse((scheduled.max(record.finished), self.released, user as usize, stage)));
            }
        }
        if let Some(left) = self.outstanding.get_mut(&record.meta.stage) {
            *left = left.saturating_sub(1);
        }
        let drained = self.outstanding.get(&self.label(self.stage)).is_none_or(|&n| n == 0);
        if drained && self.stage_sent_everything() && self.ready.is_empty() && self.stage + 1 < self.stages.len() {
            // inference-perf waits `interval` after a stage, not after the probe.
            let pause = if self.label(self.stage) == PROBE_STAGE { Micros::ZERO } else { self.interval };
            self.begin_stage(self.stage + 1, record.finished + pause);
        }
    }
}
