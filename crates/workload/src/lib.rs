//! # blis-workload: request streams for BLIS
//!
//! Workloads are lazy, arrival-ordered streams of
//! [`blis_engine::request::Request`]; a run never materialises its
//! requests. Every random draw comes from a stream derived from the workload
//! seed and a subsystem name ([`blis_engine::rng::subsystem_rng`]), so the
//! same seed gives the same requests on every machine.
//!
//! Reading order:
//!
//! * [`source`]: the one entry point, [`open`]: what to run (synthetic flags,
//!   a spec or inference-perf file, a built-in, a trace, a recorded
//!   inference-perf run) and how (overrides, a concurrency cap, label
//!   mixes) become one request stream; every BLIS command reads workloads here.
//! * [`spec`]: the ServeGen-style workload spec language (YAML), strict
//!   parsing and command-line overrides; [`builtin`]: presets and scenarios
//!   written in it.
//! * [`plan`]: validation of a spec into a [`plan::Plan`]; [`dist`] and
//!   [`arrival`] are the samplers it builds, [`empirical`] the PDFs they may
//!   read, [`client`] one client's stream, [`content`] the synthetic token
//!   content that makes prefix groups and multi-turn context share KV blocks.
//! * [`generator`]: the k-way merge of clients plus multi-turn rounds
//!   released on completion (an engine [`blis_engine::driver::Workload`]).
//! * [`network`]: client-perspective latencies.
//! * [`trace_v2`] and [`mooncake`]: trace writing and streaming replay.
//! * [`servegen`]: importing ServeGen data directories; [`compose`]:
//!   merging specs; [`stats`]: what a spec generates, measured.
//! * [`synthetic`]: the flag-driven workload of `blis run`; [`labels`]:
//!   tenant and SLO-class assignment over any request stream
//!   (`--tenant-mix`, `--slo-class-mix`).
//! * [`inference_perf`]: inference-perf's configuration, shared-prefix prompt
//!   set and staged load, as `blis validate` reproduces real runs.
//! * [`limits`]: the bounds every value is checked against.
//!
//! Files are read with `blis_data::textfile`'s bounds.
//!
//! ## Example
//!
//! ```
//! use blis_engine::driver::Workload;
//! use blis_workload::{OpenOptions, WorkloadInput, open, spec::load};
//!
//! let plan = load("preset:chatbot").unwrap().plan().unwrap();
//! let first: Vec<_> = plan.generator().take(3).collect();
//! assert!(first.windows(2).all(|w| w[0].request.arrival <= w[1].request.arrival));
//!
//! // What `blis run --workload preset:chatbot --num-requests 5` streams:
//! let options = OpenOptions { overrides: blis_workload::spec::Overrides { num_requests: Some(5), ..Default::default() }, ..Default::default() };
//! let mut workload = open(&WorkloadInput::Builtin("preset:chatbot".into()), &options).unwrap();
//! assert_eq!(workload.expected_requests, 5);
//! assert!(workload.stream.next_request().is_some());
//! ```

#![warn(missing_docs)]

/// Implements [`RequestSource`] and the engine's `Workload` for a replay
/// that reads ahead: its `fill()` puts the next request in `next` (leaving
/// it empty at the end of the file), and keeps in `error` the first error
/// met after the file was checked (it changed underneath us), where the
/// stream ends.
macro_rules! buffered_replay {
    ($ty:ty) => {
        impl $crate::RequestSource for $ty {
            fn take_error(&mut self) -> Option<$crate::error::WorkloadError> {
                self.error.take()
            }
        }

        impl blis_engine::driver::Workload for $ty {
            fn peek_arrival(&mut self) -> Option<blis_engine::time::Micros> {
                self.fill();
                self.next.as_ref().map(|r| r.arrival)
            }

            fn next_request(&mut self) -> Option<blis_engine::request::Request> {
                self.fill();
                self.next.take()
            }
        }
    };
}
pub(crate) use buffered_replay;

pub mod arrival;
pub mod builtin;
pub mod client;
pub mod compose;
pub mod concurrency;
pub mod content;
pub mod dist;
pub mod empirical;
pub mod error;
pub mod generator;
pub mod inference_perf;
pub mod io_distribution;
pub mod labels;
pub mod limits;
pub mod mooncake;
pub mod network;
pub mod plan;
pub mod servegen;
pub mod source;
pub mod spec;
pub mod stats;
pub mod synthetic;
pub mod trace_v2;

pub use source::{OpenOptions, Opened, OpenedWorkload, WorkloadInput, open};

/// A request stream that may end early on an error it meets while
/// streaming (a trace file that changed after it was checked). Callers
/// check [`RequestSource::take_error`] after the run.
pub trait RequestSource: blis_engine::driver::Workload {
    /// The error that ended the stream, if one did.
    fn take_error(&mut self) -> Option<error::WorkloadError>;
}

/// A request source that ends with [`error::WorkloadError::ArrivalPastSpan`]
/// at the first request arriving after
/// [`Micros::MAX_SPAN`](blis_engine::time::Micros::MAX_SPAN), instead of
/// letting saturated arrivals run as zero-latency requests at the end of time.
pub struct WithinSpan {
    inner: Box<dyn RequestSource>,
    error: Option<error::WorkloadError>,
}

impl WithinSpan {
    /// Wraps `inner`.
    pub fn new(inner: Box<dyn RequestSource>) -> WithinSpan {
        WithinSpan { inner, error: None }
    }
}

impl blis_engine::driver::Workload for WithinSpan {
    fn peek_arrival(&mut self) -> Option<blis_engine::time::Micros> {
        if self.error.is_some() {
            return None;
        }
        let t = self.inner.peek_arrival()?;
        if t <= blis_engine::time::Micros::MAX_SPAN {
            return Some(t);
        }
        let request = self.inner.next_request().map_or(u64::MAX, |r| r.id.0);
        self.error = error::WorkloadError::past_span(request, t);
        None
    }

    fn next_request(&mut self) -> Option<blis_engine::request::Request> {
        self.peek_arrival()?;
        self.inner.next_request()
    }

    fn on_finish(&mut self, record: &blis_engine::request::RequestRecord) {
        self.inner.on_finish(record);
    }
}

impl RequestSource for WithinSpan {
    fn take_error(&mut self) -> Option<error::WorkloadError> {
        self.error.take().or_else(|| self.inner.take_error())
    }
}

impl RequestSource for inference_perf::StagedWorkload {
    fn take_error(&mut self) -> Option<error::WorkloadError> {
        None
    }
}

impl RequestSource for generator::Generator {
    fn take_error(&mut self) -> Option<error::WorkloadError> {
        None
    }
}

impl<I: Iterator<Item = blis_engine::request::Request>> RequestSource for blis_engine::driver::IterWorkload<I> {
    fn take_error(&mut self) -> Option<error::WorkloadError> {
        None
    }
}
