"""Generated C is byte-identical to the recorded corpus (tests/data/generated_c.json).

A refactor of codegen must not change any kernel. A change meant to alter generated C
regenerates the record with ``python tests/test_generated_c.py --record`` and says why
in its commit."""
import json
import sys
from pathlib import Path

import pytest
from generated_corpus import hashes

RECORD = Path(__file__).parent / "data" / "generated_c.json"
QUICK_EVERY = 40      # the quick tier checks the entries of every 40th pair of a stored file and an op


def _check(current: dict[str, str]) -> None:
    recorded = json.loads(RECORD.read_text())
    missing = sorted(set(current) - set(recorded))
    assert not missing, f"the corpus changed (e.g. {missing[:3]}): record it again"
    changed = sorted(key for key in current if current[key] != recorded[key])
    assert not changed, f"{len(changed)} generated kernels changed, e.g. {changed[:5]}"


def test_generated_c_matches_record_quick():
    _check(hashes(every=QUICK_EVERY))


@pytest.mark.slow
def test_generated_c_matches_record():
    current = hashes()
    assert sorted(current) == sorted(json.loads(RECORD.read_text())), "the corpus changed: record it again"
    _check(current)


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    RECORD.write_text(json.dumps(hashes(), indent=1, sort_keys=True) + "\n")
