"""Durations for people: three significant digits in s, ms, us or ns."""
import math

import pytest

from loopopt.units import duration, in_unit, time_unit


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
