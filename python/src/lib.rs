//! `blis._blis`: the native half of the `blis` Python package. Scenarios
//! come in as YAML or JSON text in `--config`'s schema (the Python side
//! turns dicts and paths into text); the report goes out as the JSON `blis
//! run --format json` prints, and per-request records as columns. Every
//! simulation runs with the GIL released, so Python threads run points on
//! every core. Errors raise `BlisError` with the CLI's one-line message.

use std::path::Path;

use blis_engine::instance::Observer;
use blis_engine::request::RequestRecord;
use blis_scenario::knobs::KnobValues;
use blis_scenario::sweep::{BaseKnobs, Grid, header, row};
use blis_scenario::{Outputs, Scenario};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::{Map, Value};

create_exception!(_blis, BlisError, PyValueError, "Bad input or a failed simulation; the message is the one line `blis` prints.");

fn err(message: impl Into<String>) -> PyErr {
    BlisError::new_err(message.into())
}

/// The knob layers of a scenario given as YAML/JSON text (like flags), or
/// of the file at `path` (a file layer named `flag path`, as the CLI names
/// `--config` and `--base` files: its relative paths are relative to its
/// folder, and errors name it).
fn layers(text: &str, path: Option<&str>, flag: &str) -> Result<(KnobValues, Option<BaseKnobs>), String> {
    Ok(match path {
        Some(p) => (KnobValues::default(), Some((KnobValues::load(Path::new(p)).map_err(|e| e.to_string())?, format!("{flag} {p}")))),
        None => {
            let raw: Value = blis_data::yaml::from_str(text).map_err(|e| format!("the scenario: not valid YAML: {e}"))?;
            (KnobValues::from_yaml(raw, "the scenario").map_err(|e| e.to_string())?, None)
        }
    })
}

/// The per-request columns, as the CLI's `--requests-csv` has them.
#[derive(Default)]
struct Records {
    id: Vec<u64>,
    instance: Vec<Option<u32>>,
    outcome: Vec<&'static str>,
    arrival_ms: Vec<f64>,
    input_tokens: Vec<u32>,
    output_tokens: Vec<u32>,
    cached_prompt_tokens: Vec<u32>,
    preemptions: Vec<u32>,
    ttft_ms: Vec<Option<f64>>,
    e2e_ms: Vec<Option<f64>>,
    scheduling_delay_ms: Vec<Option<f64>>,
    finished_ms: Vec<f64>,
}

impl Observer for Records {
    fn on_finish(&mut self, r: &RequestRecord) {
        self.id.push(r.id.0);
        self.instance.push(r.instance);
        self.outcome.push(r.outcome.as_str());
        self.arrival_ms.push(r.arrival.as_ms_f64());
        self.input_tokens.push(r.input_tokens);
        self.output_tokens.push(r.output_tokens);
        self.cached_prompt_tokens.push(r.cached_prompt_tokens);
        self.preemptions.push(r.preemptions);
        self.ttft_ms.push(r.ttft().map(|t| t.as_ms_f64()));
        self.e2e_ms.push(r.e2e().map(|t| t.as_ms_f64()));
        self.scheduling_delay_ms.push(r.scheduling_delay().map(|t| t.as_ms_f64()));
        self.finished_ms.push(r.finished.as_ms_f64());
    }
    fn observes_tokens(&self) -> bool {
        false
    }
}

/// Simulates a scenario: `(report JSON, per-request columns)`. `text` is
/// YAML or JSON in `--config`'s schema, or `path` names such a file.
#[pyfunction]
#[pyo3(signature = (text, path=None, requests=true))]
fn run(py: Python<'_>, text: &str, path: Option<&str>, requests: bool) -> PyResult<(String, Py<PyAny>)> {
    let (report, records) = py
        .detach(|| -> Result<(String, Records), String> {
            let (values, file) = layers(text, path, "--config")?;
            let scenario = Scenario::from_values(&values, file.into_iter().collect());
            let resolved = scenario.resolve().map_err(|e| e.to_string())?;
            let mut records = Records::default();
            let observers: Vec<&mut dyn Observer> = if requests { vec![&mut records] } else { Vec::new() };
            let report = blis_scenario::simulate(resolved, Outputs { observers, decisions: None }).map_err(|e| e.to_string())?;
            let json = serde_json::to_string_pretty(&report).map_err(|e| format!("rendering the report: {e}"))?;
            Ok((json, records))
        })
        .map_err(err)?;
    let columns = pyo3::types::PyDict::new(py);
    columns.set_item("id", records.id)?;
    columns.set_item("instance", records.instance)?;
    columns.set_item("outcome", records.outcome)?;
    columns.set_item("arrival_ms", records.arrival_ms)?;
    columns.set_item("input_tokens", records.input_tokens)?;
    columns.set_item("output_tokens", records.output_tokens)?;
    columns.set_item("cached_prompt_tokens", records.cached_prompt_tokens)?;
    columns.set_item("preemptions", records.preemptions)?;
    columns.set_item("ttft_ms", records.ttft_ms)?;
    columns.set_item("e2e_ms", records.e2e_ms)?;
    columns.set_item("scheduling_delay_ms", records.scheduling_delay_ms)?;
    columns.set_item("finished_ms", records.finished_ms)?;
    Ok((report, columns.into_any().unbind()))
}

/// A grid (YAML or JSON text, `blis sweep --grid`'s schema): its CSV header
/// and, per point, its knob values as JSON, in point order. Every axis
/// value is checked against `base` (a scenario as [`run`] takes it) first,
/// as `blis sweep` does, so a value no point can run with is one error.
#[pyfunction]
#[pyo3(signature = (text, base, base_path=None))]
fn grid_points(text: &str, base: &str, base_path: Option<&str>) -> PyResult<(String, Vec<String>)> {
    let raw: Value = blis_data::yaml::from_str(text).map_err(|e| err(format!("the grid: not valid YAML: {e}")))?;
    let grid = Grid::parse(raw, "the grid").map_err(|e| err(e.to_string()))?;
    grid.check_knobs("the grid").map_err(|e| err(e.to_string()))?;
    let (flags, file) = layers(base, base_path, "--base").map_err(err)?;
    grid.check_scenarios("the grid", &flags, &file).map_err(|e| err(e.to_string()))?;
    let header = header(&grid);
    let points = (0..grid.points).map(|i| Value::Object(grid.point(i)).to_string()).collect();
    Ok((header, points))
}

/// One point's CSV row (as `blis sweep` writes it): `base` is a scenario
/// as [`run`] takes it, `point` a JSON object of knob values, `index` its
/// number. Never raises for a point that cannot run: its error goes into
/// the row, as in `blis sweep`.
#[pyfunction]
#[pyo3(signature = (base, point, index, base_path=None))]
fn sweep_row(py: Python<'_>, base: &str, point: &str, index: u64, base_path: Option<&str>) -> PyResult<String> {
    let point: Map<String, Value> = serde_json::from_str(point).map_err(|e| err(format!("the point: {e}")))?;
    let (flags, file) = layers(base, base_path, "--base").map_err(err)?;
    Ok(py.detach(|| row(index, &point, &flags, &file)))
}

/// Scores candidate policy files on a scenario (given as [`run`] takes
/// it): per candidate, in order, the JSON `blis evaluate` prints for it.
#[pyfunction]
#[pyo3(signature = (candidates, text, path=None, excerpts=5))]
fn evaluate(py: Python<'_>, candidates: Vec<String>, text: &str, path: Option<&str>, excerpts: usize) -> PyResult<Vec<String>> {
    let (values, file) = layers(text, path, "--config").map_err(err)?;
    let files: Vec<_> = file.into_iter().collect();
    // A scenario that cannot run is the caller's error, not a score of 0 for every candidate.
    blis_scenario::evaluate::check(&values, &files).map_err(|e| err(e.to_string()))?;
    Ok(py.detach(|| {
        candidates.iter().map(|c| blis_scenario::evaluate::evaluate(Path::new(c), &values, &files, excerpts).to_string()).collect()
    }))
}

/// The `blis._blis` module.
#[pymodule]
fn _blis(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("BlisError", m.py().get_type::<BlisError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(grid_points, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_row, m)?)?;
    m.add_function(wrap_pyfunction!(evaluate, m)?)?;
    Ok(())
}
