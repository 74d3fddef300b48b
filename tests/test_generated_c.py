"""Generated C is byte-identical to the recorded corpus (tests/data/generated_c.json).

A refactor of codegen must not change any kernel. A change meant to alter generated C
regenerates the record with ``python tests/test_generated_c.py --record`` and says why
in its commit."""
import json
import sys
from pathlib import Path

from generated_corpus import hashes

RECORD = Path(__file__).parent / "data" / "generated_c.json"


def test_generated_c_matches_record():
    recorded = json.loads(RECORD.read_text())
    current = hashes()
    assert sorted(current) == sorted(recorded), "the corpus changed: record it again"
    changed = sorted(key for key in current if current[key] != recorded[key])
    assert not changed, f"{len(changed)} generated kernels changed, e.g. {changed[:5]}"


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    RECORD.write_text(json.dumps(hashes(), indent=1, sort_keys=True) + "\n")
