import os
from typing import Any, Dict, List, Mapping, Optional

def evaluate(candidates: List[os.PathLike[str] | str], scenario: Any, *, excerpts: int = ...) -> List[Dict[str, Any]]: ...

class BLISEvaluator:
    scenario: Any
    excerpts: int
    def __init__(self, scenario: Any, excerpts: int = ...) -> None: ...
    def evaluate(self, program_path: str) -> Dict[str, Any]: ...

class EvaluationBatch:
    outputs: List[Dict[str, Any]]
    scores: List[float]
    trajectories: Optional[List[Dict[str, Any]]]

class BLISAdapter:
    component: str
    excerpts: int
    def __init__(self, excerpts: int = ...) -> None: ...
    def evaluate(self, batch: List[Any], candidate: Mapping[str, str], capture_traces: bool = ...) -> EvaluationBatch: ...
    def make_reflective_dataset(self, candidate: Mapping[str, str], eval_batch: EvaluationBatch, components_to_update: List[str]) -> Dict[str, List[Dict[str, Any]]]: ...
