"""The AMX tile table: each entry a C template, its meaning on the tile bytes, and its preconditions.

AMX adds 8 tile registers ``tmm0..tmm7`` of up to 16 rows x 64 bytes and a tile multiply unit.
A tile's shape (rows, bytes per row ``colsb``) is set by the configuration (palette 1) that
``loadconfig`` loads; ``rows(t)``/``colsb(t)`` below are those of tile ``t``. The dot products
``C += A x B`` read their operands in this layout (``g`` = elements per 32-bit group: 4 int8
bytes, VNNI-4; 2 bf16 values, VNNI-2):

* ``A``: M rows x K elements, row m is ``A[m, 0..K-1]`` (``colsb(a) = K * element size``, a
  multiple of 4 bytes);
* ``B``: K/g rows x N*g elements: ``b[k // g][g * n + k % g] = B[k, n]`` (each row holds ``g``
  consecutive k of all N columns; ``rows(b) = colsb(a) / 4``, ``colsb(b) = 4 N``);
* ``C``: M rows x N int32 or float32 (``rows(c) = M``, ``colsb(c) = colsb(b) = 4 N``).

So M <= 16, N <= 16, K <= 64 int8 or 32 bf16 per instruction; ``vnni_pack`` builds the B layout.
Templates take tile numbers ``{t}``, ``{c}``, ``{a}``, ``{b}`` as integer literals (the
intrinsics paste them into the instruction), ``{p}`` a pointer and ``{stride}`` bytes between
rows. Code emitted through ``TileConfig.emit`` has its preconditions checked against the
configuration; a violated one would fault (SIGILL) at run time. Running tile code needs the
Linux permission of ``loopopt.targets.x86.amx_runtime.require_amx``.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

MAX_ROWS = 16          # rows of a tile
MAX_COLSB = 64         # bytes per tile row
TILES = 8              # tmm0..tmm7
PALETTE = 1
CONFIG_BYTES = 64
CPU_FLAGS = ("amx_tile", "amx_int8", "amx_bf16")
COMPILE_FLAGS = ("-mamx-tile", "-mamx-int8", "-mamx-bf16")
PRELUDE = """#include <immintrin.h>
/* The 64-byte tile configuration of palette 1, as ldtilecfg reads and sttilecfg writes it. */
typedef struct __attribute__((aligned(64))) {
    unsigned char palette_id, start_row, reserved[14];
    unsigned short colsb[16];   /* bytes per row of tmm0..tmm7; entries 8..15 must be 0 */
    unsigned char rows[16];     /* rows of tmm0..tmm7; entries 8..15 must be 0 */
} lo_tilecfg;
"""


@dataclass(frozen=True)
class Precondition:
    """A condition on the configuration and the tile operands that the instruction requires."""

    text: str
    holds: Callable[[TileConfig, Mapping[str, int]], bool] | None = None   # None: documented, not checkable


@dataclass(frozen=True)
class Dot:
    """The element types of a tile dot product: A and B element kinds, accumulator, group size."""

    a: str      # "u8", "s8" or "bf16"
    b: str
    acc: str    # "int32" or "float32"
    group: int  # elements of A (and of B) per 32-bit group


@dataclass(frozen=True)
class TileInstr:
    """A C template, its meaning on the tile bytes, and its preconditions."""

    template: str
    meaning: str
    tiles: tuple[str, ...] = ()                  # operands that are tile numbers
    preconditions: tuple[Precondition, ...] = ()
    dot: Dot | None = None

    def __call__(self, **operands: object) -> str:
        return self.template.format(**operands)


@dataclass(frozen=True)
class TileIsa:
    """The AMX table: CPU flags, compile flags, prelude and the entries (as attributes)."""

    name: str
    cpu_flags: tuple[str, ...]
    compile_flags: tuple[str, ...]
    prelude: str
    ops: dict[str, TileInstr]

    def __getattr__(self, name: str) -> TileInstr:
        try:
            return self.__dict__["ops"][name]
        except KeyError:
            raise AttributeError(f"ISA {self.__dict__.get('name')!r} has no instruction {name!r}") from None


def _configured(*operands: str) -> Precondition:
    return Precondition(f"tiles {', '.join(operands)} are configured (rows > 0)",
                        lambda cfg, t: all(cfg.rows(t[o]) > 0 for o in operands))


DOT_PRECONDITIONS = (
    _configured("c", "a", "b"),
    Precondition("c, a, b are distinct tiles", lambda cfg, t: len({t["c"], t["a"], t["b"]}) == 3),
    Precondition("rows(c) == rows(a)", lambda cfg, t: cfg.rows(t["c"]) == cfg.rows(t["a"])),
    Precondition("rows(b) == colsb(a) / 4", lambda cfg, t: 4 * cfg.rows(t["b"]) == cfg.colsb(t["a"])),
    Precondition("colsb(c) == colsb(b)", lambda cfg, t: cfg.colsb(t["c"]) == cfg.colsb(t["b"])),
)
MEMORY = ("the compiler is not told that the tile load reads memory: data written by C code just "
          "before must be made visible with a compiler barrier")


def _dot(intrinsic: str, dot: Dot) -> TileInstr:
    if dot.acc == "int32":
        meaning = (f"c[m][n] += sum over k < colsb(a) of {dot.a} a[m][k] * {dot.b} b[k / 4][4 n + k % 4] "
                   f"(int32, wrapping; exact products)")
    else:
        meaning = ("c[m][n] += sum over k < colsb(a) / 2 of bf16 a[m][k] * bf16 b[k / 2][2 n + k % 2] "
                   "(float32: exact products, sums rounded to nearest even, |error| <= (K + 1) 2^-24 "
                   "(|c| + sum |a b|) for K products; denormal a, b, c and results are flushed to zero)")
    return TileInstr(f"{intrinsic}({{c}}, {{a}}, {{b}})",
                     f"{meaning}; m < rows(c), n < colsb(c) / 4", ("c", "a", "b"), DOT_PRECONDITIONS, dot)


AMX = TileIsa(
    name="amx", cpu_flags=CPU_FLAGS, compile_flags=COMPILE_FLAGS, prelude=PRELUDE,
    ops={
        "loadconfig": TileInstr(
            "_tile_loadconfig({p})",
            "configure the tiles from the 64-byte palette-1 block at p: tmm t gets rows[t] rows of "
            "colsb[t] bytes (0 and 0: unused); every tile becomes 0",
            (), (Precondition("p is a 64-byte palette-1 block: rows <= 16, colsb a multiple of 4 <= 64, "
                              "unused entries 0 (TileConfig checks this when built)"),)),
        "storeconfig": TileInstr(
            "_tile_storeconfig({p})",
            "the 64 bytes at p = the current configuration (all 0 when no tile is configured)"),
        "loadd": TileInstr(
            "_tile_loadd({t}, {p}, {stride})",
            "tile t row r = the colsb(t) bytes at (char *)p + r * stride, r < rows(t)",
            ("t",), (_configured("t"), Precondition(MEMORY))),
        "stored": TileInstr(
            "_tile_stored({t}, {p}, {stride})",
            "the colsb(t) bytes at (char *)p + r * stride = tile t row r, r < rows(t); other bytes untouched",
            ("t",), (_configured("t"),)),
        "zero": TileInstr("_tile_zero({t})", "every byte of tile t = 0", ("t",), (_configured("t"),)),
        "dpbusd": _dot("_tile_dpbusd", Dot("u8", "s8", "int32", 4)),
        "dpbssd": _dot("_tile_dpbssd", Dot("s8", "s8", "int32", 4)),
        "dpbsud": _dot("_tile_dpbsud", Dot("s8", "u8", "int32", 4)),
        "dpbuud": _dot("_tile_dpbuud", Dot("u8", "u8", "int32", 4)),
        "dpbf16ps": _dot("_tile_dpbf16ps", Dot("bf16", "bf16", "float32", 2)),
        "release": TileInstr(
            "_tile_release()",
            "return the tiles to the unconfigured state (storeconfig then gives 64 zero bytes); tile "
            "instructions other than loadconfig fault until the next loadconfig"),
    },
)


@dataclass(frozen=True)
class TileConfig:
    """A palette-1 configuration: ``shapes[t] = (rows, colsb)`` of tmm t, ``(0, 0)`` for an unused tile.

    ``colsb`` must be a multiple of 4: ldtilecfg accepts other widths, but then tileloadd and
    tilestored fault (#UD, SIGILL; measured on the Xeon this was developed on)."""

    shapes: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        if len(self.shapes) > TILES:
            raise ValueError(f"a tile configuration has at most {TILES} tiles, got {len(self.shapes)}")
        for t, (rows, colsb) in enumerate(self.shapes):
            if (not (0 <= rows <= MAX_ROWS and 0 <= colsb <= MAX_COLSB) or (rows == 0) != (colsb == 0)
                    or colsb % 4):
                raise ValueError(f"tmm{t}: shape {rows} rows x {colsb} bytes is not a tile shape: rows in "
                                 f"1..{MAX_ROWS} and colsb a multiple of 4 in 4..{MAX_COLSB}, "
                                 f"or (0, 0) for an unused tile")

    def rows(self, t: int) -> int:
        return self.shapes[t][0] if t < len(self.shapes) else 0

    def colsb(self, t: int) -> int:
        return self.shapes[t][1] if t < len(self.shapes) else 0

    def _padded(self) -> tuple[list[int], list[int]]:
        return ([self.rows(t) for t in range(16)], [self.colsb(t) for t in range(16)])

    def to_bytes(self) -> bytes:
        """The 64-byte block ``loadconfig`` reads (layout of ``lo_tilecfg``)."""
        rows, colsb = self._padded()
        return (bytes([PALETTE, 0]) + bytes(14) + np.array(colsb, dtype="<u2").tobytes() + bytes(rows))

    def c_initializer(self) -> str:
        """A C initializer of ``lo_tilecfg`` holding this configuration."""
        rows, colsb = self._padded()
        return (f"{{{PALETTE}, 0, {{0}}, {{{', '.join(map(str, colsb))}}}, "
                f"{{{', '.join(map(str, rows))}}}}}")

    def describe(self, tiles: Mapping[str, int]) -> str:
        return ", ".join(f"{name}=tmm{t} ({self.rows(t)} x {self.colsb(t)} B)" for name, t in tiles.items())

    def emit(self, name: str, **operands: object) -> str:
        """The C of table entry ``name`` on these tiles; ValueError if a precondition fails."""
        instr = getattr(AMX, name)
        tiles = {o: operands[o] for o in instr.tiles}
        for o, t in tiles.items():
            if not (isinstance(t, int) and 0 <= t < TILES):
                raise ValueError(f"{name}: operand {o}={t!r} is not a tile number 0..{TILES - 1}")
        for pre in instr.preconditions:
            if pre.holds is not None and not pre.holds(self, tiles):
                raise ValueError(f"{name}: precondition '{pre.text}' fails for {self.describe(tiles)}")
        return instr(**operands)


# --- a 2 x 2 block of accumulator tiles: the peak loop, the GEMM and the tile kernels -------------------

C_TILES = ((0, 1), (2, 3))      # C_TILES[i][j]: accumulator of tile row i, tile column j
A_TILES = (4, 5)                # one per tile row
B_TILES = (6, 7)                # one per tile column
TILE = MAX_ROWS                 # rows (and int32 columns) of an accumulator tile
BLOCK = 2 * TILE                # output rows and columns of the 2 x 2 block


@dataclass(frozen=True)
class TileBlock:
    """A block of 1 or 2 x 1 or 2 accumulator tiles with one A tile per tile row and one B tile per
    tile column: ``C[i][j] += A[i] x B[j]``. Emits C statements through the table."""

    config: TileConfig

    @classmethod
    def of(cls, rows: tuple[int, ...], cols: tuple[int, ...], a_colsb: int) -> TileBlock:
        """Accumulators of ``rows[i]`` x ``cols[j]`` 32-bit values, A tiles ``rows[i]`` x ``a_colsb``
        bytes, B tiles ``a_colsb / 4`` x ``4 cols[j]`` bytes."""
        shapes = [(0, 0)] * TILES
        for i, r in enumerate(rows):
            shapes[A_TILES[i]] = (r, a_colsb)
            for j, c in enumerate(cols):
                shapes[C_TILES[i][j]] = (r, 4 * c)
        for j, c in enumerate(cols):
            shapes[B_TILES[j]] = (a_colsb // 4, 4 * c)
        return cls(TileConfig(tuple(shapes)))

    @property
    def accumulators(self) -> list[tuple[int, int, int]]:
        """(tile row i, tile column j, tile number) of each configured accumulator."""
        return [(i, j, t) for i, row in enumerate(C_TILES) for j, t in enumerate(row) if self.config.rows(t)]

    def zeros(self) -> list[str]:
        return [f"{self.config.emit('zero', t=t)};" for _, _, t in self.accumulators]

    def loads(self, a: Callable[[int], str], lda: int, b: Callable[[int], str], ldb: int) -> list[str]:
        """Load A tile i from pointer ``a(i)`` (row stride ``lda``), B tile j from ``b(j)``."""
        a_loads = [(t, a(i), lda) for i, t in enumerate(A_TILES) if self.config.rows(t)]
        b_loads = [(t, b(j), ldb) for j, t in enumerate(B_TILES) if self.config.rows(t)]
        return [f"{self.config.emit('loadd', t=t, p=p, stride=s)};" for t, p, s in a_loads + b_loads]

    def dots(self, name: str) -> list[str]:
        """One ``name`` dot product per accumulator."""
        emit = self.config.emit
        return [f"{emit(name, c=t, a=A_TILES[i], b=B_TILES[j])};" for i, j, t in self.accumulators]

    def stores(self, c: Callable[[int, int], str], ldc: int) -> list[str]:
        """Store accumulator (i, j) to pointer ``c(i, j)`` (row stride ``ldc`` bytes)."""
        return [f"{self.config.emit('stored', t=t, p=c(i, j), stride=ldc)};" for i, j, t in self.accumulators]


def chunk_starts(k: int) -> tuple[int, ...]:
    """Where each 64-byte K chunk starts: every 64 bytes, the last shifted back to end at K."""
    if k <= MAX_COLSB:
        return (0,)
    return tuple(range(0, k - MAX_COLSB, MAX_COLSB)) + (k - MAX_COLSB,)


# --- tile layouts in numpy -------------------------------------------------------------------

def vnni_pack(b: np.ndarray, group: int) -> np.ndarray:
    """B (K x N) in the B-tile layout: ``out[k // group, group * n + k % group] = b[k, n]``.

    K is padded with zero rows up to a multiple of ``group`` (4 for int8, 2 for bf16)."""
    if b.ndim != 2:
        raise ValueError(f"vnni_pack: b must be 2-D (K x N), got shape {b.shape}")
    if group not in (2, 4):
        raise ValueError(f"vnni_pack: group={group} must be 4 (int8) or 2 (bf16)")
    k, n = b.shape
    padded = np.zeros((-(-k // group) * group, n), dtype=b.dtype)
    padded[:k] = b
    return np.ascontiguousarray(padded.reshape(-1, group, n).transpose(0, 2, 1)).reshape(-1, group * n)

