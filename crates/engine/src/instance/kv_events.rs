//! vLLM's KV events (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`): the cache's index changes of a step,
//! published as one batch to observers.

use crate::kv::events::{self, CacheChange, KvEvent, KvEventBatch};

use super::{Instance, Observer};

impl Instance {
    /// When recording KV events, turns the cache's index changes since the
    /// last call into events; registered blocks belong to `slot`'s request
    /// (every call that registers blocks is for one request, and is
    /// followed by this). Consecutive blocks become one `BlockStored`, each
    /// eviction one `BlockRemoved`, as vLLM reports them.
    pub(super) fn note_kv_changes(&mut self, slot: u32) {
        if !self.cfg.kv_events {
            return;
        }
        self.kv.take_changes(&mut self.kv_changes);
        let live = &self.slots[slot as usize];
        let block_size = self.kv.block_size();
        for change in self.kv_changes.drain(..) {
            let event = match change {
                CacheChange::Removed { hash } => KvEvent::BlockRemoved { block_hashes: vec![hash], medium: events::GPU },
                CacheChange::Stored { hash, parent, index } => {
                    if let Some(KvEvent::BlockStored { block_hashes, token_ids, medium: events::GPU, .. }) = self.kv_events.last_mut()
                        && parent.is_some()
                        && block_hashes.last() == parent.as_ref()
                    {
                        block_hashes.push(hash);
                        events::push_token_ids(&live.req.prompt, live.req.output_seed, index * block_size, block_size, token_ids);
                        continue;
                    }
                    let mut token_ids = Vec::with_capacity(block_size as usize);
                    events::push_token_ids(&live.req.prompt, live.req.output_seed, index * block_size, block_size, &mut token_ids);
                    KvEvent::BlockStored { block_hashes: vec![hash], parent_block_hash: parent, token_ids, block_size, medium: events::GPU }
                }
            };
            self.kv_events.push(event);
        }
    }

    /// Hands the KV events recorded since the last step to `obs`, with the
    /// offload tiers' after the GPU's.
    pub(super) fn publish_kv_events(&mut self, obs: &mut dyn Observer) {
        if !self.cfg.kv_events {
            return;
        }
        if let Some(t) = &mut self.tiers {
            t.take_events(&mut self.kv_events);
        }
        if !self.kv_events.is_empty() {
            obs.on_kv_events(&KvEventBatch { instance: self.id, time: self.now, events: &self.kv_events });
            self.kv_events.clear();
        }
    }
}
