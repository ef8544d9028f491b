"""roofline.testing.strategies: valid output, InvalidArgument for impossible options, options that do what they say."""

from __future__ import annotations

from fractions import Fraction

import attrs
import pytest
from hypothesis import find, given
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import roofline.formulas as f
from roofline import get_accelerator, get_model, model_names
from roofline.estimate import kv_budget_for
from roofline.hardware import ACCELERATORS, Accelerator
from roofline.models import ModelConfig
from roofline.sim import (
    ClosedLoop,
    KVPool,
    Request,
    RooflineCostModel,
    UnitCostModel,
    check_requests,
    serve_continuous,
)
from roofline.testing import strategies as rs
from roofline.testing.strategies import (
    TIME_RESOLUTION,
    accelerators,
    batch_sizes,
    closed_loops,
    cost_models,
    kv_budgets,
    kv_pools,
    links,
    model_configs,
    requests,
    workloads,
)

LLAMA = get_model("llama-3.1-8b")
H100 = get_accelerator("h100-sxm")


def _revalidated(instance: object) -> object:
    """Build the attrs instance again from its fields, so every validator runs once more."""
    return type(instance)(**{a.name: getattr(instance, a.name) for a in attrs.fields(type(instance)) if a.init})


# --------------------------------------------------------------------------- output is valid


def test_every_public_strategy_is_tested_here():
    """Each name in strategies.__all__ is either a constant or is exercised by this module."""
    strategies = {n for n in rs.__all__ if callable(getattr(rs, n))}
    assert strategies == {"positive_fractions", "domain_values", "model_configs", "accelerators", "requests",
                          "workloads", "closed_loops", "batch_sizes", "kv_budgets", "kv_pools", "cost_models", "links",
                          "decode_stretches", "layer_windows", "state_mixers"}


@given(rs.state_mixers(max_layers=3, max_width=6))
def test_state_mixers_build_hybrid_models_whose_state_is_their_shapes(mixer):
    """A drawn StateMixer revalidates, and one attention layer beside it makes a model holding its state."""
    assert _revalidated(mixer) == mixer and 1 <= mixer.layers <= 3
    model = attrs.evolve(LLAMA, num_hidden_layers=mixer.layers + 1, state_mixer=mixer, state_dtype="float32")
    assert model.attention_layers == 1 and model.kv_bytes_per_token == LLAMA.kv_bytes_per_token // 32
    inner = mixer.heads * mixer.head_dim  # by kind, as vLLM's state shapes are (docs/conventions.md, "Hybrid models")
    channels = {"gated_deltanet": 2 * mixer.key_heads * mixer.key_dim + inner,
                "mamba2": 2 * mixer.key_heads * mixer.key_dim + inner,
                "mamba1": inner, "short_conv": inner, "lightning": 0}[mixer.kind]
    conv = (mixer.conv_kernel - 1) * channels
    ssm = 0 if mixer.kind == "short_conv" else inner * mixer.key_dim
    assert model.state_bytes_per_sequence == mixer.layers * (conv * 2 + ssm * 4) > 0


@given(model_configs(presets=True, architecture="hybrid", max_layers=8))
def test_hybrid_model_configs_hold_recurrent_layers_and_other_architectures_none(model):
    """architecture="hybrid" draws models with recurrent layers (the hybrid presets among them); "dense" and "any"
    never do, so the formulas without a state still price every model they draw."""
    assert model.is_hybrid and model.attention_layers >= 1 and model.state_bytes_per_sequence > 0
    for architecture in ("dense", "any"):
        assert not any(m.is_hybrid for m in (get_model(n) for n in model_names())
                       if rs._architecture_of(m, architecture))


def test_state_mixers_refuse_bad_options():
    """An unknown kind or a bound below 1 is an InvalidArgument."""
    with pytest.raises(InvalidArgument):
        rs.state_mixers(kind="rwkv").example()
    with pytest.raises(InvalidArgument):
        rs.state_mixers(max_width=0).example()


@given(requests(max_arrival_s=Fraction(7, 2)))
def test_requests_pass_the_request_validators(r):
    """A drawn Request rebuilds through its validators, on the time grid, within its bounds."""
    assert _revalidated(r) == r
    assert 0 <= r.arrival_s <= Fraction(7, 2) and (r.arrival_s / TIME_RESOLUTION).denominator == 1
    assert 1 <= r.prompt_tokens <= 2048 and 1 <= r.output_tokens <= 512


@given(workloads(max_size=12))
def test_workloads_pass_check_requests(w):
    """A workload is in arrival order with ids 0..n-1 and passes check_requests unchanged."""
    assert check_requests(w) == w
    assert [r.id for r in w] == list(range(len(w)))
    assert all(_revalidated(r) == r for r in w)
    assert not w or w[0].arrival_s == 0
    assert all(isinstance(r.arrival_s, Fraction) and (r.arrival_s / TIME_RESOLUTION).denominator == 1 for r in w)


@given(model_configs(presets=True))
def test_model_configs_pass_the_model_validators(m):
    """A drawn ModelConfig rebuilds through its validators and has positive sizes."""
    assert _revalidated(m) == m
    assert m.weight_bytes > 0 and m.kv_bytes_per_token > 0 and m.matmul_flops_per_token > 0


@given(accelerators())
def test_accelerators_pass_the_accelerator_validators(a):
    """A drawn Accelerator rebuilds through its validators; bandwidth, peak and memory are > 0."""
    assert isinstance(a, Accelerator) and _revalidated(a) == a
    assert a.bandwidth > 0 and a.peak_flops > 0 and a.usable_memory > 0


@given(rs.decode_stretches(), rs.decode_stretches(crossing=True, max_crossover=9))
def test_decode_stretches_are_valid_formula_arguments(free, crossing):
    """Drawn stretch arguments pass the formulas' checks; a crossing draw has its crossover in [0, max_crossover]."""
    assert f.stretch_time(steps=3, **free) > 0
    j = f.stretch_crossover(**{k: v for k, v in crossing.items() if k != "overhead"})
    assert j is not None and 0 <= j <= 9


def test_decode_stretches_refuse_bad_maxima():
    """A negative maximum is an InvalidArgument when the strategy is built."""
    with pytest.raises(InvalidArgument):
        rs.decode_stretches(max_batch=0)


@given(kv_pools(unlimited=None))
def test_kv_pools_pass_the_pool_validators(pool):
    """A drawn KVPool rebuilds through its validators."""
    assert _revalidated(pool) == pool


@given(rs.layer_windows(max_layers=5, max_window=9), st.data())
def test_layer_windows_pools_and_cost_models_count_the_same_layers(windows, data):
    """Drawn windows have 1 to 5 layers, at least one sliding with a window in [1, 9]; pools and roofline cost
    models drawn with them carry exactly those windows (the cost model's model has that many layers)."""
    assert 1 <= len(windows) <= 5 and any(w is not None for w in windows)
    assert all(w is None or 1 <= w <= 9 for w in windows)
    pool = data.draw(kv_pools(max_blocks=50, layer_windows=windows, unlimited=None))
    assert pool.layer_windows == windows and _revalidated(pool) == pool
    cost = data.draw(rs.cost_models(kind="roofline", layer_windows=windows))
    assert cost.layer_windows == windows


def test_layer_windows_refuse_bad_bounds_and_windows():
    """A bound below 1, or a window of 0 given to kv_pools or cost_models, is an InvalidArgument."""
    for build in (lambda: rs.layer_windows(max_layers=0), lambda: rs.layer_windows(max_window=0),
                  lambda: kv_pools(layer_windows=(None, 0)), lambda: rs.cost_models(layer_windows=(0,))):
        with pytest.raises(InvalidArgument):
            build()


@given(kv_budgets(model=LLAMA, accelerator=H100), st.sampled_from([1, 16]))
def test_kv_budgets_of_a_model_are_accepted_by_the_capacity_formulas(budget, block):
    """A real budget is > 0, at most the full-utilization budget, and makes a pool."""
    full = kv_budget_for(LLAMA, H100, utilization=1)
    assert 0 < budget <= full
    pool = KVPool.from_budget(budget=budget, kv_bytes_per_token=LLAMA.kv_bytes_per_token, block_size=block)
    assert pool.capacity_blocks == f.kv_capacity_blocks(budget=budget, kv_bytes_per_token=LLAMA.kv_bytes_per_token,
                                                        block_size=block)


@given(kv_budgets(min_value=10, max_value=10**9))
def test_kv_budgets_drawn_are_in_range(budget):
    """Drawn integer budgets lie in [min_value, max_value] and are accepted by kv_capacity_tokens."""
    assert 10 <= budget <= 10**9
    assert f.kv_capacity_tokens(budget=budget, kv_bytes_per_token=131_072) == budget // 131_072


@given(batch_sizes(min_value=2, max_value=9))
def test_batch_sizes_are_in_range(b):
    """Batch sizes lie in [min_value, max_value]."""
    assert 2 <= b <= 9


@given(cost_models(overhead=True), workloads(max_size=3, max_output_tokens=4))
def test_cost_models_run_the_scheduler_exactly(cost, w):
    """A drawn cost model runs the scheduler, and every step duration is exact and > 0."""
    assert cost.exact
    result = serve_continuous(w, cost, record_steps=True)
    for step in result.steps:
        assert isinstance(step.duration_s, (int, Fraction)) and step.duration_s > 0


# --------------------------------------------------------------------------- impossible options

IMPOSSIBLE = {
    "positive_fractions min <= 0": lambda: rs.positive_fractions(min_value=0),
    "positive_fractions min > max": lambda: rs.positive_fractions(min_value=3, max_value=2),
    "domain_values unknown": lambda: rs.domain_values("complex"),
    "model_configs attention": lambda: model_configs(attention="mla"),
    "model_configs max_layers": lambda: model_configs(max_layers=0),
    "model_configs max_hidden": lambda: model_configs(max_hidden=63),
    "model_configs nothing": lambda: model_configs(attention="mqa", presets=True, generated=False),
    "accelerators nothing": lambda: accelerators(presets=False, measured=False, generated=False),
    "requests id": lambda: requests(id=-1),
    "requests prompt min > max": lambda: requests(min_prompt_tokens=5, max_prompt_tokens=4),
    "requests output min 0": lambda: requests(min_output_tokens=0),
    "requests arrival < 0": lambda: requests(max_arrival_s=-1),
    "requests arrival float": lambda: requests(max_arrival_s=0.5),
    "workloads min_size > max_size": lambda: workloads(min_size=3, max_size=2),
    "workloads negative size": lambda: workloads(min_size=-1),
    "workloads arrivals": lambda: workloads(arrivals="weekly"),
    "workloads lengths": lambda: workloads(lengths="bimodal"),
    "workloads rate 0": lambda: workloads(rate=0),
    "workloads rate float": lambda: workloads(rate=0.5),
    "workloads output min > max": lambda: workloads(min_output_tokens=9, max_output_tokens=8),
    "workloads prompt min 0": lambda: workloads(min_prompt_tokens=0),
    "batch_sizes min 0": lambda: batch_sizes(min_value=0),
    "batch_sizes max < min": lambda: batch_sizes(min_value=5, max_value=4),
    "kv_budgets max < min": lambda: kv_budgets(min_value=5, max_value=4),
    "kv_budgets negative": lambda: kv_budgets(min_value=-1),
    "kv_budgets model only": lambda: kv_budgets(model=LLAMA),
    "kv_budgets no room": lambda: kv_budgets(model=get_model("llama-3.1-70b"), accelerator=H100),
    "kv_pools max < min": lambda: kv_pools(min_blocks=5, max_blocks=4),
    "kv_pools block 0": lambda: kv_pools(block_size=0),
    "kv_pools max block 0": lambda: kv_pools(max_block_size=0),
    "kv_pools unlimited": lambda: kv_pools(unlimited="yes"),
    "cost_models kind": lambda: cost_models(kind="measured"),
    "cost_models flops": lambda: cost_models(flops="approx"),
}


@pytest.mark.parametrize("name", sorted(IMPOSSIBLE))
def test_impossible_options_raise_invalid_argument(name):
    """Every impossible combination of options raises InvalidArgument when the strategy is built."""
    with pytest.raises(InvalidArgument):
        IMPOSSIBLE[name]()


# --------------------------------------------------------------------------- options do what they say


@given(workloads(min_size=2, max_size=9, arrivals="zero"))
def test_arrivals_zero_puts_everyone_at_zero(w):
    """arrivals="zero": every arrival is exactly 0; min_size and max_size bound the count."""
    assert 2 <= len(w) <= 9
    assert {r.arrival_s for r in w} == {0}


@given(workloads(min_size=2, arrivals="uniform", rate=Fraction(1, 3)))
def test_arrivals_uniform_gaps_are_at_most_twice_the_mean(w):
    """arrivals="uniform": gaps lie in [0, 2 / rate]."""
    gaps = [b.arrival_s - a.arrival_s for a, b in zip(w, w[1:], strict=False)]
    assert all(0 <= g <= 6 for g in gaps)


def test_arrivals_poisson_and_bursty_spread_out_in_time():
    """arrivals="poisson" reaches gaps above the mean; "bursty" shares instants and also spreads out."""
    w = find(workloads(min_size=3, arrivals="poisson"), lambda w: any(r.arrival_s > 2 for r in w))
    assert w[-1].arrival_s > 2
    w = find(workloads(min_size=3, max_size=3, arrivals="bursty"), lambda w: len({r.arrival_s for r in w}) == 2)
    assert len({r.arrival_s for r in w}) == 2 and w[-1].arrival_s > 0


@given(workloads(min_size=1, lengths="identical", max_prompt_tokens=10_000, max_output_tokens=10_000))
def test_lengths_identical_gives_one_prompt_and_one_output_length(w):
    """lengths="identical": every request has the same P and the same O."""
    assert len({r.prompt_tokens for r in w}) == 1 and len({r.output_tokens for r in w}) == 1


@given(workloads(min_size=1, lengths="narrow", max_prompt_tokens=10_000, max_output_tokens=10_000))
def test_lengths_narrow_stay_within_an_eighth_of_a_centre(w):
    """lengths="narrow": lengths within +-centre/8, so 7 (max - min) <= 2 min, for P and for O."""
    for values in ([r.prompt_tokens for r in w], [r.output_tokens for r in w]):
        assert 7 * (max(values) - min(values)) <= 2 * min(values)


def test_lengths_wide_mix_short_and_long_requests():
    """lengths="wide" reaches a spread of 100x or more, which "narrow" never can."""
    def spread(w):
        outs = [r.output_tokens for r in w]
        return max(outs) >= 100 * min(outs)

    w = find(workloads(min_size=2, lengths="wide", max_output_tokens=1000), spread)
    assert spread(w)


@given(workloads(min_prompt_tokens=3, max_prompt_tokens=5, min_output_tokens=7, max_output_tokens=8))
def test_length_bounds_are_respected(w):
    """Prompt and output lengths stay within their bounds whatever the distribution."""
    assert all(3 <= r.prompt_tokens <= 5 and 7 <= r.output_tokens <= 8 for r in w)


@given(model_configs(attention="mha"), model_configs(attention="mqa"), model_configs(attention="gqa"))
def test_attention_kinds(mha, mqa, gqa):
    """mha: KV heads = heads; mqa: 1 KV head; gqa: groups of 2 or more query heads."""
    assert mha.num_key_value_heads == mha.num_attention_heads
    assert mqa.num_key_value_heads == 1
    assert gqa.num_attention_heads // gqa.num_key_value_heads >= 2


@given(model_configs(explicit_head_dim=False, tied=True), model_configs(tied=False, presets=True))
def test_head_dim_and_tied_options(implicit, untied):
    """explicit_head_dim=False: head_dim = hidden / heads; tied=True/False fixes the flag."""
    assert implicit.head_dim * implicit.num_attention_heads == implicit.hidden_size
    assert implicit.tie_word_embeddings and not untied.tie_word_embeddings


@given(model_configs(presets=True, generated=False))
def test_model_presets_only(m):
    """presets=True, generated=False: only the shipped presets, unchanged."""
    assert m.name in model_names() and m == get_model(m.name)


def test_model_presets_filtered_by_explicit_head_dim():
    """explicit_head_dim=True among the presets finds Qwen3 or Mistral-Small (head_dim 128 != hidden / heads)."""
    m = find(model_configs(presets=True, generated=False, explicit_head_dim=True), lambda m: True)
    assert m.name.startswith(("qwen3", "mistral-small"))
    assert m.head_dim == 128 != m.hidden_size // m.num_attention_heads


@given(accelerators(presets=False, generated=False))
def test_accelerators_measured_only(a):
    """measured=True alone: the measured copies, whose bandwidth and peak are the measured values."""
    base = ACCELERATORS[a.key.removesuffix(":measured")]
    assert a.key.endswith(":measured")
    assert a.bandwidth == (base.measured_bandwidth or base.hbm_bandwidth).value
    assert a.peak_flops == (base.measured_bf16 or base.peak_bf16).value


@given(accelerators(measured=False, generated=False))
def test_accelerators_presets_only(a):
    """presets=True alone: the datasheet presets themselves."""
    assert ACCELERATORS[a.key] is a


@given(kv_pools(unlimited=True, block_size=16), kv_pools(min_blocks=3, max_blocks=5, max_block_size=2))
def test_kv_pool_options(unlimited, small):
    """unlimited=True gives capacity None; the block range and block size bounds hold."""
    assert unlimited.capacity_blocks is None and unlimited.block_size == 16
    assert 3 <= small.capacity_blocks <= 5 and 1 <= small.block_size <= 2


@given(cost_models(kind="unit"), cost_models(kind="roofline", flops="2p"))
def test_cost_model_kinds(unit, roof):
    """kind="unit" gives UnitCostModel; kind="roofline" with flops="2p" has no attention FLOPs."""
    assert isinstance(unit, UnitCostModel)
    assert isinstance(roof, RooflineCostModel) and roof.attention_flops_per_token == 0


# --------------------------------------------------------------------------- shrinking


def test_shrinking_goes_to_the_smallest_cases():
    """Minimal examples: one request (0, P = 1, O = 1), batch min_value, a 1-block pool of 1 token."""
    assert find(workloads(), lambda w: True) == (Request(id=0, arrival_s=0, prompt_tokens=1, output_tokens=1),)
    assert find(workloads(), lambda w: len(w) >= 2) == tuple(
        Request(id=i, arrival_s=0, prompt_tokens=1, output_tokens=1) for i in range(2))
    assert find(batch_sizes(min_value=3), lambda b: True) == 3
    assert find(kv_pools(unlimited=None), lambda p: True) == KVPool(1, 1)
    assert find(cost_models(), lambda c: True) == UnitCostModel(1, 1)
    m = find(model_configs(), lambda m: True)
    assert isinstance(m, ModelConfig) and m.num_hidden_layers == 1


@given(links(generated=False))
def test_links_presets_only(link):
    """generated=False: only the presets' NVLink, Infinity Fabric and PCIe links (the same objects)."""
    assert any(link is a.scale_up or link is a.pcie for a in ACCELERATORS.values())


@given(links(presets=False))
def test_links_generated_bounds(link):
    """Generated links: 1 GB/s to 2 TB/s per direction, 0.1 to 10 us per ring step, Sourced as derived."""
    assert 10**9 <= link.bandwidth.value <= 2 * 10**12
    assert Fraction(1, 10**7) <= link.latency.value <= Fraction(1, 10**5)
    assert link.bandwidth.source.kind == "derived"


def test_links_needs_an_option():
    """Both options False is an InvalidArgument when the strategy is built."""
    with pytest.raises(InvalidArgument):
        links(presets=False, generated=False)


# --------------------------------------------------------------------------- workloads and pools of the scheduler


@given(st.data())
def test_boundary_arrivals_are_whole_or_half_steps_or_short_gaps(data):
    """workloads(arrivals="boundaries") starts at 0 and draws gaps of at most 8 / rate, mostly 0, 1/2, 1 or 3 steps."""
    w = data.draw(workloads(min_size=1, max_size=12, arrivals="boundaries", rate=2))
    times = [r.arrival_s for r in w]
    assert times[0] == 0
    assert all(0 <= b - a <= 4 for a, b in zip(times, times[1:], strict=False))


def test_boundary_arrivals_reach_each_kind_of_gap():
    """The boundary gaps 1/2, 1 and 3 (rate 1) are each drawn in some workload."""
    for gap in (Fraction(1, 2), 1, 3):
        find(workloads(min_size=2, max_size=2, arrivals="boundaries"),
             lambda w, g=gap: w[1].arrival_s - w[0].arrival_s == g)


@given(st.data())
def test_tight_pools_hold_the_largest_request_give_or_take_a_block(data):
    """kv_pools(tight_for=w): a pool from one block short of w's largest lifetime KV to 1.5 times it + 2 blocks,
    or a plain pool; with an empty workload, a plain pool."""
    w = data.draw(workloads(min_size=0, max_size=6, max_prompt_tokens=50, max_output_tokens=20))
    pool = data.draw(kv_pools(max_blocks=3, block_size=4, tight_for=w))
    if w and pool.capacity_blocks is not None and pool.capacity_blocks > 3:
        need = max(-(-(r.prompt_tokens + r.output_tokens - 1) // 4) for r in w)
        assert need - 1 <= pool.capacity_blocks <= need + need // 2 + 2


def test_tight_pools_sometimes_leave_out_the_largest_request():
    """A tight pool one block too small for the largest request is drawn (it is then rejected, the others run)."""
    reqs = (Request(id=0, arrival_s=0, prompt_tokens=30, output_tokens=3),)
    pool = find(kv_pools(block_size=1, tight_for=reqs), lambda p: p.capacity_blocks == 31)
    assert pool.never_fits_reason(30, 3) is not None
    with pytest.raises(InvalidArgument):
        kv_pools(tight_for=[1, 2])


@given(st.data())
def test_whole_step_arrivals_are_multiples_of_the_step(data):
    """workloads(arrivals="whole_steps", rate=3) draws gaps of exactly 0, 1/3, 2/3 or 1."""
    w = data.draw(workloads(min_size=2, max_size=10, arrivals="whole_steps", rate=3))
    assert {b.arrival_s - a.arrival_s for a, b in zip(w, w[1:], strict=False)} <= {0, Fraction(1, 3),
                                                                                  Fraction(2, 3), 1}


@given(closed_loops(min_clients=2, max_clients=4, max_size=6, max_prompt_tokens=9, max_output_tokens=5))
def test_closed_loops_are_valid_and_within_range(loop):
    """closed_loops draws 2..4 clients, up to 6 requests of lengths in range, a think time >= 0."""
    assert 2 <= loop.clients <= 4 and len(loop.lengths) <= 6 and loop.think_time_s >= 0
    assert all(1 <= p <= 9 and 1 <= o <= 5 for p, o in loop.lengths)


def test_closed_loops_shrink_and_refuse_bad_ranges():
    """closed_loops shrinks to one client, no think time; a bad range is an InvalidArgument when built."""
    assert find(closed_loops(min_size=1), lambda c: True) == ClosedLoop(clients=1, lengths=[(1, 1)])
    assert find(closed_loops(), lambda c: c.think_time_s > 0).think_time_s == Fraction(1, 2)
    with pytest.raises(InvalidArgument):
        closed_loops(min_clients=3, max_clients=2)
