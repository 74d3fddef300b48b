"""A dependency-free progress bar on stderr."""
from __future__ import annotations

import sys
import time


class Progress:
    """A progress bar on stderr (one line per update when stderr is not a terminal)."""

    def __init__(self, total: int, enabled: bool = True, width: int = 24):
        self.total, self.enabled, self.width, self.start = total, enabled, width, time.perf_counter()
        self.tty = sys.stderr.isatty()

    def update(self, done: int, label: str) -> None:
        """Show ``done`` of ``total`` steps with ``label`` (a newline after the last one on a terminal)."""
        if not self.enabled:
            return
        filled = self.width * done // max(self.total, 1)
        line = (f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total} "
                f"{time.perf_counter() - self.start:5.1f}s {label}")
        sys.stderr.write(f"\r{line:<79}" if self.tty else line + "\n")
        if self.tty and done == self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()
