"""The Python API under generated bad arguments: the simulator's policies, KV pools, cost models,
requests, workloads and the loaders. Each call returns a sound result or raises a project error
(``roofline.errors.RooflineError``, a ValueError) naming the argument; never another exception or a hang.
"""

from __future__ import annotations

import math
from datetime import timedelta
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import roofline
from roofline.errors import InvalidValueError, RooflineError
from roofline.formulas import REGISTRY
from roofline.sim import (
    ClosedLoop,
    KVPool,
    Request,
    RooflineCostModel,
    SimResult,
    UnitCostModel,
    check_requests,
    serve_continuous,
    serve_serial,
    serve_static,
    synthetic_workload,
)

FUZZ = settings(settings.get_profile("fuzz"), deadline=timedelta(seconds=10))

M = roofline.get_model("llama-3.2-1b")
A = roofline.get_accelerator("h100-sxm")
COST = RooflineCostModel.for_model(M, A)
REQS = [Request(id=0, arrival_s=0, prompt_tokens=5, output_tokens=3),
        Request(id=1, arrival_s=Fraction(1, 100), prompt_tokens=9, output_tokens=2)]

#: Bad and extreme values of every kind a caller can pass by mistake.
BAD = [None, True, False, "1", "", 1.5, math.nan, math.inf, -math.inf, -1, 0, 1, 2, 10**400, 2**63, 2**64 + 1,
       1e308, 5e-324, np.int64(3), np.float64(math.nan), np.array([1, 2]), np.array([], dtype=object),
       Fraction(1, 3), [], [REQS[0]], {}, object(), UnitCostModel, RooflineCostModel, M, A, b"x", 1j]

#: Entry points, the keyword arguments of a good call, and the names a generated call may change.
ENTRIES: dict[str, tuple[Any, dict[str, Any]]] = {
    "serve_serial": (serve_serial, dict(requests=REQS, cost_model=COST, kv_pool=None, max_model_len=None,
                                        record_steps=True, max_steps=None)),
    "serve_static": (serve_static, dict(requests=REQS, cost_model=COST, batch_size=2, max_wait=None, kv_pool=None,
                                        max_num_batched_tokens=None, max_model_len=None, record_steps=False,
                                        max_steps=None)),
    "serve_continuous": (serve_continuous, dict(requests=REQS, cost_model=COST, max_num_seqs=4,
                                                admission="reserve", kv_pool=KVPool.tokens(100),
                                                max_prefill_tokens=None, record_steps=False, max_steps=None)),
    "KVPool.from_budget": (KVPool.from_budget, dict(budget=10**9, kv_bytes_per_token=32768, block_size=16)),
    "KVPool": (KVPool, dict(capacity_blocks=100, block_size=16)),
    "UnitCostModel": (UnitCostModel, dict(decode=1, prefill=Fraction(1, 5))),
    "RooflineCostModel.for_model": (RooflineCostModel.for_model, dict(model=M, accelerator=A, flops="exact",
                                                                      overhead=0, exact=True,
                                                                      tensor_parallel_size=1)),
    "Request": (Request, dict(id=0, arrival_s=0, prompt_tokens=5, output_tokens=3)),
    "check_requests": (check_requests, dict(requests=REQS)),
    "synthetic_workload": (synthetic_workload, dict(num_prompts=3, rate=2, input_len=8, output_len=4, seed=0)),
    "ClosedLoop": (ClosedLoop, dict(clients=2, lengths=[(5, 3), (9, 2)], think_time_s=0)),
    "load_model": (roofline.load_model, dict(spec="llama-3.2-1b", weight_dtype=None, kv_dtype=None)),
    "get_accelerator": (roofline.get_accelerator, dict(name="h100-sxm")),
    "ModelConfig": (roofline.ModelConfig, dict(name="tiny", num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                                               num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                               vocab_size=100, tie_word_embeddings=False, weight_dtype="bfloat16",
                                               kv_dtype="bfloat16", source="", model_type="llama")),
}


def _positional(name: str, kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Split the arguments that the entry point takes positionally."""
    first = {"serve_serial": 2, "serve_static": 2, "serve_continuous": 2, "check_requests": 1, "load_model": 1,
             "get_accelerator": 1, "synthetic_workload": 1}.get(name, 0)
    keys = list(kwargs)
    return tuple(kwargs[k] for k in keys[:first]), {k: kwargs[k] for k in keys[first:]}


def _sound(value: Any) -> None:
    """A returned object holds no non-finite number where it reports one."""
    if isinstance(value, SimResult):
        for r in value.requests:
            for t in (r.finish_s, r.handed_back_s):
                assert t is None or math.isfinite(float(t)), r
    if isinstance(value, KVPool) and value.capacity_blocks is not None:
        assert isinstance(value.capacity_blocks, int) and value.capacity_blocks >= 0
    if isinstance(value, Request):
        assert math.isfinite(float(value.arrival_s))
    if isinstance(value, roofline.ModelConfig):  # name=None was accepted
        assert all(isinstance(getattr(value, f), str) for f in ("name", "source", "model_type")), value
        assert value.parameters > 0 and value.kv_bytes_per_token > 0


@pytest.mark.parametrize("name", sorted(ENTRIES))
@FUZZ
@given(data=st.data())
def test_generated_arguments_give_a_sound_result_or_a_project_error_naming_one(name: str,
                                                                              data: st.DataObject) -> None:
    """One or two arguments replaced by bad or extreme values: a sound result, or a RooflineError whose
    field is one of the arguments (or a field inside one); never another exception."""
    func, good = ENTRIES[name]
    kwargs = dict(good)
    changed = data.draw(st.lists(st.sampled_from(sorted(good)), min_size=1, max_size=2, unique=True), label="args")
    for arg in changed:
        kwargs[arg] = data.draw(st.sampled_from(BAD), label=arg)
    args, rest = _positional(name, kwargs)
    try:
        out = func(*args, **rest)
    except RooflineError as exc:
        note(f"refused: {exc}")
        message = str(exc)
        assert "\n" not in message and len(message) < 5000
        field = getattr(exc, "field", None)
        if field is not None:
            base = field.split("[")[0].split(".")[0]
            if base not in good and base in REGISTRY:  # a formula's result out of range: every input is given
                assert all(f"{arg}=" in message for arg in REGISTRY[base].domains), message
                return
            assert base in good or base in ("requests", "lengths") or field.startswith(("arrival_s", "prompt",
                                                                                         "output")), field
        return
    _sound(out)


@pytest.mark.parametrize(("call", "field"), [
    (lambda: serve_serial(None, COST, record_steps=True), "requests"),  # type: ignore[arg-type]
    (lambda: serve_static(5, COST, record_steps=True), "requests"),  # type: ignore[arg-type]
    (lambda: serve_continuous("abc", COST, record_steps=True), "requests"),  # type: ignore[arg-type]
    (lambda: serve_serial(REQS, UnitCostModel, record_steps=True), "cost_model"),
    (lambda: serve_continuous(REQS, RooflineCostModel, record_steps=True), "cost_model"),
    (lambda: RooflineCostModel.for_model(None, A), "model"),  # type: ignore[arg-type]
    (lambda: RooflineCostModel.for_model(M, roofline.Accelerator), "accelerator"),  # type: ignore[arg-type]
    (lambda: KVPool.from_budget(budget=10**400, kv_bytes_per_token=1.5), "budget"),
    (lambda: KVPool.from_budget(budget=1e308, kv_bytes_per_token=1), "budget"),  # above MAX_BUDGET
    (lambda: KVPool.from_budget(budget=1e24, kv_bytes_per_token=5e-324), "kv_capacity_blocks"),
    (lambda: KVPool.from_budget(budget=np.array([1e9]), kv_bytes_per_token=1), "budget"),
    (lambda: UnitCostModel(decode=10**400, prefill=0.5), "decode"),
    (lambda: Request(id=0, arrival_s=10**400, prompt_tokens=1, output_tokens=1), "arrival_s"),
    (lambda: Request(id=0, arrival_s=0, prompt_tokens=10**16, output_tokens=1), "prompt_tokens"),
    (lambda: roofline.load_model(None), "spec"),  # type: ignore[arg-type]
    (lambda: KVPool(np.array([1, 2]), 16), "capacity_blocks"),
    (lambda: serve_static(REQS, COST, batch_size=np.array([1, 2]), record_steps=True), "batch_size"),  # type: ignore[arg-type]
    (lambda: serve_static(REQS, COST, max_wait=np.array([1.0]), record_steps=True), "max_wait"),
    (lambda: serve_continuous(REQS, COST, admission=np.array([1, 2]), record_steps=True), "admission"),  # type: ignore[arg-type]
    (lambda: UnitCostModel(decode=np.array([1, 2])), "decode"),
    (lambda: RooflineCostModel.for_model(M, A, flops=np.array([1])), "flops"),  # type: ignore[arg-type]
    (lambda: synthetic_workload(3, rate=10**400), "rate"),
    (lambda: synthetic_workload(3, rate=5e-324), "rate"),
    (lambda: synthetic_workload(3, arrival="gamma", rate=1, cv=5e-324), "cv"),
    (lambda: synthetic_workload(0, rate=np.array([1, 2])), "rate"),
    (lambda: synthetic_workload(10**400, rate=1), "num_prompts"),
    (lambda: synthetic_workload(3, rate=1, input_len=None), "input_len"),  # type: ignore[arg-type]
    (lambda: ClosedLoop(clients=1, lengths=None), "lengths"),  # type: ignore[arg-type]
    (lambda: ClosedLoop(clients=1, lengths=[(10**16, 1)]), "lengths[0].prompt_tokens"),
])
def test_each_listed_api_fault_names_the_argument(call: Any, field: str) -> None:
    """The issue's API faults: each an InvalidValueError naming the argument, not a TypeError or OverflowError."""
    with pytest.raises(InvalidValueError) as exc:
        call()
    assert exc.value.field == field
    assert str(exc.value).startswith(f"{field}=")


def test_an_integer_too_long_to_print_is_named_by_its_size() -> None:
    """A 5,000-digit integer (beyond Python's 4,300-digit str limit) still gives a one-line error message."""
    with pytest.raises(InvalidValueError) as exc:
        Request(id=0, arrival_s=0, prompt_tokens=10**5000, output_tokens=1)
    assert str(exc.value).startswith("prompt_tokens=<an integer of 16,610 bits>: must be <=")


def test_the_uniform_share_of_a_billion_rows_uses_the_series_and_agrees_with_the_recurrence() -> None:
    """expected_useful_share_uniform at B = 10^9 (once a 10^9-step loop) is 1/2 + 1/(2 (1 + r)) + O(1/B) for
    r = 2s/(1 - s) = 18; just past the recurrence's limit the series equals the recurrence to 1e-14."""
    from roofline.formulas import expected_useful_share_uniform
    from roofline.formulas.useful_share import _RECURRENCE_MAX_BATCH, _j_large

    share = expected_useful_share_uniform(batch=10**9, spread=0.9)
    assert abs(share - (0.5 + 0.5 / 19)) < 1e-8
    assert expected_useful_share_uniform(batch=2**70, spread=0.9) == pytest.approx(0.5 + 0.5 / 19, rel=1e-15)
    n, r = _RECURRENCE_MAX_BATCH + 1, 18.0
    j = math.log1p(r) / r
    for m in range(1, n + 1):
        j = (1 / m - j) / r
    assert _j_large(n, r) == pytest.approx(j, rel=1e-14)


def test_numpy_integers_in_a_pool_become_python_ints_that_never_wrap() -> None:
    """KVPool(np.int64(2**62), block_size=np.int64(16)) holds 2**66 token slots, not an int64 product that wraps."""
    pool = KVPool(np.int64(2**62), block_size=np.int64(16))
    assert pool.capacity_tokens == 2**66 and type(pool.capacity_blocks) is int


def test_a_float_underflow_that_divides_by_zero_is_a_project_error() -> None:
    """intensity_limit with a context and KV size of 1.8e-177 (product 0.0 in floats) once raised
    ZeroDivisionError; it is an InvalidValueError naming the formula and its inputs."""
    from roofline.formulas import intensity_limit

    with pytest.raises(InvalidValueError) as exc:
        intensity_limit(attention_flops_per_token=0, context=1.8e-177, flops_per_token=1,
                        kv_bytes_per_token=1.8e-177)
    assert exc.value.field == "intensity_limit" and "context=1.8e-177" in str(exc.value)


_WORKLOAD_ARGS = ("arrival", "rate", "cv", "input_len", "output_len", "input_distribution", "output_distribution",
                  "range_ratio", "input_cap", "output_cap", "sigma", "trace", "seed")
_WORKLOAD_BAD = [*BAD, "Poisson", "trace", "lognormal", "exponential", "uniform", [(1, 2)], "abc", (REQS[0], 3)]


@FUZZ
@given(data=st.data())
def test_every_synthetic_workload_refusal_names_its_argument(data: st.DataObject) -> None:
    """synthetic_workload with one to three arguments replaced by bad values, on each length distribution:
    a workload, or a RooflineError whose field is one of its arguments (``trace[0]`` for an element): never
    an AttributeError (trace=[(1, 2)]), a TypeError, or an error naming no field or another function's
    (arrival='Poisson' is ``arrival``, not arrival_times' ``process``)."""
    dist = data.draw(st.sampled_from(["fixed", "uniform", "exponential", "lognormal", "trace"]), label="dist")
    kwargs: dict[str, Any] = dict(rate=2, input_len=8, output_len=4, seed=0, input_distribution=dist,
                                  output_distribution=dist, trace=REQS if dist == "trace" else None,
                                  input_cap=16 if dist == "exponential" else None,
                                  output_cap=16 if dist == "exponential" else None)
    for arg in data.draw(st.lists(st.sampled_from(_WORKLOAD_ARGS), min_size=1, max_size=3, unique=True)):
        kwargs[arg] = data.draw(st.sampled_from(_WORKLOAD_BAD), label=arg)
    num_prompts = data.draw(st.sampled_from([3, 0]), label="num_prompts")
    try:
        work = synthetic_workload(num_prompts, **kwargs)
    except RooflineError as exc:
        note(f"refused: {exc}")
        field = getattr(exc, "field", None)
        assert field is not None and field.split("[")[0] in (*_WORKLOAD_ARGS, "num_prompts"), exc
        assert f"{field}=" in str(exc), exc
        return
    assert len(work.requests) == num_prompts and work.spec["num_prompts"] == num_prompts
    assert all(isinstance(r, Request) and r.prompt_tokens >= 1 and r.output_tokens >= 1 for r in work.requests)
