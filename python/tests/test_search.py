"""The search adapters: `blis evaluate`'s numbers from Python, OpenEvolve's
and GEPA's contracts, and the example loops with a stub LLM."""

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

import blis
from blis.search import BLISAdapter, BLISEvaluator

from test_blis import BLIS, MODEL, ROOT

SCENARIO = {"model": MODEL, "num-instances": 2, "rate": 30, "num-requests": 400}


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_evaluate_from_python_equals_blis_evaluate(tmp_path):
    a = write(tmp_path, "a.yaml", "routing: {type: round-robin}\n")
    b = write(tmp_path, "b.yaml", "routing: {type: always-busiest}\n")
    bad = write(tmp_path, "bad.yaml", "routing: {type: nonsense}\n")
    py = blis.search.evaluate([a, b, bad], SCENARIO, excerpts=2)
    out = subprocess.run(
        [BLIS, "evaluate", "--model", MODEL, "--num-instances", "2", "--rate", "30", "--num-requests", "400",
         "--candidate", str(a), "--candidate", str(b), "--candidate", str(bad), "--excerpts", "2"],
        capture_output=True, text=True,
    )
    assert out.returncode == 0, out.stderr
    assert py == json.loads(out.stdout)
    assert py[0]["score"] > py[1]["score"] > py[2]["score"] == 0.0
    assert "unknown policy `nonsense`" in py[2]["error"]
    assert len(py[1]["trace"]) == 2 and "above the least loaded" in py[1]["trace"][0]


def test_a_scenario_that_cannot_run_raises_instead_of_scoring_every_candidate_0(tmp_path):
    a = write(tmp_path, "a.yaml", "routing: {type: round-robin}\n")
    with pytest.raises(blis.BlisError, match="rate"):
        blis.search.evaluate([a], {**SCENARIO, "rate": -1})


def test_openevolve_evaluator_returns_combined_score_and_artifacts(tmp_path):
    e = BLISEvaluator(SCENARIO)
    good = e.evaluate(str(write(tmp_path, "p.yaml", "routing: {type: least-loaded}\n")))
    assert 0 < good["combined_score"] <= 1 and good["completed"] == 400.0
    assert set(good["artifacts"]) == {"trace", "error"}
    broken = e.evaluate(str(write(tmp_path, "q.yaml", "routing: [\n")))
    assert broken["combined_score"] == 0.0 and broken["artifacts"]["error"]


def test_gepa_adapter_scores_a_batch_and_reflects_on_its_traces():
    adapter = BLISAdapter(excerpts=2)
    candidate = {"policy": "routing: {type: always-busiest}\n"}
    batch = [SCENARIO, {**SCENARIO, "seed": 5}]
    run = adapter.evaluate(batch, candidate, capture_traces=True)
    assert len(run.scores) == 2 and all(0 < s < 1 for s in run.scores)
    dataset = adapter.make_reflective_dataset(candidate, run, ["policy"])
    assert [r["Inputs"] for r in dataset["policy"]] == batch
    assert all("above the least loaded" in r["Feedback"] for r in dataset["policy"])
    assert adapter.evaluate(batch, candidate).trajectories is None


def test_the_example_loops_improve_on_the_pathological_start():
    spec = importlib.util.spec_from_file_location("evolve", ROOT / "examples" / "search" / "evolve.py")
    evolve = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(evolve)
    for loop, history in evolve.main().items():
        assert len(history) == 4, loop
        assert all(a <= b for a, b in zip(history, history[1:])), (loop, history)
        assert history[-1] > history[0] + 0.1, (loop, history)
