"""The Python API checks its arguments before using them: a project error naming the argument."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import roofline
from roofline.errors import InvalidValueError
from roofline.estimate import criticality, decode_step, kv_budget_for, kv_capacity

M = roofline.get_model("llama-3.1-8b")
A = roofline.get_accelerator("h100-sxm")

CALLS = [
    (lambda: decode_step(M, None, batch=1, context=1), "accelerator"),  # type: ignore[arg-type]
    (lambda: decode_step(None, A, batch=1, context=1), "model"),  # type: ignore[arg-type]
    (lambda: decode_step(roofline.ModelConfig, A, batch=1, context=1), "model"),  # type: ignore[arg-type]
    (lambda: decode_step(M, A, batch=np.array([1, 2]), context=1), "batch"),
    (lambda: decode_step(M, A, batch=1, context=1, kv_reads="no"), "kv_reads"),  # type: ignore[arg-type]
    (lambda: decode_step(M, A, batch=1, context=1, overhead=float("inf")), "overhead"),
    (lambda: decode_step(M, A, batch=1, context=1, flops=None), "flops"),  # type: ignore[arg-type]
    (lambda: criticality(M, A, context=np.array([1])), "context"),
    (lambda: kv_capacity(M, budget=np.array([1e9]), context=1), "budget"),
    (lambda: kv_capacity(M, budget=1e9, context=0), "context"),
    (lambda: kv_capacity(M, budget=1e9, context=1, block_size=0), "block_size"),
    (lambda: kv_budget_for(M, A, utilization=np.array([0.5])), "utilization"),
    (lambda: kv_budget_for(M, A, utilization=float("nan")), "utilization"),
    (lambda: kv_budget_for(M, A, reserved="1"), "reserved"),
]


@pytest.mark.parametrize(("call", "field"), CALLS)
def test_bad_arguments_raise_a_project_error_naming_the_argument(call: Any, field: str) -> None:
    """Each bad argument is an InvalidValueError (a ValueError) whose message starts with its name."""
    with pytest.raises(InvalidValueError) as exc:
        call()
    assert exc.value.field == field
    assert str(exc.value).startswith(f"{field}=")


def test_kv_reads_false_is_still_the_weights_only_step() -> None:
    """kv_reads=False at 1,000 tokens is the batch-1 weights-only step: 16,060,522,496 B / 3.35 TB/s."""
    step = decode_step(M, A, batch=1, context=1000, kv_reads=False)
    assert step.bytes == 16_060_522_496
    assert step.step_time == step.bytes / A.bandwidth
