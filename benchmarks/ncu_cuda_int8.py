"""Where ResNet-50's quantized 3x3 convs at N=32 spend their time on the GPU, next to their peers: each
layer's fastest TMA pixel-box kernel of ``bench_cuda_int8`` (``WINNERS``) and the ninth session's
(``SECOND``), verified bit for bit, then
cuDNN's float16 conv and Triton's int8 GEMM of the im2col'd shape (``triton_conv_gemm``), each launched
once inside the NVTX range ``profile`` (everything before it, warm-ups and the choice of Triton's tile,
outside), for Nsight Compute:

``ncu --clock-control none --nvtx --nvtx-include 'profile/' --section SpeedOfLight --section
InstructionStats --section WarpStateStats --csv python benchmarks/ncu_cuda_int8.py``

The kernels run in the order the labels print (``conv2_x loopopt``, ``conv2_x cuDNN``, ...); with the
argument ``ours``, loopopt's alone.

``python benchmarks/ncu_cuda_int8.py floor``: each layer's ``WINNERS`` and ``SECOND`` tiles (verified bit for
bit) timed whole, without the padding's border term and with the epilogue printed empty (the products
alone: their sums are stored nowhere), one launch with the L2 flushed and in a CUDA graph
(``cuda_bench``), to place the time between the main loop, the border term and the rest of the
epilogue.
"""
from __future__ import annotations

import contextlib
import sys

import numpy as np
from bench_cuda_int8 import case_op, expected, inputs, triton_conv_gemm

from loopopt.dataflows import gpu_wgmma
from loopopt.targets.cuda import device

# the tenth session's fastest pixel-box tiles (persistent ones: as many blocks an SM as fit)
SPECIALIZED = {"specialize": True, "stages": 4, "engine": "tma"}
WALKING = SPECIALIZED | {"block_m": 64, "block_n": 128, "warps_m": 1, "depth": 128, "swizzle": 128,
                         "persistent": True}
WINNERS = {"conv2_x.n32.u8": {"block_m": 256, "block_n": 64, "warps_m": 1, "depth": 64, "stages": 3,
                              "swizzle": 64, "engine": "tma"},
           "conv3_x.n32.u8": WALKING, "conv4_x.n32.u8": WALKING}
# the ninth session's
WIDE_BOX = {"block_m": 128, "block_n": 64, "warps_m": 2, "depth": 64, "stages": 4, "swizzle": 64,
            "engine": "tma"}
SPECIALIZED_BOX = SPECIALIZED | {"block_m": 128, "block_n": 128, "warps_m": 2, "depth": 128, "swizzle": 128}
SECOND = {"conv2_x.n32.u8": [WIDE_BOX], "conv3_x.n32.u8": [SPECIALIZED_BOX],
          "conv4_x.n32.u8": [SPECIALIZED_BOX]}


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
    """Each tile's kernel whole, without the padding's border term (its outputs wrong: timing alone) and
    without its epilogue: ms of one launch (L2 flushed) and in a graph."""
    from unittest import mock

    from bench_cuda_tensor import build_all
    from cuda_bench import events_median, graph_median

    from loopopt.targets.cuda import padding_sums
    from loopopt.targets.cuda.tensor_printer import TensorPrinter
    runs = [(case, tiles, gpu_wgmma(case_op(case), **tiles)) for case in WINNERS
            for tiles in (WINNERS[case], *SECOND[case])]
    cuts = {"whole": contextlib.nullcontext,
            "without the border term": lambda: mock.patch.object(padding_sums, "outside", lambda *args: "0"),
            "without the epilogue": lambda: mock.patch.object(TensorPrinter, "_row_epilogue",
                                                              lambda self, depth: None)}
    for cut in cuts.values():
        with cut():
            build_all([schedule for *_, schedule in runs])
    for case, tiles, schedule in runs:
        op = case_op(case)
        args, params = inputs(op)
        times = []
        for name, cut in cuts.items():
            with cut():
                kernel = schedule.compile(target="cuda")
            buffers = kernel.prepare(*args, **params)
            if name == "whole":
                kernel.run(buffers)
                exact = np.array_equal(kernel.output(buffers), expected(op, args, params))
                print(f"{case} {tiles}: {'bit-exact' if exact else 'WRONG'}, {kernel.build.registers} "
                      f"registers, {kernel.build.spill_bytes} spill bytes", flush=True)
            times.append(f"{name} {events_median(lambda k=kernel, b=buffers: k.run(b)) * 1e3:.4f} / "
                         f"{graph_median(lambda k=kernel, b=buffers: k.run(b)) * 1e3:.4f}")
        print(f"{case} {tiles}: {', '.join(times)} ms (one launch / graph)", flush=True)


if __name__ == "__main__":
    device.cupy()
    if sys.argv[1:] == ["floor"]:
        floor()
        sys.exit(0)
    sys.exit(0 if launch(with_peers=sys.argv[1:] != ["ours"]) else 1)
