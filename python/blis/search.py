"""Adapters for policy search frameworks, scoring candidates with BLIS.

* :class:`BLISEvaluator` follows OpenEvolve's evaluator contract:
  ``evaluate(program_path) -> dict`` of metrics with ``combined_score``
  (the evolved "program" is a policy file, ``--policy-config``'s schema).
* :class:`BLISAdapter` follows GEPA's adapter protocol: ``evaluate(batch,
  candidate, capture_traces)`` scores a candidate (``{"policy": YAML
  text}``) on a batch of scenarios, and ``make_reflective_dataset`` turns
  the traces into the feedback records a reflecting model reads.

Neither imports its framework: both are duck-typed to its interface, so
they work with it installed and are testable without it (see
``examples/search/``). Scores are the run's fitness in [0, 1]
(``--fitness-weights``, default ``goodput:0.5,ttft_p99:0.25,e2e_p99:0.25``);
a candidate that does not run scores 0 and its error is the feedback.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from . import _as_text, _blis

__all__ = ["evaluate", "BLISEvaluator", "BLISAdapter", "EvaluationBatch"]


def evaluate(candidates: List["os.PathLike[str] | str"], scenario, *, excerpts: int = 5) -> List[Dict[str, Any]]:
    """What ``blis evaluate`` prints: per candidate policy file, in order,
    ``{candidate, score, fitness, metrics, anomalies, trace, error}``."""
    text, path = _as_text(scenario)
    return [json.loads(r) for r in _blis.evaluate([os.fspath(c) for c in candidates], text, path, excerpts)]


class BLISEvaluator:
    """OpenEvolve's evaluator: ``evaluate(program_path)`` runs the policy
    file on ``scenario`` and returns numeric metrics with
    ``combined_score``, and the evidence under ``artifacts``."""

    def __init__(self, scenario, excerpts: int = 5):
        self.scenario = scenario
        self.excerpts = excerpts

    def evaluate(self, program_path: str) -> Dict[str, Any]:
        (r,) = evaluate([program_path], self.scenario, excerpts=self.excerpts)
        metrics = {k: float(v) for k, v in (r.get("metrics") or {}).items()}
        return {"combined_score": float(r["score"]), **metrics, "artifacts": {"trace": "\n".join(r["trace"]), "error": r["error"] or ""}}


@dataclass
class EvaluationBatch:
    """GEPA's evaluation batch: one output, score and (optionally) trajectory per data instance."""

    outputs: List[Dict[str, Any]]
    scores: List[float]
    trajectories: Optional[List[Dict[str, Any]]] = field(default=None)


class BLISAdapter:
    """GEPA's adapter: a candidate is ``{"policy": YAML text}``, a data
    instance a scenario (as :func:`blis.run` takes it)."""

    component = "policy"

    def __init__(self, excerpts: int = 5):
        self.excerpts = excerpts

    def evaluate(self, batch: List[Any], candidate: Mapping[str, str], capture_traces: bool = False) -> EvaluationBatch:
        with tempfile.TemporaryDirectory() as tmp:
            policy = os.path.join(tmp, "candidate.yaml")
            with open(policy, "w", encoding="utf-8") as f:
                f.write(candidate[self.component])
            results = [evaluate([policy], scenario, excerpts=self.excerpts)[0] for scenario in batch]
        scores = [float(r["score"]) for r in results]
        trajectories = [{"scenario": s, "result": r} for s, r in zip(batch, results)] if capture_traces else None
        return EvaluationBatch(outputs=results, scores=scores, trajectories=trajectories)

    def make_reflective_dataset(self, candidate: Mapping[str, str], eval_batch: EvaluationBatch, components_to_update: List[str]) -> Dict[str, List[Dict[str, Any]]]:
        records = []
        for t in eval_batch.trajectories or []:
            r = t["result"]
            feedback = r["error"] and f"The policy did not run: {r['error']}" or (
                f"Fitness {r['score']:.4f}. Metrics: {json.dumps(r['metrics'])}. Anomalies: {json.dumps(r['anomalies'])}. "
                + ("Worst routing decisions:\n" + "\n".join(r["trace"]) if r["trace"] else "No routing decision sent a request above the least-loaded instance.")
            )
            records.append({"Inputs": t["scenario"], "Generated Outputs": candidate[self.component], "Feedback": feedback})
        return {c: records for c in components_to_update}
