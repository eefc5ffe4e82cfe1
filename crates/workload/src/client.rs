//! One client of a plan and the lazy stream of its first-round requests.
//!
//! A client draws from three seeded streams of its own (arrivals, lengths,
//! sessions) named after its id, so adding, removing or changing another
//! client never changes its requests. The flag-described synthetic workload
//! is a client too, one that draws as [`crate::synthetic`] says.

use blis_engine::request::{SloClassId, TenantId, TokenRun, TokenSeq};
use blis_engine::rng::{SimRng, mix64};
use blis_engine::time::Micros;
use rand::SeedableRng;

use crate::arrival::{Modulation, Process};
use crate::content::{ClientContent, first_prompt};
use crate::dist::Sampler;
use crate::network::NetworkModel;
use crate::spec::ContextGrowth;
use crate::synthetic::{SyntheticSpec, SyntheticStream};

/// An active window of a client.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowPlan {
    /// Start, µs.
    pub start_us: f64,
    /// End, µs (already cut at the horizon; infinite for an always-active client).
    pub end_us: f64,
    /// Multiplier of the client's rate inside the window.
    pub rate_scale: f64,
    /// Gap distribution inside the window, when it differs from the client's.
    pub process: Option<Process>,
    /// Prompt lengths inside the window, when they differ from the client's.
    pub input: Option<Sampler>,
    /// Output lengths inside the window, when they differ from the client's.
    pub output: Option<Sampler>,
}

/// Input modality of a multimodal request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Modality {
    /// Images.
    Image,
    /// Audio segments.
    Audio,
    /// Video segments.
    Video,
}

/// How many items of a modality a request carries and how many tokens each.
#[derive(Clone, Debug, PartialEq)]
pub struct ModalityPlan {
    /// Which modality.
    pub kind: Modality,
    /// Items per request.
    pub count: Sampler,
    /// Tokens per item.
    pub tokens: Sampler,
}

/// Multi-turn behaviour of a client.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct MultiTurn {
    /// Rounds per session.
    pub max_rounds: u32,
    /// Delay from a round's completion to the next round's arrival.
    pub think_time: Micros,
    /// Prompt growth.
    pub growth: ContextGrowth,
}

/// A validated client.
#[derive(Clone, Debug)]
pub struct ClientPlan {
    /// Name.
    pub id: String,
    /// Index in the plan (`RequestMeta::client`).
    pub index: u32,
    /// Interned tenant.
    pub tenant: TenantId,
    /// Interned SLO class.
    pub slo_class: SloClassId,
    /// Base arrival rate, requests per µs (aggregate rate × normalised fraction).
    pub rate_per_us: f64,
    /// Unit-mean gap distribution.
    pub process: Process,
    /// Time variation of the rate.
    pub modulation: Modulation,
    /// Active windows in increasing time.
    pub windows: Vec<WindowPlan>,
    /// Prompt length (text), excluding the prefix.
    pub input: Sampler,
    /// Output length.
    pub output: Sampler,
    /// Shared prefix groups and their token runs: a spec client has at most
    /// one; the synthetic client draws one of several per request.
    pub prefixes: Vec<(String, TokenRun)>,
    /// Whether responses are streamed.
    pub streaming: bool,
    /// Client-side network.
    pub network: Option<NetworkModel>,
    /// Image/audio/video inputs.
    pub modalities: Vec<ModalityPlan>,
    /// Reasoning ratio of outputs.
    pub reason_ratio: Option<Sampler>,
    /// Multi-turn sessions.
    pub multi_turn: Option<MultiTurn>,
    /// Content keys.
    pub content: ClientContent,
    /// Seed of the arrival draws.
    pub arrival_seed: u64,
    /// Seed of the first-round length draws.
    pub length_seed: u64,
    /// Seed of later rounds' draws (one stream per session and round).
    pub session_seed: u64,
    /// How its requests are drawn.
    pub draws: Draws,
}

/// How a client's first-round requests are drawn.
#[derive(Clone, Debug, PartialEq)]
pub enum Draws {
    /// From its windows, samplers and content keys: a client of a spec.
    Spec,
    /// As the synthetic workload of `blis run`'s flags draws them (its own
    /// streams, arrival clock and content), so the flags give the same
    /// requests whichever command reads them.
    Synthetic(SyntheticSpec),
}

/// Everything drawn for one request besides its arrival.
#[derive(Clone, Debug, PartialEq)]
pub struct Draft {
    /// Per-client request number (session number for multi-turn clients).
    pub k: u64,
    /// 0-based round.
    pub round: u32,
    /// The prompt.
    pub prompt: TokenSeq,
    /// Output tokens.
    pub output_tokens: u32,
    /// Seed of the generated-token stream.
    pub output_seed: u64,
    /// Text tokens of the prompt (prefix included).
    pub text_tokens: u32,
    /// Image, audio and video tokens of the prompt.
    pub modality_tokens: [u32; 3],
    /// Fraction of the output that is reasoning.
    pub reason_ratio: f64,
    /// Index in the client's `prefixes` of the prefix the prompt starts with.
    pub prefix_group: Option<u32>,
    /// Where the prompt's own tokens start, for a first round: they come
    /// from a stream keyed by client, request and round
    /// ([`RequestMeta::own_prompt_from`](blis_engine::request::RequestMeta::own_prompt_from)).
    pub own_prompt_from: Option<u32>,
}

impl ClientPlan {
    /// The RNG of round `round` of session `k`: a pure function of the
    /// session, so later rounds draw the same lengths whatever order the
    /// simulation completes sessions in.
    pub fn session_rng(&self, k: u64, round: u32) -> SimRng {
        SimRng::seed_from_u64(mix64(self.session_seed ^ mix64(k ^ (u64::from(round) << 44))))
    }

    fn draw_ratio(&self, rng: &mut SimRng) -> f64 {
        self.reason_ratio.as_ref().map_or(0.0, |s| s.value(rng))
    }

    /// Draws a first round (or single-turn request) number `k` in window `w`.
    pub fn first_round(&self, k: u64, w: &WindowPlan, rng: &mut SimRng) -> Draft {
        let text = w.input.as_ref().unwrap_or(&self.input).tokens(rng);
        let mut modality_tokens = [0u32; 3];
        for m in &self.modalities {
            let n = m.count.tokens(rng);
            let total: u32 = (0..n).map(|_| m.tokens.tokens(rng)).fold(0u32, u32::saturating_add);
            modality_tokens[m.kind as usize] = total;
        }
        let output_tokens = w.output.as_ref().unwrap_or(&self.output).tokens(rng);
        let reason_ratio = self.draw_ratio(rng);
        let private = modality_tokens.iter().fold(text, |a, &b| a.saturating_add(b));
        let prompt = first_prompt(self.prefix_run(), self.content, k, private);
        let prefix = self.prefix_run().map_or(0, TokenRun::len);
        Draft {
            k,
            round: 0,
            prompt,
            output_tokens,
            output_seed: self.content.output_seed(k, 0),
            text_tokens: text + prefix,
            modality_tokens,
            reason_ratio,
            prefix_group: self.prefix_group(),
            own_prompt_from: Some(prefix),
        }
    }

    /// The prefix of a spec client, if it has one.
    fn prefix_run(&self) -> Option<&TokenRun> {
        self.prefixes.first().map(|p| &p.1)
    }

    /// The group of a spec client's prefix, if it has one.
    fn prefix_group(&self) -> Option<u32> {
        (!self.prefixes.is_empty()).then_some(0)
    }

    /// The name of prefix group `group` (an index into `prefixes`).
    pub fn prefix_name(&self, group: Option<u32>) -> &str {
        group.and_then(|g| self.prefixes.get(g as usize)).map_or("", |p| p.0.as_str())
    }

    /// Draws round `round` ≥ 1 of session `k`, whose previous round had
    /// `previous` as prompt (used when the context accumulates).
    pub fn next_round(&self, k: u64, round: u32, previous: &crate::content::Turn<'_>, growth: ContextGrowth) -> Draft {
        let mut rng = self.session_rng(k, round);
        let question = self.input.tokens(&mut rng);
        let output_tokens = self.output.tokens(&mut rng);
        let reason_ratio = self.draw_ratio(&mut rng);
        let prompt = match growth {
            ContextGrowth::Accumulate => crate::content::next_prompt(previous, self.content, k, round, question),
            ContextGrowth::Fixed => {
                let mut p = TokenSeq::new();
                if let Some(run) = self.prefix_run() {
                    p.push(run.clone());
                }
                p.push(TokenRun::synthetic(self.content.prompt_seed(k, round), question));
                p
            }
        };
        let text_tokens = prompt.len();
        Draft {
            k,
            round,
            prompt,
            output_tokens,
            output_seed: self.content.output_seed(k, round),
            text_tokens,
            modality_tokens: [0; 3],
            reason_ratio,
            prefix_group: self.prefix_group(),
            own_prompt_from: None,
        }
    }
}

/// The lazy stream of one client's first-round requests.
pub struct ClientStream {
    kind: StreamKind,
}

// One per client, drawn from on every request: the larger variant stays
// inline rather than behind a pointer.
#[allow(clippy::large_enum_variant)]
enum StreamKind {
    Spec(SpecStream),
    Synthetic(SyntheticStream),
}

impl ClientStream {
    /// A stream positioned before the client's first request.
    pub fn new(plan: &ClientPlan) -> ClientStream {
        let kind = match &plan.draws {
            Draws::Spec => StreamKind::Spec(SpecStream::new(plan)),
            Draws::Synthetic(spec) => StreamKind::Synthetic(spec.generate()),
        };
        ClientStream { kind }
    }

    /// The client's next first-round request: its arrival and its draws, or
    /// `None` when the client has no more. Arrivals never decrease.
    pub fn next(&mut self, plan: &ClientPlan) -> Option<(Micros, Draft)> {
        match &mut self.kind {
            StreamKind::Spec(s) => {
                let (arrival, window) = s.next_arrival(plan)?;
                Some((arrival, s.draft(plan, window)))
            }
            StreamKind::Synthetic(s) => {
                let (req, prefix_group) = s.next_with_group()?;
                let draft = Draft {
                    k: req.id.0,
                    round: 0,
                    text_tokens: req.prompt_tokens(),
                    prompt: req.prompt,
                    output_tokens: req.max_output_tokens,
                    output_seed: req.output_seed,
                    modality_tokens: [0; 3],
                    reason_ratio: 0.0,
                    prefix_group,
                    own_prompt_from: req.meta.own_prompt_from,
                };
                Some((req.arrival, draft))
            }
        }
    }
}

/// The arrivals and draws of a spec client.
struct SpecStream {
    arrivals: SimRng,
    lengths: SimRng,
    window: usize,
    op_clock: f64,
    next_k: u64,
}

impl SpecStream {
    /// A stream positioned before the client's first arrival.
    fn new(plan: &ClientPlan) -> SpecStream {
        let op_clock = plan.windows.first().map_or(0.0, |w| plan.modulation.cumulative(w.start_us));
        SpecStream {
            arrivals: SimRng::seed_from_u64(plan.arrival_seed),
            lengths: SimRng::seed_from_u64(plan.length_seed),
            window: 0,
            op_clock,
            next_k: 0,
        }
    }

    /// The next arrival and the index of its window, or `None` when the
    /// client has no more. Arrivals never decrease and always lie inside a
    /// window: a gap that crosses the window's end is discarded and the
    /// process restarts at the next window's start.
    fn next_arrival(&mut self, plan: &ClientPlan) -> Option<(Micros, usize)> {
        loop {
            let w = plan.windows.get(self.window)?;
            let process = w.process.as_ref().unwrap_or(&plan.process);
            let mean_gap_us = 1.0 / (plan.rate_per_us * w.rate_scale);
            self.op_clock += process.gap(&mut self.arrivals) * mean_gap_us;
            let t = plan.modulation.inverse(self.op_clock).max(w.start_us);
            if t < w.end_us {
                return Some((Micros(t.floor() as u64), self.window));
            }
            self.window += 1;
            if let Some(next) = plan.windows.get(self.window) {
                self.op_clock = plan.modulation.cumulative(next.start_us);
            }
        }
    }

    /// Draws the lengths and content of the next first-round request, in window `w`.
    fn draft(&mut self, plan: &ClientPlan, window: usize) -> Draft {
        let k = self.next_k;
        self.next_k += 1;
        plan.first_round(k, &plan.windows[window], &mut self.lengths)
    }
}
