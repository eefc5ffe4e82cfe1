//! Links KV blocks cross, and the KV transfer of a disaggregated decode
//! instance.
//!
//! **Links.** One direction of a link is one first-come, first-served
//! channel: a transfer of `b` bytes that is ready at `r` starts when the
//! link is free (`s = max(r, free)`), holds it until `s + b / bandwidth` and
//! completes `latency` later, so concurrent transfers share the bandwidth
//! and none overtakes another. The offload tiers ([`super::offload`]) and
//! the P/D transfer use it.
//!
//! **P/D transfer** (vLLM's `NixlConnector`, vLLM 0.11, as llm-d deploys
//! it). A decode instance receives a request whose prompt a prefill
//! instance computed (`do_remote_prefill`). When its scheduler admits the
//! request it allocates blocks for the whole prompt and pulls the blocks
//! its own prefix cache lacks from the prefill instance's GPU
//! (`get_num_new_matched_tokens` returns them with `load_kv_async`); the
//! request waits off the scheduler (`WAITING_FOR_REMOTE_KVS`) while other
//! requests run, and when the blocks land it is scheduled with all but the
//! prompt's last token computed (`_update_waiting_for_remote_kv`), so its
//! first step computes one token and emits the first output token. Each
//! decode instance pulls over its own inbound link (its NIC: every GPU of a
//! tensor-parallel instance moves its own shard over its own NIC at once,
//! so `block_bytes` is one GPU's shard).

use crate::time::Micros;

/// One direction of a link.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct LinkConfig {
    /// Bytes per second one GPU's shard moves in this direction.
    pub bytes_per_s: f64,
    /// Fixed cost of a transfer, added once per transfer.
    pub latency: Micros,
}

impl LinkConfig {
    /// Whether the bandwidth is a positive finite number.
    pub fn is_valid(&self) -> bool {
        self.bytes_per_s.is_finite() && self.bytes_per_s > 0.0
    }
}

/// One direction of a link: a first-come, first-served channel.
#[derive(Clone, Debug)]
pub(crate) struct Link {
    cfg: LinkConfig,
    /// When the transfers queued so far leave the link.
    free_at: Micros,
    /// The last transfer's size and time on the link: most transfers are
    /// of one of a few sizes (a block, a prompt).
    last: (u64, Micros),
}

impl Link {
    pub(crate) fn new(cfg: LinkConfig) -> Link {
        Link { cfg, free_at: Micros::ZERO, last: (0, Micros::ZERO) }
    }

    /// Queues `bytes` that are ready at `ready`; returns (completion time,
    /// time the link is busy with them).
    pub(crate) fn transfer(&mut self, ready: Micros, bytes: u64) -> (Micros, Micros) {
        if bytes != self.last.0 {
            let busy =
                Micros::from_us_f64((bytes as f64 / self.cfg.bytes_per_s * 1e6).ceil()).unwrap_or(Micros::MAX_SPAN).min(Micros::MAX_SPAN);
            self.last = (bytes, busy);
        }
        let busy = self.last.1;
        let start = self.free_at.max(ready);
        self.free_at = start + busy;
        (self.free_at + self.cfg.latency, busy)
    }
}

/// How a decode instance receives prompts computed elsewhere.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct KvTransferConfig {
    /// Its inbound link (prefill instance → this instance), per GPU.
    pub link: LinkConfig,
    /// Bytes of one block on one GPU (its tensor-parallel shard).
    pub block_bytes: u64,
}

/// What a decode instance's KV transfers did over a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KvTransferStats {
    /// Transfers (one per request whose prompt was computed elsewhere).
    pub transfers: u64,
    /// Blocks pulled (the prompt's blocks its own prefix cache lacked).
    pub blocks: u64,
    /// Bytes pulled, per GPU.
    pub bytes: u64,
    /// Time the inbound link was busy.
    pub busy: Micros,
    /// Σ over transfers of the time from admission to landing.
    pub wait: Micros,
}

impl KvTransferStats {
    /// Adds `other`'s counters.
    pub fn absorb(&mut self, other: &KvTransferStats) {
        self.transfers += other.transfers;
        self.blocks += other.blocks;
        self.bytes += other.bytes;
        self.busy += other.busy;
        self.wait += other.wait;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Transfers queue behind each other and each pays the latency once.
    #[test]
    fn a_link_is_first_come_first_served() {
        let mut link = Link::new(LinkConfig { bytes_per_s: 1e6, latency: Micros(10) });
        assert_eq!(link.transfer(Micros(0), 1000), (Micros(1010), Micros(1000)));
        // Ready at 500 but the link is busy until 1000.
        assert_eq!(link.transfer(Micros(500), 2000), (Micros(3010), Micros(2000)));
        // Ready after the link went idle.
        assert_eq!(link.transfer(Micros(5000), 0), (Micros(5010), Micros(0)));
    }
}
