"""Field-by-field comparison of two simulation results (used to check the event engine against the step engine).

Needs no optional dependency.
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["same", "assert_same_results"]

_PERCENTILE_FIELDS = ("queue_wait", "ttft", "tpot", "e2e", "itl")


def same(a: Any, b: Any, where: str) -> None:
    """Assert equal values of the same number type (an int stays an int, a Fraction a Fraction).

    Raises
    ------
    AssertionError
        Naming ``where``, the two values and their types.

    Examples
    --------
    >>> same(1, 1, "x")
    """
    assert type(a) is type(b), f"{where}: {a!r} ({type(a).__name__}) vs {b!r} ({type(b).__name__})"
    assert a == b, f"{where}: {a!r} != {b!r}"


#: The options that say which engine ran (and why the step engine), set apart when two engines' results are compared.
_ENGINE_OPTIONS = ("engine", "engine_reason")


def assert_same_results(first: Any, second: Any) -> None:
    """Assert that ``first`` ran on the event engine (the stretch clock) and ``second`` on the step engine,
    and that they are otherwise identical: options, every request's fields, every summary figure (each
    percentile field by field) and, when recorded, every step record.

    Raises
    ------
    AssertionError
        A result from another engine than said (``options["engine"]``), or at the first difference,
        naming the field.
    """
    engines = (first.options.get("engine"), second.options.get("engine"))
    why = (first.options.get("engine_reason"), second.options.get("engine_reason"))
    assert engines == ("event", "step"), f"engines {engines}, not event vs step (reasons: {why})"
    options = [{k: v for k, v in r.options.items() if k not in _ENGINE_OPTIONS} for r in (first, second)]
    assert (first.policy, options[0]) == (second.policy, options[1])
    assert len(first.requests) == len(second.requests), f"requests: {len(first.requests)} vs {len(second.requests)}"
    for i, (x, y) in enumerate(zip(first.requests, second.requests, strict=True)):
        for field in attrs.fields(type(x)):
            same(getattr(x, field.name), getattr(y, field.name), f"requests[{i}].{field.name}")
    for field in attrs.fields(type(first.summary)):
        a, b = getattr(first.summary, field.name), getattr(second.summary, field.name)
        if field.name in _PERCENTILE_FIELDS and a is not None and b is not None:
            for g in attrs.fields(type(a)):
                same(getattr(a, g.name), getattr(b, g.name), f"summary.{field.name}.{g.name}")
        else:
            same(a, b, f"summary.{field.name}")
    if second.steps is None:
        assert first.steps is None
        return
    assert len(first.steps) == len(second.steps)
    for x, y in zip(first.steps, second.steps, strict=True):
        for field in attrs.fields(type(x)):
            same(getattr(x, field.name), getattr(y, field.name), f"steps[{x.index}].{field.name}")
