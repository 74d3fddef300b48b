"""Memos of the ranking's pure functions of an op's loop structure, by the knobs they read.

``rank.figures`` prices every candidate of a search space (up to about 47,000), and candidates that
differ only in their unrolling, weight format or parallel loop share the extents and order of their
outer loops: ``by_knobs("pixel", "outer")`` memoizes a function ``(op, knobs, *args)`` by the op (its
identity), those fields of the knobs and the other arguments, so it runs once per distinct value. The
function must read no other field of the knobs and nothing that changes (the machine profile, say:
its arguments carry what it reads of it); tests/targets/x86/test_knob_memo.py holds each memo to its
function over whole search spaces.
"""
from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
LIMIT = 1 << 16            # entries a memo keeps before it starts over (an op has a few thousand)


def by_knobs(*fields: str) -> Callable[[F], F]:
    """Memoize a function ``(op, knobs, *args, **kwargs)`` that reads only ``fields`` of the knobs; it
    returns a copy of what it remembers (a dict or list stays the caller's own); ``__wrapped__`` is
    the function itself."""
    read = attrgetter(*fields)

    def memoize(function: F) -> F:
        memo: dict[tuple, Any] = {}

        @functools.wraps(function)
        def memoized(op, knobs, *args, **kwargs):
            key = (op, read(knobs), args, tuple(kwargs.items()))
            if key not in memo:
                if len(memo) >= LIMIT:
                    memo.clear()
                memo[key] = function(op, knobs, *args, **kwargs)
            return copy.copy(memo[key])

        return memoized  # type: ignore[return-value]

    return memoize
