"""The element type a tensor-core kernel stores its outputs in (``Op.out_dtype``): float32, or float16 or
bfloat16, the float32 sums (with the bias, scales and epilogue) rounded to nearest even once, in
registers, at the store. On the GPU the conversion intrinsics round (``__float2half_rn``,
``__float2bfloat16_rn``; two consecutive columns as one 4-byte ``__half2``/``__nv_bfloat162`` store);
the host emulation stores the bit patterns (``uint16_t``) that C functions of the same rounding compute
(``HOST``), so that a truncating conversion misses the reference without a GPU. TMA stores a 16-bit
output's chunks as it does float32's: 64 rows of 128 swizzled bytes, 64 columns a chunk instead of 32.

Only the tensor-core kernels store 16-bit outputs (``check``); a ``split_k`` kernel whose shares are
added into its output refuses them, one whose tile's last block reduces the shares
(``split_k(..., reduce="last")``, ``split_reduce``) rounds once at that block's store.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ops import BFLOAT16, FLOAT16
from ...schedule import Schedule, ScheduleError

ROW_BYTES = 128     # a staged chunk's row (the 128-byte swizzle)


@dataclass(frozen=True)
class OutputType:
    """How a kernel stores an output of ``dtype``: its C type on the GPU and in the host emulation, its
    bytes, TMA's ``CUtensorMapDataType`` of it, and the conversion of a float32 value (``LO_OUT``)."""

    dtype: str
    device: str
    host: str
    size: int
    map_type: int
    convert: str = ""       # the device's conversion intrinsic ("": float32, none)
    pair: str = ""          # the device's two-element type and its conversion of two floats

    @property
    def converts(self) -> bool:
        return bool(self.convert)

    def ctype(self, device: bool) -> str:
        return self.device if device else self.host

    @property
    def chunk_columns(self) -> int:
        """Columns of a chunk TMA stores: one 128-byte row of them."""
        return ROW_BYTES // self.size

    def value(self, value: str) -> str:
        """The C expression storing the float32 ``value`` as this type."""
        return f"LO_OUT({value})" if self.converts else value

    def macros(self, device: bool) -> str:
        """``LO_OUT`` (a 16-bit output's conversion: on the host, ``HOST``'s functions)."""
        if not self.converts:
            return ""
        if device:
            return f"#define LO_OUT(value) {self.convert}(value)"
        return HOST + f"\n#define LO_OUT(value) lo_{self.dtype}_bits(value)"

    def store2(self, device: bool) -> str:
        """``LO_STORE2``: two consecutive outputs in one store on the GPU (8 bytes of float32, 4 of
        16-bit)."""
        if not device:
            return ("#define LO_STORE2(place, first, second) ((&(place))[0] = "
                    f"{self.value('(first)')}, (&(place))[1] = {self.value('(second)')})")
        kind, convert = self.pair.split() if self.converts else ("float2", "make_float2")
        return (f"#define LO_STORE2(place, first, second) (*({kind} *) &(place) = "
                f"{convert}((first), (second)))")


TYPES = {
    "float32": OutputType("float32", "float", "float", 4, 7),
    FLOAT16: OutputType(FLOAT16, "__half", "uint16_t", 2, 6, "__float2half_rn", "__half2 __floats2half2_rn"),
    BFLOAT16: OutputType(BFLOAT16, "__nv_bfloat16", "uint16_t", 2, 9, "__float2bfloat16_rn",
                         "__nv_bfloat162 __floats2bfloat162_rn"),
}


def of(schedule: Schedule) -> OutputType:
    """The output type of ``schedule``'s op."""
    return TYPES[schedule.op.out_dtype]


def check(schedule: Schedule, tensor_cores: bool) -> None:
    """ScheduleError where a kernel that is not a tensor-core one (``tensor_cores``) would store a 16-bit
    output."""
    if schedule.op.out_dtype != "float32" and not tensor_cores:
        raise ScheduleError(f"{schedule.op!r} stores {schedule.op.out_dtype} outputs, which only the "
                            f"tensor-core kernels write: tensorize it (gpu_wgmma, gpu_mma, gpu_wmma), or use "
                            f"out_dtype='float32'")


# float32 to float16 and bfloat16 bit patterns, rounded to nearest even (NaN stays NaN, overflow to
# infinity, float16's subnormals rounded too): the host emulation's LO_OUT
HOST = r"""
static uint16_t lo_float16_bits(float value)
{
    union { float f; uint32_t u; } v = { value };
    const uint32_t sign = (v.u >> 16) & 0x8000u, mag = v.u & 0x7fffffffu;
    if (mag > 0x7f800000u) return (uint16_t) (sign | 0x7e00u);           /* NaN */
    if (mag >= 0x47800000u) return (uint16_t) (sign | 0x7c00u);          /* 65536 and more: infinity */
    const uint32_t e = mag >> 23, m = (mag & 0x7fffffu) | 0x800000u;
    uint32_t h, rest, half;
    if (e >= 113) {          /* a normal half: 10 of the 23 fraction bits */
        h = ((e - 112) << 10) | ((mag & 0x7fffffu) >> 13);
        rest = mag & 0x1fffu, half = 0x1000u;
    } else if (e >= 101) {   /* a subnormal half: units of 2^-24 */
        const uint32_t shift = 126 - e;
        h = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    } else {
        return (uint16_t) sign;
    }
    if (rest > half || (rest == half && (h & 1))) ++h;      /* a carry rounds up into the exponent */
    return (uint16_t) (sign | h);
}

static uint16_t lo_bfloat16_bits(float value)
{
    union { float f; uint32_t u; } v = { value };
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t) ((v.u >> 16) | 0x40u);   /* NaN */
    return (uint16_t) ((v.u + 0x7fffu + ((v.u >> 16) & 1)) >> 16);
}"""
