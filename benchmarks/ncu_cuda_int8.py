"""Where ResNet-50's quantized 3x3 convs at N=32 spend their time on the GPU, next to their peers: each
layer's fastest TMA pixel-box kernel of ``bench_cuda_int8`` (``WINNERS``), verified bit for bit, then
cuDNN's float16 conv and Triton's int8 GEMM of the im2col'd shape (``triton_conv_gemm``), each launched
once inside the NVTX range ``profile`` (everything before it, warm-ups and the choice of Triton's tile,
outside), for Nsight Compute:

``ncu --clock-control none --nvtx --nvtx-include 'profile/' --section SpeedOfLight --section
InstructionStats --section WarpStateStats --csv python benchmarks/ncu_cuda_int8.py``

The kernels run in the order the labels print (``conv2_x loopopt``, ``conv2_x cuDNN``, ...); with the
argument ``ours``, loopopt's alone.

``python benchmarks/ncu_cuda_int8.py floor``: each layer's ``WINNERS`` and ``SECOND`` tiles (verified bit for
bit) timed whole and
with the epilogue printed empty (the products alone: their sums are stored nowhere), one launch with the
L2 flushed and in a CUDA graph (``cuda_bench``), to place the time between the main loop and the
epilogue.
"""
from __future__ import annotations

import sys

import numpy as np
from bench_cuda_int8 import case_op, expected, inputs, triton_conv_gemm

from loopopt.dataflows import gpu_wgmma
from loopopt.targets.cuda import device

# the ninth session's fastest pixel-box tiles (docs/benchmarks.md, "the epilogue from the accumulators'
# registers")
WIDE_BOX = {"block_m": 128, "block_n": 64, "warps_m": 2, "depth": 64, "stages": 4, "swizzle": 64,
            "engine": "tma"}
SPECIALIZED_BOX = {"block_m": 128, "block_n": 128, "warps_m": 2, "specialize": True, "depth": 128,
                   "stages": 4, "swizzle": 128, "engine": "tma"}
WINNERS = {"conv2_x.n32.u8": WIDE_BOX, "conv3_x.n32.u8": SPECIALIZED_BOX, "conv4_x.n32.u8": SPECIALIZED_BOX}
# persistent tile loops (one warpgroup of consumers: two blocks an SM; two: one), the epilogue staged
WALKING = {"specialize": True, "persistent": True, "stages": 4, "engine": "tma"}
SECOND = {"conv2_x.n32.u8": [WALKING | {"block_m": 128, "block_n": 64, "warps_m": warps, "depth": 64,
                                        "swizzle": 64} for warps in (1, 2)],
          "conv3_x.n32.u8": [WALKING | {"block_m": 64, "block_n": 128, "warps_m": 1, "depth": 128,
                                        "swizzle": 128},
                             SPECIALIZED_BOX | {"persistent": True}],
          "conv4_x.n32.u8": [WALKING | {"block_m": 64, "block_n": 128, "warps_m": 1, "depth": 128,
                                        "swizzle": 128},
                             SPECIALIZED_BOX | {"persistent": True}]}


def profiled(label: str, call) -> None:
    """``call`` warmed up outside the range, then launched once inside ``profile``."""
    import torch
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    print(label, flush=True)
    torch.cuda.nvtx.range_push("profile")
    call()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


def launch(with_peers: bool = True) -> bool:
    import torch
    torch.backends.cudnn.benchmark = True
    ok = True
    for case, tiles in [(name, tiles) for name in WINNERS for tiles in (WINNERS[name], *SECOND[name])]:
        op = case_op(case)
        kernel = gpu_wgmma(op, **tiles).compile(target="cuda")
        args, params = inputs(op)
        buffers = kernel.prepare(*args, **params)
        kernel.run(buffers)
        exact = bool(np.array_equal(kernel.output(buffers), expected(op, args, params)))
        ok &= exact
        print(f"{case} {tiles}: {'bit-exact' if exact else 'WRONG'}; {kernel.build.registers} registers, "
              f"{kernel.build.spill_bytes} spill bytes", flush=True)
        profiled(f"{case} loopopt {tiles}", lambda kernel=kernel, buffers=buffers: kernel.run(buffers))
        if tiles is not WINNERS[case] or not with_peers:
            continue
        x = torch.randn(*op.tensor(op.inputs[0]).shape, device="cuda").half().contiguous(
            memory_format=torch.channels_last)
        w = torch.randn(*op.tensor(op.inputs[1]).shape, device="cuda").half().contiguous(
            memory_format=torch.channels_last)
        profiled(f"{case} cuDNN", lambda x=x, w=w: torch.nn.functional.conv2d(x, w, None, 1, 1))
        name, call = triton_conv_gemm(op)
        profiled(f"{case} {name}", call)
    return ok


def floor() -> None:
    """Each tile's kernel whole and without its epilogue: ms of one launch (L2 flushed) and in a graph."""
    from unittest import mock

    from bench_cuda_tensor import build_all
    from cuda_bench import events_median, graph_median

    from loopopt.targets.cuda.tensor_printer import TensorPrinter
    runs = [(case, tiles, gpu_wgmma(case_op(case), **tiles)) for case in WINNERS
            for tiles in (WINNERS[case], *SECOND[case])]
    no_epilogue = mock.patch.object(TensorPrinter, "_row_epilogue", lambda self, depth: None)
    with no_epilogue:
        build_all([schedule for *_, schedule in runs])
    build_all([schedule for *_, schedule in runs])
    for case, tiles, schedule in runs:
        op = case_op(case)
        args, params = inputs(op)
        with no_epilogue:
            empty = schedule.compile(target="cuda")
        whole = schedule.compile(target="cuda")
        times = []
        for kernel in (whole, empty):
            buffers = kernel.prepare(*args, **params)
            if kernel is whole:
                kernel.run(buffers)
                exact = np.array_equal(kernel.output(buffers), expected(op, args, params))
                print(f"{case} {tiles}: {'bit-exact' if exact else 'WRONG'}, {kernel.build.registers} "
                      f"registers, {kernel.build.spill_bytes} spill bytes", flush=True)
            times.append((events_median(lambda k=kernel, b=buffers: k.run(b)) * 1e3,
                          graph_median(lambda k=kernel, b=buffers: k.run(b)) * 1e3))
        print(f"{case} {tiles}: whole {times[0][0]:.4f} / {times[0][1]:.4f} ms, without the epilogue "
              f"{times[1][0]:.4f} / {times[1][1]:.4f} ms (one launch / graph)", flush=True)


if __name__ == "__main__":
    device.cupy()
    if sys.argv[1:] == ["floor"]:
        floor()
        sys.exit(0)
    sys.exit(0 if launch(with_peers=sys.argv[1:] != ["ours"]) else 1)
