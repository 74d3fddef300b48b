"""The parameters of a generated kernel function, as codegen declares them.

Codegen produces one ``KernelParam`` per C parameter; the C signature, the cffi
declaration and the kernel's argument binding are all rendered from them, so nothing
reads C text back.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelParam:
    """One C parameter: a pointer to ``ctype`` elements (read-only if ``const``) or a scalar."""

    name: str
    ctype: str
    pointer: bool = True
    const: bool = False

    def declaration(self, restrict: bool = True) -> str:
        """The C declaration, e.g. ``const float *restrict I`` or ``int lo_zx``."""
        if not self.pointer:
            return f"{self.ctype} {self.name}"
        return f"{'const ' if self.const else ''}{self.ctype} *{'restrict ' if restrict else ''}{self.name}"


def signature(function: str, params: tuple[KernelParam, ...], restrict: bool = True) -> str:
    """``void function(params...)``."""
    return f"void {function}({', '.join(p.declaration(restrict) for p in params)})"


def scalar(name: str, ctype: str) -> KernelParam:
    """A by-value parameter."""
    return KernelParam(name, ctype, pointer=False)
