//! The lazy generator of a plan: a k-way merge of the clients' arrival
//! streams by arrival time, plus the later rounds of multi-turn sessions,
//! which only exist once the previous round has completed.
//!
//! Memory is constant in the number of requests: one pending arrival per
//! client, plus one entry per session that is in flight.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::Arc;

use blis_engine::driver::Workload;
use blis_engine::request::{Outcome, Request, RequestId, RequestMeta, RequestRecord, TokenSeq};
use blis_engine::time::Micros;
use rustc_hash::FxHashMap;

use crate::client::{ClientPlan, ClientStream, Draft};
use crate::content::{Turn, reasoning_tokens};

/// A generated request and what the engine's [`Request`] does not carry.
#[derive(Clone, Debug, PartialEq)]
pub struct GeneratedRequest {
    /// The request as the engine runs it.
    pub request: Request,
    /// Per-client request (or session) number.
    pub k: u64,
    /// Text tokens of the prompt, prefix included.
    pub text_tokens: u32,
    /// Image, audio and video tokens of the prompt.
    pub modality_tokens: [u32; 3],
    /// Fraction of the output that is reasoning.
    pub reason_ratio: f64,
    /// Index in its client's `prefixes` of the shared prefix its prompt starts with.
    pub prefix_group: Option<u32>,
}

impl GeneratedRequest {
    /// An error when the request arrives after
    /// [`Micros::MAX_SPAN`](blis_engine::time::Micros::MAX_SPAN), where
    /// simulated time stops meaning anything (as [`crate::WithinSpan`] ends a run).
    pub fn check_span(&self) -> Result<(), crate::error::WorkloadError> {
        crate::error::WorkloadError::past_span(self.request.id.0, self.request.arrival).map_or(Ok(()), Err)
    }
}

/// A later round waiting for its arrival time.
struct FollowUp {
    arrival: Micros,
    seq: u64,
    client: u32,
    draft: Draft,
}

impl PartialEq for FollowUp {
    fn eq(&self, o: &Self) -> bool {
        (self.arrival, self.seq) == (o.arrival, o.seq)
    }
}
impl Eq for FollowUp {}
impl PartialOrd for FollowUp {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for FollowUp {
    /// Reversed, so the max-heap pops the earliest (then first released).
    fn cmp(&self, o: &Self) -> Ordering {
        (o.arrival, o.seq).cmp(&(self.arrival, self.seq))
    }
}

/// What a session's next round needs from the round in flight.
struct InFlight {
    client: u32,
    k: u64,
    round: u32,
    prompt: TokenSeq,
    output_seed: u64,
    output_tokens: u32,
    reason_ratio: f64,
}

/// The request stream of a [`crate::plan::Plan`]: deterministic in the plan, arrival
/// ordered, lazy. As an engine [`Workload`] it also releases multi-turn
/// rounds on completion; as an [`Iterator`] (no simulation) only first
/// rounds exist.
pub struct Generator {
    clients: Vec<Arc<ClientPlan>>,
    streams: Vec<ClientStream>,
    pending: Vec<Option<(Micros, Draft)>>,
    heads: BinaryHeap<Reverse<(Micros, u32)>>,
    follow_ups: BinaryHeap<FollowUp>,
    in_flight: FxHashMap<RequestId, InFlight>,
    next_id: u64,
    next_seq: u64,
    first_rounds_left: u64,
}

impl Generator {
    /// A generator positioned before the first request of `clients` (a
    /// plan's), stopping after `num_requests` first rounds if given.
    pub fn new(clients: &[Arc<ClientPlan>], num_requests: Option<u64>) -> Generator {
        let clients = clients.to_vec();
        let mut streams: Vec<ClientStream> = clients.iter().map(|c| ClientStream::new(c)).collect();
        let mut heads = BinaryHeap::new();
        let pending = clients
            .iter()
            .zip(&mut streams)
            .map(|(c, s)| {
                let next = s.next(c);
                if let Some((t, _)) = next {
                    heads.push(Reverse((t, c.index)));
                }
                next
            })
            .collect();
        Generator {
            clients,
            streams,
            pending,
            heads,
            follow_ups: BinaryHeap::new(),
            in_flight: FxHashMap::default(),
            next_id: 0,
            next_seq: 0,
            first_rounds_left: num_requests.unwrap_or(u64::MAX),
        }
    }

    fn build(&mut self, client: u32, arrival: Micros, d: Draft) -> GeneratedRequest {
        let id = RequestId(self.next_id);
        self.next_id += 1;
        let c = &self.clients[client as usize];
        let session = c.multi_turn.map(|_| ((u64::from(client) << 40) | d.k, d.round));
        if let Some(mt) = c.multi_turn
            && d.round + 1 < mt.max_rounds
        {
            self.in_flight.insert(
                id,
                InFlight {
                    client,
                    k: d.k,
                    round: d.round,
                    prompt: d.prompt.clone(),
                    output_seed: d.output_seed,
                    output_tokens: d.output_tokens,
                    reason_ratio: d.reason_ratio,
                },
            );
        }
        GeneratedRequest {
            request: Request {
                id,
                arrival,
                prompt: d.prompt,
                max_output_tokens: d.output_tokens,
                output_seed: d.output_seed,
                meta: RequestMeta {
                    client,
                    tenant: c.tenant,
                    slo_class: c.slo_class,
                    session,
                    // A session's prompt recurs in its next round.
                    own_prompt_from: d.own_prompt_from.filter(|_| session.is_none()),
                    ..RequestMeta::default()
                },
            },
            k: d.k,
            text_tokens: d.text_tokens,
            modality_tokens: d.modality_tokens,
            reason_ratio: d.reason_ratio,
            prefix_group: d.prefix_group,
        }
    }

    /// Arrival of the next request, if one is pending.
    pub fn peek(&self) -> Option<Micros> {
        let head = self.heads.peek().map(|r| r.0.0);
        let follow = self.follow_ups.peek().map(|f| f.arrival);
        match (head, follow) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next request in arrival order (ties: later rounds first, then
    /// clients in spec order).
    pub fn next_generated(&mut self) -> Option<GeneratedRequest> {
        let head = self.heads.peek().map(|r| r.0);
        let follow = self.follow_ups.peek().map(|f| f.arrival);
        let take_follow_up = match (head, follow) {
            (None, None) => return None,
            (Some((a, _)), Some(b)) => b <= a,
            (None, Some(_)) => true,
            (Some(_), None) => false,
        };
        if take_follow_up {
            let f = self.follow_ups.pop()?;
            return Some(self.build(f.client, f.arrival, f.draft));
        }
        let Reverse((arrival, client)) = self.heads.pop()?;
        let i = client as usize;
        let (_, draft) = self.pending[i].take()?;
        self.first_rounds_left -= 1;
        if self.first_rounds_left == 0 {
            self.heads.clear();
        } else {
            let plan = self.clients[i].clone();
            self.pending[i] = self.streams[i].next(&plan);
            if let Some((t, _)) = self.pending[i] {
                self.heads.push(Reverse((t, client)));
            }
        }
        Some(self.build(client, arrival, draft))
    }
}

impl Iterator for Generator {
    type Item = GeneratedRequest;

    fn next(&mut self) -> Option<GeneratedRequest> {
        self.next_generated()
    }
}

impl Workload for Generator {
    fn peek_arrival(&mut self) -> Option<Micros> {
        self.peek()
    }

    fn next_request(&mut self) -> Option<Request> {
        self.next_generated().map(|g| g.request)
    }

    /// Releases a session's next round `think_time` after this one
    /// completed; a session whose round was dropped, timed out or rejected ends.
    fn on_finish(&mut self, record: &RequestRecord) {
        let Some(f) = self.in_flight.remove(&record.id) else { return };
        if record.outcome != Outcome::Completed {
            return;
        }
        let plan = self.clients[f.client as usize].clone();
        let Some(mt) = plan.multi_turn else { return };
        let turn = Turn {
            prompt: &f.prompt,
            output_seed: f.output_seed,
            output_len: f.output_tokens,
            reasoning_tokens: reasoning_tokens(f.reason_ratio, f.output_tokens),
        };
        let draft = plan.next_round(f.k, f.round + 1, &turn, mt.growth);
        self.follow_ups.push(FollowUp { arrival: record.finished + mt.think_time, seq: self.next_seq, client: f.client, draft });
        self.next_seq += 1;
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::plan::Plan;
    use crate::spec::parse;

    fn plan(text: &str) -> Plan {
        parse(text, "t", Path::new(".")).unwrap().plan().unwrap()
    }

    fn client(id: &str, fraction: f64, arrival: &str) -> String {
        format!(
            "  - id: {id}\n    rate_fraction: {fraction}\n    arrival: {arrival}\n    input_distribution: {{type: lognormal, params: {{mu: 5, sigma: 1}}}}\n    output_distribution: {{type: exponential, params: {{mean: 100}}}}\n"
        )
    }

    #[test]
    fn merged_stream_is_ordered_deterministic_and_numbered() {
        let text = format!(
            "aggregate_rate: 50\nnum_requests: 5000\nclients:\n{}{}",
            client("a", 1.0, "{process: gamma, cv: 3}"),
            client("b", 2.0, "{process: poisson}")
        );
        let p = plan(&text);
        let a: Vec<GeneratedRequest> = p.generator().collect();
        assert_eq!(a.len(), 5000);
        assert!(a.windows(2).all(|w| w[0].request.arrival <= w[1].request.arrival));
        assert!(a.iter().enumerate().all(|(i, r)| r.request.id == RequestId(i as u64)));
        assert_eq!(a, p.generator().collect::<Vec<_>>());
        // Rate fractions are normalised: b sends about twice as many as a.
        let b_share = a.iter().filter(|r| r.request.meta.client == 1).count() as f64 / 5000.0;
        assert!((b_share - 2.0 / 3.0).abs() < 0.05, "b share {b_share}");
    }

    #[test]
    fn adding_a_client_never_changes_another_clients_requests() {
        let base = format!("aggregate_rate: 50\nhorizon: 100000000\nclients:\n{}", client("a", 1.0, "{process: weibull, cv: 2}"));
        let with_b = format!("{base}{}", client("b", 1.0, "{process: poisson}"));
        // Same absolute rate for a: double the aggregate when b joins.
        let with_b = with_b.replace("aggregate_rate: 50", "aggregate_rate: 100");
        let only_a = |p: &Plan| -> Vec<(Micros, TokenSeq, u32, u64)> {
            p.generator()
                .filter(|r| p.labels.clients[r.request.meta.client as usize] == "a")
                .map(|r| (r.request.arrival, r.request.prompt, r.request.max_output_tokens, r.request.output_seed))
                .collect()
        };
        let alone = only_a(&plan(&base));
        assert!(alone.len() > 4000);
        assert_eq!(alone, only_a(&plan(&with_b)));
    }

    #[test]
    fn lifecycle_windows_contain_all_arrivals() {
        let text = format!(
            "aggregate_rate: 200\nclients:\n{}    lifecycle:\n      windows:\n        - {{start_us: 1000000, end_us: 3000000}}\n        - {{start_us: 5000000, end_us: 5500000, rate_scale: 4, arrival: {{process: gamma, cv: 2}}}}\n        - {{start_us: 9000000, end_us: 12000000}}\n",
            client("a", 1.0, "{process: poisson, bursty: {interval_us: 700000, duration_us: 100000}}")
        );
        let p = plan(&text);
        let times: Vec<u64> = p.generator().map(|r| r.request.arrival.as_us()).collect();
        let windows = [(1_000_000, 3_000_000), (5_000_000, 5_500_000), (9_000_000, 12_000_000)];
        assert!(times.iter().all(|t| windows.iter().any(|&(s, e)| (s..e).contains(t))), "arrival outside every window");
        // Every window got traffic. The short one runs at 4x the rate and
        // lies between spikes, where the bursty base level is 1/(1 + 9·0.1/0.7)
        // = 0.4375: 200/s · 4 · 0.4375 · 0.5 s = 175 expected; gamma CV 2
        // gives a count sd of about √(175·4) ≈ 26, so 100..250 is a ~3σ band.
        for (s, e) in windows {
            assert!(times.iter().any(|t| (s..e).contains(t)), "window {s}..{e} empty");
        }
        let short = times.iter().filter(|t| (5_000_000..5_500_000).contains(*t)).count();
        assert!((100..250).contains(&short), "{short} arrivals in the 4x window");
    }

    /// Index of dispersion of counts in 1 s windows (variance / mean): 1 for
    /// Poisson, about CV² for a renewal process with gaps of CV > 1. With
    /// 2000 windows of mean 100 the Poisson estimate has a standard error
    /// of ≈ 1·√(2/1999) ≈ 0.03, so [0.85, 1.15] is a 5σ band; gamma and
    /// Weibull with CV 3 give ≈ 9, far above the bound of 3.
    #[test]
    fn gamma_and_weibull_with_cv_above_one_are_burstier_than_poisson() {
        let idc = |arrival: &str| {
            let p = plan(&format!("aggregate_rate: 100\nhorizon: 2000000000\nclients:\n{}", client("a", 1.0, arrival)));
            let mut counts = vec![0f64; 2000];
            for r in p.generator() {
                counts[(r.request.arrival.as_us() / 1_000_000) as usize] += 1.0;
            }
            let m = counts.iter().sum::<f64>() / counts.len() as f64;
            counts.iter().map(|c| (c - m).powi(2)).sum::<f64>() / (counts.len() - 1) as f64 / m
        };
        let poisson = idc("{process: poisson}");
        assert!((0.85..1.15).contains(&poisson), "poisson IDC {poisson}");
        for arrival in ["{process: gamma, cv: 3}", "{process: weibull, cv: 3}"] {
            let d = idc(arrival);
            assert!(d > 3.0, "{arrival}: IDC {d}");
        }
        assert!(idc("{process: constant}") < 0.05);
    }

    /// Bursty spikes carry `multiplier` times the base rate and the mean rate
    /// is preserved; the diurnal cycle's peak hour carries about 10x the
    /// trough hour. Counts are in the thousands, so Poisson noise is a few
    /// percent and the bounds below are several standard deviations wide.
    #[test]
    fn modulated_rates_follow_their_profiles() {
        let b = plan(&format!(
            "aggregate_rate: 100\nhorizon: 600000000\nclients:\n{}",
            client("a", 1.0, "{process: poisson, bursty: {interval_us: 60000000, duration_us: 5000000, multiplier: 10}}")
        ));
        let times: Vec<u64> = b.generator().map(|r| r.request.arrival.as_us()).collect();
        let in_spike = times.iter().filter(|&&t| t % 60_000_000 < 5_000_000).count() as f64;
        let outside = times.len() as f64 - in_spike;
        let ratio = (in_spike / 50.0) / (outside / 550.0); // per-second rates
        assert!((8.5..11.5).contains(&ratio), "spike/base rate ratio {ratio}");
        assert!((times.len() as f64 / 60_000.0 - 1.0).abs() < 0.03, "mean rate off: {} requests", times.len());

        let d = plan(&format!(
            "aggregate_rate: 20\nhorizon: 86400000000\nclients:\n{}",
            client("a", 1.0, "{process: poisson, diurnal: {peak_to_trough: 10, peak_at_us: 43200000000}}")
        ));
        let mut per_hour = [0f64; 24];
        for r in d.generator() {
            per_hour[(r.request.arrival.as_us() / 3_600_000_000) as usize] += 1.0;
        }
        // Hours 11-12 and 23-0 straddle peak and trough: compare 11+12 with 23+0.
        let ratio = (per_hour[11] + per_hour[12]) / (per_hour[23] + per_hour[0]);
        assert!((7.5..11.0).contains(&ratio), "peak/trough ratio {ratio}: {per_hour:?}");
    }

    #[test]
    fn num_requests_and_horizon_bound_the_stream() {
        let p = plan(&format!(
            "aggregate_rate: 10\nhorizon: 5000000\nnum_requests: 1000000\nclients:\n{}",
            client("a", 1.0, "{process: poisson}")
        ));
        let n = p.generator().count();
        assert!((25..=80).contains(&n), "{n} requests in 5 s at 10/s");
        assert!(p.generator().all(|r| r.request.arrival < Micros(5_000_000)));
    }
}
