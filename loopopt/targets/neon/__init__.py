"""The AArch64 NEON target: the same schedules printed from NEON instruction tables, built natively
on an ARM machine or cross-compiled and run under qemu-aarch64 elsewhere."""
from .target import TARGET, NeonTarget

__all__ = ["TARGET", "NeonTarget"]
