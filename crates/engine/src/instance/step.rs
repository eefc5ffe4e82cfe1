//! The step: forming a batch as vLLM's `Scheduler.schedule()` does (running requests first, then waiting ones,
//! within the token budget and `max_num_seqs`; KV blocks per step; preemption from the tail), timing it with the
//! latency model, and completing it (tokens, finished requests, freed blocks).

use crate::event::EventClass;
use crate::latency::{BatchEntry, StepBatch};
use crate::request::{Outcome, RequestRecord, TokenSeq, extend_block_hashes};
use crate::scheduler::PreemptionVictim;
use crate::time::Micros;

use super::{
    InstEvent, Instance, LoadStart, Observer, PREEMPTION_EMA_GAMMA, QueueChange, QueueEvent, Status, StepEvent, TokenEvent, give_up_time,
};

impl Instance {
    /// Blocks came free, or a request left the wait queue, between steps: a
    /// request the scheduler could not admit may fit now. vLLM's engine
    /// loop, which runs while anything waits, would schedule it at its next
    /// iteration; an instance with no step in flight starts one now, where
    /// it would otherwise wait for the next arrival.
    pub(super) fn resume(&mut self) {
        if self.waiting.len() > 0 || !self.landed.is_empty() {
            self.wake();
        }
    }

    pub(super) fn on_step_boundary(&mut self, obs: &mut dyn Observer) {
        self.step_pending = false;
        // Under async scheduling the step starting now was formed when the
        // completed one started: it sees requests enqueued, and loads landed,
        // before that.
        let cutoff = if self.cfg.scheduler.async_scheduling && !self.scheduled.is_empty() { self.step_start } else { self.now };
        if !self.scheduled.is_empty() {
            self.complete_step(obs);
        }
        self.admit_incoming(cutoff);
        self.start_step(cutoff);
        self.publish_kv_events(obs);
        for &(slot, change) in &self.queue_log {
            let live = &self.slots[slot as usize];
            obs.on_queue(&QueueEvent { id: live.req.id, meta: live.req.meta, instance: self.id, time: self.now, change });
        }
        self.queue_log.clear();
    }

    /// Applies the results of the step in flight: sample tokens, finish requests.
    pub(super) fn complete_step(&mut self, obs: &mut dyn Observer) {
        let now = self.now;
        let duration = now - self.step_start;
        let preempted = self.step_preempted;
        obs.on_step(&StepEvent {
            instance: self.id,
            start: self.step_start,
            duration,
            batch: StepBatch { entries: &self.entries, load: self.step_load, preempted },
            requests: &self.entry_ids,
        });
        let per_token = self.latency.output_token_overhead();
        let emission = self.latency.token_emission_delay();
        self.stats.overheads_clamped += u64::from(per_token.max(emission) >= crate::latency::MAX_STEP);
        let emitted = now + emission;
        let tokens_observed = obs.observes_tokens();
        let mut any_finished = false;
        for i in 0..self.scheduled.len() {
            let (slot, _) = self.scheduled[i];
            let live = &mut self.slots[slot as usize];
            live.in_step = false;
            if live.aborted {
                any_finished = true;
                continue;
            }
            if live.num_computed < live.num_tokens() {
                continue; // a prefill chunk: no token sampled yet
            }
            live.num_output += 1;
            let time = emitted + Micros(per_token.0.saturating_mul(u64::from(live.num_output)));
            let gap = live.last_token.map(|prev| time - prev);
            if live.num_output == 1 {
                live.first_token = Some(time);
            }
            live.last_token = Some(time);
            if tokens_observed {
                obs.on_token(&TokenEvent { id: live.id, meta: live.req.meta, instance: self.id, index: live.num_output, time, gap });
            }
            if live.num_output >= live.max_output_tokens {
                any_finished = true;
            }
        }
        self.store_computed_blocks();
        if any_finished {
            // Retire finished and aborted requests, keeping the running order.
            let mut k = 0;
            while k < self.running.len() {
                let slot = self.running[k];
                let live = &self.slots[slot as usize];
                if live.status == Status::Moved {
                    self.running.remove(k);
                    self.live_count -= 1;
                    self.release(slot);
                    continue;
                }
                let outcome = if live.aborted {
                    Some(Outcome::TimedOut)
                } else if live.num_output >= live.max_output_tokens {
                    Some(Outcome::Completed)
                } else {
                    None
                };
                match outcome {
                    Some(o) => {
                        self.running.remove(k);
                        self.finish(slot, o, obs);
                    }
                    None => k += 1,
                }
            }
        }
        self.scheduled.clear();
        self.entries.clear();
        self.entry_ids.clear();
    }

    /// Frees a request's resources and reports it.
    pub(super) fn finish(&mut self, slot: u32, outcome: Outcome, obs: &mut dyn Observer) {
        let now = self.now;
        let completion = self.latency.completion_overhead();
        self.stats.overheads_clamped += u64::from(outcome == Outcome::Completed && completion >= crate::latency::MAX_STEP);
        let live = &self.slots[slot as usize];
        let finished = match outcome {
            Outcome::Completed => live.last_token.unwrap_or(now) + completion,
            Outcome::TimedOut => give_up_time(self.cfg.client_timeout, &live.req).unwrap_or(now),
            Outcome::Dropped(_) | Outcome::Rejected(_) => now,
        };
        let record = RequestRecord {
            id: live.req.id,
            meta: live.req.meta,
            instance: Some(self.id),
            outcome,
            arrival: live.req.arrival,
            enqueued: live.enqueued,
            queued: live.queued,
            first_scheduled: live.first_scheduled,
            first_token: live.first_token,
            last_token: live.last_token,
            finished,
            input_tokens: live.req.prompt_tokens(),
            output_tokens: live.num_output,
            cached_prompt_tokens: live.cached_prompt_tokens,
            preemptions: live.preemptions,
            loaded_prompt_tokens: live.loaded_tokens,
            kv_load_wait: live.load_wait,
            pd: None,
        };
        self.live_count -= 1;
        let live = &mut self.slots[slot as usize];
        if live.hold_kv && outcome == Outcome::Completed {
            let table = std::mem::replace(&mut live.table, self.spare_tables.pop().unwrap_or_default());
            self.held.push((record.id, table));
        }
        self.release(slot);
        obs.on_finish(&record);
    }

    /// Marks `slot` free (its blocks were freed) for the next request.
    pub(super) fn release(&mut self, slot: u32) {
        let live = &mut self.slots[slot as usize];
        self.kv.free(&mut live.table);
        live.room_tokens = 0;
        live.aborted = true; // the slot is dead until reused
        live.status = Status::Free;
        live.in_step = false;
        // The prompt is not needed any more (it may hold a long list of real
        // token ids). The block table and hashes are kept for the slot's next
        // request unless so many slots are free already that this one will
        // not be reused soon, as when a burst drains: a run's memory is then
        // bounded by the requests it holds, not by the most it ever held.
        live.req.prompt = TokenSeq::new();
        if self.free_slots.len() >= self.cfg.scheduler.max_num_seqs as usize {
            live.table.shrink();
            live.hashes = Vec::new();
        }
        self.free_slots.push(slot);
    }

    /// Forms the next batch and starts it, or goes idle when there is no work.
    /// Loads that landed after `visible_until` wait for a later step, unless
    /// nothing else can run.
    pub(super) fn start_step(&mut self, mut visible_until: Micros) {
        loop {
            let preempted = self.schedule(visible_until);
            let preempted_share = f64::from(preempted) / self.running.len().max(1) as f64;
            self.preemption_ema = PREEMPTION_EMA_GAMMA * preempted_share + (1.0 - PREEMPTION_EMA_GAMMA) * self.preemption_ema;
            if !self.scheduled.is_empty() {
                self.step_preempted = preempted;
                break;
            }
            // Nothing ran. Requests and loads held back by async scheduling
            // are scheduled at once when there is nothing else to run (vLLM's
            // engine runs an empty step, which reports finished loads too).
            if !self.incoming.is_empty() || self.landed.back().is_some_and(|&(_, at)| at > visible_until) {
                visible_until = self.now;
                self.admit_incoming(self.now);
                continue;
            }
            // If everything was preempted, the next pass admits from the wait
            // queue (vLLM's next busy-loop iteration); otherwise idle.
            if preempted == 0 || self.waiting.len() == 0 {
                return;
            }
        }
        self.step_load = self.load();
        let batch = StepBatch { entries: &self.entries, load: self.step_load, preempted: self.step_preempted };
        let mut duration = self.latency.step_time(&batch);
        if self.step_slowdown != 1.0 {
            duration = Micros::from_us_f64(duration.0 as f64 * self.step_slowdown)
                .unwrap_or(crate::latency::MAX_STEP)
                .min(crate::latency::MAX_STEP);
        }
        let tokens: u64 = self.entries.iter().map(|e| u64::from(e.new_tokens)).sum();
        if let Some(kernels) = &mut self.moe_kernels {
            let stall = kernels.launch(tokens);
            if stall > Micros::ZERO {
                duration += stall;
                self.stats.moe_kernel_compiles += 1;
                self.stats.moe_compile_stall += stall;
            }
        }
        let usage = self.kv.usage();
        let s = &mut self.stats;
        s.steps += 1;
        s.batch_requests += self.entries.len() as u64;
        s.batch_tokens += tokens;
        s.kv_usage_peak = s.kv_usage_peak.max(usage);
        s.kv_usage_integral += usage * duration.as_us() as f64;
        s.busy += duration;
        s.steps_clamped += u64::from(duration <= crate::latency::MIN_STEP || duration >= crate::latency::MAX_STEP);
        self.step_start = self.now;
        self.step_end = self.now + duration;
        self.step_pending = true;
        self.events.push(self.step_end, EventClass::StepCompletion, InstEvent::Step);
    }

    /// One vLLM v1 scheduling pass. Fills `scheduled`/`entries`; returns the
    /// number of requests preempted. A landed load joins only if it landed
    /// by `visible_until`: vLLM learns of a finished load from the output of
    /// the step that ran while it finished, which the async scheduler reads
    /// only after forming the next step.
    pub(super) fn schedule(&mut self, visible_until: Micros) -> u32 {
        let now = self.now;
        let s = self.cfg.scheduler.clone();
        let mut budget = s.max_num_batched_tokens;
        let mut preempted = 0u32;
        self.scheduled.clear();
        self.entries.clear();
        self.entry_ids.clear();

        // 1. Running requests, in order.
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let slot = self.running[i];
            let live = &self.slots[slot as usize];
            let mut n = live.num_tokens() - live.num_computed;
            if s.long_prefill_token_threshold > 0 {
                n = n.min(s.long_prefill_token_threshold);
            }
            n = n.min(budget);
            if n == 0 {
                i += 1;
                continue;
            }
            let mut scheduled_self = true;
            while !self.allocate(slot, n, false) {
                let (victim_idx, victim) = self.pick_victim();
                self.running.remove(victim_idx);
                // A victim already scheduled in this step gives its budget back.
                if let Some(pos) = self.scheduled.iter().position(|&(v, _)| v == victim) {
                    let (_, tokens) = self.scheduled.remove(pos);
                    self.entries.remove(pos);
                    self.entry_ids.remove(pos);
                    budget += tokens;
                    let v = &mut self.slots[victim as usize];
                    v.num_computed -= tokens;
                    v.in_step = false;
                }
                if victim_idx < i {
                    i -= 1;
                }
                self.preempt(victim);
                preempted += 1;
                if victim == slot {
                    scheduled_self = false;
                    break;
                }
            }
            if !scheduled_self {
                break;
            }
            self.push_scheduled(slot, n);
            budget -= n;
            i += 1;
        }

        // 2. Waiting requests, unless this step preempted: first those whose
        //    prefix landed from the CPU tier (they hold their blocks, so the
        //    queue's head never waits on them), then the wait queue.
        if preempted == 0 {
            while budget > 0 && self.running.len() < s.max_num_seqs as usize {
                let (slot, landed) = match self.landed.front() {
                    Some(&(slot, at)) if at <= visible_until => (slot, true),
                    _ => match self.waiting.peek() {
                        Some(slot) => (slot, false),
                        None => break,
                    },
                };
                let live = &self.slots[slot as usize];
                let num_tokens = live.num_tokens();
                let hit_tokens = if landed {
                    self.hit_scratch.clear();
                    live.num_computed
                } else if self.kv.prefix_caching() && live.num_computed == 0 {
                    self.kv.find_cached_prefix(&live.hashes, num_tokens, &mut self.hit_scratch)
                } else {
                    self.hit_scratch.clear();
                    0
                };
                if !landed && live.remote_prompt {
                    match self.start_transfer(slot, hit_tokens) {
                        LoadStart::Started => continue,
                        LoadStart::NoRoom => break,
                        LoadStart::NoHit => {}
                    }
                } else if !landed && self.tiers.is_some() {
                    match self.start_load(slot, hit_tokens) {
                        LoadStart::Started => continue,
                        LoadStart::NoRoom => break,
                        LoadStart::NoHit => {}
                    }
                }
                let mut n = num_tokens - hit_tokens;
                if s.long_prefill_token_threshold > 0 {
                    n = n.min(s.long_prefill_token_threshold);
                }
                if !s.enable_chunked_prefill && n > budget {
                    break;
                }
                n = n.min(budget);
                self.slots[slot as usize].num_computed = hit_tokens;
                if !self.allocate(slot, n, !landed) {
                    if !landed {
                        self.slots[slot as usize].num_computed = 0;
                    }
                    break;
                }
                if landed {
                    self.landed.pop_front();
                } else {
                    self.waiting.pop();
                    self.stats.prefix_query_tokens += u64::from(num_tokens);
                    self.stats.prefix_hit_tokens += u64::from(hit_tokens);
                }
                self.queue_log.push((slot, QueueChange::Scheduled));
                self.running.push(slot);
                let live = &mut self.slots[slot as usize];
                live.status = Status::Running;
                if live.first_scheduled.is_none() {
                    live.first_scheduled = Some(now);
                    live.cached_prompt_tokens = hit_tokens.min(live.req.prompt_tokens());
                }
                self.push_scheduled(slot, n);
                budget -= n;
            }
        }
        self.stats.preemptions += u64::from(preempted);
        preempted
    }

    /// Records `n` tokens of `slot` in this step and advances its computed count
    /// (vLLM `_update_after_schedule`).
    pub(super) fn push_scheduled(&mut self, slot: u32, n: u32) {
        let live = &mut self.slots[slot as usize];
        self.entries.push(BatchEntry { computed_tokens: live.num_computed, new_tokens: n, prompt_tokens: live.prompt_tokens });
        self.entry_ids.push(live.id);
        self.scheduled.push((slot, n));
        live.num_computed += n;
        live.in_step = true;
    }

    /// KV allocation for `n` more tokens of `slot`; on first admission the
    /// prefix hits in `hit_scratch` are taken too.
    #[inline(always)]
    pub(super) fn allocate(&mut self, slot: u32, n: u32, with_hits: bool) -> bool {
        let live = &mut self.slots[slot as usize];
        // Blocks that slide out of a sliding-window group are entered in the
        // index as they go (`KvCache::release_skipped`), generated ones too,
        // so their hashes are needed now rather than at a preemption.
        if self.kv.prefix_caching() && self.kv.slides_out_upto(&live.table, live.num_computed) > live.hashes.len() {
            extend_block_hashes(&live.req.prompt, live.req.output_seed, live.num_output, self.kv.block_size(), &mut live.hashes);
        }
        self.kv.release_skipped(&mut live.table, live.num_computed, &live.hashes);
        let need = live.num_computed + n;
        if !with_hits && need <= live.room_tokens {
            live.allocated_tokens = need;
            return true; // most decode steps
        }
        let cache_upto = live.cacheable_tokens(need);
        if !with_hits && self.kv.holds(&live.table, need, cache_upto) {
            live.allocated_tokens = need;
            live.room_tokens = self.kv.room_tokens(&live.table, live.cacheable_upto);
            return true;
        }
        self.take_blocks(slot, need, cache_upto, with_hits)
    }

    /// [`Instance::allocate`] when blocks may be taken or registered: for
    /// `slot` to hold `need` tokens, its first `cache_upto` in the index.
    #[inline(never)]
    pub(super) fn take_blocks(&mut self, slot: u32, need: u32, cache_upto: u32, with_hits: bool) -> bool {
        let live = &mut self.slots[slot as usize];
        // Hashes must cover every full block entered in the prefix index.
        if self.kv.prefix_caching() && (cache_upto / self.kv.block_size()) as usize > live.hashes.len() {
            extend_block_hashes(&live.req.prompt, live.req.output_seed, live.num_output, self.kv.block_size(), &mut live.hashes);
        }
        let hits: &[u32] = if with_hits { &self.hit_scratch } else { &[] };
        let ok = self.kv.allocate_slots(&mut live.table, need, hits, &live.hashes, cache_upto);
        if ok {
            live.allocated_tokens = need;
            live.room_tokens = self.kv.room_tokens(&live.table, live.cacheable_upto);
        }
        self.note_kv_changes(slot);
        ok
    }

    /// The running request to preempt: the tail, or the lowest priority
    /// (latest arrival among equals). Returns (index in running, slot).
    pub(super) fn pick_victim(&self) -> (usize, u32) {
        match self.cfg.scheduler.preemption {
            PreemptionVictim::Tail => {
                let i = self.running.len() - 1;
                (i, self.running[i])
            }
            PreemptionVictim::LowestPriority => {
                let mut best = 0;
                for (i, &slot) in self.running.iter().enumerate().skip(1) {
                    let (a, b) = (&self.slots[slot as usize].req, &self.slots[self.running[best] as usize].req);
                    let lower = a.meta.priority.total_cmp(&b.meta.priority).then(b.arrival.cmp(&a.arrival)).then(b.id.cmp(&a.id));
                    if lower.is_le() {
                        best = i;
                    }
                }
                (best, self.running[best])
            }
        }
    }

    /// Frees the victim's blocks and returns it to the wait queue to recompute.
    pub(super) fn preempt(&mut self, slot: u32) {
        let live = &mut self.slots[slot as usize];
        // Its generated tokens are computed: make them findable, as vLLM
        // would have, so the recomputation can hit them.
        let private_since = live.private_since.take();
        if self.kv.prefix_caching() || private_since.is_some() {
            extend_block_hashes(&live.req.prompt, live.req.output_seed, live.num_output, self.kv.block_size(), &mut live.hashes);
        }
        if self.kv.prefix_caching() {
            let indexed = live.indexed_on_preemption();
            self.kv.cache_full_blocks(&mut live.table, &live.hashes, indexed);
        }
        // Its own prompt blocks are in the index now, so the recomputation's
        // copies must enter it when allocated, as vLLM's would: a copy finds
        // the old entry there (the first block registered for a content
        // keeps it) until that block is reused.
        live.cacheable_upto = live.cacheable_upto.max(live.req.prompt_tokens());
        // Likewise the private blocks it stored in the tiers.
        if let (Some(tiers), Some(since)) = (self.tiers.as_mut(), private_since) {
            tiers.adopt(live.req.id.0, since, &live.hashes);
            live.private_from_block = live.private_from_block.max(live.stored_blocks);
        }
        self.note_kv_changes(slot);
        let live = &mut self.slots[slot as usize];
        self.kv.free(&mut live.table);
        live.num_computed = 0;
        live.allocated_tokens = 0;
        live.room_tokens = 0;
        live.stored_blocks = 0;
        live.store_due_tokens = 0;
        live.preemptions += 1;
        live.status = Status::Waiting;
        let key = live.key;
        self.waiting.push_preempted(key, slot);
        self.queue_log.push((slot, QueueChange::Enqueued));
    }
}
