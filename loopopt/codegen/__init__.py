"""C code generation shared by C-like targets: the target-neutral instruction table types, vector
access analysis, the emitter (a target passes its tables, e.g. ``targets/x86/isa.py``)."""
from .emit import Generated, generate, kernel_arguments, vector_access_kinds
from .instr import Isa

__all__ = ["Generated", "generate", "kernel_arguments", "vector_access_kinds", "Isa"]
