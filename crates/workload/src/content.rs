//! Synthetic token content of workload requests.
//!
//! Content is a pure function of *who* sent a request and *which* request
//! it is, never of the seed, the arrival time or the global request id:
//!
//! * a shared prefix is the run `prefix_group` of the stream named after its
//!   group, so every request of the group shares its KV blocks;
//! * the private part of request `k` (0-based, per client) in round `r` of
//!   client `c` is a fresh stream keyed by `(c, k, r)`;
//! * its generated tokens are another stream keyed by `(c, k, r)`, so a later
//!   round that carries them in its prompt hits the blocks they left behind.
//!
//! The generator and both trace readers build prompts with these functions,
//! which is why a spec written to a trace and replayed gives identical
//! requests, and why adding a client never changes another client's tokens.

use blis_engine::request::{TokenRun, TokenSeq};
use blis_engine::rng::{mix64, subsystem_seed};

/// The content keys of one client, derived once from its id.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ClientContent {
    base: u64,
}

impl ClientContent {
    /// Content keys of client `client_id`.
    pub fn new(client_id: &str) -> ClientContent {
        ClientContent { base: subsystem_seed(0, &format!("workload/content/{client_id}")) }
    }

    fn key(self, k: u64, round: u32, salt: u64) -> u64 {
        mix64(self.base ^ mix64(k ^ mix64(u64::from(round) ^ salt)))
    }

    /// Seed of the private prompt stream of request `k`, round `round`.
    pub fn prompt_seed(self, k: u64, round: u32) -> u64 {
        self.key(k, round, 0x7072_6f6d_7074)
    }

    /// Seed of the generated-token stream of request `k`, round `round`.
    pub fn output_seed(self, k: u64, round: u32) -> u64 {
        self.key(k, round, 0x6f75_7470_7574)
    }
}

/// The shared prefix of `group`: `len` tokens of the group's stream.
pub fn prefix_run(group: &str, len: u32) -> TokenRun {
    TokenRun::synthetic(subsystem_seed(0, &format!("workload/prefix/{group}")), len)
}

/// A Mooncake hash id's block: `len` tokens of the block's stream.
pub fn hash_block_run(hash_id: u64, len: u32) -> TokenRun {
    TokenRun::synthetic(mix64(hash_id ^ 0x6d6f_6f6e_6361_6b65), len)
}

/// The prompt of a first round (or single-turn request): the group prefix,
/// if any, followed by `private_len` private tokens.
pub fn first_prompt(prefix: Option<&TokenRun>, content: ClientContent, k: u64, private_len: u32) -> TokenSeq {
    let mut prompt = TokenSeq::new();
    if let Some(p) = prefix {
        prompt.push(p.clone());
    }
    prompt.push(TokenRun::synthetic(content.prompt_seed(k, 0), private_len));
    prompt
}

/// A finished round of a session, as the next round's prompt needs it.
#[derive(Copy, Clone, Debug)]
pub struct Turn<'a> {
    /// The round's prompt.
    pub prompt: &'a TokenSeq,
    /// Seed of its generated-token stream.
    pub output_seed: u64,
    /// Tokens it generated.
    pub output_len: u32,
    /// How many of them were reasoning tokens (generated first).
    pub reasoning_tokens: u32,
}

/// The prompt of round `round` ≥ 1 of session `k` whose context
/// accumulates: the previous prompt, the answer part of the previous output
/// (tokens `reasoning_tokens ..` of its generated stream: reasoning tokens
/// are not sent back, as chat templates of reasoning models drop them) and
/// `question_len` new tokens.
pub fn next_prompt(previous: &Turn<'_>, content: ClientContent, k: u64, round: u32, question_len: u32) -> TokenSeq {
    let mut prompt = previous.prompt.clone();
    let reasoning = previous.reasoning_tokens.min(previous.output_len);
    prompt.push(TokenRun::Synthetic { seed: previous.output_seed, offset: reasoning, len: previous.output_len - reasoning });
    prompt.push(TokenRun::synthetic(content.prompt_seed(k, round), question_len));
    prompt
}

/// Reasoning tokens of an output of `output_len` tokens with reasoning
/// ratio `ratio` (rounded to the nearest token).
pub fn reasoning_tokens(ratio: f64, output_len: u32) -> u32 {
    ((ratio.clamp(0.0, 1.0) * f64::from(output_len)).round() as u32).min(output_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_depend_on_client_request_and_round_only() {
        let a = ClientContent::new("a");
        assert_eq!(a, ClientContent::new("a"));
        assert_ne!(a.prompt_seed(0, 0), ClientContent::new("b").prompt_seed(0, 0));
        assert_ne!(a.prompt_seed(0, 0), a.prompt_seed(1, 0));
        assert_ne!(a.prompt_seed(0, 0), a.prompt_seed(0, 1));
        assert_ne!(a.prompt_seed(3, 2), a.output_seed(3, 2));
        assert_eq!(prefix_run("g", 10), prefix_run("g", 10));
        assert_ne!(prefix_run("g", 10), prefix_run("h", 10));
    }

    #[test]
    fn next_prompt_extends_the_previous_one() {
        let c = ClientContent::new("chat");
        let p0 = first_prompt(Some(&prefix_run("sys", 64)), c, 5, 30);
        let turn = Turn { prompt: &p0, output_seed: c.output_seed(5, 0), output_len: 40, reasoning_tokens: 10 };
        let p1 = next_prompt(&turn, c, 5, 1, 20);
        assert_eq!(p1.len(), 64 + 30 + 30 + 20);
        assert_eq!(p1.runs()[..p0.runs().len()], p0.runs()[..]);
        assert_eq!(p1.runs()[p0.runs().len()], TokenRun::Synthetic { seed: c.output_seed(5, 0), offset: 10, len: 30 });
        assert_eq!(reasoning_tokens(0.25, 40), 10);
        assert_eq!(reasoning_tokens(2.0, 40), 40);
    }
}
