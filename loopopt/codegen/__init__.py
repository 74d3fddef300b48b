"""C code generation: ISA instruction tables, vector access analysis, the emitter."""
from .emit import Generated, generate, kernel_arguments, vector_access_kinds
from .isa import ISAS, Isa

__all__ = ["Generated", "generate", "kernel_arguments", "vector_access_kinds", "ISAS", "Isa"]
