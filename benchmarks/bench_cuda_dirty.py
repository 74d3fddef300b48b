"""The GEMM in no catalog's first choice after a dirty and a clean flush, and its last steps in halves.

The first choice is 192 x 256 in one wave, B in whole-line rows: where its time goes after each flush,
and what was tried to take it back.

``cuda_bench`` overwrites the L2 with a fill before each timed run, which leaves every line of it dirty:
each line a kernel then takes in is a write-back to DRAM first. A clean flush here is the same fill and
then a read of another buffer twice the L2 (a sum), which leaves the L2 full of clean lines. Each call
is timed one launch after each kind of flush in alternation (9 rounds of 20, three times): cuBLAS and
``VARIANTS``, the printed CUDA patched, each verified against float64 first:

- ``as printed``: the first choice.
- ``unchecked``: its outputs staged without the per-element bounds select (the TMA stores clip).
- ``halves``: the same, and the last two k-steps multiplied in halves of 128 columns (m64n128k16), the
  left half's first, so that the left half's outputs are staged and stored while the right half's
  products run (the one wave's output drain, ~4.4 us with the tensor cores idle, half hidden).

``--tried``: the earlier variants too (``TRIED``: the output's lines taken early by zero stores, its
boxes prefetched, the inputs loaded evict_first, the blocks ending once the stores read their buffers,
the outputs stored a row a warp by st.global). ``--timelines``: first, thread 0 of each block reads
its SM's clock at entry, once the first and the last step's boxes are in, once the products are done
and once its warpgroup's stores are (``timeline``), after each flush and after none (warm).

``--ncu``: each call once after a dirty flush and once after a clean one (after a warm-up), for Nsight
Compute in application replay with ``--cache-control none``:

``ncu --replay-mode application --cache-control none --clock-control none --nvtx --nvtx-include
'profiled/' --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum python
benchmarks/bench_cuda_dirty.py --ncu`` (``--section PmSampling`` for the time series)

``--printed``: only the first choice as printed, its last 3 steps in halves as patched, and ``PRINTED``:
the same op with its last 2 or 3 steps in halves as loopopt prints them (``Schedule.halves``).

``--check NAME``: one launch of a variant (or of ``PRINTED``), verified (for ``compute-sanitizer``).

``python benchmarks/bench_cuda_dirty.py [--tried] [--timelines] [--printed] [--ncu] [--check NAME]
[--json PATH]``
"""
from __future__ import annotations

import argparse
import ctypes
import json
import re
import statistics
from collections.abc import Callable

from bench_cuda_cold import BUFFER, FIRST, STORE, calls_verified, output_prefetched, own_buffers
from bench_cuda_kstep import _substituted, kernel_from
from bench_cuda_launch import launch
from bench_cuda_tensor import prepacked, reference, torch_tensors
from bench_cuda_tune import case_op
from cuda_bench import environment

from loopopt.dataflows import gpu_wgmma
from loopopt.schedule import Schedule
from loopopt.targets.cuda import device
from loopopt.targets.cuda.printer import print_kernel

WAIT = "        asm volatile(\"wgmma.wait_group.sync.aligned 1;\" ::: \"memory\");\n    }\n"
DRAINED = "    asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");\n"
CHUNKS = 16         # 16-byte stores a thread covering its warpgroup's 64 x 256 fp16 outputs


def touched(first: int, last: int, m: int = 2000, n: int = 3000) -> Callable[[str], str]:
    """The patch storing zeros over each warpgroup's outputs at loop steps ``first`` .. ``last``."""
    steps = last - first + 1
    if CHUNKS % steps:
        raise ValueError(f"steps {first}-{last}: {steps} steps must divide {CHUNKS} stores a thread")

    def patch(source: str) -> str:
        zeros = (f"        if (lo_r >= {first} && lo_r <= {last}) {{   /* the output's lines taken early */\n"
                 f"            #pragma unroll\n"
                 f"            for (int lo_z = 0; lo_z < {CHUNKS // steps}; ++lo_z) {{\n"
                 f"                const int lo_q = ((lo_r - {first}) * {CHUNKS // steps} + lo_z) * 128"
                 f" + lo_thread % 128;\n"
                 f"                const int lo_zr = 192 * i_o + 64 * lo_w + lo_q / 32;\n"
                 f"                const int lo_zc = 256 * j_o + 8 * (lo_q % 32);\n"
                 f"                if (lo_zr < {m} && lo_zc < {n})\n"
                 f"                    *(int4 *) (C + (long long) lo_zr * {n} + lo_zc)"
                 f" = make_int4(0, 0, 0, 0);\n"
                 f"            }}\n        }}\n")
        source = _substituted(re.escape(WAIT), lambda match: zeros + match.group(0), source)
        fence = '    asm volatile("fence.proxy.async.global;" ::: "memory");\n'
        return _substituted(re.escape(DRAINED), lambda match: match.group(0) + fence, source)
    return patch


HINTED = r"""static __device__ __forceinline__ void lo_tma_2d_first(void *dst, const lo_tensor_map *map,
                                                       int x, int y, unsigned long long *bar)
{   /* the box's lines taken into L2 marked evict_first from column FROM on */
    if (x < FROM) { lo_tma_2d(dst, map, x, y, bar); return; }
    unsigned long long policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
                 "[%0], [%1, {%2, %3}], [%4], %5;"
                 :: "r"(LO_SHARED(dst)), "l"((unsigned long long) map), "r"(x), "r"(y), "r"(LO_SHARED(bar)),
                    "l"(policy) : "memory");
}
"""
STORE_HELPER = "\nstatic __device__ __forceinline__ void lo_tma_store_2d("


def evict_first(tensors: str, from_step: int = 0) -> Callable[[str], str]:
    """The patch loading ``tensors``' boxes of k-steps ``from_step`` on with an L2 evict_first policy: once
    the one wave has read them, their (clean) lines are the victims the output's lines take, not the
    flush's dirty lines."""
    def patch(source: str) -> str:
        source = _substituted(re.escape(STORE_HELPER), lambda match: "\n" + HINTED.replace(
            "FROM", str(64 * from_step)) + match.group(0), source)
        return _substituted(rf"lo_tma_2d(\([^\n]*&lo_map_[{tensors}],)", r"lo_tma_2d_first\1", source)
    return patch


DONE = "if (lo_thread % 128 == 0) LO_STORES_DONE();"


def stores_read(source: str) -> str:
    """The block ends once its output stores have read their staging buffers (``wait_group.read 0``, as
    CUTLASS's epilogues end), not once the writes completed in L2."""
    read = 'if (lo_thread % 128 == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");'
    return _substituted(re.escape(DONE), lambda match: read, source)


ROWS = """    LO_GROUP_SYNC();
    #pragma unroll 4
    for (int lo_q = 0; lo_q < 16; ++lo_q) {   /* a warp a row: 512 bytes, 16 a lane */
        const int lo_row = LO_LANE / 32 * 16 + lo_q, lo_c = LO_LANE % 32 / 8, lo_k = LO_LANE % 8;
        const uint4 lo_v = *(const uint4 *) (lo_stage + (lo_w * 4 + lo_c) * 4096 + lo_row * 64
                                             + (lo_k ^ (lo_row % 8)) * 8);
        const int lo_gr = 192 * i_o + 64 * lo_w + lo_row, lo_gc = 256 * j_o + 64 * lo_c + 8 * lo_k;
        if (lo_gr < M && lo_gc < N) *(uint4 *) (C + (long long) lo_gr * N + lo_gc) = lo_v;
    }
"""


def rows_stored(source: str, m: int = 2000, n: int = 3000) -> str:
    """Each warpgroup's four output boxes staged whole (``own_buffers``), then stored by its threads a row
    a warp in 16-byte vectors (``st.global``, no TMA): a row's 512 bytes in one run, so only its two ends
    are partial 32-byte sectors, where the 64-column TMA boxes split a row into four runs."""
    source = _substituted(STORE, lambda match: f"\n{match.group(3)}}}\n", own_buffers(source))
    rows = ROWS.replace("< M", f"< {m}").replace("< N", f"< {n}").replace("* N", f"* {n}")
    return _substituted(re.escape(f"    {DONE}\n"), lambda match: rows, source)


def unstored(source: str) -> str:
    """The outputs staged in shared memory but never stored (for the timeline alone: wrong results)."""
    return _substituted(r"\n\s*if \(lo_thread % 128 == 0\) lo_tma_store_2d\([^\n]*\n", "\n", source)


def unchecked(source: str) -> str:
    """The outputs staged without the per-element bounds select (``cond ? acc : 0``): the TMA stores
    clip the boxes to the tensor, and the zero-filled boxes past A's and B's edges leave zeros there."""
    return _substituted(r"LO_OUT\(\(.*\) \? (lo_acc\[[^\]]*\]\[lo_e \+ lo_h\]) : 0\.0f\)", r"LO_OUT(\1)",
                        source)

HALF = ("#define LO_WGMMA_HALF(d, da, db) asm volatile(\"{ .reg .pred p; setp.ne.b32 p, %66, 0; "
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
        + ", ".join(f"%{i}" for i in range(64)) + "}, %64, %65, p, 1, 1, 0, 0; }\" : "
        + ", ".join(f"\"+f\"((d)[{i}])" for i in range(64)) + " : \"l\"(da), \"l\"(db), \"r\"(1))\n")
LOOP = "for (int lo_r = 0; lo_r < 16; ++lo_r) {"
DRAINED_EPILOGUE = re.compile(r"    asm volatile\(\"wgmma\.wait_group\.sync\.aligned 0;\" ::: \"memory\"\);\n"
                              r"    __syncthreads\(\);[^\n]*\n(    __half \*lo_stage = [^\n]*\n)(.*?)"
                              r"    if \(lo_thread % 128 == 0\) LO_STORES_DONE\(\);\n", re.S)


def _products(step: int, half: int) -> str:
    """A warpgroup's four k16 products of ``step`` on its 128 columns of ``half`` (0 left, 1 right)."""
    a = f"lo_d0 + {step % 4 * 3584}ull + (unsigned long long) i_i_o * 512 + lo_q * 2"
    b = f"lo_d0 + {step % 4 * 3584 + 1536 + 1024 * half}ull + lo_q * 2"
    return (f"    asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n"
            f"    #pragma unroll\n    for (int lo_q = 0; lo_q < 4; ++lo_q)\n"
            f"        LO_WGMMA_HALF(lo_acc[0] + {64 * half}, {a}, {b});\n"
            f"    asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n")


REFILL_BLOCK = re.compile(r"        if \(lo_r \+ 2 < 16\)   /\* into the buffer[^\n]*\n(.*?)"
                          r"(?=        asm volatile\(\"wgmma\.wait_group\.sync\.aligned 1;)", re.S)


def halves(split: int = 2) -> Callable[[str], str]:
    """The patch multiplying the last ``split`` steps (2 or 3) in halves of 128 columns (m64n128k16), the
    left half's first, so that its outputs are staged and stored while the right half's products run:
    the steps left, the first of them right, the left half's epilogue (once the block is done with step
    12's buffer, its staging), the other steps right, the right half's epilogue. Each box staged in a
    buffer of its own."""
    if split not in (2, 3):
        raise ValueError(f"split {split}: the left half's staging needs step 12's buffer free (2 or 3)")
    first = 16 - split

    def patch(source: str) -> str:
        refill = REFILL_BLOCK.search(source)
        if refill is None:
            raise ValueError("the printed kernel has no refill block: the patch needs updating")
        source = _substituted(re.escape("\n__global__ "), lambda match: "\n" + HALF + match.group(0)[1:],
                              source)
        source = _substituted(re.escape(LOOP), lambda match: LOOP.replace("< 16", f"< {first}"), source)

        def tail(match: re.Match) -> str:
            declared, boxes = match.group(1), match.group(2)
            left = _substituted(BUFFER, lambda m: "const int lo_buffer = lo_w * 2 + lo_c;\n", boxes)
            left = _substituted(re.escape("lo_c = 0; lo_c < 4;"), lambda m: "lo_c = 0; lo_c < 2;", left)
            right = _substituted(BUFFER, lambda m: "const int lo_buffer = 6 + lo_w * 2 + lo_c - 2;\n", boxes)
            right = _substituted(re.escape("lo_c = 0; lo_c < 4;"), lambda m: "lo_c = 2; lo_c < 4;", right)
            wait = "    asm volatile(\"wgmma.wait_group.sync.aligned {}\" ::: \"memory\");\n"
            copies = (f"    {{   /* step {first}'s boxes are in: the last copy, step {first + 2}'s */\n"
                      f"        const int lo_r = {first};\n"
                      f"        lo_wait(lo_bar + {first % 4}, {first // 4 % 2}u);\n        __syncthreads();\n"
                      + refill.group(1) + "    }\n") if first + 2 < 16 else ""
            return (f"    /* steps {first}-15 in halves of 128 columns */\n" + copies
                    + "".join(("" if copies and s == first
                               else f"    lo_wait(lo_bar + {s % 4}, {s // 4 % 2}u);\n") + _products(s, 0)
                              for s in range(first, 16))
                    + _products(first, 1) + wait.format("1;")
                    + "    __syncthreads();   /* every warpgroup is done with step 12's buffer */\n"
                    + declared + left + "".join(_products(s, 1) for s in range(first + 1, 16))
                    + wait.format("0;")
                    + "    __syncthreads();   /* every warpgroup is done with the ring */\n" + right
                    + "    if (lo_thread % 128 == 0) LO_STORES_DONE();\n")
        return _substituted(DRAINED_EPILOGUE, tail, source)
    return patch


VARIANTS = {"as printed": lambda s: s, "unchecked": unchecked,
            "halves, last 2 steps": lambda s: halves(2)(unchecked(s)),
            "halves, last 3 steps": lambda s: halves(3)(unchecked(s))}
TRIED = {"touched 6-13": touched(6, 13), "touched 2-9": touched(2, 9), "touched 0-3": touched(0, 3),
         "output prefetched": output_prefetched, "A, B evict_first": evict_first("AB"),
         "B evict_first": evict_first("B"), "A evict_first": evict_first("A"),
         "A, B evict_first from step 8": evict_first("AB", 8),
         "A, B evict_first from step 12": evict_first("AB", 12), "stores read": stores_read,
         "rows stored": rows_stored}     # earlier calls' variants (--tried)
PRINTED = {f"halves({steps}), printed": steps for steps in (2, 3)}     # gpu_wgmma(halves=steps)


def printed(name: str) -> Schedule:
    """The schedule of ``PRINTED[name]``: the first choice with its last steps in halves."""
    return gpu_wgmma(case_op("novel_gemm"), **FIRST, halves=PRINTED[name])

TIMES = r"""
__device__ unsigned long long lo_times[132 * 8];
extern "C" int lo_times_read(unsigned long long *host)
{
    return (int) cudaMemcpyFromSymbol(host, lo_times, sizeof(lo_times));
}
"""
MARKS = {   # where thread 0 reads its SM's clock: entry, first step's boxes in, last step's in, products done
    "const int lo_thread = (int) (threadIdx.x + blockDim.x * threadIdx.y);\n": "0",
    "lo_wait(lo_bar + lo_r % 4, (unsigned) (lo_r / 4) & 1u);\n": "lo_r == 0 ? 1 : 2",
    "__syncthreads();   /* every warp is done with the tiles: reuse them */\n": "3"}


def timeline(patch: Callable[[str], str]) -> Callable[[str], str]:
    """``patch``, and thread 0 of each block recording ``%globaltimer`` at entry and exit and its SM's
    ``clock64`` at ``MARKS`` (the first and last step's boxes in) and once its warpgroup's stores are
    done (``lo_times``: 8 words a block: clocks 0-4, entry and exit times 5-6)."""
    def mark(slot: str) -> str:
        when = " && (lo_r == 0 || lo_r == 15)" if "lo_r" in slot else ""
        return (f"if (lo_thread == 0{when}) lo_times[8 * (blockIdx.x + gridDim.x * blockIdx.y) + ({slot})]"
                " = clock64();\n")

    def patched(source: str) -> str:
        source = patch(source)
        for anchor, slot in MARKS.items():
            source = _substituted(re.escape(anchor), lambda match, s=slot: match.group(0) + mark(s), source)
        now = 'asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(lo_now));'
        end = (f"\n    if (lo_thread == 0) {{ unsigned long long lo_now; {mark('4').strip()} {now} "
               "lo_times[8 * (blockIdx.x + gridDim.x * blockIdx.y) + 6] = lo_now; }\n}\n")
        start = (f"    if (lo_thread == 0) {{ unsigned long long lo_now; {now} "
                 "lo_times[8 * (blockIdx.x + gridDim.x * blockIdx.y) + 5] = lo_now; }\n")
        source = _substituted(r"\n}\n(\ntypedef int \(\*lo_encode_tiled\))",
                              lambda match: end + match.group(1), source)
        source = _substituted(re.escape(next(iter(MARKS))), lambda match: match.group(0) + start, source)
        return _substituted(r"\n__global__ ", lambda match: TIMES + match.group(0), source)
    return patched


class Flushes:
    """The dirty flush (``cuda_bench``'s fill) and the clean one (the fill, then a read of another
    buffer twice the L2), each followed by one timed call (CUDA events, seconds)."""

    def __init__(self) -> None:
        cp = device.cupy()
        words = 2 * cp.cuda.Device().attributes["L2CacheSize"] // 4
        self.filled = cp.empty(words, dtype="float32")
        self.read = cp.ones(words, dtype="float32")

    def flush(self, clean: bool | None) -> None:
        """The dirty flush (``clean`` False), the clean one (True) or none (None: the L2 as the last run
        left it, warm)."""
        if clean is not None:
            self.filled.fill(0)
        if clean:
            self.read.sum()

    def elapsed(self, call: Callable[[], object], clean: bool) -> float:
        self.flush(clean)
        return device.elapsed(call, flush_l2=False)


def interleaved(flushes: Flushes, calls: dict, rounds: int = 9, runs: int = 20) -> dict:
    """Each call one launch after each flush, in alternation: the median of ``rounds`` rounds' medians of
    ``runs`` runs (us), keyed ``name, dirty`` / ``name, clean``."""
    times: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, call in calls.items():
            for clean in (False, True):
                for _ in range(2):
                    flushes.elapsed(call, clean)
                timed = statistics.median(flushes.elapsed(call, clean) for _ in range(runs))
                times.setdefault(f"{name}, {'clean' if clean else 'dirty'}", []).append(timed)
    return {key: round(statistics.median(values) * 1e6, 2) for key, values in times.items()}


def timelines(kernel, stored: list, flushes: Flushes, runs: int = 40) -> list[dict]:
    """``kernel`` (``timeline``-patched) run ``runs`` times after each flush: per run, the medians over
    blocks of its marks' intervals (ns at the SM clock the run measured), the latest block's entry and
    exit after the earliest entry; a row of their medians over runs for each flush."""
    import numpy as np
    library = ctypes.CDLL(str(kernel.build.library))
    call, words = launch(kernel, stored), (ctypes.c_ulonglong * (132 * 8))()
    rows = []
    for clean in (False, True, None):
        per_run = []
        for _ in range(runs):
            flushes.flush(clean)
            call()
            device.cupy().cuda.Device().synchronize()
            if library.lo_times_read(words):
                raise RuntimeError("cudaMemcpyFromSymbol of lo_times failed")
            t = np.frombuffer(words, dtype=np.uint64).reshape(132, 8).astype(np.float64)
            ghz = np.median((t[:, 4] - t[:, 0]) / (t[:, 6] - t[:, 5]))
            marks = np.diff(t[:, :5], axis=1) / ghz
            per_run.append([*np.median(marks, axis=0), *np.max(marks, axis=0), t[:, 5].max() - t[:, 5].min(),
                            t[:, 6].max() - t[:, 5].min(), ghz])
        names = ["first boxes", "steps 1-15", "last step, drained", "stores", "first boxes, latest",
                 "steps 1-15, latest", "last step, latest", "stores, latest", "entries spread",
                 "first entry to last exit", "SM GHz"]
        medians = np.median(np.array(per_run), axis=0)
        rows.append({"flush": {False: "dirty", True: "clean", None: "none (warm)"}[clean]} | {
            n: round(float(v), 3 if n == "SM GHz" else 0) for n, v in zip(names, medians)})
    return rows


def checked(name: str) -> bool:
    """One launch of ``VARIANTS[name]`` into a poisoned output, verified against float64 (the run to put
    under ``compute-sanitizer``)."""
    import torch
    op = case_op("novel_gemm")
    schedule = printed(name) if name in PRINTED else gpu_wgmma(op, **FIRST)
    source = print_kernel(schedule).source
    kernel = kernel_from(schedule, source if name in PRINTED else VARIANTS[name](source), device.arch())
    logical, stored = torch_tensors(op)
    out = device.cupy().full((op.m, op.n), float("nan"), kernel.parameter_dtype(op.output))
    kernel.run(kernel.bind(dict(zip(op.call_tensors, prepacked(kernel, stored))) | {op.output: out}))
    got, expected = torch.as_tensor(out, device="cuda").double(), reference(op, logical)
    error = float(torch.linalg.vector_norm(got - expected) / torch.linalg.vector_norm(expected))
    print(f"{name}: relative error {error:.2e}", flush=True)
    return error < 1e-3      # NaN (an output never written) fails


def profiled(calls: dict) -> None:
    """Each call warmed, then launched once after a dirty flush and once after a clean one, those two
    launches inside the NVTX range ``profiled``."""
    import torch
    flushes = Flushes()
    for name, call in calls.items():
        call()
        for clean in (False, True):
            flushes.flush(clean)
            torch.cuda.nvtx.range_push("profiled")
            call()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
            print(f"profiled: {name}, {'clean' if clean else 'dirty'}", flush=True)


def main() -> int:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--ncu", action="store_true", help="each call once a flush, for Nsight Compute")
    arguments.add_argument("--json", help="write the environment and rows to this file")
    arguments.add_argument("--tried", action="store_true", help="the earlier variants (TRIED) too")
    arguments.add_argument("--timelines", action="store_true", help="the clock64 timelines first")
    arguments.add_argument("--printed", action="store_true", help="halves as printed against the patch")
    arguments.add_argument("--check", choices=[*VARIANTS, *PRINTED], help="one launch of this one, verified")
    args = arguments.parse_args()
    if args.check:
        return 0 if checked(args.check) else 1
    patched = {name: VARIANTS[name] for name in ("as printed", "halves, last 3 steps")} if args.printed \
        else VARIANTS | (TRIED if args.tried else {})
    rows, calls = calls_verified(patched, {name: printed(name) for name in PRINTED} if args.printed else {})
    if args.ncu:
        profiled(calls)
        return 0 if all(r["verified"] for r in rows) else 1
    env = environment()
    print(json.dumps(env), flush=True)
    flushes = Flushes()
    op = case_op("novel_gemm")
    schedule = gpu_wgmma(op, **FIRST)
    stored = torch_tensors(op)[1]
    marked = (("as printed", VARIANTS["as printed"]), ("unstored", unstored), ("unchecked", unchecked),
              ("unchecked, unstored", lambda source: unstored(unchecked(source))))
    for name, patch in marked if args.timelines else ():
        kernel = kernel_from(schedule, timeline(patch)(print_kernel(schedule).source), device.arch())
        for row in timelines(kernel, stored, flushes):
            rows.append({"timeline": name} | row)
            print(json.dumps(rows[-1]), flush=True)
    for repeat in range(3):
        rows.append({"together": repeat} | interleaved(flushes, calls))
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "rows": rows}, f, indent=1)
    return 0 if all(r.get("verified", True) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
