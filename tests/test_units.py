"""Durations for people: three significant digits in s, ms, us or ns."""
import math

import pytest
from json_schemas import SCHEMAS, problems

import loopopt as lo
from loopopt.units import duration, in_unit, json_units, rate_unit, significant, time_unit


@pytest.mark.parametrize("seconds, text", [
    (0.000564, "564 us"), (0.00123, "1.23 ms"), (0.0123, "12.3 ms"), (12.0, "12.0 s"), (5.4e-6, "5.40 us"),
    (7.89e-7, "789 ns"), (2.5e-10, "0.25 ns"), (0.0, "0.00 ms"), (math.nan, "nan ms"), (1e-3, "1.00 ms"),
])
def test_duration_shows_three_significant_digits(seconds, text):
    assert duration(seconds) == text


def test_a_column_in_one_unit():
    """A table takes the unit of its smallest value; larger ones keep their digits in it."""
    name, scale = time_unit(4.2e-5)
    assert (name, scale) == ("us", 1e-6)
    assert [in_unit(s, scale) for s in (4.2e-5, 1.5e-4, 0.0123)] == ["42.0", "150", "12300"]


def test_significant_digits_without_exponent():
    values = (0.00145, 1.2345, 231.4, 4718.6, 0.0)
    assert [significant(v) for v in values] == ["0.00145", "1.23", "231", "4719", "0"]


def test_rate_unit_follows_the_arithmetic():
    conv = lo.Conv2d(4, 8, 3, height=6, width=6)
    assert rate_unit(conv) == json_units(conv)["rate"] == "GFLOP/s"
    assert rate_unit(conv.with_quant(lo.QuantSpec())) == "GOP/s"
    assert json_units() == {"time": "s", "energy": "J", "data": "bytes"}


def test_the_json_schema_check_finds_what_breaks_the_convention():
    """The checker the per-command schema tests use: missing keys, wrong types, keys in other units."""
    good = {"units": json_units(), "provenance": {}, "model": "m",
            "total_s": {"loopopt": 1e-3, "onnxruntime": None},
            "nodes": [{"node": "conv", "flops": 10, "onnxruntime_s": None}]}
    assert problems(good, SCHEMAS["onnx"]) == []
    bad = {**good, "total_s": {"loopopt": "1"},
           "nodes": [{"node": "conv", "flops": 1.5, "onnxruntime_ms": 2.0}]}
    assert problems(bad, SCHEMAS["onnx"]) == [
        "$.total_s: no key 'onnxruntime'",
        "$.total_s.loopopt: str '1' is not (<class 'int'>, <class 'float'>, <class 'NoneType'>)",
        "$.nodes[0]: no key 'onnxruntime_s'", "$.nodes[0].flops: float 1.5 is not <class 'int'>",
        "$.nodes[0].onnxruntime_ms: a key in another unit or not lower case"]
