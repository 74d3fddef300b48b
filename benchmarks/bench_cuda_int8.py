"""The cuda target's int8 and bfloat16 tensor-core kernels on an NVIDIA GPU (``gpu_mma``:
``mma.sync.m16n8k32`` s8 x s8 / u8 x s8 -> s32 and ``m16n8k16`` bf16 -> f32, ``ldmatrix`` from swizzled
tiles; ``gpu_wgmma``: Hopper's ``wgmma`` m64nNk32 s8 x s8 / u8 x s8 -> s32, TMA-staged in the 128-byte
swizzle and warp-specialized for the GEMM, the threads' im2col for the conv), next to PyTorch in the
same run: an int8 GEMM 4096^3 (int32 output) against ``torch._int_mm``
and Triton's int8 GEMM (the faster of them in the table; cuBLAS's float16 GEMM of the same shape timed
beside them for scale, in the row's ``peers``),
ResNet-50's conv2_x, conv3_x and conv4_x at N=32 quantized (uint8 activations, per-channel int8
weights, requantized uint8 output: Composable Kernel's quantized conv) against the faster of cuDNN's
float16 conv of the same shape (PyTorch has no int8 conv on the GPU) and Triton's int8 GEMM of the conv's
im2col'd GEMM (M x N x K random int8, int32 out, the fastest of a few tiles: ``triton_conv_gemm``),
the ``.u8`` convs also on TMA pixel boxes (``BOX_TILES``: TMA fills the padding with 0, the epilogue
adds the zero point's share back, ``padding_sums``) and the cost model's first three candidates
(``model_first``), each case's fastest timed again in alternation with both peers (``interleaved``);
conv2_x with int8 activations and asymmetric uint8 weights
(``.s8u8a``) and with uint8 weights symmetric about 128 (``.u8u8``), whose weights' zero points cost
the kernel the activation sums (one more ``mma`` per activation fragment and step), and a bfloat16
GEMM 4096^3 against cuBLAS.

Every output is checked on the GPU: the int8 ones bit for bit (``torch._int_mm`` minus the zero-point
term; the conv's int32 sums from a float64 conv of ``x - zx`` and ``w - zw``, exact, then
``quant.requantize_output``), the bf16
one within 1e-4 relative to float64 of the same rounded inputs. Times: CUDA events around one launch
with the L2 cache overwritten (median of 50) and inside a CUDA graph (``cuda_bench``); the peers both
ways.

``python benchmarks/bench_cuda_int8.py [--only gemm4096.s8] [--json PATH]``; ``--check``: small int8
kernels of every guard kind, output kind and split-K verified once (the run for ``compute-sanitizer``);
``--check-boxes``: those of them on TMA pixel boxes alone.
"""
from __future__ import annotations

import json
import math
import sys

import cuda_bench
import numpy as np
from bench_cuda_tensor import build_all, model_first
from cuda_bench import events_median, fastest_verified, graph_median, main, markdown, torch_graph_median

import loopopt as lo
from loopopt.dataflows import TENSOR_PRESETS, gpu_mma, gpu_wgmma
from loopopt.layers import get_layer
from loopopt.measure import checked
from loopopt.quant import requantize_output
from loopopt.quant_reference import random_call
from loopopt.targets.cuda import device, quantized

CASES = ["gemm4096.s8", "conv2_x.n32.u8", "conv3_x.n32.u8", "conv4_x.n32.u8", "conv2_x.n32.s8u8a",
         "conv2_x.n32.u8u8", "gemm4096.bf16"]
CONV_SPECS = {"u8": lo.QuantSpec(activation="uint8", output="uint8"),
              "s8u8a": lo.QuantSpec(activation="int8", weight="uint8", weight_symmetric=False,
                                    output="uint8"),
              "u8u8": lo.QuantSpec(activation="uint8", weight="uint8", output="uint8")}
TALL = {"block_m": 256, "warps_m": 4, "warps_n": 4}
LONG = {"block_n": 256, "warps_n": 8}
WIDE = {"block_n": 64, "warps_m": 4, "warps_n": 2}
# wgmma: the fp16 4096^3 GEMM's fastest tiles (128 x 256, 1 x 2 warpgroups) at the same 128 bytes a row
WGMMA = {"warps_m": 1, "warps_n": 2, "depth": 128, "stages": 4, "swizzle": 128, "engine": "tma",
         "specialize": True}
WGMMA_CONV = {"block_m": 128, "block_n": 64, "warps_m": 2, "warps_n": 1, "depth": 64}
# a quantized conv's TMA pixel boxes: block tiles (clamped to the conv's channels), each with its rows a
# whole step (depth and swizzle: the channels' bytes up to 128 where the tiles name none, ``box_variants``),
# specialized or not, persistent or not (a requantizing persistent kernel: as many blocks an SM as fit)
BOX_TILES = [{"block_m": 128, "block_n": 64, "warps_m": 2}, {"block_m": 128, "block_n": 64, "warps_m": 1,
                                                              "specialize": True},
             {"block_m": 256, "block_n": 64, "warps_m": 1}, {"block_m": 256, "block_n": 64, "warps_m": 2,
                                                              "specialize": True},
             {"block_m": 128, "block_n": 128, "warps_m": 1, "stages": 5, "specialize": True},
             {"block_m": 128, "block_n": 128, "warps_m": 2, "specialize": True},
             {"block_m": 256, "block_n": 128, "warps_m": 2, "specialize": True},
             {"block_m": 64, "block_n": 128, "warps_m": 1, "specialize": True},
             {"block_m": 64, "block_n": 64, "warps_m": 1, "specialize": True},
             {"block_m": 64, "block_n": 64, "warps_m": 1, "specialize": True, "persistent": True},
             {"block_m": 128, "block_n": 256, "warps_m": 1, "warps_n": 2, "specialize": True},
             {"block_m": 64, "block_n": 128, "warps_m": 1, "specialize": True, "persistent": True},
             {"block_m": 128, "block_n": 64, "warps_m": 1, "specialize": True, "persistent": True},
             {"block_m": 64, "block_n": 128, "warps_m": 1, "specialize": True, "persistent": True,
              "depth": 64, "swizzle": 64},
             {"block_m": 128, "block_n": 64, "warps_m": 2, "specialize": True, "persistent": True},
             {"block_m": 128, "block_n": 128, "warps_m": 2, "specialize": True, "persistent": True}]
CHECKS = [lo.Conv2d(24, 40, 3, stride=2, padding=(1, 2), dilation=2, height=13, width=11, batch=2),
          lo.Conv2d(64, 72, 1, height=7, width=9, bias=False), lo.Matmul(300, 260, 200)]
BOX_CHECKS = [lo.Conv2d(32, 40, 3, stride=2, padding=((1, 0), (2, 1)), dilation=2, height=13, width=11,
                        batch=2),
              lo.Conv3d(16, 16, 3, stride=(1, 2, 1), padding=1, dilation=(2, 1, 1), depth=7, height=6,
                        width=7, batch=2)]
CHECK_SPECS = [lo.QuantSpec(activation="uint8", output="uint8"),
               lo.QuantSpec(activation="int8", output="int32"),
               lo.QuantSpec(activation="uint8", per_channel=False, output="float32")]


def case_op(case: str) -> lo.Op:
    if case == "gemm4096.s8":
        return lo.Matmul(4096, 4096, 4096, quant=lo.QuantSpec(activation="int8", output="int32"))
    if case == "gemm4096.bf16":
        return lo.Matmul(4096, 4096, 4096, dtype="bfloat16")
    name, _, spec = case.split(".")
    layer = get_layer(f"resnet50.{name}", batch=32)
    return type(layer)(**layer.arguments, quant=CONV_SPECS[spec])


def box_variants(op: lo.Op) -> list[tuple[str, dict]]:
    """``BOX_TILES`` on TMA pixel boxes, each step's depth the conv's channels up to 128 bytes, in the
    swizzle of that row, and the cost model's first three candidates (``model_first``)."""
    row = min(128, op.arguments["in_channels"])
    boxes = {json.dumps(knobs, sort_keys=True): knobs for knobs in (
        {"depth": row, "stages": 4, "swizzle": row} | tiles | {"engine": "tma"} for tiles in BOX_TILES)}
    return [("gpu_wgmma", knobs) for knobs in boxes.values()] + model_first(op)


def variants(case: str, op: lo.Op) -> list[tuple[str, dict]]:
    """The (preset, arguments) timed for ``case``: wgmma where the op's types have it (not the convs
    whose weights' zero point costs activation sums, nor bfloat16: ``bench_cuda_tensor``); a ``.u8``
    conv's on TMA pixel boxes alone (``box_variants``: the threads' copies, ``gpu_mma`` and
    ``WGMMA_CONV``, were slower in every run since the eighth session: 0.0397 / 0.0334 / 0.0385 ms there
    against the boxes' 0.0349 / 0.0284 / 0.0277, and are timed no more)."""
    if case.startswith("conv"):
        if case.endswith(".u8"):
            return box_variants(op)
        return [("gpu_mma", arguments) for arguments in ({}, WIDE, TALL, {"depth": 64})]
    deep = {"depth": 128 if case.endswith("s8") else 64, "stages": 3}
    wgmma = [("gpu_wgmma", arguments) for arguments in (
        WGMMA, WGMMA | {"specialize": False},
        WGMMA | {"block_m": 256, "block_n": 128, "warps_m": 2, "warps_n": 1})]
    return [("gpu_mma", arguments) for arguments in ({}, deep, TALL, LONG, TALL | {"stages": 3})] + (
        wgmma if case.endswith("s8") else [])


def inputs(op: lo.Op) -> tuple[list[np.ndarray], dict]:
    if op.quant is not None:
        return random_call(op, seed=0)
    rng = np.random.default_rng(0)
    return [rng.standard_normal(op.tensor(t).shape).astype(np.float32) for t in op.inputs], {}


def expected(op: lo.Op, args: list[np.ndarray], params: dict):
    """The exact output (int8 cases, numpy) or the float64 one (bf16, a torch tensor on the GPU)."""
    import torch
    x, w = (torch.as_tensor(a, device="cuda") for a in args[:2])
    if op.quant is None:
        a, b = (torch.as_tensor(v, device="cuda").double() for v in op.operand_values(*args))
        return torch.matmul(a, b)
    zx = int(params["x_zero_point"])
    if not op.windows:
        sums = torch._int_mm(x, w) - zx * w.int().sum(dim=0)
        return sums.cpu().numpy()
    wins = op.windows
    stride, pad, dilation = (tuple(getattr(v, f) for v in wins) for f in ("stride", "pad", "dilation"))
    zw = torch.as_tensor(np.broadcast_to(params["w_zero_point"], (op.channels,)).astype(np.float64),
                         device="cuda").reshape(-1, 1, 1, 1)
    sums = torch.nn.functional.conv2d(x.double() - zx, w.double() - zw, None, stride, pad, dilation,
                                      op.groups)
    return requantize_output(sums.cpu().numpy().astype(np.int32), params["x_scale"], params["w_scale"],
                             params["y_scale"], params["y_zero_point"], op.quant.output,
                             args[2] if op.bias else None)


def triton_int8_matmul(a, b, tiles: tuple[int, int, int, int, int] = (128, 256, 128, 8, 3)):
    """Triton's int8 GEMM (its tutorial's blocked matmul, ``tl.dot`` on int8 into int32; ``tiles``: tile
    m, n and k, warps, stages) of two int8 tensors whose sizes the tiles divide: a call of no arguments
    filling the int32 output it returns with it. ``b`` is read from an N x K copy (k contiguous, made
    once, as loopopt's packed weights are): Hopper's int8 wgmma takes both operands k-major, and with
    ``b`` row-major Triton's kernel ran at about 105 TOP/s on the H200 (1.31 ms at 4096^3)."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(a_ptr, b_ptr, c_ptr, m, n, k, tile_m: tl.constexpr, tile_n: tl.constexpr, tile_k: tl.constexpr,
               group: tl.constexpr):
        pid, tiles_m, tiles_n = tl.program_id(0), tl.cdiv(m, tile_m), tl.cdiv(n, tile_n)
        first = pid // (group * tiles_n) * group
        rows = tl.minimum(tiles_m - first, group)
        pm, pn = first + pid % (group * tiles_n) % rows, pid % (group * tiles_n) // rows
        rm, rn = pm * tile_m + tl.arange(0, tile_m), pn * tile_n + tl.arange(0, tile_n)
        rk = tl.arange(0, tile_k)
        a_at, b_at = a_ptr + rm[:, None] * k + rk[None, :], b_ptr + rn[None, :] * k + rk[:, None]
        acc = tl.zeros((tile_m, tile_n), dtype=tl.int32)
        for _ in range(0, k, tile_k):
            acc += tl.dot(tl.load(a_at), tl.load(b_at), out_dtype=tl.int32)
            a_at += tile_k
            b_at += tile_k
        tl.store(c_ptr + rm[:, None] * n + rn[None, :], acc)

    (m, k), n = a.shape, b.shape[1]
    tile_m, tile_n, tile_k, warps, stages = tiles
    b_nk = b.t().contiguous()
    out = torch.empty(m, n, dtype=torch.int32, device="cuda")
    grid = (triton.cdiv(m, tile_m) * triton.cdiv(n, tile_n),)
    return lambda: kernel[grid](a, b_nk, out, m, n, k, tile_m, tile_n, tile_k, 8, num_warps=warps,
                                num_stages=stages), out


def triton_conv_gemm(op: lo.Op) -> tuple[str, object]:
    """Triton's int8 GEMM on ``op``'s im2col'd GEMM (M = the output pixels, N = the channels, K = the
    channels in x the taps; random int8, checked against ``torch._int_mm``), the fastest (one launch, L2
    overwritten) of a few tiles the sizes allow: its name and call."""
    import torch
    m = op.arguments["batch"] * math.prod(window.out for window in op.windows)
    n, k = op.channels, op.arguments["in_channels"] * math.prod(window.taps for window in op.windows)
    generator = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda", generator=generator)
    b = torch.randint(-128, 128, (k, n), dtype=torch.int8, device="cuda", generator=generator)
    depth = 128 if k % 128 == 0 else 64
    tiles = [(tm, min(tn, n), depth, warps, stages) for tm, tn, warps, stages in (
        (128, 256, 8, 3), (128, 128, 4, 4), (256, 128, 8, 3), (64, 256, 4, 4), (128, 64, 4, 4))]
    timed = []
    for tile in sorted({t for t in tiles if m % t[0] == 0 and n % t[1] == 0}):
        call, out = triton_int8_matmul(a, b, tile)
        call()
        if not torch.equal(out, torch._int_mm(a, b)):
            raise AssertionError(f"Triton's int8 GEMM with tiles {tile} differs from torch._int_mm")
        timed.append((events_median(call), tile, call))
    seconds, tile, call = min(timed, key=lambda t: t[0])
    return f"Triton int8 GEMM {m}x{n}x{k} (im2col'd; tiles {tile[0]}x{tile[1]}x{tile[2]}, {tile[3]} warps, " \
           f"{tile[4]} stages)", call


def peers(op: lo.Op, args: list[np.ndarray]) -> tuple[list[tuple[str, float, float]], list]:
    """The peers of ``op``'s case: name, seconds of one call (L2 flushed) and inside a CUDA graph (the
    int8 GEMM's: ``torch._int_mm`` with ``b`` row-major and column-major, and Triton, each checked equal
    to the others), and the calls timed
    for scale only (the int8 GEMM's: cuBLAS's float16 GEMM of the same shape)."""
    import torch
    torch.backends.cudnn.benchmark = True
    if op.quant is None:
        a, b = (torch.as_tensor(v, device="cuda").bfloat16() for v in args[:2])
        calls = [("cuBLAS (torch.matmul bf16)", lambda: torch.matmul(a, b))]
    elif not op.windows:
        a, b = (torch.as_tensor(v, device="cuda") for v in args[:2])
        triton_call, triton_out = triton_int8_matmul(a, b)
        triton_call()
        b_columns = b.t().contiguous().t()          # column-major, made once: cuBLASLt's int8 layout
        if not torch.equal(triton_out, torch._int_mm(a, b)) or not torch.equal(triton_out,
                                                                               torch._int_mm(a, b_columns)):
            raise AssertionError("Triton's int8 GEMM differs from torch._int_mm")
        calls = [("torch._int_mm (int8 -> int32)", lambda: torch._int_mm(a, b)),
                 ("torch._int_mm, b column-major", lambda: torch._int_mm(a, b_columns)),
                 ("Triton int8 (tl.dot -> int32)", triton_call)]
        a16, b16 = a.half(), b.half()
        scale = [("cuBLAS (torch.matmul fp16, for scale)", lambda: torch.matmul(a16, b16))]
        return ([(name, events_median(call), torch_graph_median(call), call) for name, call in calls],
                [(name, events_median(call), torch_graph_median(call), call) for name, call in scale])
    else:
        x = torch.randn(*op.tensor(op.inputs[0]).shape, device="cuda").half().contiguous(
            memory_format=torch.channels_last)
        w = torch.randn(*op.tensor(op.inputs[1]).shape, device="cuda").half().contiguous(
            memory_format=torch.channels_last)
        stride, pad, dilation = (tuple(getattr(v, f) for v in op.windows)
                                 for f in ("stride", "pad", "dilation"))
        calls = [(f"cuDNN {torch.backends.cudnn.version()} fp16 conv (no int8 conv in PyTorch)",
                  lambda: torch.nn.functional.conv2d(x, w, None, stride, pad, dilation, op.groups)),
                 triton_conv_gemm(op)]
    return [(name, events_median(call), torch_graph_median(call), call) for name, call in calls], []


def run_variant(kernel, args: list[np.ndarray], params: dict, want) -> dict:
    import torch
    buffers = kernel.prepare(*args, **params)
    kernel.run(buffers)
    got = kernel.output(buffers)
    if kernel.op.quant is not None:
        verified, error = bool(np.array_equal(got, want)), float(np.abs(got.astype(np.int64) - want).max())
    else:
        result = torch.as_tensor(got, device="cuda").double()
        error = float(torch.linalg.vector_norm(result - want) / torch.linalg.vector_norm(want))
        verified = error < 1e-4
    seconds = events_median(lambda: kernel.run(buffers))
    graph = graph_median(lambda: kernel.run(buffers))
    return {"median_ms": seconds * 1e3, "graph_ms": graph * 1e3, "tops": kernel.op.flops / seconds / 1e12,
            "graph_tops": kernel.op.flops / graph / 1e12, "error": error, "verified": verified,
            "registers": kernel.build.registers, "spill_bytes": kernel.build.spill_bytes}


def bench(cases: list[str]) -> list[dict]:
    ops = {case: case_op(case) for case in cases}
    chosen = {case: [(preset, arguments, TENSOR_PRESETS[preset](op, **arguments))
                     for preset, arguments in variants(case, op)] for case, op in ops.items()}
    build_all([schedule for runs in chosen.values() for *_, schedule in runs])
    rows = []
    for case, op in ops.items():
        args, params = inputs(op)
        want = expected(op, args, params)
        timed, scale = peers(op, args)
        name, peer_seconds, peer_graph, _ = min(timed, key=lambda p: p[1])      # the fastest peer
        runs = {}
        for preset, arguments, schedule in chosen[case]:
            row = {"case": case, "op": repr(op), "kernel": preset, "instruction": schedule.tensorized[3],
                   "arguments": arguments,
                   "peer": name, "peer_ms": peer_seconds * 1e3, "peer_graph_ms": peer_graph * 1e3,
                   "peers": {p: {"ms": s * 1e3, "graph_ms": g * 1e3} for p, s, g, _ in timed + scale}}
            kernel = schedule.compile(target="cuda")
            row |= run_variant(kernel, args, params, want)
            runs[id(row)] = kernel
            rows.append(row)
            print(json.dumps(row), flush=True)
        best = fastest_verified([r for r in rows if r["case"] == case]).get(case)
        if best is not None:
            best |= interleaved(runs[id(best)], args, params, timed)
            print(json.dumps({"case": case, "interleaved": best["interleaved"]}), flush=True)
    return rows


def interleaved(kernel, args: list[np.ndarray], params: dict, timed: list, rounds: int = 9) -> dict:
    """The case's fastest kernel and each of its peers (``timed``) timed again in alternation, one
    launch (L2 flushed) and inside a CUDA graph: ms, the medians of ``rounds`` rounds' medians
    (``cuda_bench.alternated_with_peers``)."""
    buffers = kernel.prepare(*args, **params)
    seconds, graphs = cuda_bench.alternated_with_peers(lambda: kernel.run(buffers),
                                                       [call for *_, call in timed], rounds)
    return {"interleaved": {"rounds": rounds, "ms": seconds[0] * 1e3, "graph_ms": graphs[0] * 1e3,
                            "peers_ms": {name: s * 1e3 for (name, *_), s in zip(timed, seconds[1:])},
                            "peers_graph_ms": {name: g * 1e3 for (name, *_), g in zip(timed, graphs[1:])}}}


def table(rows: list[dict]) -> str:
    """Each case's fastest verified variant (by its one-launch time) against its fastest peer, and the
    interleaved times against every peer."""
    best = fastest_verified(rows)
    header = ["case", "instruction", "arguments", "ms (one launch, L2 flushed)", "TOP/s", "ms in a graph",
              "TOP/s in a graph", "peer", "peer ms", "peer ms in a graph", "peer / loopopt", "in a graph",
              "interleaved ms: loopopt, peers", "interleaved in a graph"]

    def alternated(row: dict, scope: str) -> str:
        rounds = row.get("interleaved")
        if rounds is None:
            return ""
        peers = ", ".join(f"{name.split(' (')[0]} {ms:.4f}" for name, ms in rounds[f"peers_{scope}"].items())
        return f"{rounds[scope]:.4f}; {peers}"

    return markdown(header, [[r["case"], r["instruction"],
                              ", ".join(f"{k}={v}" for k, v in r["arguments"].items()) or "defaults",
                              f"{r['median_ms']:.4f}", f"{r['tops']:.0f}", f"{r['graph_ms']:.4f}",
                              f"{r['graph_tops']:.0f}", r["peer"], f"{r['peer_ms']:.4f}",
                              f"{r['peer_graph_ms']:.4f}", f"{r['peer_ms'] / r['median_ms']:.2f}x",
                              f"{r['peer_graph_ms'] / r['graph_ms']:.2f}x", alternated(r, "ms"),
                              alternated(r, "graph_ms")]
                             for r in best.values()])


def check() -> bool:
    """Every CHECKS shape under each CHECK_SPECS spec with default and small tiles (split-K 3 on int32)
    and on wgmma (the specs without activation sums), and the ``BOX_CHECKS`` convs on TMA pixel boxes
    (``box_runs``), verified once, bit for bit."""
    small = {"block_m": 32, "block_n": 48, "warps_m": 2, "warps_n": 3, "depth": 96}
    runs = []
    for shape in CHECKS:
        for spec in CHECK_SPECS:
            op = type(shape)(**shape.arguments, quant=spec)
            tiles = [{}, small] + ([small | {"split_k": 3}] if spec.output == "int32" else [])
            runs += [(f"{op!r} {arguments}", gpu_mma(op, **arguments)) for arguments in tiles]
            if not quantized.needs_activation_sums(spec):     # wgmma: the threads' copies
                runs.append((f"{op!r} gpu_wgmma {WGMMA_CONV}", gpu_wgmma(op, **WGMMA_CONV)))
    return verified(runs + box_runs())


def box_runs() -> list[tuple[str, lo.Schedule]]:
    """The ``BOX_CHECKS`` convs on TMA pixel boxes, a requantized and an int32 spec each, unspecialized
    and warp-specialized with split-K or in a persistent tile loop (the run for ``compute-sanitizer``
    alone: ``--check-boxes``)."""
    tiles = [{"block_m": 128, "block_n": 64, "warps_m": 2, "depth": 64, "swizzle": 64},
             {"block_m": 64, "block_n": 64, "warps_m": 1, "depth": 32, "stages": 3, "specialize": True,
              "split_k": 3},
             {"block_m": 64, "block_n": 64, "warps_m": 1, "depth": 32, "stages": 3, "specialize": True,
              "persistent": True}]
    return [(f"{op!r} gpu_wgmma TMA {arguments}", gpu_wgmma(op, **arguments, engine="tma"))
            for shape in BOX_CHECKS for spec in CHECK_SPECS[:2]
            for op in [type(shape)(**shape.arguments, quant=spec)]
            for arguments in tiles if spec.output == "int32" or "split_k" not in arguments]


def verified(runs: list[tuple[str, lo.Schedule]]) -> bool:
    """Each schedule of ``runs`` built (in parallel) and verified once, bit for bit; prints each."""
    build_all([schedule for _, schedule in runs])
    ok = True
    for what, schedule in runs:
        good, error, _ = checked(schedule.compile(target="cuda"), seed=7)
        ok &= good
        print(f"{what}: {'verified' if good else 'WRONG'} (max error {error:.2e})", flush=True)
    return ok


if __name__ == "__main__":
    device.cupy()
    if sys.argv[1:] == ["--check-boxes"]:
        raise SystemExit(0 if verified(box_runs()) else 1)
    raise SystemExit(main(__doc__, CASES, bench, table, check))
