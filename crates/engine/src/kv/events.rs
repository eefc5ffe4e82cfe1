//! vLLM's KV-cache events (`vllm/distributed/kv_events.py`, vLLM 0.10–0.13):
//! what a KV-cache-aware router (llm-d's precise prefix-cache scorer,
//! Dynamo's KV router) subscribes to.
//!
//! * `BlockStored` when a request's full blocks enter the GPU prefix index
//!   (`BlockPool.cache_full_blocks`): their hashes in order, the hash of
//!   the block before them (none for a prompt's first block), their token
//!   ids, the block size and the medium (`GPU`). Blocks stored in an
//!   offload tier are reported as vLLM's `OffloadingConnector` reports
//!   them: medium `CPU` (`DISK`, `REMOTE` below it), no parent, no tokens.
//! * `BlockRemoved` when a cached block is evicted (`_maybe_evict_cached_block`).
//! * `AllBlocksCleared` when the whole prefix cache is reset.
//!
//! An instance records them only when asked ([`crate::scheduler::InstanceConfig::kv_events`])
//! and hands them out once per step, as vLLM's engine core publishes one
//! `KVEventBatch` per step.
//!
//! Block hashes are BLIS's 64-bit chained hashes (vLLM's are SHA-256 or
//! Python's `hash`, so they never match a real server's); a synthetic prompt
//! has no real token ids, so its tokens are stand-ins derived from the
//! stream and position ([`synthetic_token_id`]), equal for equal content.

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::request::{TokenRun, TokenSeq};
use crate::rng::mix64;
use crate::time::Micros;

/// Stand-in token ids are below this (a vocabulary every tokenizer has).
pub const SYNTHETIC_VOCAB: u32 = 32_000;

/// Where a block event happened (vLLM's `medium`).
pub type MediumName = &'static str;

/// The GPU's block pool.
pub const GPU: MediumName = "GPU";

/// One KV-cache event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvEvent {
    /// Blocks entered a prefix index.
    BlockStored {
        /// Their content hashes, in order.
        block_hashes: Vec<u64>,
        /// The hash of the block before the first of them, if any.
        parent_block_hash: Option<u64>,
        /// Their tokens (empty for an offload tier, as vLLM reports them).
        token_ids: Vec<u32>,
        /// Tokens per block.
        block_size: u32,
        /// `GPU`, `CPU`, `DISK` or `REMOTE`.
        medium: MediumName,
    },
    /// Blocks were evicted from a prefix index.
    BlockRemoved {
        /// Their content hashes.
        block_hashes: Vec<u64>,
        /// Where they were.
        medium: MediumName,
    },
    /// Every block of the GPU prefix index was dropped.
    AllBlocksCleared,
}

impl KvEvent {
    /// vLLM's class name of the event (its msgpack tag).
    pub fn tag(&self) -> &'static str {
        match self {
            KvEvent::BlockStored { .. } => "BlockStored",
            KvEvent::BlockRemoved { .. } => "BlockRemoved",
            KvEvent::AllBlocksCleared => "AllBlocksCleared",
        }
    }
}

/// JSON: an object with vLLM's field names and its class name as `type`
/// (`{"type": "BlockStored", "block_hashes": [...], "parent_block_hash": null,
/// "token_ids": [...], "block_size": 16, "lora_id": null, "medium": "GPU"}`).
impl Serialize for KvEvent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("type", self.tag())?;
        match self {
            KvEvent::BlockStored { block_hashes, parent_block_hash, token_ids, block_size, medium } => {
                m.serialize_entry("block_hashes", block_hashes)?;
                m.serialize_entry("parent_block_hash", parent_block_hash)?;
                m.serialize_entry("token_ids", token_ids)?;
                m.serialize_entry("block_size", block_size)?;
                m.serialize_entry("lora_id", &None::<u32>)?;
                m.serialize_entry("medium", medium)?;
            }
            KvEvent::BlockRemoved { block_hashes, medium } => {
                m.serialize_entry("block_hashes", block_hashes)?;
                m.serialize_entry("medium", medium)?;
            }
            KvEvent::AllBlocksCleared => {}
        }
        m.end()
    }
}

/// The events of one instance since its previous batch, handed out after
/// a step is formed.
#[derive(Copy, Clone, Debug)]
pub struct KvEventBatch<'a> {
    /// Instance id.
    pub instance: u32,
    /// When the batch was published.
    pub time: Micros,
    /// The events, in the order they happened.
    pub events: &'a [KvEvent],
}

/// JSON: `{"ts": seconds, "instance": id, "events": [...]}`, one line per
/// batch in a `--kv-events-output` file (vLLM's `KVEventBatch` with the
/// instance, which vLLM's stream implies by its endpoint).
impl Serialize for KvEventBatch<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("ts", &self.time.as_secs_f64())?;
        m.serialize_entry("instance", &self.instance)?;
        m.serialize_entry("events", self.events)?;
        m.end()
    }
}

/// A change to a [`super::KvCache`]'s prefix index, as the cache records
/// it when asked: the instance turns these into [`KvEvent`]s, adding what
/// only it knows (the tokens).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CacheChange {
    /// A block with content `hash` was registered; it is block `index` of
    /// the request being allocated, whose previous block has `parent`.
    Stored {
        /// Its content hash.
        hash: u64,
        /// The content hash of the block before it in the request.
        parent: Option<u64>,
        /// Its position in the request.
        index: u32,
    },
    /// A block with content `hash` was evicted.
    Removed {
        /// Its content hash.
        hash: u64,
    },
}

/// The stand-in id of token `position` of synthetic stream `seed`.
pub fn synthetic_token_id(seed: u64, position: u32) -> u32 {
    (mix64(seed ^ u64::from(position).rotate_left(29) ^ 0x746f_6b65_6e00) % u64::from(SYNTHETIC_VOCAB)) as u32
}

/// Appends the ids of tokens `start .. start + len` of the prompt followed by
/// the output stream `output_seed` (real ids where the prompt has them).
pub fn push_token_ids(prompt: &TokenSeq, output_seed: u64, start: u32, len: u32, out: &mut Vec<u32>) {
    let end = start + len;
    let mut at = 0u32;
    let output = TokenRun::Synthetic { seed: output_seed, offset: 0, len: u32::MAX - prompt.len() };
    for run in prompt.runs().iter().chain(std::iter::once(&output)) {
        let run_len = run.len();
        let (lo, hi) = (start.max(at), end.min(at.saturating_add(run_len)));
        if lo < hi {
            match run {
                TokenRun::Synthetic { seed, offset, .. } => out.extend((lo..hi).map(|p| synthetic_token_id(*seed, offset + (p - at)))),
                TokenRun::Explicit(ids) => out.extend_from_slice(&ids[(lo - at) as usize..(hi - at) as usize]),
            }
        }
        at = at.saturating_add(run_len);
        if at >= end {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Equal content gives equal ids wherever it sits; real ids pass through.
    #[test]
    fn token_ids_follow_the_runs() {
        let mut p = TokenSeq::synthetic(7, 10);
        p.push(TokenRun::Explicit(Arc::from(vec![5u32, 6, 7])));
        let mut ids = Vec::new();
        push_token_ids(&p, 99, 8, 7, &mut ids);
        assert_eq!(ids.len(), 7);
        assert_eq!(ids[2..5], [5, 6, 7]);
        assert_eq!(ids[0], synthetic_token_id(7, 8));
        assert_eq!(ids[5], synthetic_token_id(99, 0));
        let mut again = Vec::new();
        push_token_ids(&TokenSeq::synthetic(7, 20), 1, 8, 2, &mut again);
        assert_eq!(again, ids[..2]);
        assert!(ids.iter().all(|&t| t < SYNTHETIC_VOCAB || (5..=7).contains(&t)));
    }
}
