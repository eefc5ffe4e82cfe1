"""A few generations of policy search against BLIS, GEPA-style and
OpenEvolve-style, with a stub "LLM" (no network): it reads the feedback
BLIS gives and rewrites the routing policy by fixed rules, where a real
search would ask a language model.

    python examples/search/evolve.py            # after building the package (docs/python.md)

Both loops start from a pathological policy (``always-busiest`` routing)
on a 4-replica deployment whose requests share long prefixes, and keep a
candidate only if BLIS scores it higher; `main()` returns each loop's
score history.
"""

from __future__ import annotations

import os
import tempfile
from typing import Dict, List

from blis.search import BLISAdapter, BLISEvaluator

SCENARIO = {
    "model": "meta-llama/llama-3.1-8b-instruct",
    "num-instances": 4,
    "rate": 60,
    "num-requests": 2500,
    "prompt-tokens": 1024,
    "prefix-tokens": 768,
    "prefix-groups": 8,
    "output-tokens": 128,
    "seed": 11,
}

START = "routing: {type: always-busiest}\n"


def policy(weights: Dict[str, int]) -> str:
    """A weighted routing policy with these scorer weights."""
    scorers = ", ".join(f"{k}: {v}" for k, v in sorted(weights.items()))
    return f"routing:\n  type: weighted\n  params:\n    scorers: {{{scorers}}}\n"


def stub_llm(current: str, feedback: str, generation: int) -> str:
    """Rewrites `current` from the feedback, by rules a reflecting model might follow."""
    if "always-busiest" in current:
        return policy({"queue-depth": 1})
    if "load" in feedback and "above the least loaded" in feedback:
        return policy({"queue-depth": 3, "precise-prefix": 1 + generation})
    return policy({"queue-depth": 1, "precise-prefix": 2 + generation})


def gepa_loop(generations: int = 3) -> List[float]:
    """GEPA's shape: evaluate the candidate on a batch with traces, build
    the reflective dataset, let the model propose, keep improvements."""
    adapter = BLISAdapter(excerpts=3)
    batch = [SCENARIO, {**SCENARIO, "seed": 12}]
    best = {"policy": START}
    best_score = sum(adapter.evaluate(batch, best).scores) / len(batch)
    history = [best_score]
    for g in range(generations):
        run = adapter.evaluate(batch, best, capture_traces=True)
        feedback = "\n".join(r["Feedback"] for r in adapter.make_reflective_dataset(best, run, ["policy"])["policy"])
        proposal = {"policy": stub_llm(best["policy"], feedback, g)}
        score = sum(adapter.evaluate(batch, proposal).scores) / len(batch)
        if score > best_score:
            best, best_score = proposal, score
        history.append(best_score)
    return history


def openevolve_loop(generations: int = 3) -> List[float]:
    """OpenEvolve's shape: programs are files, the evaluator scores a path,
    the model mutates the best program using its artifacts."""
    evaluator = BLISEvaluator(SCENARIO, excerpts=3)
    with tempfile.TemporaryDirectory() as tmp:
        def write(i: int, text: str) -> str:
            path = os.path.join(tmp, f"program_{i}.yaml")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            return path

        best_text = START
        best = evaluator.evaluate(write(0, best_text))
        history = [best["combined_score"]]
        for g in range(generations):
            child_text = stub_llm(best_text, best["artifacts"]["trace"], g)
            child = evaluator.evaluate(write(g + 1, child_text))
            if child["combined_score"] > best["combined_score"]:
                best_text, best = child_text, child
            history.append(best["combined_score"])
    return history


def main() -> Dict[str, List[float]]:
    return {"gepa": gepa_loop(), "openevolve": openevolve_loop()}


if __name__ == "__main__":
    for loop, history in main().items():
        print(f"{loop}: " + " -> ".join(f"{s:.4f}" for s in history))
