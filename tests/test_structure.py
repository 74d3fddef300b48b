"""The tree keeps its shape: import layers (import-linter contracts in pyproject.toml), no
code outside ops.py asking which class an op is, and ruff clean (its configuration in
pyproject.toml) over loopopt, tests and benchmarks."""
import ast
import re
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


@pytest.mark.slow
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


def _contract(name_start: str) -> dict:
    import tomllib
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c["name"].startswith(name_start))


def test_every_module_outside_the_targets_is_kept_from_their_folders():
    """The forbidden contract (nothing outside ``loopopt.targets`` imports a target's folder) names every
    top-level module but the targets, so a new module is checked too."""
    import pkgutil

    import loopopt

    sources = set(_contract("targets: nothing outside")["source_modules"])
    modules = {f"loopopt.{info.name}" for info in pkgutil.iter_modules(loopopt.__path__)}
    modules.discard("loopopt.targets")
    assert sources == modules, (f"not a source: {sorted(modules - sources)}; "
                                f"unknown: {sorted(sources - modules)}")


def _imported_modules(path: Path, package: str) -> set[str]:
    """The absolute names ``path`` (a module of ``package``) imports: each module, and each name taken
    from one (``from . import x`` imports the module ``x``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = parts[: len(parts) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return found


def test_target_folders_are_independent():
    """A target folder imports no other target's folder (each reaches the shared code, ``targets.base``
    and ``targets.registry`` only); a new target is a folder and a registry line."""
    targets = ROOT / "loopopt" / "targets"
    folders = sorted(p.name for p in targets.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert "x86" in folders
    crossings = []
    for folder in folders:
        for path in (targets / folder).rglob("*.py"):
            package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
            others = {f"loopopt.targets.{other}" for other in folders if other != folder}
            crossings += [f"{path.relative_to(ROOT)} -> {m}" for m in _imported_modules(path, package)
                          if any(m == o or m.startswith(o + ".") for o in others)]
    assert not crossings, crossings


TABLE_FILES = {"codegen/instr.py"}     # the target-neutral tables: the plain-C variant is named "scalar"


def test_no_isa_name_outside_the_targets():
    """No module outside ``targets/`` spells an instruction-set variant's name (any registered target's,
    ``registry.isa_names()``) as a string: it asks the target (``target_of_isa``, ``resolve_isa``,
    ``computes``, ``search_rules``, ``core_costs``) instead. User-facing examples and tests may name them."""
    from loopopt.targets.registry import isa_names
    literal = re.compile(r"[\"'](" + "|".join(map(re.escape, isa_names())) + r")[\"']")
    package = ROOT / "loopopt"
    names = (path.relative_to(package).as_posix() for path in package.rglob("*.py")
             if literal.search(path.read_text()))
    spelled = {name for name in names if not name.startswith("targets/") and name not in TABLE_FILES}
    assert not spelled, f"ask the target instead: {sorted(spelled)}"


X86_INTRINSIC = re.compile(r"_mm(128|256|512)?_[a-z]|__m(128|256|512)")


def test_x86_intrinsics_only_in_the_x86_folder():
    """The C emitter and everything outside ``targets/x86`` print x86 C only through x86's tables (an
    ``Isa``'s entries and helpers), never by spelling an intrinsic or a vector type."""
    package = ROOT / "loopopt"
    x86 = package / "targets" / "x86"
    spelled = sorted(path.relative_to(package).as_posix() for path in package.rglob("*.py")
                     if not path.is_relative_to(x86) and X86_INTRINSIC.search(path.read_text()))
    assert not spelled, f"x86 intrinsics outside targets/x86: {spelled}"


HAND_INDENT = re.compile(r"""["'] {4,}["'] ?[*+]|\{' {4,}' \*""")     # "    " * depth, "    " + line


def test_c_indentation_only_in_the_printer():
    """C printers indent through ``codegen/cprint.py`` (``line``, ``indented``, ``block``, ``nest``),
    never by multiplying or prefixing spaces themselves."""
    package = ROOT / "loopopt"
    printer = package / "codegen" / "cprint.py"
    sites = sorted(f"{path.relative_to(package).as_posix()}:{number}"
                   for path in package.rglob("*.py") if path != printer
                   for number, text in enumerate(path.read_text().splitlines(), 1)
                   if HAND_INDENT.search(text))
    assert not sites, f"hand-indented C (use codegen/cprint.py): {sites}"
