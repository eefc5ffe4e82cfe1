//! What the n-th request of a stage sends: the prompts and `max_tokens` of
//! inference-perf's `shared_prefix`, `random` and `synthetic` data
//! generators, and of its datasets as a recorded run measured them.

use blis_engine::request::{RequestId, TokenRun, TokenSeq};
use blis_engine::rng::{mix64, subsystem_rng, subsystem_seed};
use rand::RngExt;

use super::config::{Data, InferencePerfError, IoLengths, SharedPrefix};
use super::measured::{MeasuredLengths, QuantileTable};
use crate::io_distribution::{LengthDistribution, Sampler};

/// One prompt of a shared-prefix set.
#[derive(Copy, Clone, Debug)]
struct PromptEntry {
    /// Its group (shared system prompt).
    group: u32,
    /// Seed of its question's token stream.
    question_seed: u64,
    /// Tokens of its question.
    question_tokens: u32,
    /// `max_tokens` of its requests (at least 1).
    output_tokens: u32,
}

/// The shuffled shared-prefix prompt set.
#[derive(Clone, Debug)]
pub struct SharedPrefixPrompts {
    /// System prompt run of each group.
    systems: Vec<TokenRun>,
    /// The prompts, in shuffled order.
    prompts: Vec<PromptEntry>,
}

impl SharedPrefixPrompts {
    /// The prompt set of `sp`: lengths drawn as inference-perf draws them
    /// (per group for system prompts, then per group its questions and
    /// outputs), prompt lengths scaled to `measured_prompt_tokens` when
    /// given (see [`StagePrompts::new`]); contents, lengths and the shuffle
    /// are deterministic in `seed`.
    pub(crate) fn new(sp: &SharedPrefix, measured_prompt_tokens: Option<f64>, seed: u64) -> SharedPrefixPrompts {
        let (groups, per_group) = (sp.num_groups as usize, sp.num_prompts_per_group as usize);
        let mut lengths = subsystem_rng(seed, "inference-perf/shared-prefix-lengths");
        let system_lens = sp.system_prompt_len.draw(groups, &mut lengths);
        let (mut question_lens, mut output_lens) = (Vec::with_capacity(groups * per_group), Vec::with_capacity(groups * per_group));
        for _ in 0..groups {
            question_lens.extend(sp.question_len.draw(per_group, &mut lengths));
            output_lens.extend(sp.output_len.draw(per_group, &mut lengths));
        }
        let tokens = |v: &[u32]| v.iter().map(|&n| f64::from(n)).sum::<f64>();
        let nominal = (tokens(&system_lens) * per_group as f64 + tokens(&question_lens)) / (groups * per_group) as f64;
        let scale = length_scale(measured_prompt_tokens, nominal);
        let scaled = |n: u32| (f64::from(n) * scale).round() as u32;

        let content = subsystem_seed(seed, "inference-perf/prompts");
        let systems = system_lens
            .iter()
            .enumerate()
            .map(|(g, &len)| TokenRun::synthetic(mix64(content ^ 0x7379_7374_656d ^ (g as u64).rotate_left(40)), scaled(len)))
            .collect();
        let mut prompts: Vec<PromptEntry> = (0..groups)
            .flat_map(|g| (0..per_group).map(move |q| (g, q)))
            .map(|(g, q)| PromptEntry {
                group: g as u32,
                question_seed: mix64(content ^ ((g as u64) << 32 | q as u64) ^ 0x7175_6573),
                question_tokens: scaled(question_lens[g * per_group + q]),
                output_tokens: output_lens[g * per_group + q].max(1),
            })
            .collect();
        // Fisher–Yates, as Python's random.shuffle.
        let mut rng = subsystem_rng(seed, "inference-perf/shuffle");
        for i in (1..prompts.len()).rev() {
            let j = rng.random_range(0..=i);
            prompts.swap(i, j);
        }
        SharedPrefixPrompts { systems, prompts }
    }

    /// Number of distinct prompts.
    pub fn len(&self) -> usize {
        self.prompts.len()
    }

    /// Whether the set is empty (never, for a validated configuration).
    pub fn is_empty(&self) -> bool {
        self.prompts.is_empty()
    }

    fn entry(&self, n: u64) -> &PromptEntry {
        &self.prompts[(n % self.prompts.len() as u64) as usize]
    }

    /// Group (shared system prompt) of request `n` of a stage.
    pub fn group_of(&self, n: u64) -> usize {
        self.entry(n).group as usize
    }

    /// Tokens of the question of request `n` of a stage (of every round of
    /// user `n`, with multi-turn chat).
    pub fn question_tokens(&self, n: u64) -> u32 {
        self.entry(n).question_tokens
    }

    /// `max_tokens` of request `n` of a stage (of every round of user `n`,
    /// with multi-turn chat); at least 1.
    pub fn output_tokens(&self, n: u64) -> u32 {
        self.entry(n).output_tokens
    }

    /// Stream seed of user `user`'s question in round `round` (multi-turn).
    pub fn question_seed(&self, user: usize, round: u32) -> u64 {
        let seed = self.entry(user as u64).question_seed;
        if round == 0 { seed } else { mix64(seed ^ u64::from(round).rotate_left(48) ^ 0x0072_6f75_6e64) }
    }

    /// The prompt of request `n` of a stage: its group's system prompt then
    /// its question, at least one token. `total_tokens` overrides the length
    /// (as measured by the server): the question absorbs the difference, and
    /// a total shorter than the system prompt cuts the system prompt.
    pub fn prompt(&self, n: u64, total_tokens: Option<u32>) -> TokenSeq {
        let e = self.entry(n);
        let system = &self.systems[e.group as usize];
        let total = total_tokens.unwrap_or(system.len().saturating_add(e.question_tokens)).max(1);
        let system_len = system.len().min(total);
        let mut seq = TokenSeq::new();
        if let TokenRun::Synthetic { seed, .. } = *system {
            seq.push(TokenRun::synthetic(seed, system_len));
        }
        seq.push(TokenRun::synthetic(e.question_seed, total - system_len));
        seq
    }
}

/// What the n-th request of a stage sends, by data generator: the prompts
/// and `max_tokens` of a run, shared by the staged workload and by replays
/// of `requests.csv`.
pub enum StagePrompts {
    /// `shared_prefix`: prompt n mod count and its output length.
    Shared(SharedPrefixPrompts),
    /// `random` / `synthetic`: lengths `n mod total_count`; synthetic prompts
    /// are prefixes of the one stream `text_seed`, random ones fresh tokens.
    Drawn {
        /// Prompt lengths, cycled.
        input: Vec<u32>,
        /// `max_tokens`, cycled.
        output: Vec<u32>,
        /// The one text of `synthetic` prompts; `None` for `random`.
        text_seed: Option<u64>,
        /// Seed of `random` prompts' tokens, mixed with the request id.
        tokens_seed: u64,
    },
    /// A dataset's: every prompt sent once, of fresh tokens; each request's
    /// prompt and output lengths drawn independently (by its id) from the
    /// run's measured distributions.
    Dataset {
        /// Prompt lengths.
        input: QuantileTable,
        /// Output lengths (`max_tokens`).
        output: QuantileTable,
        /// Seed of the prompt-length draws, mixed with the request id.
        input_seed: u64,
        /// Seed of the output-length draws, mixed with the request id.
        output_seed: u64,
        /// Seed of the prompts' tokens, mixed with the request id.
        tokens_seed: u64,
    },
}

/// `measured` over `nominal` when both make a positive finite ratio, else 1:
/// how much longer the server's tokenisation made the prompts.
fn length_scale(measured: Option<f64>, nominal: f64) -> f64 {
    let scale = measured.map_or(1.0, |m| m / nominal);
    if scale.is_finite() && scale > 0.0 { scale } else { 1.0 }
}

impl StagePrompts {
    /// The prompts of `data`, deterministic in `seed`. `measured` is what
    /// the run's reports say of its lengths, when it was recorded: the mean
    /// prompt length the server saw (inference-perf decodes random tokens to
    /// text and the server re-tokenises it, so real prompts come out a few
    /// percent longer than configured, and generated prompts, shared-prefix
    /// token counts and drawn input lengths, are scaled to that mean), and
    /// the length distributions a dataset's requests are drawn from, without
    /// which a dataset cannot be reproduced.
    pub fn new(data: &Data, measured: &MeasuredLengths, seed: u64) -> Result<StagePrompts, InferencePerfError> {
        let measured_prompt_tokens = measured.prompt_mean_tokens;
        let cycle = |d: &LengthDistribution, stream: &str| {
            let count = d.total_count.unwrap_or(1) as usize;
            d.draw(Sampler::IoDistribution, count, &mut subsystem_rng(seed, stream)).into_iter().map(|n| n.max(1)).collect::<Vec<u32>>()
        };
        let drawn = |io: &IoLengths, shared_text: bool| {
            let input = cycle(&io.input, "inference-perf/input-lengths");
            let drawn_mean = input.iter().map(|&n| f64::from(n)).sum::<f64>() / input.len().max(1) as f64;
            let scale = length_scale(measured_prompt_tokens, drawn_mean);
            StagePrompts::Drawn {
                input: input.into_iter().map(|n| ((f64::from(n) * scale).round() as u32).max(1)).collect(),
                output: cycle(&io.output, "inference-perf/output-lengths"),
                text_seed: shared_text.then(|| subsystem_seed(seed, "inference-perf/synthetic-text")),
                tokens_seed: subsystem_seed(seed, "inference-perf/random-tokens"),
            }
        };
        Ok(match data {
            Data::SharedPrefix(sp) => StagePrompts::Shared(SharedPrefixPrompts::new(sp, measured_prompt_tokens, seed)),
            Data::Random(io) => drawn(io, false),
            Data::Synthetic(io) => drawn(io, true),
            Data::Dataset(dataset) => match (&measured.prompt, &measured.output) {
                (Some(input), Some(output)) => StagePrompts::Dataset {
                    input: input.clone(),
                    output: output.clone(),
                    input_seed: subsystem_seed(seed, "inference-perf/dataset-input-lengths"),
                    output_seed: subsystem_seed(seed, "inference-perf/dataset-output-lengths"),
                    tokens_seed: subsystem_seed(seed, "inference-perf/random-tokens"),
                },
                _ => return Err(InferencePerfError::DatasetLengths { dataset: dataset.name() }),
            },
        })
    }

    /// Prompt and `max_tokens` of request `n` of a stage, whose id is `id`
    /// (single-turn); `input_tokens` replaces the prompt's length when known
    /// (a recorded request). Lengths are at least 1: the engine needs a token.
    pub fn nth(&self, n: u64, id: RequestId, input_tokens: Option<u32>) -> (TokenSeq, u32) {
        match self {
            StagePrompts::Shared(prompts) => (prompts.prompt(n, input_tokens), prompts.output_tokens(n)),
            StagePrompts::Drawn { input, output, text_seed, tokens_seed } => {
                let len = input_tokens.unwrap_or(input[(n % input.len() as u64) as usize]).max(1);
                let stream = text_seed.unwrap_or_else(|| mix64(tokens_seed ^ id.0));
                (TokenSeq::synthetic(stream, len), output[(n % output.len() as u64) as usize])
            }
            StagePrompts::Dataset { input, output, input_seed, output_seed, tokens_seed } => {
                let len = input_tokens.unwrap_or_else(|| input.tokens_for(input_seed ^ id.0)).max(1);
                (TokenSeq::synthetic(mix64(tokens_seed ^ id.0), len), output.tokens_for(output_seed ^ id.0))
            }
        }
    }

    /// Where a prompt's own tokens begin
    /// ([`RequestMeta::own_prompt_from`](blis_engine::request::RequestMeta::own_prompt_from)):
    /// `random` data and datasets draw every prompt from a stream keyed by
    /// its request; `synthetic` prompts are prefixes of one text and
    /// shared-prefix prompts recur, so they promise nothing.
    pub fn own_prompt_from(&self) -> Option<u32> {
        match self {
            StagePrompts::Drawn { text_seed: None, .. } | StagePrompts::Dataset { .. } => Some(0),
            _ => None,
        }
    }

    /// Requests after which prompts recur with the same length: the prompt
    /// count of a shared prefix, `total_count` of drawn input lengths;
    /// `None` for a dataset, whose prompts never recur.
    pub fn prompt_cycle(&self) -> Option<u64> {
        match self {
            StagePrompts::Shared(prompts) => Some(prompts.len() as u64),
            StagePrompts::Drawn { input, .. } => Some(input.len() as u64),
            StagePrompts::Dataset { .. } => None,
        }
    }

    /// `max_tokens` of each request of the cycle (`None` for a dataset, whose
    /// lengths do not cycle).
    fn output_lengths(&self) -> Option<Box<dyn Iterator<Item = u32> + '_>> {
        match self {
            StagePrompts::Shared(prompts) => Some(Box::new(prompts.prompts.iter().map(|e| e.output_tokens))),
            StagePrompts::Drawn { output, .. } => Some(Box::new(output.iter().copied())),
            StagePrompts::Dataset { .. } => None,
        }
    }

    /// Whether every request has the same `max_tokens`, so that a recorded
    /// request's output length is known.
    pub fn fixed_output(&self) -> bool {
        self.output_lengths().is_some_and(|mut lengths| {
            let first = lengths.next();
            lengths.all(|n| Some(n) == first)
        })
    }

    /// Mean `max_tokens` over the cycle of requests (a dataset's: of its
    /// measured output-length distribution).
    pub fn mean_output_tokens(&self) -> f64 {
        if let StagePrompts::Dataset { output, .. } = self {
            return output.mean().max(1.0);
        }
        let (count, sum) = self.output_lengths().into_iter().flatten().fold((0u64, 0.0), |(c, s), n| (c + 1, s + f64::from(n)));
        sum / count.max(1) as f64
    }
}
