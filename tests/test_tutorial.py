"""The tutorial's python blocks run, in order, in one namespace (in a temporary directory)."""
import re
from pathlib import Path

import pytest

TUTORIAL = Path(__file__).resolve().parent.parent / "docs" / "tutorial.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


@pytest.mark.slow      # end to end; compile, measure, reuse, compare and plot have quick tests of their own
def test_tutorial_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(TUTORIAL.read_text())
    assert len(blocks) >= 10
    namespace: dict = {}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"{TUTORIAL.name} block {number}", "exec"), namespace)  # noqa: S102
    assert (tmp_path / "compare.png").stat().st_size > 0
