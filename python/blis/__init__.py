"""BLIS from Python: simulate a vLLM deployment, or sweep one over a grid.

A scenario is what ``blis run --config`` takes: a dict of knob names to
values (``{"model": "meta-llama/llama-3.1-8b-instruct", "rate": 20}``),
YAML or JSON text, or the path of such a file. Results are those of
``blis run`` with the same knobs, to the last digit.

    >>> import blis
    >>> r = blis.run({"model": "meta-llama/llama-3.1-8b-instruct", "num-requests": 200})
    >>> r.report["requests"]["completed"]
    200
    >>> r.to_pandas()["ttft_ms"].quantile(0.99)  # doctest: +SKIP

Simulations release the GIL: threads (``blis.sweep``'s local backend) use
every core. Bad input raises :class:`BlisError` with the one-line message
the ``blis`` command prints.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Mapping, Optional, Union

from . import _blis
from ._blis import BlisError

__all__ = ["BlisError", "Result", "run", "sweep", "search", "__version__"]
__version__ = _blis.__version__

Scenario = Union[Mapping[str, Any], str, "os.PathLike[str]"]


def _as_text(scenario: Scenario) -> "tuple[str, Optional[str]]":
    """(YAML/JSON text, path) for the native side: a dict becomes JSON, a
    path stays a path (its relative paths are relative to its folder), and
    any other string is YAML text."""
    if isinstance(scenario, Mapping):
        return json.dumps(dict(scenario)), None
    if isinstance(scenario, os.PathLike) or (isinstance(scenario, str) and "\n" not in scenario and os.path.isfile(scenario)):
        return "", os.fspath(scenario)
    if isinstance(scenario, str):
        return scenario, None
    raise TypeError(f"a scenario is a dict, YAML/JSON text or a path, not {type(scenario).__name__}")


class Result:
    """What one simulation reported.

    ``report`` is the JSON report of ``blis run --format json`` as a dict;
    ``requests`` the per-request records as columns (a dict of lists);
    :meth:`to_pandas` and :meth:`to_arrow` make a table of them.
    """

    def __init__(self, report: Dict[str, Any], requests: Dict[str, List[Any]]):
        self.report = report
        self.requests = requests

    def to_pandas(self):
        """The per-request records as a ``pandas.DataFrame`` (needs pandas)."""
        import pandas

        return pandas.DataFrame(self.requests)

    def to_arrow(self):
        """The per-request records as a ``pyarrow.Table`` (needs pyarrow)."""
        import pyarrow

        return pyarrow.table(self.requests)

    def __repr__(self) -> str:
        r = self.report["requests"]
        p99 = self.report["latency_ms"]["ttft"]["p99"]
        ttft = "no TTFT (nothing completed)" if p99 is None else f"TTFT p99 {p99:.1f} ms"
        return f"<blis.Result: {r['completed']} of {r['injected']} requests completed, {ttft}>"


def run(scenario: Scenario, *, requests: bool = True) -> Result:
    """Simulates ``scenario`` (a dict, YAML/JSON text or a path) as ``blis
    run`` would; with ``requests=False`` the per-request records are not
    kept."""
    text, path = _as_text(scenario)
    report, columns = _blis.run(text, path, requests)
    return Result(json.loads(report), columns)


def sweep(base: Scenario, grid: Union[Mapping[str, Any], str, "os.PathLike[str]"], *, backend: str = "local", jobs: Optional[int] = None) -> List[str]:
    """Runs ``base`` at every point of ``grid`` (``blis sweep --grid``'s
    schema: ``axes`` and ``zip``) and returns the CSV lines ``blis sweep``
    writes, header first, points in order.

    ``backend="local"`` runs points on ``jobs`` threads (default: every
    core); ``backend="ray"`` runs each point as a Ray task on the cluster
    ``ray.init()`` connected to (or a local one it starts). Both give the
    same lines.
    """
    base_text, base_path = _as_text(base)
    if isinstance(grid, Mapping):
        grid_text = json.dumps(dict(grid))
    elif isinstance(grid, os.PathLike) or (isinstance(grid, str) and "\n" not in grid and os.path.isfile(grid)):
        with open(grid, encoding="utf-8") as f:
            grid_text = f.read()
    else:
        grid_text = grid
    header, points = _blis.grid_points(grid_text, base_text, base_path)
    if backend == "local":
        with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
            rows = list(pool.map(lambda ip: _blis.sweep_row(base_text, ip[1], ip[0], base_path), enumerate(points)))
    elif backend == "ray":
        import ray

        if not ray.is_initialized():
            ray.init(num_cpus=jobs)
        task = ray.remote(_ray_row)
        rows = ray.get([task.remote(base_text, p, i, base_path) for i, p in enumerate(points)])
    else:
        raise BlisError(f"backend `{backend}`: allowed values are local, ray")
    return [header, *rows]


def _ray_row(base_text: str, point: str, index: int, base_path: Optional[str]) -> str:
    """One point's row, on a Ray worker."""
    from blis import _blis as native

    return native.sweep_row(base_text, point, index, base_path)


from . import search  # noqa: E402  (needs run's helpers above)
