"""The x86 target: SIMD C kernels (AVX-512, AVX2, scalar; AMX tiles for quantized and bf16 ops)
built through cffi into the kernel cache and called in this process. ``target.py`` is its face
(``TARGET``, found through ``targets.registry``); the other modules are its instruction tables, kernel
families and their generators, and its tile runtime."""
