"""Can a warpgroup's output stores run beside the other warpgroups' last products inside one tile? The
GEMM in no catalog's first choice (2000x3000x1000 fp16, 192 x 256 tiles, three consumer warpgroups, 4
stages, unspecialized TMA: one wave of 132 tiles) stores its 12 MB at the end of the wave with every SM
at once. Its printed CUDA patched: the block barrier of each step replaced by an *empty* mbarrier a buffer
(one arrival a warpgroup once its products of the step retired, the copying thread waiting on it before it
refills the buffer), the prologue filling the whole ring, copies three steps ahead, each warpgroup staging
its outputs once every warpgroup retired the last step of buffer 0 ("decoupled", copied by thread 0 or by
warpgroup 2's first thread); then warpgroup 1 started once warpgroup 0 reached its step ``GO`` (retired
step ``GO - 1``) and warpgroup 2 once warpgroup 1 did ("stagger"), so that warpgroup 0 finishes first and
stores while the others still multiply. A step of lead costs a step of copies in flight in the 4-buffer
ring of 56 KB (the 227 KB are full), so the same at depth 32 with 8 buffers of 28 KB too.

The patches assert the text they change (a printer change that moves it fails loudly, as
``bench_cuda_kstep``'s). Every kernel is verified against float64, then timed one launch (L2 overwritten)
in alternation with cuBLAS, twice, and in a CUDA graph.

``python benchmarks/bench_cuda_stagger.py [--json PATH]``
"""
from __future__ import annotations

import json
import re

from bench_cuda_against import WIDE
from bench_cuda_kstep import _substituted, graph_ms, kernel_from
from bench_cuda_tensor import reference, run_variant, torch_tensors
from bench_cuda_tune import case_op
from cuda_bench import interleaved_medians, rows_main

from loopopt.dataflows import gpu_wgmma
from loopopt.targets.cuda import device
from loopopt.targets.cuda.printer import print_kernel

BARRIERS = 229376                     # the full barriers' offset (a barrier a buffer); empty ones follow
STAGING = 3 * 2 * 64 * 64 * 2         # bytes: two 64 x 64 half buffers a warpgroup, from offset 0
ARRIVE = ('#define LO_ARRIVE(bar) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" '
          ':: "r"(LO_SHARED(bar)) : "memory")\n')


def _number(pattern: str, source: str) -> int:
    found = re.search(pattern, source)
    if found is None:
        raise ValueError(f"the printed kernel has no {pattern!r}: the patch needs updating")
    return int(found.group(1))


def decoupled(source: str, copier: int, go: int | None = None) -> str:
    """The printed CUDA with empty barriers for its block barriers (thread ``copier`` copies), its
    warpgroups started in a stagger where ``go`` is given."""
    steps = _number(r"for \(int lo_r = 0; lo_r < (\d+); \+\+lo_r\) \{\n", source)
    ring = _number(r"lo_barriers_init\(lo_bar, (\d+)\);", source)
    step_bytes = _number(r"lo_expect\(lo_bar \+ lo_step % \d+, (\d+)\);", source)
    if steps % ring:
        raise ValueError(f"{steps} steps over {ring} buffers: the staging's wait assumes whole rounds")
    empty, start_bar = f"lo_bar + {ring}", f"lo_bar + {2 * ring}"
    source = _substituted(rf"\b{BARRIERS + 8 * ring}\b", str(BARRIERS + 8 * (2 * ring + 2)), source)
    source = _substituted(r"(\n__global__ )", ARRIVE + r"\1", source)
    source = _substituted(rf"if \(lo_thread == 0\) lo_barriers_init\(lo_bar, {ring}\);",
                          f"if (lo_thread == 0) {{ lo_barriers_init(lo_bar, {ring}); "
                          f"lo_empty_init({empty}, {ring}, 3); lo_empty_init({start_bar}, 2, 1); }}", source)
    ahead = _number(rf"if \(lo_r \+ (\d+) < {steps}\)", source)
    first = source.index(f"    {{\n        const int lo_step = {ahead - 1};")
    loop = source.index("    const unsigned long long lo_d0")
    last = source[first:loop]     # the prologue's last copies, again for the buffers it left empty
    source = source[:loop] + "".join(last.replace(f"lo_step = {ahead - 1};", f"lo_step = {step};")
                                     for step in range(ahead, ring)) + source[loop:]
    if go is not None:
        source = _substituted(r"(\n    for \(int lo_r = 0;)",
                              rf"\n    if (lo_w > 0) lo_wait({start_bar} - 1 + lo_w, 0u);\1", source)
    source = _substituted(rf"(lo_wait\(lo_bar \+ lo_r % {ring}, [^\n]*\n)\s*__syncthreads\(\);\n", r"\1",
                          source)
    retire = '        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");\n'
    start = source.index(f"        if (lo_r + {ahead} < {steps})")
    end = source.index(retire, start)
    signals = f"        if (lo_r >= 1 && lo_thread % 128 == 0) LO_ARRIVE({empty} + (lo_r - 1) % {ring});\n"
    if go is not None:
        signals += (f"        if (lo_r == {go} && lo_w < 2 && lo_thread % 128 == 0) "
                    f"LO_ARRIVE({start_bar} + lo_w);\n")
    copy = _substituted(rf"if \(lo_r \+ {ahead} < ", f"if (lo_r >= 1 && lo_r + {ring - 1} < ",
                        source[start:end])
    copy = _substituted(rf"lo_step = lo_r \+ {ahead};", f"lo_step = lo_r + {ring - 1};", copy)
    released = f"lo_wait({empty} + (lo_r - 1) % {ring}, (unsigned) ((lo_r - 1) / {ring}) & 1u);"
    copy = _substituted(r"if \(lo_thread == 0\) \{\n",
                        f"if (lo_thread == {copier}) {{\n                    {released}\n", copy)
    source = source[:start] + retire + signals + copy + source[end + len(retire):]
    staged = "".join(f"lo_wait({empty} + {b}, {(steps // ring - 1) & 1}u); "
                     for b in range(-(-STAGING // step_bytes)))
    return _substituted(r"__syncthreads\(\);   /\* every warp is done with the tiles: reuse them \*/",
                        f"{staged}  /* the staging's buffers' last steps retired */", source)


DEEP = WIDE | {"depth": 32, "stages": 8, "swizzle": 64}   # twice the steps, eight buffers of 28 KB
VARIANTS = {"as printed": (WIDE, lambda source: source),
            "decoupled (thread 0 copies)": (WIDE, lambda source: decoupled(source, 0)),
            "decoupled (warpgroup 2 copies)": (WIDE, lambda source: decoupled(source, 256)),
            **{f"stagger GO={go}": (WIDE, lambda source, go=go: decoupled(source, 256, go))
               for go in (0, 1, 2)},
            "depth 32 s8 as printed": (DEEP, lambda source: source),
            "depth 32 s8 decoupled": (DEEP, lambda source: decoupled(source, 0)),
            **{f"depth 32 s8 stagger GO={go}": (DEEP, lambda source, go=go: decoupled(source, 256, go))
               for go in (2, 4)}}


def bench() -> list[dict]:
    import torch
    op, arch = case_op("novel_gemm"), device.arch()
    logical, stored = torch_tensors(op)
    expected = reference(op, logical)
    a, b = logical
    calls, rows = {"cuBLAS": lambda: torch.matmul(a, b)}, []
    for name, (arguments, patch) in VARIANTS.items():
        schedule = gpu_wgmma(op, **arguments)
        kernel = kernel_from(schedule, patch(print_kernel(schedule).source), arch)
        row = run_variant(kernel, stored, expected)
        rows.append({"kernel": name, "verified": row["verified"], "relative_error": row["relative_error"],
                     "one_launch_us": row["median_ms"] * 1e3, "graph_us": graph_ms(kernel, stored) * 1e3})
        print(json.dumps(rows[-1]), flush=True)
        if row["verified"]:
            out = device.cupy().empty((op.m, op.n), kernel.parameter_dtype(op.output))
            buffers = kernel.bind(dict(zip(op.call_tensors, stored)) | {op.output: out})
            calls[name] = lambda kernel=kernel, buffers=buffers: kernel.run(buffers)
    for repeat in range(2):
        rows.append({"together": repeat} | {name: round(seconds * 1e6, 2) for name, seconds
                                            in zip(calls, interleaved_medians(list(calls.values())))})
        print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    raise SystemExit(rows_main(__doc__, bench))
