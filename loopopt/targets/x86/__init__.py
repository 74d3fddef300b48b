"""The x86 target: SIMD C kernels (AVX-512, AVX2, scalar; AMX tiles for quantized and bf16 ops)
built through cffi into the kernel cache and called in this process."""
from .target import TARGET, X86Target

__all__ = ["TARGET", "X86Target"]
