"""The tree keeps its shape: import layers (import-linter contracts in pyproject.toml), no
code outside ops.py asking which class an op is, and ruff clean (its configuration in
pyproject.toml) over loopopt, tests and benchmarks."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OP_CLASSES = {"Op", "Contraction", "ConvNd", "Conv1d", "Conv2d", "Conv3d", "Matmul", "Gemm"}


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_import_layers_are_kept():
    pytest.importorskip("importlinter")
    result = _run("-c", "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_clean():
    pytest.importorskip("ruff")
    result = _run("-m", "ruff", "check", "loopopt", "tests", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr


def _op_class_checks(path: Path) -> list[str]:
    """``isinstance(x, <op class>)`` calls in one file, as ``path:line``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        is_call = isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance"
        if is_call and len(node.args) == 2:
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            names = {getattr(k, "id", getattr(k, "attr", None)) for k in kinds}
            if names & OP_CLASSES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_ops_describe_themselves():
    sources = [p for d in ("loopopt", "benchmarks") for p in (ROOT / d).rglob("*.py") if p.name != "ops.py"]
    checks = [hit for path in sources for hit in _op_class_checks(path)]
    # the one allowed: Schedule checks that it was given an op at all
    assert [hit.split(":")[0] for hit in checks] == ["loopopt/schedule.py"], checks


def test_every_module_has_a_layer():
    """A module missing from the layer contract would be checked by nobody."""
    import pkgutil
    import tomllib

    import loopopt

    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    layered = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    modules = {info.name for info in pkgutil.iter_modules(loopopt.__path__)}
    assert modules == layered, (f"not in a layer: {sorted(modules - layered)}; "
                                f"unknown: {sorted(layered - modules)}")
