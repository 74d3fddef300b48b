"""compare(): verified rows, table, HTML, CSV and JSON exports."""
import json

import pytest

import loopopt as lo
from loopopt import dataflows
from loopopt.compare import compare

NAMES = ["naive", "output_stationary", "weight_stationary"]


@pytest.fixture(scope="module")
def comparison():
    op = lo.Conv2d(4, 8, 3, padding=1, height=6, width=6)
    return compare(op, [dataflows.PRESETS[n](op) for n in NAMES], NAMES, progress=False, budget=0.05)


def test_rows_verified_and_analysed(comparison):
    assert [r.name for r in comparison.rows] == NAMES
    for row in comparison.rows:
        assert row.verified and row.gflops > 0 and row.dram_bytes > 0 and row.energy_uj > 0
        assert row.predicted_ms > 0
        assert set(row.misses) >= {"registers", "L1", "DRAM"}


def test_exports(comparison, tmp_path):
    text = str(comparison)
    assert all(n in text for n in NAMES) and "GFLOP/s" in text
    assert "<table>" in comparison._repr_html_()
    assert json.loads(comparison.to_json())["rows"][1]["name"] == "output_stationary"
    lines = comparison.to_csv(tmp_path / "c.csv").read_text().splitlines()
    assert len(lines) == 1 + len(NAMES) and lines[0].startswith("name,")
    assert {"noisy", "provenance_fingerprint", "provenance_cpu", "provenance_compiler", "provenance_threads",
            "provenance_utc", "provenance_loopopt"} <= set(lines[0].split(","))
    data = comparison.to_dict()
    assert data["provenance"]["fingerprint"] == lo.machine_profile().fingerprint
    assert data["ranking"] == comparison.ranking() and sorted(data["ranking"]) == sorted(NAMES)


def test_without_reuse_and_mismatched_names():
    op = lo.Matmul(8, 16, 8)
    cmp = compare(op, [dataflows.output_stationary(op)], ["os"], reuse=False, progress=False, budget=0.02)
    assert cmp.rows[0].dram_bytes is None and not cmp.profiles
    assert cmp.rows[0].predicted_ms > 0                    # the kernel model, without memory traffic
    with pytest.raises(ValueError, match="names"):
        compare(op, [lo.Schedule(op)], ["a", "b"], progress=False)
    with pytest.raises(ValueError, match="got 1 schedules but 2 ISAs"):
        compare(op, [lo.Schedule(op)], ["a"], isa=["scalar", "scalar"], progress=False)
    with pytest.raises(ValueError, match=r"origins names \['b'\] but the rows are \['a'\]"):
        compare(op, [lo.Schedule(op)], ["a"], origins={"b": "somewhere"}, progress=False)


def test_an_isa_per_row_and_origins():
    op = lo.Matmul(8, 16, 8)
    schedule, origin = dataflows.output_stationary(op), "stored schedule x.toml, searched on this CPU"
    cmp = compare(op, [schedule, schedule], ["vector", "scalar"], isa=["auto", "scalar"], reuse=False,
                  progress=False, budget=0.02, origins={"vector": origin})
    assert [r.isa for r in cmp.rows] == [lo.available_isas()[0], "scalar"]
    assert all(r.verified for r in cmp.rows)
    assert f"vector: {origin}" in str(cmp).splitlines()
    assert cmp.to_dict()["origins"] == cmp.origins == {"vector": origin}


@pytest.mark.slow      # the quick tier compares a Conv2d (above) and runs these ops' kernels elsewhere
@pytest.mark.parametrize("op", [
    lo.Conv3d(3, 8, 3, padding=((1, 0), 1, (0, 2)), depth=3, height=4, width=5),
    lo.Matmul(6, 16, 5, batch=2, trans_a=True, trans_b=True),
    lo.Conv1d(4, 8, 4, padding="same", stride=1, length=12),
    lo.Gemm(6, 16, 5, trans_a=True, alpha=2.0, beta=-1.0, c_shape=(6, 1)),
], ids=repr)
def test_new_ops_compare_verified_and_analysed(op):
    cmp = compare(op, [dataflows.naive(op), dataflows.output_stationary(op)], ["naive", "os"], progress=False,
                  budget=0.02)
    assert all(row.verified and row.dram_bytes > 0 and row.predicted_ms > 0 for row in cmp.rows)
