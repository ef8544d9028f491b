"""Speculative decoding in the reference scheduler (docs/conventions.md, "Speculative decoding in the scheduler").

The formulas against the scheduler: a lone request's finish is its prefill plus the speculative steps of
:func:`roofline.speculative.speculative_step` (an independent module) at its own contexts; tokens per step
equal the formula exactly in expectation mode and converge to it under seeded draws; at acceptance 0 with
n-gram lookup a run is a plain run (a unit cost model prices the verification as a step); tokens are
conserved; the KV holds the proposals; the stretch clock equals the step clock with the feature on.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline import Deployment
from roofline.errors import InvalidValueError
from roofline.hardware import get_accelerator
from roofline.models import get_model
from roofline.sim import KVPool, Request, RooflineCostModel, Speculation, UnitCostModel, serve_continuous
from roofline.speculative import SpeculativeConfig, speculative_step
from roofline.testing.compare import assert_same_results

H100 = get_accelerator("h100-sxm")
TARGET = get_model("llama-3.1-8b")
COST = RooflineCostModel.for_model(TARGET, H100)
DRAFT = '{"model": "llama-3.2-1b", "num_speculative_tokens": 4}'


def _draft(k: int, alpha: Fraction, mode: str = "seeded", seed: int = 0) -> Speculation:
    config = SpeculativeConfig.parse(f'{{"model": "llama-3.2-1b", "num_speculative_tokens": {k}}}')
    return Speculation.from_config(config, H100, acceptance_rate=alpha, mode=mode, seed=seed)


@pytest.mark.parametrize("method", ["ngram", "draft_model"])
@pytest.mark.parametrize("mode", ["seeded", "expectation"])
def test_a_lone_request_finishes_after_its_prefill_and_the_speculative_steps_at_its_contexts(method, mode):
    """A lone request's finish is its prefill plus speculative_step(batch 1, its context).step_time per step.

    Its contexts grow by the accepted tokens A(d) the Speculation draws (cut at O)."""
    k, alpha, prompt, output = 3, Fraction(7, 10), 300, 40
    spec = _draft(k, alpha, mode) if method == "draft_model" else Speculation(k, alpha, mode=mode)
    result = serve_continuous([Request(id=5, arrival_s=0, prompt_tokens=prompt, output_tokens=output)], COST,
                              speculative=spec)
    config = SpeculativeConfig.parse('{"method": "ngram", "num_speculative_tokens": 3}' if method == "ngram"
                                     else '{"model": "llama-3.2-1b", "num_speculative_tokens": 3}')
    sums = spec.accepted(5, output - 1)
    t, steps = _lone_finish(Deployment(TARGET, H100), COST, config, sums, prompt, output, alpha)
    r = result.requests[0]
    assert r.finish_s == t and r.generated_tokens == output
    sp = result.options["speculative"]
    assert sp["sequence_steps"] == steps and sp["tokens"] == output - 1 and sp["method"] == method
    # the proposals are held while verified: the last step holds its context + k
    last_context = prompt + 1 + sums[steps - 1]
    assert result.summary.peak_kv_tokens == last_context + k


def _lone_finish(deployment, cost, config, sums, prompt, output, alpha):
    """(finish [s], steps) of a lone request: its prefill, then speculative_step(batch 1, its context) per step,
    its contexts growing by the accepted tokens ``sums`` (A(d), cut at O)."""
    t = cost.prefill_time(prompt, prompt * (prompt + 1) // 2)
    made, steps = 1, 0
    while made < output:
        t += speculative_step(deployment, config, batch=1, context=prompt + made, acceptance_rate=alpha).step_time
        steps += 1
        made = min(output, 1 + sums[steps])
    return t, steps


def test_expectation_mode_makes_exactly_the_formula_s_tokens_per_step():
    """Expectation mode, k = 1, alpha = 1/2: tau = 3/2 tokens per step exactly over a batch of requests.

    O - 1 = 3 n tokens take 2 n steps, each request its own floor(d tau)."""
    tau = f.speculative_tokens_per_step(speculative_tokens=1, acceptance_rate=Fraction(1, 2))
    assert tau == Fraction(3, 2)
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=10 + i, output_tokens=1 + 3 * (i + 1)) for i in range(6)]
    result = serve_continuous(reqs, COST, speculative=Speculation(1, Fraction(1, 2), mode="expectation"))
    sp = result.options["speculative"]
    assert sp["tokens_per_step"] == tau == sp["expected_tokens_per_step"]
    assert sp["sequence_steps"] == sum(2 * (i + 1) for i in range(6))
    assert sp["seed"] is None and sp["acceptance_mode"] == "expectation"


@pytest.mark.parametrize(("k", "alpha"), [(1, Fraction(1, 2)), (4, Fraction(7, 10)), (6, Fraction(9, 10))])
def test_seeded_draws_converge_to_the_formula(k, alpha):
    """Seeded tokens per step converge to (1 - alpha^(k+1)) / (1 - alpha): within 5 standard errors.

    The variance from the distribution P(N >= i) = alpha^i; 20,000 draws, then 200 requests in the scheduler."""
    tau = f.speculative_tokens_per_step(speculative_tokens=k, acceptance_rate=alpha)
    spec = Speculation(k, alpha, seed=3)
    steps = 20_000
    made = np.diff(np.array(spec.accepted(11, steps)))
    assert made.min() >= 1 and made.max() <= k + 1
    p = [float(alpha) ** j * (1 - float(alpha)) for j in range(k)] + [float(alpha) ** k]
    mean = sum((j + 1) * q for j, q in enumerate(p))
    assert mean == pytest.approx(float(tau))
    var = sum((j + 1) ** 2 * q for j, q in enumerate(p)) - mean ** 2
    assert abs(made.mean() - mean) < 5 * (var / steps) ** 0.5
    # and in the scheduler: 200 requests of 400 tokens
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=20, output_tokens=400) for i in range(200)]
    sp = serve_continuous(reqs, UnitCostModel(), speculative=spec).options["speculative"]
    achieved = sp["tokens_per_step"]
    assert abs(float(achieved) - mean) < 5 * (var / sp["sequence_steps"]) ** 0.5 + float(k + 1) * 200 / sp[
        "sequence_steps"]  # each request's last step is cut at O
    assert sp["tokens"] == 200 * 399


# --------------------------------------------------------------------------- a per-position acceptance vector

RATES = (Fraction(9, 10), Fraction(8, 10), Fraction(7, 10))


def test_a_vector_s_expectation_mode_makes_exactly_the_formula_s_tokens_per_step():
    """alpha = 0.9, 0.8, 0.7: E = 1 + 0.9 + 0.72 + 0.504 = 781 / 250 tokens per step (by hand). Expectation mode:
    after d steps floor(d E) tokens; 250 steps make 781 exactly, so a request of 1 + 781 tokens takes 250 steps."""
    spec = Speculation(3, RATES, mode="expectation")
    assert spec.tokens_per_step == Fraction(781, 250) == 1 + Fraction(9, 10) + Fraction(72, 100) + Fraction(504, 1000)
    sums = spec.accepted(0, 250)
    assert sums[250] == 781 and all(s == (d * 781) // 250 for d, s in enumerate(sums))
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=10, output_tokens=1 + 781) for i in range(3)]
    sp = serve_continuous(reqs, COST, speculative=spec).options["speculative"]
    assert sp["sequence_steps"] == 3 * 250 and sp["tokens"] == 3 * 781
    assert Fraction(sp["tokens"], sp["sequence_steps"]) == Fraction(781, 250) and sp["tokens_per_step"] == 781 / 250
    assert sp["expected_tokens_per_step"] == 781 / 250
    assert sp["acceptance_rate"] == [0.9, 0.8, 0.7]


@pytest.mark.parametrize("rates", [RATES, (Fraction(1, 2), Fraction(1), Fraction(1, 4), Fraction(9, 10))])
def test_a_vector_s_seeded_draws_converge_to_the_formula(rates):
    """Each proposal i drawn against alpha_i, counted only if all before it were: the tokens per step have
    P(N >= i) = alpha_1 .. alpha_i; their mean over 20,000 steps is within 5 standard errors of E, and each
    position's acceptance given the ones before converges to its alpha_i."""
    k = len(rates)
    spec = Speculation(k, rates, seed=5)
    steps = 20_000
    made = np.diff(np.array(spec.accepted(2, steps)))
    survive = [float(np.prod([float(r) for r in rates[:i]])) for i in range(k + 1)]  # P(N >= i)
    mean = sum(survive)
    assert mean == pytest.approx(float(spec.tokens_per_step))
    var = sum((2 * i + 1) * survive[i] for i in range(k + 1)) - mean ** 2  # E[X^2] = sum (2i + 1) P(X > i)
    assert abs(made.mean() - mean) < 5 * (var / steps) ** 0.5
    for i in range(1, k + 1):  # of the steps that reached proposal i, the share that accepted it
        reached, kept = int((made >= i).sum()), int((made >= i + 1).sum())
        share = float(rates[i - 1])
        assert abs(kept / reached - share) < 5 * (share * (1 - share) / reached) ** 0.5 + 1e-12


def test_k_equal_rates_are_the_one_rate_and_a_vector_of_another_length_is_refused():
    one = Speculation(3, Fraction(7, 10), seed=4)
    same = Speculation(3, [Fraction(7, 10)] * 3, seed=4)
    assert same.acceptance_rate == Fraction(7, 10) and same.accepted(1, 50) == one.accepted(1, 50)
    for bad in ((Fraction(1, 2),) * 2, [Fraction(1, 2)] * 4, (), (Fraction(1, 2), Fraction(3, 2), Fraction(1, 2))):
        with pytest.raises(InvalidValueError) as error:
            Speculation(3, bad)
        assert error.value.field == "acceptance_rate"


def test_simulate_takes_a_vector_of_k_rates_and_refuses_another_length(capsys):
    base = ["simulate", "--policy", "continuous", "--num-prompts", "4", "--random-input-len", "32",
            "--random-output-len", "40", "--acceptance-mode", "expectation", "--speculative-config",
            '{"model": "llama-3.2-1b", "num_speculative_tokens": 3}', "--json"]
    status, out, _ = _cli([*base, "--acceptance-rate", "0.9,0.8,0.7"], capsys)
    assert status == 0
    import json

    sp = json.loads(out)["results"][0]["options"]["speculative"]
    assert sp["acceptance_rate"] == [0.9, 0.8, 0.7] and sp["expected_tokens_per_step"] == 3.124
    for rates, words in (("0.9,0.8", "--acceptance-rate='0.9,0.8': a per-position vector needs k = 3 rates"),
                         ("0.9,,0.7", "expected comma-separated numbers in (0, 1]"),
                         ("0.9,0,0.7", "must be > 0")):
        status, _, err = _cli([*base, "--acceptance-rate", rates], capsys)
        assert status == 2 and len(err.splitlines()) == 1 and words in err, err
    report = ["report", "--speculative-config", '{"model": "llama-3.2-1b", "num_speculative_tokens": 3}']
    status, _, err = _cli([*report, "--acceptance-rate", "0.9,0.8"], capsys)  # it printed Fraction(9, 10), ...
    assert status == 2 and err.strip().endswith(
        "error: --acceptance-rate='0.9,0.8': a per-position vector needs k = 3 rates, one per proposed token"), err


def test_the_draws_depend_on_the_seed_and_the_request_id_only():
    spec = Speculation(4, Fraction(7, 10), seed=1)
    reqs = [Request(id=i, arrival_s=i, prompt_tokens=30, output_tokens=60) for i in range(4)]
    alone = serve_continuous(reqs[2:3], COST, speculative=spec)
    together = serve_continuous(reqs, COST, speculative=spec)
    sums = spec.accepted(2, 59)
    steps = next(d for d, a in enumerate(sums) if 1 + a >= 60)
    assert alone.options["speculative"]["sequence_steps"] == steps
    assert spec.accepted(2, 59) != Speculation(4, Fraction(7, 10), seed=2).accepted(2, 59)
    assert together.requests[2].generated_tokens == alone.requests[0].generated_tokens == 60


@pytest.mark.parametrize("prefill", ["separate", "chunked"])
def test_acceptance_zero_with_ngram_is_a_plain_run_but_for_the_verification(prefill):
    """alpha = 0: every proposal rejected, one token per step. A unit cost model prices a verification like a
    decode step (both 1), so the run equals the plain run field by field; the roofline's verification costs more."""
    reqs = [Request(id=i, arrival_s=i // 3, prompt_tokens=5 + 2 * i, output_tokens=3 + 5 * i) for i in range(9)]
    kw = dict(max_num_seqs=4, prefill=prefill)
    if prefill == "chunked":  # a budget no step fills (a verification takes k + 1 of it, a decode row 1)
        kw["max_num_batched_tokens"] = 1000
    spec = Speculation(3, 0)
    plain = serve_continuous(reqs, UnitCostModel(), **kw)
    spec_run = serve_continuous(reqs, UnitCostModel(), speculative=spec, **kw)
    assert spec_run.requests == plain.requests
    assert spec_run.summary.steps == plain.summary.steps
    assert spec_run.options["speculative"]["accepted_tokens"] == 0
    roof_plain = serve_continuous(reqs, COST, **kw)
    roof_spec = serve_continuous(reqs, COST, speculative=spec, **kw)
    assert [r.generated_tokens for r in roof_spec.requests] == [r.generated_tokens for r in roof_plain.requests]
    assert roof_spec.summary.steps == roof_plain.summary.steps
    assert all(s.finish_s >= p.finish_s for s, p in zip(roof_spec.requests, roof_plain.requests, strict=True))
    assert roof_spec.requests[-1].finish_s > roof_plain.requests[-1].finish_s


def test_reserve_admission_reserves_the_proposals_of_the_last_step():
    """A request (P, O) needs blocks_for(P + O - 1 + k) blocks: refused on arrival in a pool of one less."""
    p, o, k, b = 20, 13, 4, 4
    need = -(-(p + o - 1 + k) // b)
    req = [Request(id=0, arrival_s=0, prompt_tokens=p, output_tokens=o)]
    fits = serve_continuous(req, COST, kv_pool=KVPool.blocks(need, block_size=b), speculative=Speculation(k, 1))
    assert fits.requests[0].finish_s is not None
    short = serve_continuous(req, COST, kv_pool=KVPool.blocks(need - 1, block_size=b), speculative=Speculation(k, 1))
    assert short.requests[0].rejected_reason is not None
    plain = serve_continuous(req, COST, kv_pool=KVPool.blocks(need - 1, block_size=b))
    assert plain.requests[0].finish_s is not None


def test_refused_by_name_where_not_modelled():
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=8, output_tokens=4)]
    spec = Speculation(4, Fraction(1, 2))
    with pytest.raises(InvalidValueError, match="record_steps"):
        serve_continuous(reqs, COST, speculative=spec, record_steps=True)
    with pytest.raises(InvalidValueError, match="max_num_batched_tokens"):
        serve_continuous(reqs, COST, speculative=spec, prefill="chunked", max_num_seqs=8, max_num_batched_tokens=39)
    gemma = RooflineCostModel.for_model(get_model("gemma-3-27b"), H100)
    with pytest.raises(InvalidValueError, match="sliding-window"):
        serve_continuous(reqs, gemma, speculative=spec)
    with pytest.raises(InvalidValueError, match="speculative"):
        serve_continuous(reqs, COST, speculative={"num_speculative_tokens": 4})
    for kw, field in (({"acceptance_rate": Fraction(3, 2)}, "acceptance_rate"), ({"mode": "mean"}, "acceptance_mode"),
                      ({"num_speculative_tokens": 0}, "num_speculative_tokens"), ({"seed": -1}, "seed"),
                      ({"proposer": UnitCostModel}, "proposer")):
        args = {"num_speculative_tokens": 2, "acceptance_rate": Fraction(1, 2), **kw}
        with pytest.raises(InvalidValueError) as error:
            Speculation(**args)
        assert error.value.field == field


# --------------------------------------------------------------------------- both clocks, conservation


# --------------------------------------------------------------------------- heads on the target, MoE drafts

EAGLE = '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": %d}'
MOE_DRAFT = '{"model": "qwen3-30b-a3b", "num_speculative_tokens": %d}'
DEEPSEEK = get_model("deepseek-v3")


def test_an_eagle_head_s_proposal_step_is_its_layer_the_shared_lm_head_and_its_fc_by_hand():
    """EAGLE head derived from Llama 3.1 8B (h 4,096, kv 1,024, MLP 14,336, vocabulary 128,256), BF16 on an H100
    SXM (3.35 TB/s), one row at context 1,000: memory-bound, so (2 bytes x parameters + KV) / BW.

    Parameters: q, o 2 x 4,096^2 + k, v 2 x 4,096 x 1,024 = 41,943,040; MLP 3 x 4,096 x 14,336 = 176,160,768;
    2 layer norms and the final norm 12,288; embedding and lm_head 2 x 128,256 x 4,096 = 1,050,673,152;
    fc 2 x 4,096^2 + 4,096 = 33,558,528: 1,302,347,776. KV: one layer, 2 x 1,024 x 2 bytes = 4,096 per token."""
    from roofline.sim.speculative import head_cost_model

    head = head_cost_model(Deployment(TARGET, H100), SpeculativeConfig.parse(EAGLE % 3))
    params = 41_943_040 + 176_160_768 + 12_288 + 1_050_673_152 + 33_558_528
    assert params == 1_302_347_776
    assert head.decode_time(1, 1000) == Fraction(2 * params + 4096 * 1000) / Fraction(335 * 10**10)
    # and the scheduler takes that cost model: one step of a lone sequence is the verification plus k head steps
    spec = Speculation.from_config(EAGLE % 3, H100, acceptance_rate=Fraction(1), target=Deployment(TARGET, H100))
    assert spec.proposer == head and spec.method == "eagle"


@pytest.mark.parametrize("mode", ["seeded", "expectation"])
@pytest.mark.parametrize(("target", "accelerator", "T", "config"), [
    (TARGET, H100, 1, EAGLE % 3),
    (get_model("qwen3-235b-a22b"), H100, 8, MOE_DRAFT % 2),  # a MoE draft of the MoE target's vocabulary
    (get_model("llama-3.1-70b"), H100, 2, DRAFT),  # the draft at the target's T = 2, as the report prices it
    (DEEPSEEK, get_accelerator("h200-sxm"), 8, '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'),
    (DEEPSEEK, get_accelerator("h200-sxm"), 8, '{"method": "mtp", "num_speculative_tokens": 2}'),
])
def test_heads_and_moe_drafts_in_the_scheduler_are_priced_as_the_report_prices_them(target, accelerator, T, config,
                                                                                      mode):
    """A lone request's finish is its prefill plus speculative_step(batch 1, its context).step_time per step: the
    report's pricing of the head (its layer, shared embedding and lm_head, replicated extra at the target's T,
    its all-reduces) or of a MoE draft (its experts one token touches), on both clocks."""
    prompt, output, alpha = 200, 30, Fraction(17, 20)
    deployment = Deployment(target, accelerator, T)
    cost = RooflineCostModel.for_deployment(deployment)
    spec = Speculation.from_config(config, accelerator, acceptance_rate=alpha, mode=mode, target=deployment)
    reqs = [Request(id=3, arrival_s=0, prompt_tokens=prompt, output_tokens=output)]
    step = serve_continuous(reqs, cost, speculative=spec, engine="step")
    event = serve_continuous(reqs, cost, speculative=spec, engine="event")
    assert_same_results(event, step)
    t, steps = _lone_finish(deployment, cost, SpeculativeConfig.parse(config), spec.accepted(3, output - 1), prompt,
                            output, alpha)
    assert step.requests[0].finish_s == t
    assert step.options["speculative"]["sequence_steps"] == steps


def test_a_moe_draft_s_proposal_step_reads_the_experts_its_rows_touch():
    """Qwen3-30B-A3B as the draft: a proposal step of B rows reads shared + X E (1 - (1 - k/E)^B) (uniform
    routing), E = 128 experts, k = 8 per token; memory-bound at these batches."""
    spec = Speculation.from_config(MOE_DRAFT % 2, H100, acceptance_rate=Fraction(1, 2))
    draft, proposer = get_model("qwen3-30b-a3b"), spec.proposer
    assert (draft.num_experts, draft.num_experts_per_tok) == (128, 8)
    for batch, context_sum in ((1, 100), (4, 900), (16, 5000)):
        touched = 128 * (1 - Fraction(120, 128) ** batch)
        nbytes = (Fraction(draft.shared_weight_bytes) + Fraction(draft.routed_expert_bytes) * touched
                  + draft.kv_bytes_per_token * context_sum)
        assert proposer.decode_time(batch, context_sum) == nbytes / H100.bandwidth


def _on_both_clocks(reqs, cost, kw, chunked, seqs, k):
    """The step clock's result, after checking the stretch clock's equals it field by field and on the
    speculative counts (chunked: a budget of max_num_seqs x (k + 1) + 7 tokens)."""
    if chunked:
        kw = dict(kw, prefill="chunked", max_num_batched_tokens=seqs * (k + 1) + 7)
    step = serve_continuous(reqs, cost, engine="step", **kw)
    event = serve_continuous(reqs, cost, engine="event", **kw)
    assert event.options["engine"] == "event"
    assert_same_results(event, step)
    assert event.options["speculative"] == step.options["speculative"]
    return step


@st.composite
def _runs(draw):
    reqs, t = [], 0
    for i in range(draw(st.integers(1, 8))):
        t += draw(st.integers(0, 3))
        reqs.append(Request(id=i, arrival_s=Fraction(t, 1000), prompt_tokens=draw(st.integers(1, 40)),
                            output_tokens=draw(st.integers(1, 40))))
    k = draw(st.integers(1, 4))
    rates = st.sampled_from([Fraction(0), Fraction(1, 3), Fraction(7, 10), Fraction(1)])
    alpha = draw(rates) if draw(st.booleans()) else tuple(draw(rates) for _ in range(k))
    mode = draw(st.sampled_from(["seeded", "expectation"]))
    proposer = draw(st.sampled_from(["ngram", "draft", "moe_draft", "eagle"]))
    seed = draw(st.integers(0, 3))
    if proposer == "ngram":
        return reqs, Speculation(k, alpha, mode=mode)
    if proposer == "draft":
        return reqs, _draft(k, alpha, mode, seed)
    config = MOE_DRAFT % k if proposer == "moe_draft" else EAGLE % k
    # the MoE draft (another vocabulary than the Llama target's, more parameters) on the accelerator alone: beside
    # the target check_draft refuses it (break-it finding 1); the clocks' agreement needs no target
    return reqs, Speculation.from_config(config, H100, acceptance_rate=alpha, mode=mode, seed=seed,
                                         target=Deployment(TARGET, H100) if proposer == "eagle" else None)


@settings(settings.get_profile("simulation_oracle"))
@given(run=_runs(), blocks=st.integers(12, 40), b=st.sampled_from([1, 4, 16]), chunked=st.booleans(),
       on_demand=st.booleans(), seqs=st.integers(1, 5), caching=st.booleans())
def test_the_stretch_clock_equals_the_step_clock_with_speculative_decoding(run, blocks, b, chunked, on_demand, seqs,
                                                                          caching):
    """A tight pool (preemptions under on-demand admission, refusals on arrival), both prefill modes, a dense or
    MoE draft, an EAGLE head or n-gram: both clocks agree field by field and on the speculative counts; every
    token is made once."""
    reqs, spec = run
    k = spec.num_speculative_tokens
    kw = dict(kv_pool=KVPool.blocks(blocks * 16 // b, block_size=b), max_num_seqs=seqs, speculative=spec,
              admission="on_demand" if on_demand else "reserve", enable_prefix_caching=caching)
    step = _on_both_clocks(reqs, COST, kw, chunked, seqs, k)
    sp = step.options["speculative"]
    done = [r for r in step.requests if r.finish_s is not None]
    # conservation: each token comes once, from a prefill (the first, and one per recompute) or a step
    assert sum(r.generated_tokens for r in done) == sum(r.request.output_tokens for r in done)
    if all(r.rejected_reason is None for r in step.requests):
        prefill_tokens = sum(r.request.output_tokens for r in done) - sp["tokens"]
        # the first prefill gives a token; so does each recompute after a preemption, but a chunked prompt
        # preempted before its last chunk made none
        assert len(done) <= prefill_tokens <= sum(1 + r.preemptions for r in done)
        if not chunked:
            assert prefill_tokens == sum(1 + r.preemptions for r in done)
    assert sp["sequence_steps"] <= sp["tokens"] <= (k + 1) * sp["sequence_steps"]
    assert sp["accepted_tokens"] == sp["tokens"] - sp["sequence_steps"]


_H200 = get_accelerator("h200-sxm")
_DS = Deployment(DEEPSEEK, _H200, 8)
_DS_COST = RooflineCostModel.for_deployment(_DS)


@settings(settings.get_profile("simulation_oracle"))
@given(run=_runs(), blocks=st.integers(12, 40), on_demand=st.booleans(), seqs=st.integers(1, 5),
       chunked=st.booleans(), method=st.sampled_from(["mtp", "deepseek_mtp"]))
def test_the_stretch_clock_equals_the_step_clock_with_deepseek_v3_s_mtp_head(run, blocks, on_demand, seqs, chunked,
                                                                              method):
    """DeepSeek-V3 on 8 x H200 with its MTP module as the proposer (a MoE target and a MoE head, tensor-parallel
    all-reduces in both): both clocks agree field by field and on the speculative counts."""
    reqs, drawn = run
    k = drawn.num_speculative_tokens
    spec = Speculation.from_config(f'{{"method": "{method}", "num_speculative_tokens": {k}}}', _H200,
                                   acceptance_rate=drawn.acceptance_rate, mode=drawn.mode, seed=drawn.seed, target=_DS)
    kw = dict(kv_pool=KVPool.blocks(blocks, block_size=16), max_num_seqs=seqs, speculative=spec,
              admission="on_demand" if on_demand else "reserve")
    _on_both_clocks(reqs, _DS_COST, kw, chunked, seqs, k)


# --------------------------------------------------------------------------- the command line

_SPEC = ["simulate", "--policy", "continuous", "--num-prompts", "6", "--random-input-len", "64",
         "--random-output-len", "33", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 1}',
         "--acceptance-rate", "0.5"]


def _cli(argv, capsys):
    from roofline.cli import main

    try:
        status = main(argv)
    except SystemExit as exc:
        status = int(exc.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


def test_simulate_says_speculation_was_on_with_its_mode_and_the_speed_up(capsys):
    """Expectation mode, k = 1, alpha = 1/2: 32 tokens after the first in 2 x 32 / 3 -> 22 steps (floor(22 x 3/2) =
    33 >= 32), so 32 / 22 tokens per step; the JSON keeps the plain run beside it."""
    status, out, _ = _cli([*_SPEC, "--acceptance-mode", "expectation"], capsys)
    assert status == 0
    lines = out.splitlines()
    on = next(line for line in lines if "speculative decoding on" in line)
    assert on.endswith("ngram, k = 1, acceptance rate 0.5")
    assert "  accepted tokens: the expectation, in whole tokens" in lines[lines.index(on) + 1]
    assert any(f"{32 / 22:.3f} tokens per step (formula 1.500)" in line for line in lines)
    assert any("without it: TPOT p50" in line and "speed-up: TPOT p50 x" in line for line in lines)
    assert all(len(line) <= 100 for line in lines if "specul" in line or "without it" in line or "per step" in line
               or "accepted tokens" in line)
    status, out, _ = _cli([*_SPEC, "--speculative-seed", "7", "--json"], capsys)
    import json

    result = json.loads(out)["results"][0]
    sp = result["options"]["speculative"]
    assert status == 0 and sp["seed"] == 7 and sp["acceptance_mode"] == "seeded"
    assert sp["tokens"] == 6 * 32 and result["without_speculative"]["steps"] > result["summary"]["steps"]


@pytest.mark.parametrize(("extra", "words"), [
    (["--policy", "all"], ["--speculative-config=", "--policy continuous"]),
    (["--acceptance-mode", "expectation", "--speculative-seed", "1"], ["--speculative-seed=1"]),
    (["--chunked-prefill", "--max-num-batched-tokens", "300"], ["--max-num-batched-tokens=300", "512"]),
    (["--out", "{tmp}", "--steps"], ["--steps: applies to runs without speculative decoding", "not modelled yet"]),
])
def test_simulate_refuses_by_name_what_speculation_does_not_model(extra, words, capsys, tmp_path):
    argv = [*_SPEC, *[str(tmp_path) if a == "{tmp}" else a for a in extra]]
    status, _, err = _cli(argv, capsys)
    assert status == 2 and len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, (word, err)


def test_simulate_needs_both_speculative_flags(capsys):
    status, _, err = _cli(_SPEC[:-2], capsys)
    assert status == 2 and "needs --acceptance-rate" in err
    status, _, err = _cli([*_SPEC[:-4], "--acceptance-rate", "0.5"], capsys)
    assert status == 2 and "--acceptance-rate=0.5" in err


@pytest.mark.parametrize("chunked", [False, True])
def test_closed_loop_clients_with_speculative_decoding_on_both_clocks(chunked):
    """Closed-loop clients: the requests are numbered as they are sent, the draws seeded by that number; both
    clocks agree, and every token is made once."""
    from roofline.sim import ClosedLoop

    loop = ClosedLoop(3, [(12 + i, 20 + 3 * i) for i in range(9)], think_time_s=Fraction(1, 50))
    kw = dict(kv_pool=KVPool.blocks(24, block_size=4), admission="on_demand", max_num_seqs=3,
              speculative=_draft(3, Fraction(3, 5)))
    if chunked:
        kw.update(prefill="chunked", max_num_batched_tokens=20)
    step = serve_continuous(loop, COST, engine="step", **kw)
    event = serve_continuous(loop, COST, engine="event", **kw)
    assert event.options["engine"] == "event"
    assert_same_results(event, step)
    sp = step.options["speculative"]
    assert sp["tokens"] + sum(1 + r.preemptions for r in step.requests) == sum(20 + 3 * i for i in range(9))


# ---------------------------------------------------------------- break-it findings mended (stop 21)
_W = ["simulate", "--policy", "continuous", "--num-prompts", "4", "--random-input-len", "64",
      "--random-output-len", "16", "--acceptance-rate", "0.7"]


def _spec_of(model):
    return ["--speculative-config", f'{{"model": "{model}", "num_speculative_tokens": 4}}']


@pytest.mark.parametrize(("extra", "words"), [
    ([*_spec_of("llama-3.2-1b"), "--num-prefill-instances", "1", "--num-decode-instances", "1"],
     ["--speculative-config=", "not taken by a disaggregated run"]),
    ([*_spec_of("llama-3.2-1b"), "-pp", "2"], ["--speculative-config=", "--pipeline-parallel-size", "2 engines"]),
    ([*_spec_of("llama-3.2-1b"), "-dp", "2"], ["--speculative-config=", "--data-parallel-size", "2 engines"]),
    (_spec_of("gemma-3-27b"), ["speculative_config.model: speculative decoding with sliding-window layers"]),
    (_spec_of("nemotron-h-56b"), ["speculative_config.model: speculative decoding of a hybrid model"]),
    (_spec_of("deepseek-v3.2"), ["speculative_config.model: speculative decoding with sparse attention"]),
    (_spec_of("gpt-oss-20b"), ["speculative_config.model: speculative decoding with sliding-window layers"]),
    (_spec_of("x"), ["speculative_config.model: unknown model 'x'"]),
    (['--speculative-config', '{"model": null, "num_speculative_tokens": 4}'],
     ["speculative_config.model: expected a preset name"]),
])
def test_simulate_refuses_drafts_and_runs_speculation_does_not_model(extra, words, capsys):
    """Findings 1, 3, 7, 15, 17: refused in one line, exit 2, by the flag or field (no traceback, no silent drop)."""
    status, _, err = _cli([*_W, *extra], capsys)
    assert status == 2 and len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, (word, err)


def test_report_and_simulate_refuse_the_same_drafts():
    """Finding 3: one rule for drafts, roofline.speculative.check_draft, in both the report and the scheduler."""
    from roofline.speculative import check_draft

    for name in ("gemma-3-27b", "nemotron-h-56b", "deepseek-v3.2"):
        with pytest.raises(InvalidValueError) as checked:
            check_draft(get_model(name))
        with pytest.raises(InvalidValueError) as scheduler:
            Speculation.from_config(f'{{"model": "{name}", "num_speculative_tokens": 2}}', H100, acceptance_rate=0.5)
        assert checked.value.field == scheduler.value.field == "speculative_config.model"
        assert checked.value.reason == scheduler.value.reason
    check_draft(get_model("llama-3.2-1b"))  # a dense draft passes


_L8 = Deployment(get_model("llama-3.1-8b"), H100)
_L70_FP8 = Deployment(get_model("llama-3.1-70b").with_dtypes(weight_dtype="fp8"), H100)


@pytest.mark.parametrize(("draft", "target", "reason"), [
    ("qwen3-0.6b", _L8, "a draft model's vocabulary (151,936 tokens) differs from the target's (128,256, "
     "llama-3.1-8b): vLLM needs one tokenizer and vocabulary for both"),
    ("llama-3.1-405b", _L8, "a draft model with at least as many parameters as the target (405,853,388,800 >= "
     "8,030,261,248, llama-3.1-8b) cannot speed it up"),
    ("llama-3.1-8b", _L8, "a draft model with at least as many parameters as the target (8,030,261,248 >= "
     "8,030,261,248, llama-3.1-8b) cannot speed it up"),
    # 70,553,706,496 B of FP8 target + 16,060,522,496 B of BF16 draft = 86.61 GB > the H100's 85.04 GB usable
    ("llama-3.1-8b", _L70_FP8, "the draft's weights (16.06 GB a GPU at T = 1) do not fit beside the target's "
     "(70.55 GB) in one NVIDIA H100 SXM5 80GB's 85.04 GB"),
])
def test_a_draft_of_another_vocabulary_too_large_or_that_does_not_fit_is_refused(draft, target, reason):
    """Break-it finding 1: a 405B draft for an 8B target was priced (a 0.014x speed-up, 811 GB of draft weights on
    one 80 GB H100), a Qwen draft for a Llama target accepted; refused by check_draft with the target, in the
    report (speculative_step) and the scheduler (Speculation.from_config) alike."""
    from roofline.speculative import check_draft

    config = SpeculativeConfig.parse(f'{{"model": "{draft}", "num_speculative_tokens": 4}}')
    errors = []
    for call in (lambda: check_draft(get_model(draft), target),
                 lambda: speculative_step(target, config, batch=1, context=256, acceptance_rate=0.7),
                 lambda: Speculation.from_config(config, H100, target=target, acceptance_rate=0.7)):
        with pytest.raises(InvalidValueError) as info:
            call()
        errors.append(info.value)
    assert all((e.field, e.value, e.reason) == ("speculative_config.model", draft, reason) for e in errors)


def test_a_smaller_draft_of_the_same_vocabulary_that_fits_still_passes():
    """The bounds of finding 1's rule: llama-3.2-1b (1,235,814,400 parameters, 128,256 tokens) beside the FP8 70B
    (70.55 + 2.47 GB <= 85.04 GB) passes; without a target only the modelling rules apply (as before)."""
    from roofline.speculative import check_draft

    check_draft(get_model("llama-3.2-1b"), _L70_FP8)
    check_draft(get_model("llama-3.1-405b"))


@pytest.mark.parametrize(("command", "draft", "words"), [
    (["report", "--context", "256", "--batch", "1"], "llama-3.1-405b", "at least as many parameters"),
    (_W, "llama-3.1-70b", "at least as many parameters"),
    (_W, "qwen3-0.6b", "differs from the target's (128,256, llama-3.1-8b)"),
])
def test_the_commands_refuse_the_draft_in_one_line(command, draft, words, capsys):
    """Break-it finding 1 on the command line: exit 2, one stderr line naming the draft."""
    argv = [*command, "--speculative-config", f'{{"model":"{draft}","num_speculative_tokens":4}}']
    if "--acceptance-rate" not in argv:
        argv += ["--acceptance-rate", "0.7"]
    status, _, err = _cli(argv, capsys)
    assert status == 2 and len(err.splitlines()) == 1 and words in err and draft in err, err


def test_seeded_draws_take_any_alpha():
    """Finding 8: a denominator past int64 is drawn as floor(alpha 2^62) / 2^62: 1e-30 accepts nothing (one token a
    step, A(d) = d), and alpha = n / 2^62 + 10^-40 (n odd, so n / 2^62 is in lowest terms) draws as n / 2^62 does."""
    assert Speculation(4, Fraction(1, 10**30)).accepted(0, 5) == [0, 1, 2, 3, 4, 5]
    assert Speculation(4, 1e-300).accepted(3, 2) == [0, 1, 2]
    n = 3 * 2**60 + 1  # alpha about 3/4
    near = Speculation(3, Fraction(n, 2**62) + Fraction(1, 10**40)).accepted(7, 400)
    assert near == Speculation(3, Fraction(n, 2**62)).accepted(7, 400)
    assert 400 * 2.5 < near[-1] < 400 * 2.9  # tau = (1 - (3/4)^4) / (1 / 4) = 2.734...


@pytest.mark.parametrize(("args", "field"), [((-1, 3), "request_id"), (("a", 3), "request_id"),
                                             ((True, 3), "request_id"), ((0, -1), "steps"), ((0, 1.5), "steps")])
def test_accepted_refuses_bad_arguments_by_name(args, field):
    with pytest.raises(InvalidValueError) as info:
        Speculation(4, Fraction(7, 10)).accepted(*args)
    assert info.value.field == field


def test_simulate_runs_a_long_decimal_acceptance_rate_and_says_proposals_kept(capsys):
    """Findings 8, 26: alpha = 1e-30 runs (one token a step: proposals kept 0.0%); at alpha = 1, k = 1 and O = 34
    the 33 tokens after the first take 17 steps, the last cut to 1 token: 33 / 17 = 1.941 tokens per step and 16 of
    17 proposals kept, 94.1%, beside "acceptance rate 1"."""
    base = ["simulate", "--policy", "continuous", "--num-prompts", "3", "--random-input-len", "64",
            "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 1}']
    status, out, err = _cli([*base, "--random-output-len", "16", "--acceptance-rate", "1e-30"], capsys)
    assert status == 0, err
    assert "    continuous: 1.000 tokens per step (formula 1.000), proposals kept 0.0%" in out.splitlines()
    status, out, err = _cli([*base, "--random-output-len", "34", "--acceptance-rate", "1"], capsys)
    assert status == 0, err
    lines = out.splitlines()
    assert any(line.endswith("ngram, k = 1, acceptance rate 1") for line in lines)
    assert "    continuous: 1.941 tokens per step (formula 2.000), proposals kept 94.1%" in lines


def test_serve_replicas_refuses_speculation_by_name():
    """Finding 11: the keyword is taken and refused (InvalidValueError naming speculative), not a TypeError."""
    from roofline.sim import serve_replicas

    reqs = [Request(id=i, arrival_s=0, prompt_tokens=8, output_tokens=4) for i in range(4)]
    with pytest.raises(InvalidValueError, match="data_parallel_size") as info:
        serve_replicas(reqs, COST, data_parallel_size=2, speculative=_draft(2, Fraction(7, 10)))
    assert info.value.field == "speculative"


def test_alpha_zero_is_taken_in_the_api_as_the_docstring_says():
    """Finding 27: the API takes alpha in [0, 1] (0: one token a step), as its docstring's Raises says; -0.1 refused."""
    assert "alpha outside [0, 1]" in " ".join((Speculation.__doc__ or "").split())
    assert Speculation(4, 0).tokens_per_step == 1 and Speculation(4, 0).accepted(0, 3) == [0, 1, 2, 3]
    with pytest.raises(InvalidValueError) as info:
        Speculation(4, -0.1)
    assert info.value.field == "acceptance_rate"
