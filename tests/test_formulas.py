"""The registry: every fast path equals its SymPy derivation exactly, and broadcasts."""

from __future__ import annotations

import functools
import inspect
import math
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, note
from hypothesis import strategies as st

import roofline.formulas as f
from roofline.errors import InvalidValueError
from roofline.symbolic import SYMBOLS, symbols_for
from roofline.testing.strategies import domain_values

NAMES = sorted(f.REGISTRY)
#: Fast paths exact for exact inputs; the others (transcendental values, numerical integrals)
#: are compared with their SymPy forms to a stated tolerance in their topic's tests.
EXACT_NAMES = [n for n in NAMES if f.REGISTRY[n].exact]


def _max_value(spec: f.FormulaSpec, default: int) -> int:
    """Inputs are drawn up to ``spec.max_test_value`` where evaluating the symbolic form grows with them."""
    return min(default, spec.max_test_value or default)


#: For formulas whose arguments must satisfy a relation (``spec.requires``): map drawn
#: arguments onto ones that satisfy it, so tests construct valid inputs instead of filtering.
ADMISSIBLE = {
    # max <= sum <= B max: the sum moves along [max, B max] by the drawn sum's fractional part
    "static_useful_share": lambda kw: dict(
        kw, length_sum=kw["length_max"] * (1 + (kw["batch"] - 1) * (Fraction(kw["length_sum"]) % 1))),
    # an output no longer than the batch's longest
    "static_handback_delay": lambda kw: dict(kw, length_max=kw["length_max"] + kw["output_tokens"]),
    # MoE: at most E experts per token (k folded into [1, E])
    **{name: (lambda kw: dict(kw, experts_per_token=1 + (kw["experts_per_token"] - 1) % kw["num_experts"]))
       for name in ("experts_touched", "moe_decode_weight_bytes", "moe_arithmetic_intensity", "moe_compute_margin")},
    # drawn inputs stay far below the work limit (max_test_value 24): always admissible
    "expected_useful_share_discrete_uniform": lambda kw: kw,
    # an arrival before the running batch ends: the drawn arrival as a share of the batch's duration
    "static_join_wait": lambda kw: dict(
        kw, arrival_time=kw["length_max"] * kw["step_time"] * (Fraction(kw["arrival_time"]) % 1)),
    # expert parallelism: E a multiple of R (the drawn E as experts per rank), k folded into [1, E], L_moe <= L
    **{name: (lambda kw: _expert_group(kw))
       for name in ("ranks_reached", "remote_ranks_reached", "experts_touched_per_rank", "alltoall_bytes",
                    "alltoall_time", "decode_alltoall_time", "decode_comm_time_ep", "step_time_ep")},
    # a group of at least two GPUs (one GPU has no all-reduce, so no crossover)
    "allreduce_crossover_batch": lambda kw: dict(kw, tensor_parallel_size=kw["tensor_parallel_size"] + 1),
    # a group of whole nodes: T = k G (at least 2 GPUs for the effective ring values)
    "hierarchical_allreduce_time": lambda kw: dict(kw, tensor_parallel_size=kw["tensor_parallel_size"]
                                                   * kw["node_gpus"]),
    **{name: (lambda kw: dict(kw, tensor_parallel_size=(kw["tensor_parallel_size"] + 1) * kw["node_gpus"]))
       for name in ("hierarchical_link_bandwidth", "hierarchical_link_latency")},
    # sparse attention: R = sum min(c_i, K) at most S, Q_K = sum min(t, K) at most Q
    **{name: (lambda kw: dict(kw, capped_context_sum=min(kw["capped_context_sum"], kw["context_sum"])))
       for name in ("sparse_decode_bytes", "sparse_decode_flops", "sparse_step_time")},
    "sparse_mixed_step_time": lambda kw: dict(
        kw, capped_context_sum=min(kw["capped_context_sum"], kw["context_sum"]),
        capped_attention_pairs=min(kw["capped_attention_pairs"], kw["attention_pairs"])),
    # at most P batches in flight
    **{name: (lambda kw: dict(kw, pipeline_parallel_size=kw["pipeline_parallel_size"] + kw["batches_in_flight"] - 1))
       for name in ("throughput_pp", "pipeline_bubble_share")},
}


def _expert_group(kw: dict) -> dict:
    """Drawn expert-parallel arguments made admissible: E = drawn E x R, 1 <= k <= E, L_moe <= L."""
    out = dict(kw, num_experts=kw["num_experts"] * kw["expert_parallel_size"])
    out["experts_per_token"] = 1 + (kw["experts_per_token"] - 1) % out["num_experts"]
    if "num_moe_layers" in kw and "num_hidden_layers" in kw:
        out["num_moe_layers"] = kw["num_moe_layers"] % (kw["num_hidden_layers"] + 1)
    return out


@functools.cache
def _domain(kind: str, max_value: int) -> st.SearchStrategy:
    """``domain_values(kind, max_value=max_value)``, built once: Hypothesis validates a strategy object the first
    time it is drawn from, and a new one per draw made that most of these tests' time (the draws are the same)."""
    return domain_values(kind, max_value=max_value)


def _kwargs(data: st.DataObject, spec: f.FormulaSpec, *, max_value: int = 10**6) -> dict:
    kwargs = {name: data.draw(_domain(kind, max_value), label=name)
              for name, kind in sorted(spec.domains.items())}
    return ADMISSIBLE[spec.name](kwargs) if spec.name in ADMISSIBLE else kwargs


def test_every_relation_has_an_admissible_mapping():
    """Each formula with a relation between its arguments has a mapping onto valid inputs here."""
    assert {n for n, spec in f.REGISTRY.items() if spec.requires} == set(ADMISSIBLE)


def test_registry_is_complete():
    """Every public fast path of every topic module is registered (none can skip the checks)."""
    exported = {name for name in f.__all__ if name not in ("REGISTRY", "FormulaSpec")}
    assert exported == set(f.REGISTRY)
    assert len(f.REGISTRY) >= 27


@pytest.mark.parametrize("name", NAMES)
def test_symbolic_free_symbols_are_the_keyword_arguments(name):
    """The symbolic form's free symbols are exactly the fast path's keyword arguments."""
    spec = f.REGISTRY[name]
    expr = spec.symbolic()
    assert {s.name for s in expr.free_symbols} <= set(spec.domains)
    for sym in expr.free_symbols:
        assert sym is SYMBOLS[sym.name], f"{sym} is not the declared symbol"


@pytest.mark.parametrize("name", EXACT_NAMES)
@given(data=st.data())
def test_fast_path_equals_symbolic_exactly(name, data):
    """With Fraction inputs the fast path equals the SymPy expression exactly."""
    spec = f.REGISTRY[name]
    kwargs = _kwargs(data, spec, max_value=_max_value(spec, 10**6))
    assert spec.admits(**kwargs)
    try:
        fast = spec.fast(**kwargs)
    except ZeroDivisionError:
        expr = spec.symbolic().subs(symbols_for(kwargs))
        assert expr.has(sp.zoo, sp.nan) or not expr.is_finite
        return
    # xreplace: the keys are the declared symbols themselves, and it is ~100x faster than subs on the
    # large Piecewise forms (roofline.symbolic.stretch); .doit(): finite sums evaluate exactly
    expected = spec.symbolic().xreplace(symbols_for(kwargs)).doit()
    note(f"fast={fast!r} symbolic={expected!r}")
    if fast is None:
        assert spec.none_when_infinite and expected == sp.oo
        return
    assert isinstance(fast, (int, Fraction)), f"not exact: {type(fast)}"
    assert sp.Rational(fast.numerator, fast.denominator) == expected


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_numpy_arrays_broadcast_like_scalars(name, data):
    """A numpy array argument gives the elementwise results of the scalar fast path."""
    spec = f.REGISTRY[name]
    limit = _max_value(spec, 10**4)
    draws = [_kwargs(data, spec, max_value=limit) for _ in range(3)]
    arrays = {arg: np.array([d[arg] for d in draws], dtype=np.int64 if kind.endswith("_int") else float)
              for arg, kind in spec.domains.items()}
    try:
        vector = spec.fast(**arrays)
    except (ZeroDivisionError, FloatingPointError):
        return
    for i in range(3):
        scalar = spec.fast(**{a: (int(v[i]) if v.dtype.kind == "i" else float(v[i])) for a, v in arrays.items()})
        got = vector[i]
        if scalar is None:
            assert got == np.inf
        else:
            assert math.isclose(float(got), float(scalar), rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_bad_input_names_the_argument(name):
    """A negative or non-finite argument raises InvalidValueError naming that argument."""
    spec = f.REGISTRY[name]
    arg = sorted(spec.domains)[0]
    good = {a: (1 if k.endswith("_int") else Fraction(1, 2) if k == "share" else 1) for a, k in spec.domains.items()}
    good = ADMISSIBLE[name](good) if name in ADMISSIBLE else good
    assert spec.admits(**good)
    for bad in (-1, float("nan"), float("inf"), "3", None):
        with pytest.raises(InvalidValueError) as info:
            spec.fast(**dict(good, **{arg: bad}))
        assert info.value.field == arg
        assert arg in str(info.value)


@pytest.mark.parametrize("name", NAMES)
def test_docstring_gives_units_returns_raises_and_an_example(name):
    """Every fast path documents units, returns, raises and a runnable example."""
    doc = inspect.getdoc(f.REGISTRY[name].fast) or ""
    for section in ("Returns", "Examples"):
        assert section in doc, f"{name}: no {section} section"
    assert "[" in doc, f"{name}: no unit in brackets"
    assert "Raises" in doc, f"{name}: no Raises"


def test_inexact_formulas_are_few_and_checked_elsewhere():
    """Only the two transcendental expected shares are inexact (checked to 1e-12 in test_useful_share)."""
    assert set(NAMES) - set(EXACT_NAMES) == {"expected_useful_share_uniform", "expected_useful_share_exponential"}


def test_proof_script_named_for_every_formula():
    """Every registered formula names a proof script (its existence is checked in test_proofs)."""
    for spec in f.REGISTRY.values():
        assert spec.proof.startswith("p") and spec.proof.endswith(".py")


def test_fraction_in_gives_fraction_out():
    """Exactness: Fraction inputs give an exact Fraction step time (no float leaks in)."""
    t = f.step_time(batch=3, context_sum=Fraction(7, 3), weight_bytes=Fraction(10), kv_bytes_per_token=Fraction(1, 7),
                    flops_per_token=Fraction(5), attention_flops_per_token=Fraction(0), bandwidth=Fraction(3),
                    peak_flops=Fraction(11), overhead=Fraction(1, 100))
    assert t == Fraction(10 + Fraction(1, 3), 3) + Fraction(1, 100)


def test_impossible_combinations_are_rejected():
    """A useful share above 1 or a negative hand-back delay is refused, naming the argument (not a wrong number)."""
    with pytest.raises(InvalidValueError, match="length_sum=100"):
        f.static_useful_share(batch=4, length_sum=100, length_max=10)
    with pytest.raises(InvalidValueError, match="length_sum=5"):
        f.static_useful_share(batch=4, length_sum=5, length_max=10)
    with pytest.raises(InvalidValueError, match="output_tokens=200"):
        f.static_handback_delay(output_tokens=200, length_max=100, step_time=Fraction(1, 200))
    assert f.static_useful_share(batch=4, length_sum=40, length_max=10) == 1


def test_arrays_that_do_not_broadcast_are_named():
    """Arrays of shapes that do not broadcast raise InvalidValueError naming an argument, not numpy's error."""
    with pytest.raises(InvalidValueError, match="does not broadcast"):
        f.ridge_point(peak_flops=np.array([1.0, 2.0]), bandwidth=np.array([1.0, 2.0, 3.0]))


def test_unknown_keyword_is_rejected():
    """A misspelt keyword argument is an error naming it, not silently ignored."""
    with pytest.raises(InvalidValueError, match="bandwith"):
        f.ridge_point(peak_flops=1, bandwith=2)
