"""The Python binding against the `blis` command: same scenario, same numbers."""

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

import blis

ROOT = Path(__file__).resolve().parents[2]
BLIS = os.environ.get("BLIS_BIN", str(ROOT / "target" / "release" / "blis"))
MODEL = "meta-llama/llama-3.1-8b-instruct"


def cli(*args):
    return subprocess.run([BLIS, *args], capture_output=True, text=True)


def test_a_dict_scenario_reports_what_blis_run_reports():
    knobs = {"model": MODEL, "num-requests": 300, "rate": 25, "max-num-seqs": 64, "seed": 7}
    py = blis.run(knobs)
    out = cli("run", "--model", MODEL, "--num-requests", "300", "--rate", "25", "--max-num-seqs", "64", "--seed", "7", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert py.report == json.loads(out.stdout)
    assert py.report["requests"]["completed"] == 300


def test_yaml_text_and_a_file_are_scenarios_too(tmp_path):
    text = f"model: {MODEL}\nnum-requests: 100\nrate: 10\n"
    path = tmp_path / "s.yaml"
    path.write_text(text)
    from_text, from_file = blis.run(text), blis.run(path)
    from_cli = json.loads(cli("run", "--config", str(path), "--format", "json").stdout)
    assert from_file.report == from_cli
    # Text is given like flags (its sources say so); the numbers are the same.
    assert from_text.report["latency_ms"] == from_cli["latency_ms"]


def test_requests_come_back_as_a_table_one_row_per_request():
    r = blis.run({"model": MODEL, "num-requests": 150})
    frame = r.to_pandas()
    assert len(frame) == 150 and frame["id"].is_unique
    assert set(frame["outcome"]) == {"completed"}
    assert frame["ttft_ms"].quantile(0.5) == pytest.approx(r.report["latency_ms"]["ttft"]["p50"], rel=0.05)
    assert r.to_arrow().num_rows == 150
    assert blis.run({"model": MODEL, "num-requests": 10}, requests=False).requests["id"] == []


@pytest.mark.parametrize(
    "scenario",
    [
        {"model": MODEL, "rate": -1},
        {"model": MODEL, "ratee": 1},
        {"model": "no/such-model"},
        "model: [unclosed\n",
    ],
)
def test_bad_input_raises_the_clis_one_line_message(scenario):
    with pytest.raises(blis.BlisError) as e:
        blis.run(scenario)
    message = str(e.value)
    assert "\n" not in message and message
    if isinstance(scenario, dict) and "rate" in scenario:
        out = cli("run", "--model", MODEL, "--rate", "-1")
        assert out.returncode == 2
        assert out.stderr.strip() == f"error: {message}"


def test_simulations_run_in_threads_and_agree():
    results = [None] * 4

    def one(i):
        results[i] = blis.run({"model": MODEL, "num-requests": 400, "seed": 3}).report

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == results[0] for r in results)


GRID = {"axes": {"rate": [5, 40], "max-num-seqs": [16, 256]}, "zip": [{"num-instances": [1, 2], "routing-policy": ["round-robin", "least-loaded"]}]}
BASE = {"model": MODEL, "num-requests": 200}


def test_a_local_sweep_gives_the_lines_blis_sweep_writes(tmp_path):
    lines = blis.sweep(BASE, GRID, jobs=2)
    grid, base = tmp_path / "g.json", tmp_path / "b.yaml"
    grid.write_text(json.dumps(GRID))
    base.write_text(f"model: {MODEL}\nnum-requests: 200\n")
    out = tmp_path / "s.csv"
    done = cli("sweep", "--base", str(base), "--grid", str(grid), "--output", str(out), "-q")
    assert done.returncode == 0, done.stderr
    assert lines == out.read_text().splitlines()
    assert len(lines) == 1 + 8


def test_a_ray_sweep_gives_the_same_lines_as_the_local_one():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert blis.sweep(BASE, GRID, backend="ray") == blis.sweep(BASE, GRID)
    finally:
        ray.shutdown()


def test_unknown_backends_and_bad_grids_are_refused():
    with pytest.raises(blis.BlisError, match="allowed values are local, ray"):
        blis.sweep(BASE, GRID, backend="spark")
    with pytest.raises(blis.BlisError, match="ratee"):
        blis.sweep(BASE, {"axes": {"ratee": [1]}})
    # A value no point can run with is one error before anything runs, as in `blis sweep`.
    with pytest.raises(blis.BlisError, match=r"rate.*-1"):
        blis.sweep(BASE, {"axes": {"rate": [5, -1]}})


def test_a_sweeps_parquet_file_holds_its_csv_rows_typed(tmp_path):
    pandas = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    grid = tmp_path / "g.yaml"
    # max-num-seqs 4096 runs only with the 8192-token budget: its points with 2048 fail.
    grid.write_text("axes:\n  rate: [5, 40]\n  routing-policy: [round-robin, least-loaded]\n  max-num-seqs: [16, 4096]\n  max-num-batched-tokens: [2048, 8192]\n")
    csv, parquet = tmp_path / "s.csv", tmp_path / "s.parquet"
    done = cli("sweep", "--model", MODEL, "--num-requests", "150", "--num-instances", "2", "--grid", str(grid),
               "--output", str(csv), "--parquet", str(parquet), "-q")
    assert done.returncode == 0, done.stderr
    a, b = pandas.read_csv(csv), pandas.read_parquet(parquet)
    assert list(a.columns) == list(b.columns) and len(a) == len(b) == 16
    assert str(b["point"].dtype) == "int64" and str(b["rate"].dtype) == "float64" and str(b["ttft_p99_ms"].dtype) == "float64"
    for column in a.columns:
        assert a[column].isna().tolist() == b[column].isna().tolist(), column
        present = a[column].notna()
        x, y = a.loc[present, column], b.loc[present, column]
        if pandas.api.types.is_numeric_dtype(x):
            assert x.astype(float).tolist() == y.astype(float).tolist(), column
        else:
            assert x.tolist() == y.tolist(), column
    assert b["error"].notna().sum() == 4, "the 4096-seat points of a 2048-token budget carry their error"
