//! KV from the tiers below the GPU: a request's prefix loaded from the CPU, disk or remote tier before it is
//! scheduled (vLLM's `WAITING_FOR_REMOTE_KVS`), and the blocks a step computed stored down to them.

use crate::kv::offload::PrivateRun;
use crate::request::extend_block_hashes;

use super::{Instance, LoadStart, Observer, QueueChange, QueueEvent, Status};

impl Instance {
    /// vLLM's connector lookup for the request at the head of the wait queue,
    /// which has nothing computed and `gpu_hit_tokens` GPU prefix hits (in
    /// `hit_scratch`): when the offload tiers hold the prompt's full blocks
    /// right after the hit, they start loading and the request leaves the
    /// queue until [`InstEvent::Loaded`].
    ///
    /// The request takes GPU blocks for all its tokens now, not only for the
    /// loaded ones as vLLM does (the rest when it is scheduled): blocks held
    /// by requests that wait could otherwise leave nothing for the request
    /// at the head of the queue while nothing runs, and vLLM would stall
    /// there. The loaded blocks enter the prefix index only when they land
    /// (vLLM's `delay_cache_blocks`).
    pub(super) fn start_load(&mut self, slot: u32, gpu_hit_tokens: u32) -> LoadStart {
        let now = self.now;
        let tiers = self.tiers.as_mut().expect("called with offload tiers");
        let block_size = self.kv.block_size();
        let live = &mut self.slots[slot as usize];
        let num_tokens = live.num_tokens();
        extend_block_hashes(&live.req.prompt, live.req.output_seed, live.num_output, block_size, &mut live.hashes);
        let gpu_blocks = (gpu_hit_tokens / block_size) as usize;
        let full_blocks = ((num_tokens / block_size) as usize).min(live.hashes.len());
        if full_blocks <= gpu_blocks {
            return LoadStart::NoHit;
        }
        let stats = self.stats.offload.as_mut().expect("set when the tiers are");
        let hits = tiers.lookup(&live.hashes[gpu_blocks..full_blocks], now, stats) as usize;
        if hits == 0 {
            return LoadStart::NoHit;
        }
        let loaded = gpu_blocks..gpu_blocks + hits;
        self.on_gpu_scratch.clear();
        self.on_gpu_scratch.extend(live.hashes[loaded.clone()].iter().map(|&h| self.kv.cached_block(h).is_some()));
        let room = self.kv.allocate_slots(&mut live.table, num_tokens, &self.hit_scratch, &live.hashes, gpu_hit_tokens);
        self.note_kv_changes(slot);
        if !room {
            return LoadStart::NoRoom;
        }
        let live = &mut self.slots[slot as usize];
        let (tiers, stats) =
            (self.tiers.as_mut().expect("called with offload tiers"), self.stats.offload.as_mut().expect("set when the tiers are"));
        let (ticket, done) = tiers.start_load(&live.hashes[loaded.clone()], now, &self.on_gpu_scratch, stats);
        live.load = Some(ticket);
        self.wait_for_remote_kv(slot, done, loaded.end as u32 * block_size, hits as u32 * block_size, gpu_hit_tokens)
    }

    /// A load from the offload tiers, or a P/D transfer, landed: the loaded blocks enter the GPU
    /// prefix index and the request waits again, with them computed (all
    /// but the last token when they cover the whole request, as vLLM
    /// recomputes it), ahead of the wait queue. A request that gave up or
    /// was moved away meanwhile ends or is released now.
    pub(super) fn on_loaded(&mut self, slot: u32, obs: &mut dyn Observer) {
        self.loading -= 1;
        let live = &mut self.slots[slot as usize];
        match live.load.take() {
            Some(ticket) => self.tiers.as_mut().expect("a load needs offload tiers").finish_load(ticket),
            None => obs.on_kv_pulled(live.req.id, self.id),
        }
        if self.gone_meanwhile(slot, obs) {
            // Its blocks are free now (vLLM frees an aborted load's blocks
            // when the load finishes).
            self.resume();
            return;
        }
        let live = &mut self.slots[slot as usize];
        let computed = live.num_computed;
        let cacheable = live.cacheable_tokens(computed);
        live.allocated_tokens = computed;
        self.kv.cache_full_blocks(&mut live.table, &live.hashes, cacheable);
        self.note_kv_changes(slot);
        let live = &mut self.slots[slot as usize];
        if computed == live.num_tokens() {
            live.num_computed -= 1;
        }
        live.status = Status::Landed;
        obs.on_queue(&QueueEvent {
            id: live.req.id,
            meta: live.req.meta,
            instance: self.id,
            time: self.now,
            change: QueueChange::Enqueued,
        });
        self.landed.push_back((slot, self.now));
        self.wake();
    }

    /// Offers the offload tiers the full blocks each request of the
    /// completed step has computed and not offered yet, as the store policy
    /// says (a request whose store is put off offers them again after its
    /// next step).
    pub(super) fn store_computed_blocks(&mut self) {
        let Some(tiers) = self.tiers.as_mut() else { return };
        let stats = self.stats.offload.as_mut().expect("set when the tiers are");
        let now = self.now;
        let block_size = self.kv.block_size();
        let policy = tiers.policy();
        for &(slot, _) in &self.scheduled {
            let live = &mut self.slots[slot as usize];
            // What may be stored changes only when a block fills or the
            // prompt completes: most steps stop at this test, which reads
            // only fields every step touches.
            if live.num_computed < live.store_due_tokens {
                continue;
            }
            let (computed, prompt) = (live.num_computed, live.prompt_tokens);
            let next_boundary = (computed / block_size + 1).saturating_mul(block_size);
            live.store_due_tokens = if computed < prompt { next_boundary.min(prompt) } else { next_boundary };
            let storable = policy.storable_blocks(computed, prompt, block_size);
            if live.aborted || storable <= live.stored_blocks {
                continue;
            }
            // Shared blocks are stored by content, then private ones by owner.
            let shared_end = storable.min(live.private_from_block).max(live.stored_blocks);
            let mut shared = live.stored_blocks as usize..live.stored_blocks as usize;
            if shared_end > live.stored_blocks {
                let hashed_output = (shared_end * block_size).saturating_sub(live.req.prompt_tokens()).min(live.num_output);
                extend_block_hashes(&live.req.prompt, live.req.output_seed, hashed_output, block_size, &mut live.hashes);
                // Hashes reach only the tokens output so far: the rest waits for the next step.
                if shared_end as usize > live.hashes.len() {
                    live.store_due_tokens = 0;
                }
                shared.end = (shared_end as usize).min(live.hashes.len()).max(shared.start);
            }
            let first_private = shared.end as u32;
            let private = (storable > first_private && first_private >= live.private_from_block).then(|| PrivateRun {
                owner: live.req.id.0,
                first_block: first_private,
                blocks: storable - first_private,
            });
            // (Past the hashed blocks, the range is empty: private blocks have no hash.)
            let shared_hashes = live.hashes.get(shared).unwrap_or_default();
            let clock = tiers.clock();
            if tiers.store(shared_hashes, private, now, stats) {
                live.stored_blocks = private.map_or(first_private, |p| p.first_block + p.blocks);
                if private.is_some() {
                    live.private_since.get_or_insert(clock);
                }
            } else {
                live.store_due_tokens = 0;
            }
        }
    }
}
