//! Turning a parsed spec into a [`Plan`]: every value checked (finite,
//! in range, consistent), rate fractions normalised, samplers built, labels
//! interned. A plan is immutable; [`Plan::generator`] streams its requests.

use std::collections::BTreeMap;
use std::sync::Arc;

use blis_engine::request::{Labels, SloClassId, TenantId, TokenRun};
use blis_engine::rng::subsystem_seed;
use blis_engine::time::Micros;

use crate::arrival::{Bursty, Diurnal, Modulation, Process};
use crate::client::{ClientPlan, Draws, Modality, ModalityPlan, MultiTurn, WindowPlan};
use crate::content::{ClientContent, prefix_run};
use crate::dist::{Empirical, MAX_TOKENS, Sampler, Shape};
use crate::empirical::{FileCache, Pdf};
use crate::error::WorkloadError;
use crate::generator::Generator;
use crate::limits::{MAX_ITEMS, MAX_PREFIX_TOKENS, MAX_RATE_PER_S, MAX_REQUESTS, MAX_ROUNDS, fmt_num};
use crate::network::NetworkModel;
use crate::spec::{ArrivalSpec, Category, ClientSpec, ContextGrowth, DistKind, DistSpec, LoadedSpec, Overrides, ProcessKind, WorkloadSpec};
use crate::synthetic::{ArrivalProcess, SyntheticSpec};

/// The client name of the synthetic workload.
pub const SYNTHETIC_CLIENT: &str = "synthetic";
/// Default seed of a spec without `seed`.
pub const DEFAULT_SEED: u64 = 42;

/// A validated workload, ready to generate.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Clients with a non-zero rate, in spec order; index = `RequestMeta::client`.
    pub clients: Vec<Arc<ClientPlan>>,
    /// Names of clients, tenants and SLO classes.
    pub labels: Labels,
    /// Stop after this many requests from the arrival processes.
    pub num_requests: Option<u64>,
    /// Stop arrivals at this time.
    pub horizon: Option<Micros>,
    /// Master seed.
    pub seed: u64,
    /// Mean total rate, requests per second.
    pub aggregate_rate: f64,
    /// Workload family.
    pub category: Category,
    /// Things worth telling the user (clients skipped, ...), one line each.
    pub warnings: Vec<String>,
}

impl Plan {
    /// A fresh lazy generator of this plan's requests.
    pub fn generator(&self) -> Generator {
        Generator::new(&self.clients, self.num_requests)
    }

    /// The plan of the flag-described synthetic workload: one client,
    /// `synthetic`, whose requests are exactly [`SyntheticSpec::generate`]'s.
    /// Call [`SyntheticSpec::validate`] first.
    pub fn synthetic(spec: &SyntheticSpec) -> Plan {
        let process = match spec.arrival {
            ArrivalProcess::Poisson => Process::Poisson,
            ArrivalProcess::Constant => Process::Constant,
        };
        let client = ClientPlan {
            id: SYNTHETIC_CLIENT.into(),
            index: 0,
            tenant: TenantId(0),
            slo_class: SloClassId(0),
            rate_per_us: spec.rate_per_s / 1e6,
            process,
            modulation: Modulation::None,
            windows: vec![WindowPlan { start_us: 0.0, end_us: f64::INFINITY, rate_scale: 1.0, process: None, input: None, output: None }],
            input: spec.prompt.sampler(),
            output: spec.output.sampler(),
            prefixes: spec.prefixes(),
            streaming: true,
            network: None,
            modalities: Vec::new(),
            reason_ratio: None,
            multi_turn: None,
            content: ClientContent::new(SYNTHETIC_CLIENT),
            arrival_seed: subsystem_seed(spec.seed, "workload/arrivals"),
            length_seed: subsystem_seed(spec.seed, "workload/lengths"),
            session_seed: subsystem_seed(spec.seed, "workload/sessions"),
            draws: Draws::Synthetic(spec.clone()),
        };
        Plan {
            clients: vec![Arc::new(client)],
            labels: Labels { clients: vec![SYNTHETIC_CLIENT.into()], tenants: vec!["default".into()], slo_classes: vec!["default".into()] },
            num_requests: Some(spec.num_requests),
            horizon: None,
            seed: spec.seed,
            aggregate_rate: spec.rate_per_s,
            category: Category::default(),
            warnings: Vec::new(),
        }
    }

    /// Network model of each client (by index), where one is given.
    pub fn networks(&self) -> Vec<Option<NetworkModel>> {
        self.clients.iter().map(|c| c.network).collect()
    }

    /// When the last client stops sending first rounds: the end of the
    /// latest lifecycle window (windows are cut at the horizon); `None`
    /// when a client never stops.
    pub fn arrivals_end(&self) -> Option<Micros> {
        let ends = self.clients.iter().flat_map(|c| c.windows.last()).map(|w| w.end_us);
        ends.map(|e| e.is_finite().then(|| Micros::from_us_f64(e).unwrap_or(Micros::MAX))).collect::<Option<Vec<_>>>()?.into_iter().max()
    }

    /// Whether any client is multi-turn (its later rounds are released by completions).
    pub fn has_sessions(&self) -> bool {
        self.clients.iter().any(|c| c.multi_turn.is_some())
    }

    /// Requests the arrival processes are expected to send: `num_requests`,
    /// or rate × horizon, whichever is smaller.
    pub fn expected_requests(&self) -> u64 {
        let by_time = self.horizon.map(|h| (self.aggregate_rate * h.as_secs_f64()).ceil() as u64);
        match (self.num_requests, by_time) {
            (Some(n), Some(t)) => n.min(t),
            (Some(n), None) => n,
            (None, Some(t)) => t,
            (None, None) => 0,
        }
    }
}

/// Where errors point: the spec's name and the key path being checked.
struct Ctx {
    source: String,
    base: std::path::PathBuf,
    files: FileCache,
    samplers: BTreeMap<(std::path::PathBuf, String, Option<u64>, Role), Arc<Empirical>>,
    /// What the plan adjusted without refusing it.
    warnings: Vec<String>,
}

impl Ctx {
    fn err<T>(&self, path: &str, message: impl Into<String>) -> Result<T, WorkloadError> {
        Err(WorkloadError::spec(&self.source, path, message))
    }

    fn check(&self, ok: bool, path: &str, message: impl Into<String>) -> Result<(), WorkloadError> {
        if ok { Ok(()) } else { self.err(path, message) }
    }
}

/// What a sampled quantity is, which sets its default range.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    /// Token lengths: whole numbers ≥ 1.
    Length,
    /// Token counts that may be 0 (tokens per image, ...).
    Tokens,
    /// Items per request (images, ...): whole numbers in [0, 10 000].
    Items,
    /// Ratios in [0, 1].
    Ratio,
}

impl Role {
    fn range(self) -> (f64, f64) {
        match self {
            Role::Length => (1.0, MAX_TOKENS),
            Role::Tokens => (0.0, MAX_TOKENS),
            Role::Items => (0.0, MAX_ITEMS),
            Role::Ratio => (0.0, 1.0),
        }
    }

    fn describe(self) -> String {
        let (lo, hi) = self.range();
        let what = match self {
            Role::Length => "a token length",
            Role::Tokens => "a token count",
            Role::Items => "an item count",
            Role::Ratio => "a ratio",
        };
        format!("{what} in [{lo}, {hi}]")
    }
}

fn build_sampler(ctx: &mut Ctx, d: &DistSpec, path: &str, role: Role) -> Result<Sampler, WorkloadError> {
    let (required, optional) = d.kind.params();
    for (k, v) in &d.params {
        let p = format!("{path}.params.{k}");
        if !required.contains(&k.as_str()) && !optional.contains(&k.as_str()) {
            let allowed: Vec<&str> = required.iter().chain(optional).copied().collect();
            let allowed = if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") };
            return ctx.err(&p, format!("unknown parameter for {}; allowed: {allowed}", kind_name(d.kind)));
        }
        ctx.check(v.is_finite(), &p, format!("{} is not a finite number", fmt_num(*v)))?;
    }
    for k in required {
        if !d.params.contains_key(*k) {
            return ctx.err(&format!("{path}.params.{k}"), format!("missing; {} needs {}", kind_name(d.kind), required.join(", ")));
        }
    }
    if d.kind != DistKind::Empirical {
        for (key, given) in
            [("pdf", d.pdf.is_some()), ("file", d.file.is_some()), ("field", d.field.is_some()), ("window", d.window.is_some())]
        {
            ctx.check(!given, &format!("{path}.{key}"), "only for type empirical")?;
        }
    }
    let p = |k: &str| d.params.get(k).copied().unwrap_or(f64::NAN);
    let (lo, hi) = role.range();
    let min = d.params.get("min").copied().unwrap_or(lo);
    let max = d.params.get("max").copied().unwrap_or(hi);
    ctx.check(
        min >= lo,
        &format!("{path}.params.min"),
        format!("{} is below the smallest allowed value: must be {}", fmt_num(min), role.describe()),
    )?;
    ctx.check(max <= hi, &format!("{path}.params.max"), format!("{} is above the largest allowed value {}", fmt_num(max), fmt_num(hi)))?;
    ctx.check(min <= max, &format!("{path}.params.max"), format!("{} is below min {}", fmt_num(max), fmt_num(min)))?;
    let positive = |ctx: &Ctx, k: &str| ctx.check(p(k) > 0.0, &format!("{path}.params.{k}"), format!("{} must be > 0", fmt_num(p(k))));
    let non_negative = |ctx: &Ctx, k: &str| ctx.check(p(k) >= 0.0, &format!("{path}.params.{k}"), format!("{} must be ≥ 0", fmt_num(p(k))));
    let shape = match d.kind {
        DistKind::ParetoLognormal => {
            positive(ctx, "alpha")?;
            positive(ctx, "xm")?;
            non_negative(ctx, "sigma")?;
            let w = p("mix_weight");
            ctx.check((0.0..=1.0).contains(&w), &format!("{path}.params.mix_weight"), format!("{} must be in [0, 1]", fmt_num(w)))?;
            Shape::ParetoLogNormal { alpha: p("alpha"), xm: p("xm"), mu: p("mu"), sigma: p("sigma"), mix_weight: w }
        }
        DistKind::Exponential => {
            positive(ctx, "mean")?;
            Shape::Exponential { mean: p("mean") }
        }
        DistKind::Gaussian => {
            non_negative(ctx, "std_dev")?;
            Shape::Gaussian { mean: p("mean"), std_dev: p("std_dev") }
        }
        DistKind::Lognormal => {
            non_negative(ctx, "sigma")?;
            Shape::LogNormal { mu: p("mu"), sigma: p("sigma") }
        }
        DistKind::Constant => {
            let v = p("value");
            ctx.check((lo..=hi).contains(&v), &format!("{path}.params.value"), format!("{} must be {}", fmt_num(v), role.describe()))?;
            Shape::Constant { value: v }
        }
        DistKind::Empirical => Shape::Empirical(empirical_sampler(ctx, d, path, role)?),
    };
    Ok(Sampler { shape, min, max })
}

fn kind_name(k: DistKind) -> String {
    serde_yaml_ng::to_string(&k).unwrap_or_default().trim().to_string()
}

/// The sampler of an empirical spec. Samplers read from files are built
/// once per (file, field, window, role) and shared: an imported ServeGen
/// spec references the same dataset window from many lifecycle windows.
fn empirical_sampler(ctx: &mut Ctx, d: &DistSpec, path: &str, role: Role) -> Result<Arc<Empirical>, WorkloadError> {
    let key = d.file.as_ref().map(|f| (ctx.base.join(f), d.field.clone().unwrap_or_default(), d.window, role));
    if let Some(e) = key.as_ref().and_then(|k| ctx.samplers.get(k)) {
        return Ok(e.clone());
    }
    let e = Arc::new(Empirical::new(&empirical_pdf(ctx, d, path, role)?));
    if let Some(k) = key {
        ctx.samplers.insert(k, e.clone());
    }
    Ok(e)
}

fn empirical_pdf(ctx: &mut Ctx, d: &DistSpec, path: &str, role: Role) -> Result<Pdf, WorkloadError> {
    let pdf = match (&d.pdf, &d.file) {
        (Some(_), Some(_)) => return ctx.err(&format!("{path}.file"), "give either `pdf` or `file`, not both"),
        (None, None) => return ctx.err(path, "empirical needs `pdf: {value: probability, ...}` or `file: PATH`"),
        (Some(p), None) => {
            ctx.check(d.field.is_none(), &format!("{path}.field"), "only with `file` (a ServeGen dataset)")?;
            ctx.check(d.window.is_none(), &format!("{path}.window"), "only with `file` and `field` (a ServeGen dataset)")?;
            p.clone()
        }
        (None, Some(f)) => {
            let file = ctx.base.join(f);
            match &d.field {
                None => {
                    ctx.check(d.window.is_none(), &format!("{path}.window"), "only with `field` (a ServeGen dataset)")?;
                    (*ctx.files.pdf(&file)?).clone()
                }
                Some(field) => {
                    let ds = ctx.files.dataset(&file)?;
                    let window = match d.window {
                        Some(w) => w,
                        None => match ds.windows.keys().next() {
                            Some(&w) => w,
                            None => return ctx.err(&format!("{path}.file"), format!("{} has no non-empty window", file.display())),
                        },
                    };
                    let Some(fields) = ds.windows.get(&window) else {
                        let have: Vec<String> = ds.windows.keys().take(8).map(u64::to_string).collect();
                        return ctx.err(
                            &format!("{path}.window"),
                            format!("{} has no window {window}; windows start at {}…", file.display(), have.join(", ")),
                        );
                    };
                    let Some(pdf) = fields.get(field) else {
                        let have: Vec<&str> = fields.keys().map(String::as_str).collect();
                        return ctx.err(
                            &format!("{path}.field"),
                            format!("{} window {window} has no field {field:?}; fields: {}", file.display(), have.join(", ")),
                        );
                    };
                    servegen_values(pdf, role)
                }
            }
        }
    };
    pdf.check().or_else(|e| ctx.err(path, e))?;
    let (lo, hi) = role.range();
    let is_outside = |&&(x, p): &&(f64, f64)| p > 0.0 && !(lo..=hi).contains(&x);
    let outside: f64 = pdf.0.iter().filter(is_outside).map(|p| p.1).sum();
    if outside > 0.0 {
        let total: f64 = pdf.0.iter().map(|p| p.1).sum();
        let message =
            format!("{:.3} % of the probability lies outside {}, and is clamped into it", 100.0 * outside / total, role.describe());
        match &d.file {
            // A dataset is data: its edge values are kept, clamped, and the user told.
            Some(f) => ctx.warnings.push(format!("{}: {path} ({}): {message}", ctx.source, f.display())),
            // A hand-written distribution with such a value is a mistake.
            None => {
                let (x, _) = pdf.0.iter().find(is_outside).copied().unwrap_or_default();
                return ctx.err(&format!("{path}.pdf"), format!("value {} must be {}", fmt_num(x), role.describe()));
            }
        }
    }
    Ok(pdf)
}

/// ServeGen ratio PDFs with integer keys are bins over [0, 1]: value =
/// key / largest key, as ServeGen's sampler reads them.
fn servegen_values(pdf: &Pdf, role: Role) -> Pdf {
    let integral = pdf.0.iter().all(|p| p.0.fract() == 0.0);
    let top = pdf.0.iter().map(|p| p.0).fold(0.0, f64::max);
    if role == Role::Ratio && integral && top > 1.0 { Pdf(pdf.0.iter().map(|&(k, v)| (k / top, v)).collect()) } else { pdf.clone() }
}

fn build_process(ctx: &Ctx, a: &ArrivalSpec, path: &str) -> Result<Process, WorkloadError> {
    let kind = a.process.unwrap_or(ProcessKind::Poisson);
    let cv_path = format!("{path}.cv");
    match (kind, a.cv) {
        (ProcessKind::Poisson | ProcessKind::Constant, Some(_)) => {
            ctx.err(&cv_path, "applies to gamma and weibull only (poisson has CV 1, constant CV 0)")
        }
        (ProcessKind::Poisson, None) => Ok(Process::Poisson),
        (ProcessKind::Constant, None) => Ok(Process::Constant),
        (ProcessKind::Gamma | ProcessKind::Weibull, None) => ctx.err(&cv_path, "missing; gamma and weibull need the CV of their gaps"),
        (ProcessKind::Gamma, Some(cv)) => {
            ctx.check(cv.is_finite() && cv > 0.0 && cv <= 100.0, &cv_path, format!("{} must be in (0, 100]", fmt_num(cv)))?;
            Process::gamma(cv).map_or_else(
                || ctx.err(&cv_path, format!("{}: too small for a gamma distribution (its shape 1/cv² overflows); for evenly spaced arrivals use process: constant", fmt_num(cv))),
                Ok,
            )
        }
        (ProcessKind::Weibull, Some(cv)) => {
            ctx.check(cv.is_finite() && (0.01..=100.0).contains(&cv), &cv_path, format!("{} must be in [0.01, 100]", fmt_num(cv)))?;
            Process::weibull(cv).map_or_else(|| ctx.err(&cv_path, "cannot build a weibull distribution"), Ok)
        }
    }
}

fn build_modulation(ctx: &Ctx, a: &ArrivalSpec, path: &str) -> Result<Modulation, WorkloadError> {
    match (&a.bursty, &a.diurnal) {
        (Some(_), Some(_)) => ctx.err(&format!("{path}.diurnal"), "give either bursty or diurnal, not both"),
        (None, None) => Ok(Modulation::None),
        (Some(b), None) => {
            let p = format!("{path}.bursty");
            ctx.check(b.interval_us > 0, &format!("{p}.interval_us"), "must be > 0")?;
            ctx.check(
                b.duration_us > 0 && b.duration_us < b.interval_us,
                &format!("{p}.duration_us"),
                format!("{} must be in (0, interval_us)", b.duration_us),
            )?;
            let m = b.multiplier.unwrap_or(10.0);
            ctx.check(
                m.is_finite() && (1.0..=1e6).contains(&m),
                &format!("{p}.multiplier"),
                format!("{} must be in [1, 1e6]", fmt_num(m)),
            )?;
            let off = b.offset_us.unwrap_or(0);
            ctx.check(off < b.interval_us, &format!("{p}.offset_us"), format!("{off} must be < interval_us"))?;
            Ok(Modulation::Bursty(Bursty::new(b.interval_us as f64, b.duration_us as f64, m, off as f64)))
        }
        (None, Some(d)) => {
            let p = format!("{path}.diurnal");
            let period = d.period_us.unwrap_or(86_400_000_000);
            ctx.check(period > 0, &format!("{p}.period_us"), "must be > 0")?;
            let r = d.peak_to_trough;
            ctx.check(
                r.is_finite() && (1.0..=1e6).contains(&r),
                &format!("{p}.peak_to_trough"),
                format!("{} must be in [1, 1e6]", fmt_num(r)),
            )?;
            Ok(Modulation::Diurnal(Diurnal::new(period as f64, r, d.peak_at_us.unwrap_or(period / 2) as f64)))
        }
    }
}

fn intern(names: &mut Vec<String>, name: &str) -> usize {
    names.iter().position(|n| n == name).unwrap_or_else(|| {
        names.push(name.to_string());
        names.len() - 1
    })
}

impl LoadedSpec {
    /// Validates the spec and builds its plan. The first problem found is
    /// returned, naming its key path.
    pub fn plan(&self) -> Result<Plan, WorkloadError> {
        let mut ctx = Ctx {
            source: self.source_name.clone(),
            base: self.base_dir.clone(),
            files: FileCache::default(),
            samplers: BTreeMap::new(),
            warnings: Vec::new(),
        };
        build(&mut ctx, &self.spec)
    }

    /// Applies `o` and plans the spec; a refused value that `o` put there is
    /// [`WorkloadError::Overridden`], blaming the flag instead of the file.
    pub fn plan_with(&mut self, o: &Overrides) -> Result<Plan, WorkloadError> {
        self.apply(o);
        self.plan().map_err(|e| match e {
            WorkloadError::Spec { key_path, message, .. } if key_path == "aggregate_rate" && o.aggregate_rate.is_some() => {
                WorkloadError::Overridden { flag: "rate", message }
            }
            WorkloadError::Spec { key_path, message, .. } if key_path == "num_requests" && o.num_requests.is_some() => {
                WorkloadError::Overridden { flag: "num-requests", message }
            }
            e => e,
        })
    }
}

fn build(ctx: &mut Ctx, s: &WorkloadSpec) -> Result<Plan, WorkloadError> {
    if let Some(v) = &s.version {
        ctx.check(v == "1", "version", format!("{v:?} is not supported; allowed: \"1\""))?;
    }
    let seed = s.seed.unwrap_or(DEFAULT_SEED);
    let category = s.category.unwrap_or_default();
    let Some(rate) = s.aggregate_rate else {
        return ctx.err("aggregate_rate", "missing; set the mean total rate in requests per second (or pass --rate)");
    };
    ctx.check(
        rate.is_finite() && rate > 0.0 && rate <= MAX_RATE_PER_S,
        "aggregate_rate",
        format!("{} must be in (0, {MAX_RATE_PER_S}] requests per second", fmt_num(rate)),
    )?;
    if let Some(n) = s.num_requests {
        ctx.check((1..=MAX_REQUESTS).contains(&n), "num_requests", format!("{n} must be in [1, 1e12]"))?;
    }
    if let Some(h) = s.horizon {
        ctx.check(
            (1..=Micros::MAX_SPAN.as_us()).contains(&h),
            "horizon",
            format!("{h} µs must be in [1, 1e14] µs (1e8 s, the simulated clock's limit)"),
        )?;
    }
    ctx.check(!s.clients.is_empty(), "clients", "at least one client is needed")?;

    let mut total_fraction = 0.0;
    let mut first_with_id: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, c) in s.clients.iter().enumerate() {
        let p = format!("clients[{i}]");
        ctx.check(!c.id.trim().is_empty(), &format!("{p}.id"), "must not be empty")?;
        if let Some(j) = first_with_id.insert(&c.id, i) {
            return ctx.err(&format!("{p}.id"), format!("{:?} is also the id of clients[{j}]; ids must be unique", c.id));
        }
        let f = c.rate_fraction.unwrap_or(1.0);
        ctx.check(f.is_finite() && f >= 0.0, &format!("{p}.rate_fraction"), format!("{} must be a finite number ≥ 0", fmt_num(f)))?;
        total_fraction += f;
    }
    ctx.check(total_fraction > 0.0, "clients", "every client has rate_fraction 0; at least one must be > 0")?;

    let mut labels = Labels::default();
    let mut prefix_lengths: BTreeMap<&str, (u32, usize)> = BTreeMap::new();
    let mut clients = Vec::new();
    let horizon_us = s.horizon.map_or(f64::INFINITY, |h| h as f64);
    for (i, c) in s.clients.iter().enumerate() {
        let p = format!("clients[{i}]");
        let fraction = c.rate_fraction.unwrap_or(1.0);
        if fraction == 0.0 {
            let warning = format!("{}: {p} ({}) has rate_fraction 0 and is skipped", ctx.source, c.id);
            ctx.warnings.push(warning);
            continue;
        }
        let index = clients.len() as u32;
        labels.clients.push(c.id.clone());
        let tenant = TenantId(intern(&mut labels.tenants, c.tenant_id.as_deref().unwrap_or("default")) as u32);
        let slo_index = intern(&mut labels.slo_classes, c.slo_class.as_deref().unwrap_or("default"));
        ctx.check(slo_index <= usize::from(u16::MAX), &format!("{p}.slo_class"), "too many distinct SLO classes")?;
        let client_seed = c.seed.unwrap_or(seed);

        let arrival = c.arrival.clone().unwrap_or_default();
        let process = build_process(ctx, &arrival, &format!("{p}.arrival"))?;
        let modulation = build_modulation(ctx, &arrival, &format!("{p}.arrival"))?;

        let (input, output) = build_lengths(ctx, c, &p)?;
        let prefix = build_prefix(ctx, c, &p, i, &mut prefix_lengths)?;
        let network = build_network(ctx, c, &p)?;
        let windows = build_windows(ctx, c, &p, horizon_us)?;
        let modalities = build_modalities(ctx, c, &p, category)?;
        let (reason_ratio, multi_turn) = build_reasoning(ctx, c, &p, category)?;
        clients.push(Arc::new(ClientPlan {
            id: c.id.clone(),
            index,
            tenant,
            slo_class: SloClassId(slo_index as u16),
            rate_per_us: rate * fraction / total_fraction / 1e6,
            process,
            modulation,
            windows,
            input,
            output,
            prefixes: prefix.into_iter().collect(),
            streaming: c.streaming.unwrap_or(true),
            network,
            modalities,
            reason_ratio,
            multi_turn,
            content: ClientContent::new(&c.id),
            arrival_seed: subsystem_seed(client_seed, &format!("workload/client/{}/arrivals", c.id)),
            length_seed: subsystem_seed(client_seed, &format!("workload/client/{}/lengths", c.id)),
            session_seed: subsystem_seed(client_seed, &format!("workload/client/{}/sessions", c.id)),
            draws: Draws::Spec,
        }));
    }
    let bounded = s.num_requests.is_some() || s.horizon.is_some() || clients.iter().all(|c| c.windows.iter().all(|w| w.end_us.is_finite()));
    ctx.check(bounded, ".", "the workload never ends: set num_requests or horizon (or give every client lifecycle windows)")?;
    Ok(Plan {
        clients,
        labels,
        num_requests: s.num_requests,
        horizon: s.horizon.map(Micros),
        seed,
        aggregate_rate: rate,
        category,
        warnings: std::mem::take(&mut ctx.warnings),
    })
}

/// Prompt and output lengths of client `c` (at `p`): `input_distribution`,
/// or `multimodal.text_distribution`, and `output_distribution`.
fn build_lengths(ctx: &mut Ctx, c: &ClientSpec, p: &str) -> Result<(Sampler, Sampler), WorkloadError> {
    // Prompt text: `input_distribution`, or `multimodal.text_distribution`.
    let text_spec = c.multimodal.as_ref().and_then(|m| m.text_distribution.as_ref());
    let input = match (&c.input_distribution, text_spec) {
        (Some(_), Some(_)) => {
            return ctx.err(
                &format!("{p}.multimodal.text_distribution"),
                "give either input_distribution or multimodal.text_distribution, not both",
            );
        }
        (Some(d), None) => build_sampler(ctx, d, &format!("{p}.input_distribution"), Role::Length)?,
        (None, Some(d)) => build_sampler(ctx, d, &format!("{p}.multimodal.text_distribution"), Role::Length)?,
        (None, None) => return ctx.err(&format!("{p}.input_distribution"), "missing; every client needs a prompt-length distribution"),
    };
    let Some(out_spec) = &c.output_distribution else {
        return ctx.err(&format!("{p}.output_distribution"), "missing; every client needs an output-length distribution");
    };
    let output = build_sampler(ctx, out_spec, &format!("{p}.output_distribution"), Role::Length)?;
    Ok((input, output))
}

/// The shared prefix of client `c` (number `i`, at `p`); a group's
/// clients must agree on its length (`prefix_lengths` remembers the first).
fn build_prefix<'s>(
    ctx: &Ctx,
    c: &'s ClientSpec,
    p: &str,
    i: usize,
    prefix_lengths: &mut BTreeMap<&'s str, (u32, usize)>,
) -> Result<Option<(String, TokenRun)>, WorkloadError> {
    Ok(match (&c.prefix_group, c.prefix_length) {
        (None, None) => None,
        (Some(_), None) => return ctx.err(&format!("{p}.prefix_length"), "missing; a prefix_group needs its prefix_length in tokens"),
        (None, Some(_)) => return ctx.err(&format!("{p}.prefix_group"), "missing; prefix_length needs the prefix_group it belongs to"),
        (Some(g), Some(len)) => {
            ctx.check(!g.trim().is_empty(), &format!("{p}.prefix_group"), "must not be empty")?;
            ctx.check(
                (1..=MAX_PREFIX_TOKENS).contains(&len),
                &format!("{p}.prefix_length"),
                format!("{len} must be in [1, {MAX_PREFIX_TOKENS}]"),
            )?;
            if let Some(&(other, j)) = prefix_lengths.get(g.as_str())
                && other != len
            {
                return ctx.err(
                    &format!("{p}.prefix_length"),
                    format!("{len} differs from {other}, the prefix_length of clients[{j}] in the same group {g:?}"),
                );
            }
            prefix_lengths.insert(g, (len, i));
            Some((g.clone(), prefix_run(g, len)))
        }
    })
}

/// The client-side network model of client `c` (at `p`).
fn build_network(ctx: &Ctx, c: &ClientSpec, p: &str) -> Result<Option<NetworkModel>, WorkloadError> {
    Ok(match &c.network {
        None => None,
        Some(n) => {
            ctx.check(
                n.rtt_ms.is_finite() && (0.0..=60_000.0).contains(&n.rtt_ms),
                &format!("{p}.network.rtt_ms"),
                format!("{} must be in [0, 60000] ms", fmt_num(n.rtt_ms)),
            )?;
            if let Some(b) = n.bandwidth_mbps {
                ctx.check(
                    b.is_finite() && (1e-3..=1e7).contains(&b),
                    &format!("{p}.network.bandwidth_mbps"),
                    format!("{} must be in [1e-3, 1e7] Mbit/s", fmt_num(b)),
                )?;
            }
            Some(NetworkModel::new(n.rtt_ms, n.bandwidth_mbps))
        }
    })
}

/// The active windows of client `c` (at `p`), cut at `horizon_us`: its
/// lifecycle windows, or one window over the whole run.
fn build_windows(ctx: &mut Ctx, c: &ClientSpec, p: &str, horizon_us: f64) -> Result<Vec<WindowPlan>, WorkloadError> {
    let mut windows = Vec::new();
    match &c.lifecycle {
        None => windows.push(WindowPlan { start_us: 0.0, end_us: horizon_us, rate_scale: 1.0, process: None, input: None, output: None }),
        Some(l) => {
            ctx.check(
                !l.windows.is_empty(),
                &format!("{p}.lifecycle.windows"),
                "at least one window is needed (omit lifecycle for an always-active client)",
            )?;
            let mut prev_end = 0;
            for (j, w) in l.windows.iter().enumerate() {
                let wp = format!("{p}.lifecycle.windows[{j}]");
                ctx.check(w.start_us < w.end_us, &format!("{wp}.end_us"), format!("{} must be after start_us {}", w.end_us, w.start_us))?;
                ctx.check(
                    w.end_us <= Micros::MAX_SPAN.as_us(),
                    &format!("{wp}.end_us"),
                    format!("{} µs must be at most 1e14 µs (1e8 s, the simulated clock's limit)", w.end_us),
                )?;
                ctx.check(
                    j == 0 || w.start_us >= prev_end,
                    &format!("{wp}.start_us"),
                    format!("{} overlaps the previous window (ending at {prev_end}); windows must be in increasing time", w.start_us),
                )?;
                prev_end = w.end_us;
                let scale = w.rate_scale.unwrap_or(1.0);
                ctx.check(
                    scale.is_finite() && scale > 0.0 && scale <= 1e6,
                    &format!("{wp}.rate_scale"),
                    format!("{} must be in (0, 1e6]", fmt_num(scale)),
                )?;
                let process = match &w.arrival {
                    None => None,
                    Some(a) => {
                        ctx.check(
                            a.bursty.is_none() && a.diurnal.is_none(),
                            &format!("{wp}.arrival"),
                            "bursty and diurnal are set on the client's arrival, not per window",
                        )?;
                        Some(build_process(ctx, a, &format!("{wp}.arrival"))?)
                    }
                };
                let input = w
                    .input_distribution
                    .as_ref()
                    .map(|d| build_sampler(ctx, d, &format!("{wp}.input_distribution"), Role::Length))
                    .transpose()?;
                let output = w
                    .output_distribution
                    .as_ref()
                    .map(|d| build_sampler(ctx, d, &format!("{wp}.output_distribution"), Role::Length))
                    .transpose()?;
                if (w.start_us as f64) < horizon_us {
                    windows.push(WindowPlan {
                        start_us: w.start_us as f64,
                        end_us: (w.end_us as f64).min(horizon_us),
                        rate_scale: scale,
                        process,
                        input,
                        output,
                    });
                }
            }
        }
    }
    Ok(windows)
}

/// Image, audio and video inputs of client `c` (at `p`), multimodal specs only.
fn build_modalities(ctx: &mut Ctx, c: &ClientSpec, p: &str, category: Category) -> Result<Vec<ModalityPlan>, WorkloadError> {
    let mut modalities = Vec::new();
    if let Some(m) = &c.multimodal {
        ctx.check(
            category == Category::Multimodal,
            &format!("{p}.multimodal"),
            format!("only for category multimodal (this spec is {})", category.as_str()),
        )?;
        for (kind, name, tokens, count) in [
            (Modality::Image, "image", &m.image_distribution, &m.image_count_distribution),
            (Modality::Audio, "audio", &m.audio_distribution, &m.audio_count_distribution),
            (Modality::Video, "video", &m.video_distribution, &m.video_count_distribution),
        ] {
            match (tokens, count) {
                (None, None) => {}
                (Some(t), Some(n)) => modalities.push(ModalityPlan {
                    kind,
                    tokens: build_sampler(ctx, t, &format!("{p}.multimodal.{name}_distribution"), Role::Tokens)?,
                    count: build_sampler(ctx, n, &format!("{p}.multimodal.{name}_count_distribution"), Role::Items)?,
                }),
                (Some(_), None) => {
                    return ctx.err(
                        &format!("{p}.multimodal.{name}_count_distribution"),
                        format!("missing; {name}_distribution needs the number of items per request"),
                    );
                }
                (None, Some(_)) => {
                    return ctx.err(
                        &format!("{p}.multimodal.{name}_distribution"),
                        format!("missing; {name}_count_distribution needs the tokens per item"),
                    );
                }
            }
        }
    }
    Ok(modalities)
}

/// The reasoning ratio (reasoning specs only) and multi-turn sessions of
/// client `c` (at `p`); `multi_turn` may be given on the client or in its
/// `reasoning` section, once.
fn build_reasoning(
    ctx: &mut Ctx,
    c: &ClientSpec,
    p: &str,
    category: Category,
) -> Result<(Option<Sampler>, Option<MultiTurn>), WorkloadError> {
    let mut reason_ratio = None;
    let mut multi_turn_spec = c.multi_turn.as_ref().map(|m| (m, format!("{p}.multi_turn")));
    if let Some(r) = &c.reasoning {
        ctx.check(
            category == Category::Reasoning,
            &format!("{p}.reasoning"),
            format!("only for category reasoning (this spec is {})", category.as_str()),
        )?;
        reason_ratio = r
            .reason_ratio_distribution
            .as_ref()
            .map(|d| build_sampler(ctx, d, &format!("{p}.reasoning.reason_ratio_distribution"), Role::Ratio))
            .transpose()?;
        if let Some(m) = &r.multi_turn {
            ctx.check(
                multi_turn_spec.is_none(),
                &format!("{p}.reasoning.multi_turn"),
                "multi_turn is also set on the client; give it once",
            )?;
            multi_turn_spec = Some((m, format!("{p}.reasoning.multi_turn")));
        }
    }
    let multi_turn = match multi_turn_spec {
        None => None,
        Some((m, mp)) => {
            ctx.check(
                (1..=MAX_ROUNDS).contains(&m.max_rounds),
                &format!("{mp}.max_rounds"),
                format!("{} must be in [1, {MAX_ROUNDS}]", m.max_rounds),
            )?;
            let think_us = m.think_time_us.unwrap_or(0);
            ctx.check(
                think_us <= Micros::MAX_SPAN.as_us(),
                &format!("{mp}.think_time_us"),
                format!("{think_us} µs must be at most 1e14 µs (1e8 s, the simulated clock's limit)"),
            )?;
            Some(MultiTurn {
                max_rounds: m.max_rounds,
                think_time: Micros(m.think_time_us.unwrap_or(0)),
                growth: m.context_growth.unwrap_or(ContextGrowth::Accumulate),
            })
        }
    };
    Ok((reason_ratio, multi_turn))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::spec::parse;

    fn plan_err(text: &str) -> String {
        parse(text, "w.yaml", Path::new(".")).unwrap().plan().unwrap_err().to_string()
    }

    const OK: &str = "aggregate_rate: 10\nnum_requests: 100\nclients:\n  - id: a\n    input_distribution: {type: constant, params: {value: 10}}\n    output_distribution: {type: exponential, params: {mean: 50}}\n";

    #[test]
    fn a_valid_spec_plans() {
        let plan = parse(OK, "w", Path::new(".")).unwrap().plan().unwrap();
        assert_eq!(plan.clients.len(), 1);
        assert_eq!(plan.labels.clients, ["a"]);
        assert_eq!(plan.labels.tenants, ["default"]);
        assert!((plan.clients[0].rate_per_us - 1e-5).abs() < 1e-18);
    }

    #[test]
    fn bad_values_give_one_clear_error_naming_the_key_path() {
        for (patch, path, needle) in [
            ("aggregate_rate: 10", "aggregate_rate: .nan", "aggregate_rate: NaN must be in (0"),
            ("aggregate_rate: 10", "aggregate_rate: -3", "aggregate_rate: -3 must be"),
            ("aggregate_rate: 10", "aggregate_rate: 1e12", "aggregate_rate: 1000000000000 must be"),
            ("aggregate_rate: 10\n", "", "aggregate_rate: missing"),
            ("{mean: 50}", "{mean: -50}", "clients[0].output_distribution.params.mean: -50 must be > 0"),
            ("{mean: 50}", "{mean: .inf}", "clients[0].output_distribution.params.mean: inf is not a finite number"),
            ("{mean: 50}", "{mean: 50, stdev: 3}", "clients[0].output_distribution.params.stdev: unknown parameter"),
            ("{mean: 50}", "{}", "clients[0].output_distribution.params.mean: missing"),
            ("{value: 10}", "{value: 0}", "clients[0].input_distribution.params.value: 0 must be a token length in [1, 1073741824]"),
            ("- id: a\n", "- id: a\n    rate_fraction: -1\n", "clients[0].rate_fraction: -1 must be"),
            ("- id: a\n", "- id: a\n    arrival: {process: gamma}\n", "clients[0].arrival.cv: missing"),
            ("- id: a\n", "- id: a\n    arrival: {process: poisson, cv: 2}\n", "clients[0].arrival.cv: applies to gamma and weibull only"),
            ("- id: a\n", "- id: a\n    arrival: {process: weibull, cv: 0}\n", "clients[0].arrival.cv: 0 must be in [0.01, 100]"),
            (
                "- id: a\n",
                "- id: a\n    arrival: {process: gamma, cv: 1e-300}\n",
                "clients[0].arrival.cv: 1e-300: too small for a gamma distribution",
            ),
            ("- id: a\n", "- id: a\n    prefix_group: sys\n", "clients[0].prefix_length: missing"),
            ("- id: a\n", "- id: a\n    multimodal: {}\n", "clients[0].multimodal: only for category multimodal"),
            ("- id: a\n", "- id: a\n    multi_turn: {max_rounds: 0}\n", "clients[0].multi_turn.max_rounds: 0 must be in [1,"),
            (
                "- id: a\n",
                "- id: a\n    multi_turn: {max_rounds: 2, think_time_us: 18446744073709551615}\n",
                "clients[0].multi_turn.think_time_us: 18446744073709551615 µs must be at most 1e14",
            ),
            (
                "- id: a\n",
                "- id: a\n    lifecycle: {windows: [{start_us: 5, end_us: 5}]}\n",
                "clients[0].lifecycle.windows[0].end_us: 5 must be after",
            ),
            (
                "- id: a\n",
                "- id: a\n    arrival: {bursty: {interval_us: 10, duration_us: 20}}\n",
                "clients[0].arrival.bursty.duration_us: 20 must be in (0, interval_us)",
            ),
            ("- id: a\n", "- id: a\n    network: {rtt_ms: -1}\n", "clients[0].network.rtt_ms: -1 must be"),
            ("num_requests: 100\n", "", "never ends"),
        ] {
            let text = OK.replacen(patch, path, 1);
            assert_ne!(text, OK, "patch {patch:?} did not apply");
            let e = plan_err(&text);
            assert!(e.starts_with("w.yaml: ") && e.contains(needle), "{needle}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    /// An empirical value a length cannot take is a mistake in a
    /// hand-written `pdf`, but data in a file: refused there, clamped with
    /// a warning saying how much probability moved here.
    #[test]
    fn empirical_values_outside_the_range_are_refused_inline_and_clamped_with_a_warning_from_files() {
        let inline = OK.replace("{type: constant, params: {value: 10}}", "{type: empirical, pdf: {0: 0.25, 10: 0.75, -3: 0}}");
        let e = plan_err(&inline);
        assert!(e.contains("clients[0].input_distribution.pdf: value 0 must be a token length in [1, 1073741824]"), "{e}");
        let dir = std::env::temp_dir().join(format!("blis-plan-empirical-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("lengths.yaml"), "{0: 0.25, 10: 0.75}\n").unwrap();
        let from_file = OK.replace("{type: constant, params: {value: 10}}", "{type: empirical, file: lengths.yaml}");
        let plan = parse(&from_file, "w", &dir).unwrap().plan().unwrap();
        assert_eq!(plan.warnings.len(), 1, "{:?}", plan.warnings);
        assert!(
            plan.warnings[0].contains("lengths.yaml") && plan.warnings[0].contains("25.000 % of the probability lies outside"),
            "{:?}",
            plan.warnings
        );
        let in_range = OK.replace("{type: constant, params: {value: 10}}", "{type: empirical, pdf: {1: 0.25, 10: 0.75, -3: 0}}");
        assert!(parse(&in_range, "w", Path::new(".")).unwrap().plan().unwrap().warnings.is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn zero_fraction_clients_are_skipped_with_a_warning() {
        let text = format!("{OK}  - id: idle\n    rate_fraction: 0\n");
        let plan = parse(&text, "w", Path::new(".")).unwrap().plan().unwrap();
        assert_eq!(plan.clients.len(), 1);
        assert_eq!(plan.warnings.len(), 1);
        assert!(plan.warnings[0].contains("idle") && plan.warnings[0].contains("skipped"), "{:?}", plan.warnings);
        let all_zero = OK.replace("- id: a\n", "- id: a\n    rate_fraction: 0\n");
        assert!(plan_err(&all_zero).contains("at least one must be > 0"));
    }

    #[test]
    fn duplicate_ids_and_mismatched_prefix_lengths_are_rejected() {
        let text = format!("{OK}  - id: a\n");
        assert!(plan_err(&text).contains("clients[1].id: \"a\" is also the id of clients[0]"));
        let two = "aggregate_rate: 1\nnum_requests: 1\nclients:\n  - {id: a, prefix_group: g, prefix_length: 8, input_distribution: {type: constant, params: {value: 1}}, output_distribution: {type: constant, params: {value: 1}}}\n  - {id: b, prefix_group: g, prefix_length: 9, input_distribution: {type: constant, params: {value: 1}}, output_distribution: {type: constant, params: {value: 1}}}\n";
        assert!(plan_err(two).contains("clients[1].prefix_length: 9 differs from 8"));
    }
}
