//! A grid of knob values and the row of one point: what `blis sweep`
//! (and `blis plan`, and the Python binding's `sweep`) run.
//!
//! A grid file (YAML or JSON) names knobs as `--config` does:
//!
//! ```yaml
//! axes:                  # the cartesian product, first axis slowest
//!   rate: [10, 20, 40]
//!   max-num-seqs: [64, 256]
//! zip:                   # optional: lists varied together, each group one more axis
//!   - {num-instances: [1, 2, 4], routing-policy: [round-robin, least-loaded, weighted]}
//! ```
//!
//! A point's knobs are its grid values over the caller's flags over a base
//! file over the defaults; its row is what `blis run` with those knobs
//! reports (same seed, same numbers).

use blis_engine::metrics::Distribution;
use serde_json::{Map, Value};

use crate::error::{ScenarioError, invalid};
use crate::knobs::{KnobId, KnobValues};
use crate::report::RunReport;
use crate::{Outputs, Scenario};

/// A knob file every point starts from (`--base`), and how errors name it.
pub type BaseKnobs = (KnobValues, String);

/// Most points a grid may have.
const MAX_POINTS: u64 = 10_000_000;

/// A grid: its axes (names, in order, each with its values) and how many
/// points it spans.
#[derive(Debug, PartialEq)]
pub struct Grid {
    /// Each axis: the knobs it sets (one, or a zip group's several) and, per
    /// step along it, their values.
    axes: Vec<(Vec<String>, Vec<Vec<Value>>)>,
    /// Points: the product of the axes' lengths.
    pub points: u64,
}

impl Grid {
    /// Reads `{axes: {knob: [values]}, zip: [{knob: [values], ...}]}`;
    /// `origin` names the file in errors.
    pub fn parse(raw: Value, origin: &str) -> Result<Grid, ScenarioError> {
        let Value::Object(mut top) = raw else {
            return Err(invalid!("{origin}: expected a mapping with `axes` and/or `zip`"));
        };
        let mut axes = Vec::new();
        let list = |key: &str, v: Value| -> Result<Vec<Value>, ScenarioError> {
            match v {
                Value::Array(values) if !values.is_empty() => Ok(values),
                Value::Array(_) => Err(invalid!("{origin}: {key}: an axis needs at least one value")),
                _ => Err(invalid!("{origin}: {key}: expected a list of values")),
            }
        };
        if let Some(v) = top.remove("axes") {
            let Value::Object(map) = v else { return Err(invalid!("{origin}: axes: expected a mapping of knob names to lists")) };
            for (name, values) in map {
                let values = list(&format!("axes.{name}"), values)?;
                axes.push((vec![name], values.into_iter().map(|v| vec![v]).collect()));
            }
        }
        if let Some(v) = top.remove("zip") {
            let Value::Array(groups) = v else { return Err(invalid!("{origin}: zip: expected a list of mappings")) };
            for (g, group) in groups.into_iter().enumerate() {
                let Value::Object(map) = group else {
                    return Err(invalid!("{origin}: zip[{g}]: expected a mapping of knob names to lists"));
                };
                let mut names = Vec::new();
                let mut columns = Vec::new();
                for (name, values) in map {
                    columns.push(list(&format!("zip[{g}].{name}"), values)?);
                    names.push(name);
                }
                let len = columns.first().map_or(0, Vec::len);
                if len == 0 {
                    return Err(invalid!("{origin}: zip[{g}]: a group needs at least one knob"));
                }
                if let Some(i) = columns.iter().position(|c| c.len() != len) {
                    return Err(invalid!(
                        "{origin}: zip[{g}]: `{}` has {} values, `{}` has {len}: zipped lists must be as long",
                        names[i],
                        columns[i].len(),
                        names[0]
                    ));
                }
                let steps: Vec<Vec<Value>> = (0..len).map(|k| columns.iter().map(|c| c[k].clone()).collect()).collect();
                axes.push((names, steps));
            }
        }
        if let Some(key) = top.keys().next() {
            return Err(invalid!("{origin}: unknown key `{key}`; allowed: axes, zip"));
        }
        if axes.is_empty() {
            return Err(invalid!("{origin}: no axes: give `axes` or `zip`"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for name in axes.iter().flat_map(|(names, _)| names) {
            if !seen.insert(name.replace('_', "-")) {
                return Err(invalid!("{origin}: `{name}` is swept twice"));
            }
        }
        let points = axes.iter().try_fold(1u64, |acc, (_, steps)| acc.checked_mul(steps.len() as u64).filter(|&p| p <= MAX_POINTS));
        let points = points.ok_or_else(|| invalid!("{origin}: more than {MAX_POINTS} points"))?;
        Ok(Grid { axes, points })
    }

    /// Checks that every name and value of the grid reads as a knob (each
    /// value once, not each point); `origin` names the file in errors.
    pub fn check_knobs(&self, origin: &str) -> Result<(), ScenarioError> {
        for (names, steps) in &self.axes {
            for step in steps {
                let one: Map<String, Value> = names.iter().cloned().zip(step.iter().cloned()).collect();
                KnobValues::from_yaml(Value::Object(one), origin)?;
            }
        }
        Ok(())
    }

    /// Checks, without simulating, that the flags over `base` and every
    /// grid value describe a scenario that resolves: each value with the
    /// other axes at their first value, or failing that with one other axis
    /// at any of its values (so a value that runs only beside a later value
    /// of another axis passes). A value that resolves in none of these is
    /// refused, naming the grid file and the value; an error about a flag or
    /// the base file names that instead. `origin` names the grid file.
    pub fn check_scenarios(&self, origin: &str, flags: &KnobValues, base: &Option<BaseKnobs>) -> Result<(), ScenarioError> {
        // The point with the given (axis, step) pairs and every other axis at its first step.
        let check = |steps: Vec<(usize, usize)>| scenario_of(&self.point(self.index_of(&steps)), flags, base).and_then(|sc| sc.check());
        for (a, (_, steps)) in self.axes.iter().enumerate() {
            for s in 0..steps.len() {
                let beside_others = self
                    .axes
                    .iter()
                    .enumerate()
                    .filter(|&(b, _)| b != a)
                    .flat_map(|(b, (_, other))| (1..other.len()).map(move |t| vec![(a, s), (b, t)]));
                let mut tries = std::iter::once(vec![(a, s)]).chain(beside_others).map(&check);
                let Some(Err(first)) = tries.next() else { continue };
                if !tries.any(|r| r.is_ok()) {
                    return Err(self.blame(origin, a, s, first));
                }
            }
        }
        Ok(())
    }

    /// The index of the point with the given `(axis, step)` pairs and every other axis at its first step.
    fn index_of(&self, steps: &[(usize, usize)]) -> u64 {
        self.axes.iter().enumerate().fold(0, |index, (a, (_, axis))| {
            let step = steps.iter().find(|(b, _)| *b == a).map_or(0, |&(_, s)| s);
            index * axis.len() as u64 + step as u64
        })
    }

    /// `err`, met checking step `s` of axis `a`, as one line: an error
    /// naming a swept knob by its flag (`--rate -5: ...`) names the grid
    /// file instead (`--grid g.yaml: rate -5: ...`), one naming another flag
    /// or a file passes unchanged, and any other names the grid file and the value.
    fn blame(&self, origin: &str, a: usize, s: usize, err: ScenarioError) -> ScenarioError {
        let Some(knob) = err.knob else {
            let (names, steps) = &self.axes[a];
            let values: Vec<String> = names.iter().zip(&steps[s]).map(|(n, v)| format!("{n} {}", cell(v))).collect();
            return invalid!("{origin}: {}: {err}", values.join(", "));
        };
        let swept = self.columns().any(|c| KnobId::from_flag(&c.replace('_', "-")) == Some(knob));
        if swept { err.from_file(origin) } else { err }
    }

    /// The knob names, one column each, in axis order.
    pub fn columns(&self) -> impl Iterator<Item = &str> {
        self.axes.iter().flat_map(|(names, _)| names.iter().map(String::as_str))
    }

    /// Point `index`'s knob values (mixed radix, the last axis fastest), in
    /// column order.
    pub fn point(&self, index: u64) -> Map<String, Value> {
        let mut steps = Vec::with_capacity(self.axes.len());
        let mut rest = index;
        for (_, axis) in self.axes.iter().rev() {
            let n = axis.len() as u64;
            steps.push((rest % n) as usize);
            rest /= n;
        }
        let mut map = Map::new();
        for ((names, axis), step) in self.axes.iter().zip(steps.into_iter().rev()) {
            for (name, v) in names.iter().zip(&axis[step]) {
                map.insert(name.clone(), v.clone());
            }
        }
        map
    }
}

/// The metrics of a row, after the point number and its knob values.
pub const METRIC_COLUMNS: &str = "gpus,injected,completed,dropped,timed_out,throughput_rps,output_tokens_per_s,\
ttft_p50_ms,ttft_p99_ms,itl_p50_ms,itl_p99_ms,e2e_p50_ms,e2e_p99_ms,slo_attainment,goodput_rps,gpu_hours,cost_usd,error";

/// A CSV field: quoted when it holds a comma, quote or line break.
pub fn field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text.to_string() }
}

/// A knob value as a CSV cell's text (strings bare, anything else as JSON), before quoting.
pub fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A latency statistic as a CSV field: empty, not 0, when nothing was
/// measured (no request of the point completed).
fn latency_field(d: &Distribution, stat: f64) -> String {
    if d.count == 0 { String::new() } else { stat.to_string() }
}

/// The metrics of `r`, as the row's fields after the knob values (the
/// `error` column empty).
fn metric_fields(r: &RunReport) -> String {
    let s = &r.summary;
    let l = &s.latency_ms;
    let a = r.cluster.autoscaling.as_ref();
    [
        (r.deployment.tp * r.cluster.num_instances).to_string(),
        s.requests.injected.to_string(),
        s.requests.completed.to_string(),
        s.requests.dropped.to_string(),
        s.requests.timed_out.to_string(),
        s.throughput.requests_per_s.to_string(),
        s.throughput.output_tokens_per_s.to_string(),
        latency_field(&l.ttft, l.ttft.p50),
        latency_field(&l.ttft, l.ttft.p99),
        latency_field(&l.itl, l.itl.p50),
        latency_field(&l.itl, l.itl.p99),
        latency_field(&l.e2e, l.e2e.p50),
        latency_field(&l.e2e, l.e2e.p99),
        r.cluster.goodput.slo_attainment.to_string(),
        r.cluster.goodput.requests_per_s.to_string(),
        a.map_or(String::new(), |a| a.gpu_hours.to_string()),
        a.and_then(|a| a.cost).map_or(String::new(), |c| c.to_string()),
        String::new(),
    ]
    .join(",")
}

/// Simulates one point: its knob values over `flags` over `base` over the
/// defaults, as `blis run` would; the error is the one line `blis run`
/// would print.
pub fn run_point(point: &Map<String, Value>, flags: &KnobValues, base: &Option<BaseKnobs>) -> Result<RunReport, String> {
    let resolved = scenario_of(point, flags, base).and_then(|s| s.resolve()).map_err(|e| e.to_string())?;
    crate::simulate(resolved, Outputs::default()).map_err(|e| e.to_string())
}

/// The scenario of one point: its knob values over `flags` over `base` over the defaults.
fn scenario_of(point: &Map<String, Value>, flags: &KnobValues, base: &Option<BaseKnobs>) -> Result<Scenario, ScenarioError> {
    let values = KnobValues::from_yaml(Value::Object(point.clone()), "the grid")?.or(flags.clone());
    Ok(Scenario::from_values(&values, base.iter().cloned().collect()))
}

/// The last column of a sweep's CSV: a digest of what every point shares
/// besides its grid values ([`scenario_digest`]), so that a resume with
/// other flags or another base can be refused instead of keeping rows that
/// answer another question.
pub const DIGEST_COLUMN: &str = "scenario";

/// The CSV header of a sweep over `grid`: `point`, the grid's columns, the
/// metrics (`error` last of them), then [`DIGEST_COLUMN`].
pub fn header(grid: &Grid) -> String {
    format!("point,{},{METRIC_COLUMNS},{DIGEST_COLUMN}", grid.columns().map(field).collect::<Vec<_>>().join(","))
}

/// The [`DIGEST_COLUMN`] value of a sweep from `flags` over `base`: FNV-1a
/// of the knob values the two give together (however they are split
/// between the layers), as text that never reads as a number. A knob added
/// to BLIS changes it too.
pub fn scenario_digest(flags: &KnobValues, base: &Option<BaseKnobs>) -> String {
    let shared = flags.clone().or(base.as_ref().map(|(values, _)| values.clone()).unwrap_or_default());
    format!("fnv1a-{:016x}", blis_engine::rng::fnv1a(&format!("{shared:?}")))
}

/// Point `index`'s CSV row (as `blis sweep` writes it): its number, its
/// knob values (`point`, in column order, from [`Grid::point`]), then its
/// metrics, or the error that stopped it in the `error` column, then the
/// [`scenario_digest`].
pub fn row(index: u64, point: &Map<String, Value>, flags: &KnobValues, base: &Option<BaseKnobs>) -> String {
    let knobs: Vec<String> = point.values().map(|v| field(&cell(v))).collect();
    let results = match run_point(point, flags, base) {
        Ok(report) => metric_fields(&report),
        Err(e) => format!("{}{}", ",".repeat(METRIC_COLUMNS.matches(',').count()), field(&e)),
    };
    format!("{index},{},{results},{}", knobs.join(","), scenario_digest(flags, base))
}

/// Whether a [`row`] records an error (its `error` column is not empty).
pub fn row_failed(row: &str) -> bool {
    row.rsplit_once(',').is_some_and(|(rest, _)| !rest.ends_with(','))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn points_enumerate_the_product_with_zipped_groups_as_one_axis() {
        let g = Grid::parse(json!({"axes": {"rate": [1, 2], "seed": [7, 8, 9]}, "zip": [{"tp": [1, 2], "num-instances": [4, 8]}]}), "g")
            .unwrap();
        assert_eq!(g.points, 12);
        assert_eq!(g.columns().collect::<Vec<_>>(), ["rate", "seed", "tp", "num-instances"], "in the file's order");
        assert_eq!(Value::Object(g.point(0)), json!({"rate": 1, "seed": 7, "tp": 1, "num-instances": 4}));
        assert_eq!(g.point(5).keys().map(String::as_str).collect::<Vec<_>>(), g.columns().collect::<Vec<_>>(), "in column order");
        assert_eq!(Value::Object(g.point(1)), json!({"rate": 1, "seed": 7, "tp": 2, "num-instances": 8}));
        assert_eq!(Value::Object(g.point(11)), json!({"rate": 2, "seed": 9, "tp": 2, "num-instances": 8}));
        let all: std::collections::BTreeSet<String> = (0..12).map(|i| Value::Object(g.point(i)).to_string()).collect();
        assert_eq!(all.len(), 12, "every point differs");
    }

    #[test]
    fn bad_grids_are_refused_by_name() {
        for (grid, needle) in [
            (json!([1]), "expected a mapping"),
            (json!({}), "no axes"),
            (json!({"axes": {"rate": []}}), "axes.rate: an axis needs at least one value"),
            (json!({"axes": {"rate": 5}}), "axes.rate: expected a list"),
            (json!({"zip": [{"rate": [1, 2], "tp": [1]}]}), "zipped lists must be as long"),
            (json!({"axes": {"rate": [1]}, "zip": [{"rate": [2]}]}), "`rate` is swept twice"),
            (json!({"axis": {"rate": [1]}}), "unknown key `axis`"),
            (json!({"axes": {"a": vec![0; 10_000], "b": vec![0; 10_000]}}), "more than"),
        ] {
            let e = Grid::parse(grid, "g").unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
    }

    fn llama() -> KnobValues {
        KnobValues { model: Some("meta-llama/llama-3.1-8b-instruct".into()), num_requests: Some(20), ..KnobValues::default() }
    }

    #[test]
    fn every_grid_value_is_checked_by_resolving_its_scenario() {
        let check = |grid: Value, flags: &KnobValues| {
            Grid::parse(grid, "g").unwrap().check_scenarios("--grid g", flags, &None).map_err(|e| e.to_string())
        };
        for (grid, needle) in [
            (json!({"axes": {"seed": [1, 2], "rate": [5, -5]}}), "--grid g: rate -5"),
            (json!({"axes": {"rate": [0]}}), "--grid g: rate 0"),
            (json!({"axes": {"max-num-seqs": [0]}}), "--grid g: max-num-seqs"),
            (json!({"axes": {"hardware": ["B900"]}}), "--grid g: hardware B900"),
            (json!({"axes": {"model": ["nope"]}}), "--grid g: model nope"),
            (json!({"axes": {"seed": [1, 2]}, "zip": [{"coefficients": ["/nonexistent.yaml"]}]}), "/nonexistent.yaml"),
        ] {
            let e = check(grid.clone(), &llama()).unwrap_err();
            assert!(e.starts_with("--grid g: ") && e.contains(needle), "{grid}: {e}");
        }
        let bad_flag = KnobValues { slo_targets: Some("foo".into()), ..llama() };
        let e = check(json!({"axes": {"rate": [5]}}), &bad_flag).unwrap_err();
        assert!(e.starts_with("--slo-targets \"foo\""), "a flag's error names the flag: {e}");
        // Each value runs beside some value of the other axis; the one
        // point that cannot run is the sweep's to report in its row.
        check(json!({"axes": {"max-num-seqs": [16, 4096], "max-num-batched-tokens": [2048, 8192]}}), &llama()).unwrap();
    }

    #[test]
    fn a_point_that_completes_nothing_has_no_latencies() {
        let grid = Grid::parse(json!({"axes": {"max-model-len": [10]}}), "g").unwrap();
        let line = row(0, &grid.point(0), &llama(), &None);
        let header: Vec<&str> = ["point", "max-model-len"].into_iter().chain(METRIC_COLUMNS.split(',')).collect();
        let cells: Vec<&str> = line.split(',').collect();
        let col = |name: &str| cells[header.iter().position(|h| *h == name).unwrap()];
        assert_eq!((col("completed"), col("error")), ("0", ""), "{line}");
        for latency in ["ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "e2e_p50_ms", "e2e_p99_ms"] {
            assert_eq!(col(latency), "", "{latency}: {line}");
        }
    }
}
