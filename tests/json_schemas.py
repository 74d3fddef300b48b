"""The schema of every ``loopopt COMMAND --json`` output (docs/reference/json.md) and its checker: the keys
each object must have with their types, one unit convention everywhere (seconds, joules, bytes, ``rate``
in the ``units`` object's unit), lower-case keys."""
from __future__ import annotations

import re

NUMBER, OPTIONAL_NUMBER, TEXT = (int, float), (int, float, type(None)), str
# a key that names another unit than the convention's (ms, us, uJ, pJ, MB, GFLOP, MFLOP) or is not lower case
FOREIGN_UNIT = re.compile(r"(_(ms|us|ns|uj|pj|mb)$)|gflop|mflop|[A-Z]")
COMMON = {"units": {"time": TEXT, "energy": TEXT, "data": TEXT}, "provenance": dict}
ROW = {"name": TEXT, "isa": TEXT, "median_s": OPTIONAL_NUMBER, "min_s": OPTIONAL_NUMBER,
       "iqr_s": OPTIONAL_NUMBER, "rate": OPTIONAL_NUMBER, "percent_of_peak": OPTIONAL_NUMBER,
       "verified": bool, "max_error": NUMBER,
       "predicted_s": OPTIONAL_NUMBER, "dram_bytes": (int, type(None)), "energy_j": OPTIONAL_NUMBER,
       "level_energy_j": dict, "relative_error": OPTIONAL_NUMBER, "algorithm": TEXT}
COMPARE = {**COMMON, "op": TEXT, "flops": int, "peak": NUMBER, "timing": dict, "ranking": list, "rows": [ROW]}
TIMING = {"median_s": NUMBER, "min_s": NUMBER, "iqr_s": NUMBER, "rate": NUMBER, "percent_of_peak": NUMBER,
          "verified": bool}
SCHEMAS = {
    "compare": COMPARE,
    "report": {**COMPARE, "report": TEXT},
    "tune": {**COMMON, "op": TEXT, "elapsed_s": NUMBER, "algorithm": TEXT, "cut": dict,
             "convergence": {"converged": (bool, type(None)), "gain_last_third": OPTIONAL_NUMBER,
                             "verdict": TEXT},
             "best": {"schedule": TEXT, **TIMING},
             "trials": [{"number": int, "elapsed_s": NUMBER, "timing": TIMING}]},
    "reuse": {**COMMON, "op": TEXT, "tensors": dict, "energy_j": NUMBER, "compute_energy_j": NUMBER,
              "levels": [{"name": TEXT, "accesses": int, "misses": int, "bytes": int, "energy_j": NUMBER}]},
    "layers": {**COMMON, "filter": TEXT,
               "layers": [{"name": TEXT, "in_channels": int, "out_channels": int, "flops": int, "kind": TEXT,
                           "stored": dict}]},
    "show": {**COMMON, "op": TEXT, "loops": list, "pseudocode": TEXT},
    "onnx": {**COMMON, "model": TEXT, "total_s": {"loopopt": OPTIONAL_NUMBER, "onnxruntime": OPTIONAL_NUMBER},
             "nodes": [{"node": TEXT, "flops": int, "onnxruntime_s": OPTIONAL_NUMBER}]},
}


def problems(data, schema, where: str = "$") -> list[str]:
    """What in ``data`` does not conform to ``schema`` (a dict of required keys, a one-item list for every
    item of a list, or a type or a tuple of types), and every key in another unit or not lower case."""
    found = []
    if isinstance(schema, dict):
        if not isinstance(data, dict):
            return [f"{where}: an object expected, got {type(data).__name__}"]
        found += [f"{where}: no key {key!r}" for key in schema if key not in data]
        found += [problem for key in schema if key in data
                  for problem in problems(data[key], schema[key], f"{where}.{key}")]
    elif isinstance(schema, list):
        if not isinstance(data, list):
            return [f"{where}: a list expected, got {type(data).__name__}"]
        found += [problem for i, item in enumerate(data)
                  for problem in problems(item, schema[0], f"{where}[{i}]")]
    else:
        types = schema if isinstance(schema, tuple) else (schema,)
        if not isinstance(data, types) or (isinstance(data, bool) and bool not in types):
            found.append(f"{where}: {type(data).__name__} {data!r:.40} is not {schema}")
    return found + _foreign_keys(data, where) if where == "$" else found


def _foreign_keys(data, where: str) -> list[str]:
    """Keys anywhere in ``data`` that name another unit than the convention's, or are not lower case (the
    values of ``stored``, ``tensors``, ``misses`` and the other maps keyed by names are left alone)."""
    if isinstance(data, list):
        return [p for i, item in enumerate(data) for p in _foreign_keys(item, f"{where}[{i}]")]
    if not isinstance(data, dict):
        return []
    named = ("tensors", "misses", "level_bytes", "level_energy_j", "stored", "origins", "loopopt",
             "provenance", "knobs", "model", "skipped", "by_algorithm", "integer_check", "units", "layouts")
    return [f"{where}.{key}: a key in another unit or not lower case" for key in data
            if FOREIGN_UNIT.search(key)] + [p for key, value in data.items() if key not in named
                                           for p in _foreign_keys(value, f"{where}.{key}")]


def check(command: str, data, rate: str | None = None) -> None:
    """Assert that ``data`` (``loopopt command --json``) conforms to the command's schema, with ``rate`` the
    unit of its rates where given."""
    found = problems(data, SCHEMAS[command])
    assert found == [], found
    if rate is not None:
        assert data["units"]["rate"] == rate
