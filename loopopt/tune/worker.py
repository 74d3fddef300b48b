"""The worker process of ``IsolatedExecutor``: ``python -m loopopt.tune.worker FD`` serves calls
over the socket ``FD`` until the parent closes it (this module is never imported by the parent).
A parent that went away (killed, even with ``kill -9``) ends the worker quietly: its socket is closed
or broken."""
from __future__ import annotations

import pickle
import sys
from multiprocessing.connection import Connection


def serve(fd: int) -> None:
    """The worker's loop: receive ``(fn, args, kwargs)``, answer ``("ok", result)`` or
    ``("raised", "Type: message")``, until the parent closes the socket."""
    connection = Connection(fd)
    while True:
        try:
            fn, args, kwargs = connection.recv()
        except (EOFError, OSError):          # the parent closed the socket, or died
            return
        try:
            answer = ("ok", fn(*args, **kwargs))
        except Exception as err:
            answer = ("raised", f"{type(err).__name__}: {err}")
        try:
            try:
                connection.send(answer)
            except (TypeError, AttributeError, pickle.PicklingError) as err:
                connection.send(("raised", f"the result cannot be sent back: {type(err).__name__}: {err}"))
        except OSError:                      # BrokenPipeError, ConnectionResetError: the parent died
            return


if __name__ == "__main__":
    serve(int(sys.argv[1]))
