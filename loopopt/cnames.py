"""The C identifiers of generated kernels: which names a user may give dims and tensors, and the
generators' names derived from layout letters.

The generated C names each dim's loop after the dim and each tensor's pointer after the tensor. Every
other name the generators declare in a kernel's scope starts with one of ``RESERVED_PREFIXES`` (``lo_``;
``t_`` in the tile kernels) or (in quantized kernels) is one of ``QUANTIZED_NAMES``; a register block's
loads are ``load_variable``s, which meet no other name while the tensor is none of ``LOAD_STEMS``.
``check_user_name`` refuses all of those, C's keywords and the C library names a kernel uses, so no user
name can shadow or be shadowed by a generated one.
"""

from __future__ import annotations

RESERVED_PREFIX = "lo_"
RESERVED_PREFIXES = ("_", RESERVED_PREFIX, "t_")     # C's reserved names, the generators', the tile kernels'
# tensors whose register-block loads ``lo_<tensor><n>`` would be the block's accumulators ``lo_acc<n>`` or
# its epilogue's lane base ``lo_v0``
LOAD_STEMS = frozenset({"acc", "v"})
# names the quantized generators declare without the prefix: the prologue's sum and group loop and its
# window-class indices (depth, row, column), and the requantized output ``Y``; float kernels leave them
# to the user (Winograd's dim ``s``)
QUANTIZED_NAMES = frozenset({"s", "g", "dc", "rc", "cc", "Y"})
C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int "
    "long register restrict return short signed sizeof static struct switch typedef union unsigned void "
    "volatile while asm typeof alignas alignof bool true false nullptr static_assert thread_local".split())
# the C library's types, functions and macros a kernel uses by name
C_LIBRARY_NAMES = frozenset(
    "int8_t uint8_t int16_t uint16_t int32_t uint32_t int64_t uint64_t ptrdiff_t size_t NULL memcpy memset "
    "omp_get_thread_num omp_get_num_threads omp_set_num_threads INT32_MAX INT32_MIN".split())
# quantized epilogue scalars: its accumulator, requantized value, lane and lane arrays
EPILOGUE_SCALARS = ("lo_a", "lo_p", "lo_j", "lo_r", "lo_t")


def check_user_name(name: str, kind: str, quantized: bool = False) -> None:
    """ValueError unless ``name`` (a ``kind``, e.g. "dim", "tensor") can name a C variable of a kernel
    (a quantized one with ``quantized``) without meeting a generated name."""
    if name.startswith(RESERVED_PREFIXES):
        prefixes = " or ".join(map(repr, RESERVED_PREFIXES))
        raise ValueError(f"{kind} name {name!r}: names starting with {prefixes} are reserved for the "
                         f"generated C; choose another name")
    listed = lambda words: ", ".join(sorted(words))
    taken = [(C_KEYWORDS, "a C keyword"), (C_LIBRARY_NAMES, "a C library name the kernels use")]
    if quantized:
        taken.append((QUANTIZED_NAMES, f"a name the quantized kernels use "
                                       f"(reserved: {listed(QUANTIZED_NAMES)})"))
    if kind == "tensor":
        taken.append((LOAD_STEMS, f"a tensor name whose register-block loads would meet the block's own "
                                  f"(reserved: {listed(LOAD_STEMS)})"))
    for words, what in taken:
        if name in words:
            raise ValueError(f"{kind} name {name!r} is {what}; choose another name")


def load_variable(tensor: str, number: int) -> str:
    """The C name of a register block's ``number``-th load, of ``tensor``: ``lo_<tensor><number>``."""
    return f"{RESERVED_PREFIX}{tensor}{number}"


def letter_variable(letter: str) -> str:
    """The C variable of an output dim by its layout letter: ``lo_<letter>``, doubled where that is one of
    ``EPILOGUE_SCALARS`` (a contraction's output lettered ``IJ`` names its channel ``lo_jj``)."""
    name = f"{RESERVED_PREFIX}{letter.lower()}"
    return name + name[-1] if name in EPILOGUE_SCALARS else name
