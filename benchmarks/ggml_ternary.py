"""llama.cpp's ternary GEMV (its ``TQ1_0`` and ``TQ2_0`` weight types) as a peer of bench_lowbit.py, through
ggml's CPU libraries called with ctypes: the ones ``build_ggml.py`` builds into its cache from the
``llama-cpp-python`` sdist (``python benchmarks/build_ggml.py``), else the ones an installed
``llama-cpp-python`` bundles, or a directory given (``--ggml-lib``).

One GEMV is a ggml graph of one ``ggml_mul_mat`` (the weights ``[n rows of k]`` in the ternary type, the
activations a float32 row, the product a float32 row; ggml quantizes the activations to its ``Q8_K`` blocks
inside the op), computed by ``ggml_graph_compute_with_ctx`` on one thread. The weights are random ternary
values quantized by ``ggml_quantize_chunk``; the output is checked against the float64 product (the
activations' 8-bit rounding is the only error).
"""
from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

import numpy as np
from build_ggml import cache_root, cached_library_dir

INSTALL_HINT = ("build them with `python benchmarks/build_ggml.py` (a few minutes), or pass --ggml-lib DIR "
                "(a directory holding libggml-base.so and libggml-cpu.so)")
TYPES = {"TQ1_0": 34, "TQ2_0": 35}       # enum ggml_type of ggml.h (llama-cpp-python 0.3.x)
GGML_TYPE_F32 = 0
GGML_STATUS_SUCCESS = 0
QK_K = 256                                # weights per block of the ternary types: k must be a multiple


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def library_dir(explicit: str | None = None) -> Path | str:
    """The directory of the ggml libraries: ``explicit``, else the newest build of ``build_ggml.py`` in its
    cache, else the ``lib`` directory of the installed ``llama_cpp`` package (found without importing
    it); or why there is none."""
    if explicit:
        found = Path(explicit)
    else:
        cached = cached_library_dir()
        if cached is not None:
            return cached
        spec = importlib.util.find_spec("llama_cpp")
        if spec is None or spec.origin is None:
            return (f"no ggml build in {cache_root()} and llama-cpp-python is not installed; "
                    f"{INSTALL_HINT}")
        found = Path(spec.origin).parent / "lib"
    missing = [name for name in ("libggml-base.so", "libggml-cpu.so") if not (found / name).exists()]
    if missing:
        return f"no {' or '.join(missing)} in {found}; {INSTALL_HINT}"
    return found


def _load(directory: Path) -> tuple[ctypes.CDLL, ctypes.CDLL]:
    """libggml-base and libggml-cpu with the argument and result types of the functions used here."""
    base = ctypes.CDLL(str(directory / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(str(directory / "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
    p, i64, size = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t
    signatures = {
        (base, "ggml_init"): ([_InitParams], p), (base, "ggml_free"): ([p], None),
        (base, "ggml_new_tensor_2d"): ([p, ctypes.c_int, i64, i64], p),
        (base, "ggml_mul_mat"): ([p, p, p], p), (base, "ggml_new_graph"): ([p], p),
        (base, "ggml_build_forward_expand"): ([p, p], None), (base, "ggml_get_data"): ([p], p),
        (base, "ggml_nbytes"): ([p], size), (base, "ggml_row_size"): ([ctypes.c_int, i64], size),
        (base, "ggml_tensor_overhead"): ([], size), (base, "ggml_graph_overhead"): ([], size),
        (base, "ggml_type_name"): ([ctypes.c_int], ctypes.c_char_p),
        (base, "ggml_quantize_chunk"): ([ctypes.c_int, p, p, i64, i64, i64, p], size),
        (cpu, "ggml_cpu_init"): ([], None),
        (cpu, "ggml_graph_compute_with_ctx"): ([p, p, ctypes.c_int], ctypes.c_int),
    }
    for (lib, name), (args, result) in signatures.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = args, result
    cpu.ggml_cpu_init()
    return base, cpu


class GgmlGemv:
    """``kind`` (``TQ1_0`` or ``TQ2_0``) weights of ``n`` outputs x ``k`` inputs (``k`` a multiple of 256)
    times a random float32 row, on ``threads`` threads: ``run()`` computes it, ``output()`` reads the
    product; ``weight_bytes`` is the size of the stored weights, ``error`` the output's largest deviation
    from the float64 product over the product's largest magnitude. The ggml context lives as long as
    the object (a bound ``run`` keeps it)."""

    def __init__(self, directory: Path, kind: str, n: int, k: int, threads: int = 1, seed: int = 0):
        if kind not in TYPES:
            raise ValueError(f"kind={kind!r}: choose one of {', '.join(TYPES)}")
        if k % QK_K:
            raise ValueError(f"k={k}: the ternary types of ggml pack blocks of {QK_K} weights; k must be a "
                             f"multiple of {QK_K}")
        self._base, self._cpu = _load(directory)
        base = self._base
        kind_id = TYPES[kind]
        named = base.ggml_type_name(kind_id).decode()
        if named != kind.lower():
            raise RuntimeError(f"this ggml names type {kind_id} {named!r}, not {kind.lower()!r}: its enum "
                               f"ggml_type differs from the one TYPES was written for")
        self.weight_bytes = base.ggml_row_size(kind_id, k) * n
        work = base.ggml_row_size(TYPES["TQ2_0"], k) * 4 + (1 << 20)     # the Q8_K activations and the plan
        size = (self.weight_bytes + 4 * (k + n) + 4 * base.ggml_tensor_overhead() + base.ggml_graph_overhead()
                + work)
        self._ctx = base.ggml_init(_InitParams(size, None, False))
        if not self._ctx:
            raise MemoryError(f"ggml_init could not allocate {size} bytes")
        rng = np.random.default_rng(seed)
        w = rng.integers(-1, 2, (n, k)).astype(np.float32)
        x = rng.standard_normal(k).astype(np.float32)
        a = base.ggml_new_tensor_2d(self._ctx, kind_id, k, n)
        b = base.ggml_new_tensor_2d(self._ctx, GGML_TYPE_F32, k, 1)
        base.ggml_quantize_chunk(kind_id, w.ctypes.data, base.ggml_get_data(a), 0, n, k, None)
        ctypes.memmove(base.ggml_get_data(b), x.ctypes.data, x.nbytes)
        self._y, self._n, self._threads = base.ggml_mul_mat(self._ctx, a, b), n, threads
        self._graph = base.ggml_new_graph(self._ctx)
        base.ggml_build_forward_expand(self._graph, self._y)
        self.run()
        reference = w.astype(np.float64) @ x.astype(np.float64)
        self.error = float(np.abs(self.output() - reference).max() / np.abs(reference).max())

    def run(self) -> None:
        """Compute the GEMV."""
        status = self._cpu.ggml_graph_compute_with_ctx(self._ctx, self._graph, self._threads)
        if status != GGML_STATUS_SUCCESS:
            raise RuntimeError(f"ggml_graph_compute_with_ctx returned status {status}")

    def output(self) -> np.ndarray:
        """The product of the last run, float32."""
        data = ctypes.cast(self._base.ggml_get_data(self._y), ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(data, (self._n,)).copy()

    def __del__(self) -> None:
        if getattr(self, "_ctx", None):
            self._base.ggml_free(self._ctx)
