import os
from typing import Any, Dict, List, Mapping, Optional, Union

__version__: str

Scenario = Union[Mapping[str, Any], str, os.PathLike[str]]

class BlisError(ValueError):
    """Bad input or a failed simulation; the message is the one line `blis` prints."""

class Result:
    report: Dict[str, Any]
    requests: Dict[str, List[Any]]
    def __init__(self, report: Dict[str, Any], requests: Dict[str, List[Any]]) -> None: ...
    def to_pandas(self) -> Any: ...
    def to_arrow(self) -> Any: ...

def run(scenario: Scenario, *, requests: bool = ...) -> Result: ...
def sweep(base: Scenario, grid: Union[Mapping[str, Any], str, os.PathLike[str]], *, backend: str = ..., jobs: Optional[int] = ...) -> List[str]: ...

from . import search as search
