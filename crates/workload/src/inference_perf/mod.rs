//! inference-perf (kubernetes-sigs/inference-perf) as BLIS reproduces it:
//! its run configuration (`results/config.yaml`), the prompts of its
//! `shared_prefix`, `random` and `synthetic` data generators and of its
//! datasets, and its load stages.
//!
//! What inference-perf does, and what this module mirrors (inference-perf
//! between b81afa4 and ad40050, late 2025):
//!
//! * **Prompts** (`SharedPrefixDataGenerator`): `num_groups` random-token
//!   system prompts of `system_prompt_len` tokens, each followed by
//!   `num_prompts_per_group` random questions of `question_len` tokens; the
//!   `num_groups · num_prompts_per_group` prompts are shuffled once, and the
//!   n-th request of every stage uses prompt `n mod count` (the generator
//!   restarts at each stage). A full prompt therefore recurs every `count`
//!   requests, which is what lets vLLM's prefix cache hit. Each prompt is
//!   here a shared synthetic run (the group's system prompt) plus a private
//!   one, so the simulated cache hits exactly where vLLM's would. Newer
//!   versions (2026) accept each length as a distribution ([`Length`]) and
//!   draw a system prompt length per group, then per group a question and
//!   an output length per prompt; a prompt keeps its lengths every time it
//!   recurs.
//! * **Drawn lengths** (`random`, `synthetic`): `input_distribution` and
//!   `output_distribution` (see [`crate::io_distribution`]), entry
//!   `n mod total_count` for the n-th request of a stage; random prompts are
//!   fresh random tokens (never shared), synthetic ones the first tokens of
//!   one fixed text (so any two share their common length as a prefix).
//! * **Arrivals** (`ConstantLoadTimer`): a stage of `rate` req/s for
//!   `duration` s sends N = ⌊rate·duration⌋ requests whose gaps are
//!   exponential, rescaled to sum exactly to `duration`, starting 1 s after
//!   the stage starts. `PoissonLoadTimer` draws a Poisson count per second
//!   and spreads it the same way over that second. Stages run one after
//!   another: the next starts `interval` s after every request of the
//!   previous one finished.
//! * **Datasets** (`shareGPT`, `cnn_dailymail`, `billsum_conversations`,
//!   `infinity_instruct`): natural text read from the dataset, each entry
//!   sent once, its lengths as the tokenizer counts them (`max_tokens` =
//!   the dataset answer's length, for completions). BLIS has neither the
//!   text nor the tokenizer, so it reproduces only recorded runs: each
//!   request's prompt length as recorded, and what no record gives drawn
//!   from the lengths the run's reports measured ([`measured`]).
//! * **Outputs**: `max_tokens` = the prompt's output length (or the drawn
//!   one) with `ignore_eos`, so every successful request generates exactly that.
//! * **Client timeout**: `load.request_timeout`, else aiohttp's default total
//!   timeout of 300 s.
//!
//! Reading order: [`config`] (the configuration and its checks),
//! [`measured`] (what a recorded run's reports say of its lengths),
//! [`prompts`] (what the n-th request of a stage sends), [`timers`] (when),
//! [`staged`] (the whole run, lazily, stage after stage), [`recorded`] (a
//! recorded run's exact sends, as `blis validate` replays them).

pub mod config;
mod keys;
pub mod measured;
pub mod prompts;
pub mod recorded;
pub mod staged;
pub mod timers;

pub use config::*;
pub use measured::{MeasuredLengths, QuantileTable};
pub use prompts::{SharedPrefixPrompts, StagePrompts};
pub use recorded::{RecordedSend, Reproduction};
pub use staged::StagedWorkload;

#[cfg(test)]
mod tests;
