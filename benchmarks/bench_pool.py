"""The pooling nodes of ResNet-18/50 and MobileNetV2, one at a time: loopopt's pooling kernel
(``lo.PoolSchedule(...).compile()``) on a channels-last input as the plan hands it on, a max pool's
kernel reading the NCHW input as it is (``input_layout``: as a QOperator ResNet's stem conv hands it
on), the same node through the backend as a one-node model from NCHW (``rep.run``: a max read as it
is, an average's input copied channels-last; the output copied out), the numpy path the backend ran
before (``loopopt.onnx.pooling.POOLS``, on the same channels-last input) and onnxruntime's one-node
model (NCHW), one thread; rounds interleaved, the median of each round's mean.

    python benchmarks/bench_pool.py [--rounds 15] [--calls 20]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import loopopt as lo  # noqa: E402
from loopopt.onnx import backend  # noqa: E402
from loopopt.onnx.peer import session_options  # noqa: E402
from loopopt.onnx.pooling import POOL_ATTRIBUTES, POOLS, pool_op  # noqa: E402

STEM = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
NODES = [   # (what, op type, input shape, dtype, attributes)
    ("ResNet stem MaxPool", "MaxPool", (1, 64, 112, 112), np.float32, STEM),
    ("ResNet stem MaxPool, int8 model", "MaxPool", (1, 64, 112, 112), np.uint8, STEM),
    ("ResNet-18 GlobalAveragePool", "GlobalAveragePool", (1, 512, 7, 7), np.float32, {}),
    ("ResNet-50 GlobalAveragePool", "GlobalAveragePool", (1, 2048, 7, 7), np.float32, {}),
    ("MobileNetV2 GlobalAveragePool", "GlobalAveragePool", (1, 1280, 7, 7), np.float32, {}),
]
ELEMENTS = {np.float32: "FLOAT", np.uint8: "UINT8"}


def _model(op_type: str, op: lo.Pool, attributes: dict):
    from onnx import TensorProto, helper
    node = helper.make_node(op_type, ["x"], ["y"], **attributes)
    element = getattr(TensorProto, ELEMENTS[np.dtype(op.dtype).type])
    graph = helper.make_graph([node], op_type, [helper.make_tensor_value_info("x", element, op.input_shape)],
                              [helper.make_tensor_value_info("y", element, op.output_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def contenders(op_type: str, shape: tuple[int, ...], dtype: type, attributes: dict) -> dict[str, Callable]:
    """Each contender's call on one random input (all checked against the numpy path first)."""
    import onnxruntime
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) if dtype == np.float32 else rng.integers(0, 256, shape)).astype(dtype)
    last = np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 1, -1)), -1, 1)    # as a conv hands it on
    values = POOL_ATTRIBUTES | attributes
    op = pool_op(op_type, shape, dtype, values)
    kernel = lo.PoolSchedule(op).compile()
    first = lo.PoolSchedule(op, input_layout=op.first_layout).compile() if op.kind == "max" else None
    out = np.empty(kernel.out_shape, kernel.dtype)
    model = _model(op_type, op, attributes)
    rep = backend.prepare(model, strict=True)
    session = onnxruntime.InferenceSession(model.SerializeToString(), session_options(1),
                                           providers=["CPUExecutionProvider"])
    calls = {"loopopt kernel (channels-last in)": lambda: kernel(last, out),
             **({"loopopt kernel (NCHW in)": lambda: first(x, out)} if op.kind == "max" else {}),
             "loopopt rep.run (NCHW in)": lambda: rep.run([x])[0],
             "numpy path (before)": lambda: POOLS[op_type](last, values),
             "onnxruntime (NCHW in)": lambda: session.run(None, {"x": x})[0]}
    want = POOLS[op_type](last, values)
    for name, call in calls.items():
        np.testing.assert_allclose(call(), want, rtol=1e-5, atol=1e-6, err_msg=name)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20, help="calls per contender per round")
    args = parser.parse_args()
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown CPU")
    print(f"{model}; 1 thread; median over {args.rounds} interleaved rounds of {args.calls} calls each, "
          "in us")
    for what, op_type, shape, dtype, attributes in NODES:
        calls = contenders(op_type, shape, dtype, attributes)
        times: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, call in calls.items():
                start = time.perf_counter()
                for _ in range(args.calls):
                    call()
                times[name].append((time.perf_counter() - start) / args.calls)
        medians = {name: statistics.median(kept) * 1e6 for name, kept in times.items()}
        ort = medians["onnxruntime (NCHW in)"]
        print(f"{what} {shape} {np.dtype(dtype)}: " + ", ".join(
            f"{name} {us:.1f} ({ort / us:.2f}x ORT)" for name, us in medians.items()), flush=True)


if __name__ == "__main__":
    main()
