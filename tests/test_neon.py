"""The NEON target: its instruction tables lane by lane, and its kernels against the reference, run
under ``qemu-aarch64 -cpu max`` here (natively on an AArch64 machine). Skipped, with the reason, where
the cross compiler or the emulator is missing (README: how to install them)."""
import warnings

import numpy as np
import pytest
import test_isa_int_tables as int_tables
import test_isa_tables as float_tables
from helpers import HYPOTHESIS, SPECS, check, check_quantized, conv_ops, matmul_ops, quantized_schedules, schedules
from helpers import tiers as both_tiers
from hypothesis import given, settings
from hypothesis import strategies as st

import loopopt as lo
from loopopt.codegen.isa import INT_MEANINGS, MEANINGS, SHARED_OPS
from loopopt.targets import target
from loopopt.targets.neon import toolchain
from loopopt.targets.neon.isa import NEON, NEON_INT
from loopopt.targets.neon.target import function_driver

MISSING = toolchain.missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"neon kernels cannot run here: {MISSING}")
ISA = "neon"


def test_tables_have_every_operation_and_its_meaning():
    assert set(NEON.ops) == set(MEANINGS)
    assert set(NEON_INT.ops) == set(INT_MEANINGS) | set(SHARED_OPS)
    assert all(NEON.ops[name].meaning == MEANINGS[name] for name in NEON.ops)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_float_instructions_match_their_scalar_meaning(seed):
    driver = function_driver(float_tables.harness(NEON), "probe", float_tables.PARAMS, NEON.compile_flags)
    float_tables.check_lanes(NEON, driver, seed)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_int_instructions_match_their_scalar_meaning(seed):
    source = int_tables.harness(NEON_INT, NEON)
    int_tables.check_lanes(NEON_INT, function_driver(source, "probe", int_tables.PARAMS, NEON_INT.compile_flags),
                           seed)
