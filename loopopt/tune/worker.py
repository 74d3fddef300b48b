"""The worker process of ``IsolatedExecutor``: ``python -m loopopt.tune.worker FD`` serves calls
over the socket ``FD`` until the parent closes it (this module is never imported by the parent)."""
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
            answer = ("ok", fn(*args, **kwargs))
        except EOFError:
            return
        except Exception as err:
            answer = ("raised", f"{type(err).__name__}: {err}")
        try:
            connection.send(answer)
        except (TypeError, AttributeError, pickle.PicklingError) as err:
            connection.send(("raised", f"the result cannot be sent back: {type(err).__name__}: {err}"))


if __name__ == "__main__":
    serve(int(sys.argv[1]))
