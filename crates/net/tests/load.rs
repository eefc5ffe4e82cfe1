//! The load generator against `blis serve` as a real peer.

use std::sync::Arc;
use std::time::Duration;

use blis_engine::latency::Blackbox;
use blis_engine::scheduler::InstanceConfig;
use blis_net::client::{ExchangeStatus, PromptContent, RunClock, Target};
use blis_net::load::{Outcome, Plan, Planned, Sink, run};
use blis_net::serve::openai::Api;
use blis_net::serve::{ServeConfig, start};
use tokio::sync::oneshot;

async fn server(failure_rate: f64) -> blis_net::serve::RunningServer {
    let config = ServeConfig {
        model_name: "m".into(),
        instance: InstanceConfig::basic(32, 2048, 4096, 4000),
        latency: Arc::new(Blackbox { alpha: [10_000.0, 0.0, 0.0], beta: [4_000.0, 5.0, 50.0] }),
        time_scale: 200.0,
        failure_rate,
        seed: 1,
        natural_output: None,
        max_body_bytes: 1 << 20,
        timeouts: Default::default(),
        kv_events: None,
    };
    start(config, "127.0.0.1:0".parse().unwrap()).await.unwrap()
}

fn http() -> reqwest::Client {
    blis_net::client::http_builder("http://").build().unwrap()
}

fn target(base: String) -> Arc<Target> {
    Arc::new(Target {
        base_url: base,
        model: "m".into(),
        api: Api::Completions,
        api_key: None,
        streaming: true,
        timeout: Duration::from_secs(30),
    })
}

/// A fixed list of requests, optionally with a follow-up round per request
/// released only when the first round finishes.
struct ListPlan {
    items: std::vec::IntoIter<Planned<(u32, u32)>>,
    follow_ups: bool,
    released: Vec<Planned<(u32, u32)>>,
    outstanding: usize,
}

impl ListPlan {
    fn new(n: u32, gap_us: u64, follow_ups: bool) -> ListPlan {
        let items: Vec<_> = (0..n)
            .map(|i| Planned {
                arrival_us: u64::from(i) * gap_us,
                prompt: PromptContent::TokenIds(vec![7; 32]),
                max_tokens: 8,
                meta: (i, 0),
            })
            .collect();
        ListPlan { items: items.into_iter(), follow_ups, released: Vec::new(), outstanding: if follow_ups { n as usize } else { 0 } }
    }
}

impl ListPlan {
    /// Released follow-ups first (their send time is "now"), then the list.
    fn head(&mut self) -> Option<&Planned<(u32, u32)>> {
        if self.released.is_empty() {
            self.released.extend(self.items.next());
        }
        self.released.last()
    }
}

impl Plan<(u32, u32)> for ListPlan {
    fn peek(&mut self) -> Option<u64> {
        self.head().map(|p| p.arrival_us)
    }
    fn take(&mut self) -> Option<Planned<(u32, u32)>> {
        self.head()?;
        self.released.pop()
    }
    fn pending(&self) -> bool {
        self.outstanding > 0
    }
    fn on_result(&mut self, o: &Outcome<(u32, u32)>, now_us: u64) {
        if self.follow_ups && o.planned.meta.1 == 0 {
            self.outstanding -= 1;
            let mut next = o.planned.clone();
            next.meta.1 = 1;
            next.arrival_us = now_us; // think time 0: send as soon as the answer is in
            self.released.push(next);
        }
    }
}

#[derive(Default)]
struct Collect {
    outcomes: Vec<Outcome<(u32, u32)>>,
    stop_after: Option<(usize, oneshot::Sender<()>)>,
}

impl Sink<(u32, u32)> for Collect {
    fn record(&mut self, o: &Outcome<(u32, u32)>) -> std::io::Result<()> {
        self.outcomes.push(o.clone());
        if self.stop_after.as_ref().is_some_and(|(n, _)| self.outcomes.len() >= *n)
            && let Some((_, tx)) = self.stop_after.take()
        {
            let _ = tx.send(());
        }
        Ok(())
    }
}

#[tokio::test]
async fn every_planned_request_is_sent_once_and_recorded() {
    let srv = server(0.0).await;
    let mut plan = ListPlan::new(40, 25_000, false);
    let mut sink = Collect::default();
    let summary = run(
        &mut plan,
        http(),
        target(format!("http://{}", srv.local_addr)),
        8,
        RunClock::start(),
        &mut sink,
        Box::pin(std::future::pending()),
    )
    .await
    .unwrap();
    assert_eq!((summary.sent, summary.ok, summary.errors, summary.timeouts), (40, 40, 0, 0));
    let mut ids: Vec<u32> = sink.outcomes.iter().map(|o| o.planned.meta.0).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..40).collect::<Vec<_>>());
    assert_eq!(summary.schedule_delays_us.len(), 40);
    assert!(sink.outcomes.iter().all(|o| o.exchange.usage.unwrap().completion_tokens == 8));
    srv.stop().await.unwrap();
}

#[tokio::test]
async fn follow_up_rounds_are_sent_only_after_the_previous_answer() {
    let srv = server(0.0).await;
    let mut plan = ListPlan::new(10, 10_000, true);
    let mut sink = Collect::default();
    let summary = run(
        &mut plan,
        http(),
        target(format!("http://{}", srv.local_addr)),
        4,
        RunClock::start(),
        &mut sink,
        Box::pin(std::future::pending()),
    )
    .await
    .unwrap();
    assert_eq!(summary.sent, 20);
    for i in 0..10 {
        let round = |r| sink.outcomes.iter().find(|o| o.planned.meta == (i, r)).unwrap();
        assert!(round(1).exchange.send_time_us >= round(0).exchange.last_chunk_time_us.unwrap(), "request {i}");
    }
    srv.stop().await.unwrap();
}

#[tokio::test]
async fn an_interrupted_run_still_records_everything_it_sent() {
    let srv = server(0.3).await;
    let mut plan = ListPlan::new(200, 2_000, false);
    let (tx, rx) = oneshot::channel();
    let mut sink = Collect { stop_after: Some((15, tx)), ..Collect::default() };
    let interrupt = Box::pin(async {
        let _ = rx.await;
    });
    let summary =
        run(&mut plan, http(), target(format!("http://{}", srv.local_addr)), 16, RunClock::start(), &mut sink, interrupt).await.unwrap();
    assert!(summary.interrupted);
    assert!(summary.sent < 200);
    assert_eq!(sink.outcomes.len() as u64, summary.sent, "nothing sent is lost");
    assert_eq!(summary.ok + summary.errors + summary.timeouts, summary.sent);
    // Injected failures are recorded with their status.
    assert!(sink.outcomes.iter().any(|o| o.exchange.status == ExchangeStatus::Error));
    srv.stop().await.unwrap();
}
