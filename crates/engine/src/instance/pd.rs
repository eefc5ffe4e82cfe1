//! Prefill/decode disaggregation on one instance: a prefill request whose blocks are held for the decode side's
//! pull, and a decode request whose prompt's KV arrives over the inbound link before it runs.

use crate::event::EventClass;
use crate::kv::events::{self, CacheChange, KvEvent};
use crate::request::{Request, RequestId};
use crate::time::Micros;

use super::{InstEvent, Instance, LoadStart, Observer, QueueChange, Status};

impl Instance {
    /// [`Instance::inject`] for a request whose prompt a prefill instance
    /// computed (P/D, [`crate::kv::transfer`]): when admitted it pulls the
    /// prompt's KV over the instance's inbound link instead of computing it.
    /// The instance must have been configured with
    /// [`crate::scheduler::InstanceConfig::kv_transfer`].
    pub fn inject_prefilled(&mut self, req: Request, now: Micros, obs: &mut dyn Observer) {
        debug_assert!(self.transfer_link.is_some(), "a prefilled request reached an instance with no inbound KV link");
        if let Some(slot) = self.inject_with_hashes(req, now, None, obs) {
            self.slots[slot as usize].remote_prompt = true;
        }
    }

    /// [`Instance::inject`] (with `prompt_hashes` as in
    /// [`Instance::inject_hashed`]) for the prefill of a disaggregated
    /// request (P/D): when it completes, its blocks stay held, as vLLM's
    /// connector delays freeing them, until [`Instance::release_kv`].
    pub fn inject_prefill(&mut self, req: Request, now: Micros, prompt_hashes: Option<&mut Vec<u64>>, obs: &mut dyn Observer) {
        if let Some(slot) = self.inject_with_hashes(req, now, prompt_hashes, obs) {
            self.slots[slot as usize].hold_kv = true;
        }
    }

    /// Lets go of the blocks a completed prefill `id` holds
    /// ([`Instance::inject_prefill`]) at `now`: they stay in the prefix
    /// cache when `keep_cached` (vLLM frees them into its cache), or are
    /// forgotten (reused first, a `BlockRemoved` each); requests that wait
    /// for blocks are scheduled now. Nothing happens if it holds none (it
    /// did not complete, or was released already).
    pub fn release_kv(&mut self, id: RequestId, keep_cached: bool, now: Micros, obs: &mut dyn Observer) {
        self.advance_clock(now);
        let Some(i) = self.held.iter().position(|(h, _)| *h == id) else { return };
        let (_, mut table) = self.held.swap_remove(i);
        if keep_cached {
            self.kv.free(&mut table);
        } else {
            self.kv.free_uncached(&mut table);
            if self.cfg.kv_events {
                self.kv.take_changes(&mut self.kv_changes);
                for change in self.kv_changes.drain(..) {
                    if let CacheChange::Removed { hash } = change {
                        self.kv_events.push(KvEvent::BlockRemoved { block_hashes: vec![hash], medium: events::GPU });
                    }
                }
                self.publish_kv_events(obs);
            }
        }
        self.spare_tables.push(table);
        self.resume();
    }

    /// Completed prefills whose blocks are held for a pull.
    pub fn held_kv(&self) -> usize {
        self.held.len()
    }

    /// The request in `slot`, at the head of the wait queue with its blocks
    /// taken and `gpu_hit_tokens` GPU prefix hits, leaves the queue
    /// (`WAITING_FOR_REMOTE_KVS`) until its KV lands at `done`, with
    /// `computed` tokens then computed of which it loaded `loaded_tokens`.
    pub(super) fn wait_for_remote_kv(
        &mut self,
        slot: u32,
        done: Micros,
        computed: u32,
        loaded_tokens: u32,
        gpu_hit_tokens: u32,
    ) -> LoadStart {
        let live = &mut self.slots[slot as usize];
        live.load_wait += done - self.now;
        live.loaded_tokens += loaded_tokens;
        live.num_computed = computed;
        live.status = Status::Loading;
        let num_tokens = live.num_tokens();
        self.waiting.pop();
        self.queue_log.push((slot, QueueChange::Scheduled));
        self.loading += 1;
        self.stats.prefix_query_tokens += u64::from(num_tokens);
        self.stats.prefix_hit_tokens += u64::from(gpu_hit_tokens);
        self.events.push(done, EventClass::InstanceArrival, InstEvent::Loaded(slot));
        LoadStart::Started
    }

    /// vLLM's `NixlConnector` on a decode instance, for the request at the
    /// head of the wait queue whose prompt a prefill instance computed, with
    /// `gpu_hit_tokens` local prefix hits (in `hit_scratch`): it takes
    /// blocks for the whole prompt and pulls the rest of the prompt's blocks
    /// over the inbound link; the request leaves the queue until
    /// [`InstEvent::Loaded`] ([`crate::kv::transfer`]).
    pub(super) fn start_transfer(&mut self, slot: u32, gpu_hit_tokens: u32) -> LoadStart {
        let now = self.now;
        let block_size = self.kv.block_size();
        let live = &mut self.slots[slot as usize];
        let prompt = live.req.prompt_tokens();
        let pulled_blocks = prompt.div_ceil(block_size) - gpu_hit_tokens / block_size;
        if pulled_blocks == 0 {
            live.remote_prompt = false;
            return LoadStart::NoHit;
        }
        let num_tokens = live.num_tokens();
        let room = self.kv.allocate_slots(&mut live.table, num_tokens, &self.hit_scratch, &live.hashes, gpu_hit_tokens);
        self.note_kv_changes(slot);
        if !room {
            return LoadStart::NoRoom;
        }
        let block_bytes = self.cfg.kv_transfer.expect("a prefilled request needs an inbound KV link").block_bytes;
        let bytes = u64::from(pulled_blocks) * block_bytes;
        let (done, busy) = self.transfer_link.as_mut().expect("set with kv_transfer").transfer(now, bytes);
        let stats = self.stats.kv_transfer.as_mut().expect("set with kv_transfer");
        stats.transfers += 1;
        stats.blocks += u64::from(pulled_blocks);
        stats.bytes += bytes;
        stats.busy += busy;
        stats.wait += done - now;
        self.slots[slot as usize].remote_prompt = false;
        self.wait_for_remote_kv(slot, done, prompt, prompt - gpu_hit_tokens, gpu_hit_tokens)
    }
}
