"""Files replaced atomically, so that a crash never leaves a partial file, and host-wide locks."""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def write_text_atomically(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same directory, flushed to disk
    and renamed over ``path``: readers see the old file or the new one, never a part."""
    path = Path(path)
    temporary = None
    try:
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp",
                                         delete=False) as handle:
            temporary = Path(handle.name)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
    return path


@contextlib.contextmanager
def host_lock(name: str) -> Iterator[None]:
    """Hold the lock ``name`` of this host (an ``flock`` on a file of that name in the temporary
    directory, released when the holder ends or dies)."""
    descriptor = os.open(Path(tempfile.gettempdir()) / name, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)
