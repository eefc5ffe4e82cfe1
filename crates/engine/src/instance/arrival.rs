//! A request reaching the instance: its arrival and hand-off to the wait queue, the prefix lookup, the slot it
//! takes, and how async scheduling hides a request enqueued during a step.

use crate::event::EventClass;
use crate::kv::BlockTable;
use crate::latency::{InstanceLoad, QueueingInput};
use crate::request::{DropReason, Outcome, Request, RequestRecord};
use crate::scheduler::WaitKey;
use crate::time::Micros;

use super::{InstEvent, Instance, Live, Observer, QueueChange, QueueEvent, Status, give_up_time};

impl Instance {
    /// Why `req` can never run here, if it cannot.
    pub fn rejection(&self, req: &Request) -> Option<DropReason> {
        let total = u64::from(req.prompt_tokens()) + u64::from(req.max_output_tokens);
        let s = &self.cfg.scheduler;
        if total > u64::from(s.max_model_len) {
            Some(DropReason::ExceedsMaxModelLen)
        } else if self.kv.groups().peak_blocks(total, s.max_num_batched_tokens, self.cfg.block_size) > u64::from(self.kv.usable_blocks()) {
            Some(DropReason::ExceedsKvCapacity)
        } else {
            None
        }
    }

    /// A request reaches the instance at `now`. It is dropped (and reported)
    /// if it can never run; otherwise it enters the wait queue after the
    /// latency model's queueing delay.
    pub fn inject(&mut self, req: Request, now: Micros, obs: &mut dyn Observer) {
        self.inject_with_hashes(req, now, None, obs);
    }

    /// [`Instance::inject`] for a request whose prompt the caller hashed
    /// already (a prefix-aware router): `prompt_hashes` must be what
    /// `extend_block_hashes` gives for the prompt (no output tokens) at
    /// this instance's block size. The instance takes them instead of hashing
    /// again, leaving an empty buffer of its own in exchange.
    pub fn inject_hashed(&mut self, req: Request, now: Micros, prompt_hashes: &mut Vec<u64>, obs: &mut dyn Observer) {
        self.inject_with_hashes(req, now, Some(prompt_hashes), obs);
    }

    /// Injects `req`; returns its slot unless it was dropped at once.
    pub(super) fn inject_with_hashes(
        &mut self,
        req: Request,
        now: Micros,
        prompt_hashes: Option<&mut Vec<u64>>,
        obs: &mut dyn Observer,
    ) -> Option<u32> {
        self.advance_clock(now);
        self.stats.injected += 1;
        if let Some(reason) = self.rejection(&req) {
            obs.on_finish(&RequestRecord::unserved(&req, Some(self.id), Outcome::Dropped(reason), now));
            return None;
        }
        let slot = self.alloc_slot(req);
        let live = &mut self.slots[slot as usize];
        let mut prefix_hit_tokens = 0;
        if self.kv.prefix_caching() {
            match prompt_hashes {
                Some(given) => {
                    std::mem::swap(&mut live.hashes, given);
                    given.clear();
                    debug_assert_eq!(live.hashes.len() as u32, live.req.prompt_tokens() / self.kv.block_size(), "hashes of another prompt");
                }
                None => self.prompt_memo.prompt_hashes(&live.req.prompt, &mut live.hashes),
            }
            prefix_hit_tokens = self.kv.find_cached_prefix(&live.hashes, live.req.prompt_tokens(), &mut self.hit_scratch);
        }
        let delay = self.latency.queueing_delay(&QueueingInput {
            prompt_tokens: live.req.prompt_tokens(),
            prefix_hit_tokens,
            load: InstanceLoad {
                running: self.running.len() as u32,
                waiting: self.waiting.len() as u32 + self.incoming.len() as u32 + self.arriving,
                kv_usage: self.kv.usage(),
                kv_free_blocks: self.kv.num_free_blocks(),
                preemption_ema: self.preemption_ema,
            },
        });
        self.stats.overheads_clamped += u64::from(delay >= crate::latency::MAX_STEP);
        let (id, give_up) = (live.req.id, give_up_time(self.cfg.client_timeout, &live.req));
        self.arriving += 1;
        self.live_count += 1;
        self.events.push(now + delay, EventClass::InstanceArrival, InstEvent::Enqueue(slot));
        if let Some(give_up) = give_up {
            // A request held up on its way (a shaping delay, a re-route) may
            // arrive after its client gave up: it times out at once.
            self.timeouts.push(give_up.max(now), EventClass::RequestCompletion, (slot, id));
        }
        Some(slot)
    }

    pub(super) fn alloc_slot(&mut self, req: Request) -> u32 {
        let key = WaitKey::new(
            self.cfg.scheduler.queue_policy,
            req.meta.priority,
            req.prompt_tokens().saturating_add(req.max_output_tokens),
            req.arrival,
            req.id.0,
        );
        // The request's own tokens, which no other request can hit (see
        // `Live::cacheable_tokens`): its generated ones outside sessions,
        // and its prompt's own (`RequestMeta::own_prompt_from`).
        let prompt = req.prompt_tokens();
        let own_from = if req.meta.session.is_some() { u32::MAX } else { req.meta.own_prompt_from.map_or(prompt, |p| p.min(prompt)) };
        // KV events name the prompt's blocks in the GPU cache and every
        // block stored in the tiers, so when recording them those are
        // indexed.
        let cacheable_upto = if self.cfg.kv_events { own_from.max(prompt) } else { own_from };
        let private_from_block = if self.cfg.kv_events { u32::MAX } else { own_from / self.kv.block_size() };
        let fresh = |req: Request, table, hashes| Live {
            prompt_tokens: req.prompt_tokens(),
            max_output_tokens: req.max_output_tokens,
            id: req.id,
            req,
            status: Status::Arriving,
            key,
            num_computed: 0,
            num_output: 0,
            table,
            hashes,
            enqueued: None,
            queued: None,
            first_scheduled: None,
            first_token: None,
            last_token: None,
            cached_prompt_tokens: 0,
            preemptions: 0,
            aborted: false,
            in_step: false,
            store_due_tokens: 0,
            cacheable_upto,
            allocated_tokens: 0,
            room_tokens: 0,
            stored_blocks: 0,
            private_from_block,
            private_since: None,
            load: None,
            loaded_tokens: 0,
            load_wait: Micros::ZERO,
            remote_prompt: false,
            hold_kv: false,
        };
        match self.free_slots.pop() {
            Some(slot) => {
                let old = &mut self.slots[slot as usize];
                // Reuse the old slot's buffers.
                let mut table = std::mem::take(&mut old.table);
                let mut hashes = std::mem::take(&mut old.hashes);
                table.clear();
                hashes.clear();
                *old = fresh(req, table, hashes);
                slot
            }
            None => {
                self.slots.push(fresh(req, BlockTable::default(), Vec::new()));
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// A hand-off of `slot` (its arrival, or a CPU-tier load) completed:
    /// a request moved away meanwhile is released, one whose client gave up
    /// ends as timed out. Returns whether the request is gone.
    pub(super) fn gone_meanwhile(&mut self, slot: u32, obs: &mut dyn Observer) -> bool {
        let live = &self.slots[slot as usize];
        if live.status == Status::Moved {
            self.live_count -= 1;
            self.release(slot);
        } else if live.aborted {
            self.finish(slot, Outcome::TimedOut, obs);
        } else {
            return false;
        }
        true
    }

    pub(super) fn on_enqueue(&mut self, slot: u32, obs: &mut dyn Observer) {
        self.arriving -= 1;
        let now = self.now;
        if self.gone_meanwhile(slot, obs) {
            return;
        }
        let live = &mut self.slots[slot as usize];
        live.enqueued = Some(now);
        if self.cfg.scheduler.async_scheduling && !self.scheduled.is_empty() {
            // vLLM's async engine loop formed the next step when this one
            // started; the request waits in the engine's input queue.
            live.status = Status::Incoming;
            self.incoming.push(slot);
            return;
        }
        live.status = Status::Waiting;
        // A synchronous engine busy with a step adds it to the scheduler
        // (vLLM's `QUEUED`) when its loop comes round, at the step's end.
        live.queued = Some(if self.scheduled.is_empty() { now } else { self.step_end });
        let key = live.key;
        obs.on_queue(&QueueEvent { id: live.req.id, meta: live.req.meta, instance: self.id, time: now, change: QueueChange::Enqueued });
        self.waiting.push_new(key, slot);
        self.wake();
    }

    /// Moves incoming requests enqueued no later than `cutoff` into the wait queue.
    pub(super) fn admit_incoming(&mut self, cutoff: Micros) {
        let mut kept = 0;
        for i in 0..self.incoming.len() {
            let slot = self.incoming[i];
            let live = &mut self.slots[slot as usize];
            if live.enqueued.is_some_and(|e| e <= cutoff) {
                live.status = Status::Waiting;
                live.queued = Some(self.now);
                let key = live.key;
                self.waiting.push_new(key, slot);
                self.queue_log.push((slot, QueueChange::Enqueued));
            } else {
                self.incoming[kept] = slot;
                kept += 1;
            }
        }
        self.incoming.truncate(kept);
    }

    /// Ensures a step boundary is pending at `now` if the instance is idle.
    pub(super) fn wake(&mut self) {
        if !self.step_pending {
            self.step_pending = true;
            self.events.push(self.now, EventClass::StepCompletion, InstEvent::Step);
        }
    }
}
