//! The client-side network model (spec section 10): what a client sees is
//! the server-side latency plus a round trip and the time to move the
//! request and response bytes over its link, at 4 bytes per token.
//!
//! ```text
//! upload_us   = input_tokens  · 4 / bandwidth_bytes_per_us
//! download_us = output_tokens · 4 / bandwidth_bytes_per_us
//! client_ttft = server_ttft + rtt + upload
//! client_e2e  = server_e2e  + rtt + upload + download
//! ```

use std::collections::BTreeMap;

use blis_engine::instance::Observer;
use blis_engine::metrics::Samples;
use blis_engine::request::RequestRecord;
use blis_engine::time::Micros;

/// Bytes per token on the wire (token ids are 32-bit).
pub const BYTES_PER_TOKEN: f64 = 4.0;

/// One client's link.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct NetworkModel {
    /// Round-trip time, µs.
    pub rtt_us: f64,
    /// Bandwidth in bytes per µs (megabits/s ÷ 8); `None` = unlimited.
    pub bytes_per_us: Option<f64>,
}

impl NetworkModel {
    /// A link with `rtt_ms` round trip and `bandwidth_mbps` megabits per second.
    pub fn new(rtt_ms: f64, bandwidth_mbps: Option<f64>) -> NetworkModel {
        NetworkModel { rtt_us: rtt_ms * 1e3, bytes_per_us: bandwidth_mbps.map(|b| b / 8.0) }
    }

    fn transfer_us(&self, tokens: u32) -> f64 {
        self.bytes_per_us.map_or(0.0, |b| f64::from(tokens) * BYTES_PER_TOKEN / b)
    }

    fn add(&self, t: Micros, extra_us: f64) -> Micros {
        t + Micros::from_us_f64(extra_us).unwrap_or(Micros::MAX)
    }

    /// TTFT as the client sees it, for requests that produced a token.
    pub fn client_ttft(&self, r: &RequestRecord) -> Option<Micros> {
        r.ttft().map(|t| self.add(t, self.rtt_us + self.transfer_us(r.input_tokens)))
    }

    /// End-to-end latency as the client sees it, for completed requests.
    pub fn client_e2e(&self, r: &RequestRecord) -> Option<Micros> {
        r.e2e().map(|t| self.add(t, self.rtt_us + self.transfer_us(r.input_tokens) + self.transfer_us(r.output_tokens)))
    }
}

/// Client-perspective latency samples (µs) of one group.
#[derive(Clone, Debug, Default)]
pub struct ClientSamples {
    /// TTFT of streaming requests.
    pub ttft_us: Samples,
    /// End-to-end latency of completed requests.
    pub e2e_us: Samples,
}

/// Collects client-perspective TTFT and E2E of requests from clients with
/// a network model, overall and per client. TTFT is collected for
/// streaming clients only: a non-streaming client sees no first token.
pub struct ClientLatency {
    networks: Vec<Option<NetworkModel>>,
    streaming: Vec<bool>,
    /// All requests of clients with a network model.
    pub overall: ClientSamples,
    /// Per client index.
    pub by_client: BTreeMap<u32, ClientSamples>,
}

impl ClientLatency {
    /// A collector for clients with these networks and streaming flags (by
    /// client index); `None` when no client has a network model.
    pub fn new(networks: Vec<Option<NetworkModel>>, streaming: Vec<bool>) -> Option<ClientLatency> {
        networks.iter().any(Option::is_some).then(|| ClientLatency {
            networks,
            streaming,
            overall: ClientSamples::default(),
            by_client: BTreeMap::new(),
        })
    }
}

impl Observer for ClientLatency {
    fn on_finish(&mut self, r: &RequestRecord) {
        let i = r.meta.client as usize;
        let Some(Some(net)) = self.networks.get(i) else { return };
        let group = self.by_client.entry(r.meta.client).or_default();
        if self.streaming.get(i).copied().unwrap_or(true)
            && let Some(t) = net.client_ttft(r)
        {
            self.overall.ttft_us.push(t.as_us() as f64);
            group.ttft_us.push(t.as_us() as f64);
        }
        if let Some(t) = net.client_e2e(r) {
            self.overall.e2e_us.push(t.as_us() as f64);
            group.e2e_us.push(t.as_us() as f64);
        }
    }
    fn observes_tokens(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blis_engine::request::{Outcome, RequestId, RequestMeta};

    #[test]
    fn client_latency_adds_rtt_and_transfer_times() {
        // 8 Mb/s = 1 byte/µs: 100 input tokens = 400 µs up, 50 output tokens = 200 µs down.
        let net = NetworkModel::new(2.0, Some(8.0));
        let r = RequestRecord {
            id: RequestId(0),
            meta: RequestMeta::default(),
            instance: Some(0),
            outcome: Outcome::Completed,
            arrival: Micros(1000),
            enqueued: None,
            queued: None,
            first_scheduled: None,
            first_token: Some(Micros(6000)),
            last_token: Some(Micros(9000)),
            finished: Micros(10_000),
            input_tokens: 100,
            output_tokens: 50,
            cached_prompt_tokens: 0,
            preemptions: 0,
            loaded_prompt_tokens: 0,
            kv_load_wait: Micros::ZERO,
            pd: None,
        };
        assert_eq!(net.client_ttft(&r), Some(Micros(5000 + 2000 + 400)));
        assert_eq!(net.client_e2e(&r), Some(Micros(9000 + 2000 + 400 + 200)));
        let unlimited = NetworkModel::new(0.5, None);
        assert_eq!(unlimited.client_e2e(&r), Some(Micros(9500)));

        let mut c = ClientLatency::new(vec![Some(net)], vec![false]).unwrap();
        c.on_finish(&r);
        assert_eq!((c.overall.ttft_us.len(), c.overall.e2e_us.len()), (0, 1)); // not streaming: no client TTFT
        assert!(ClientLatency::new(vec![None], vec![true]).is_none());
    }
}
