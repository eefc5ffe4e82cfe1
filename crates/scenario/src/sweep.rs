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

use serde_json::{Map, Value};

use crate::error::{ScenarioError, invalid};
use crate::knobs::KnobValues;
use crate::report::RunReport;
use crate::{Outputs, Scenario};

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
                let Value::Object(map) = group else { return Err(invalid!("{origin}: zip[{g}]: expected a mapping of knob names to lists")) };
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
                    return Err(invalid!("{origin}: zip[{g}]: `{}` has {} values, `{}` has {len}: zipped lists must be as long", names[i], columns[i].len(), names[0]));
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
                KnobValues::from_yaml(Value::Object(one), origin).map_err(|e| invalid!("{}", e.0))?;
            }
        }
        Ok(())
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

/// A knob value as a CSV field (strings bare, anything else as JSON).
fn value_field(v: &Value) -> String {
    field(&match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
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
        l.ttft.p50.to_string(),
        l.ttft.p99.to_string(),
        l.itl.p50.to_string(),
        l.itl.p99.to_string(),
        l.e2e.p50.to_string(),
        l.e2e.p99.to_string(),
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
pub fn run_point(point: &Map<String, Value>, flags: &KnobValues, base: &Option<(KnobValues, String)>) -> Result<RunReport, String> {
    let values = KnobValues::from_yaml(Value::Object(point.clone()), "the grid").map_err(|e| e.0)?.or(flags.clone());
    let scenario = Scenario::from_values(&values, base.iter().cloned().collect());
    let resolved = scenario.resolve().map_err(|e| e.0)?;
    crate::simulate(resolved, Outputs::default()).map_err(|e| e.0)
}

/// Point `index`'s CSV row (as `blis sweep` writes it): its number, its
/// knob values (`point`, in column order, from [`Grid::point`]), then its
/// metrics, or the error that stopped it in the `error` column.
pub fn row(index: u64, point: &Map<String, Value>, flags: &KnobValues, base: &Option<(KnobValues, String)>) -> String {
    let knobs: Vec<String> = point.values().map(value_field).collect();
    let results = match run_point(point, flags, base) {
        Ok(report) => metric_fields(&report),
        Err(e) => format!("{}{}", ",".repeat(METRIC_COLUMNS.matches(',').count()), field(&e)),
    };
    format!("{index},{},{results}", knobs.join(","))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn points_enumerate_the_product_with_zipped_groups_as_one_axis() {
        let g = Grid::parse(json!({"axes": {"rate": [1, 2], "seed": [7, 8, 9]}, "zip": [{"tp": [1, 2], "num-instances": [4, 8]}]}), "g").unwrap();
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
            let e = Grid::parse(grid, "g").unwrap_err().0;
            assert!(e.contains(needle), "{e}");
        }
    }

}
