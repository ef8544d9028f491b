"""Speculative decoding: the formulas against hand values, the API's refusals, `roofline report --speculative-config`.

docs/conventions.md, "Speculative decoding". The derivation and the Llama 3.1 8B / 3.2 1B
numbers are proved in proofs/p18_speculative_decoding.py (tests/test_proofs.py).
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

import roofline.formulas as f
from roofline import Deployment, get_accelerator, get_model
from roofline.cli import main
from roofline.errors import InvalidValueError
from roofline.profiles import get_engine_profile
from roofline.speculative import SpeculativeConfig, best_speculative_tokens, break_even_batch, speculative_step

H100 = get_accelerator("h100-sxm")
LLAMA = Deployment(get_model("llama-3.1-8b"), H100)
NGRAM3 = SpeculativeConfig.parse('{"method": "ngram", "num_speculative_tokens": 3}')
DRAFT4 = SpeculativeConfig.parse('{"method": "draft_model", "model": "llama-3.2-1b", "num_speculative_tokens": 4}')
TINY = dict(weight_bytes=100, kv_bytes_per_token=1, flops_per_token=10, attention_flops_per_token=2, bandwidth=1,
            peak_flops=1, overhead=0)


def test_tokens_per_step_hand_values():
    """1 + alpha + ... + alpha^k: 7/4 at k = 2, alpha = 1/2; k + 1 at alpha = 1; 1 at k = 0; 2.7731 at 4, 0.7."""
    assert f.speculative_tokens_per_step(speculative_tokens=2, acceptance_rate=Fraction(1, 2)) == Fraction(7, 4)
    assert f.speculative_tokens_per_step(speculative_tokens=5, acceptance_rate=1) == 6
    assert f.speculative_tokens_per_step(speculative_tokens=0, acceptance_rate=Fraction(3, 10)) == 1
    assert f.speculative_tokens_per_step(speculative_tokens=4, acceptance_rate=Fraction(7, 10)) == Fraction(27731,
                                                                                                             10000)
    with pytest.raises(InvalidValueError, match="acceptance_rate"):
        f.speculative_tokens_per_step(speculative_tokens=2, acceptance_rate=Fraction(3, 2))


def test_verification_step_hand_values():
    """B = 2 at c = 3, k = 1: bytes 100 + 2 x 4 = 108 > FLOPs 2 x 2 x (10 + 2 x 3.5) = 68; + 5 s of proposer."""
    t = f.speculative_step_time(**TINY, batch=2, context=3, speculative_tokens=1, proposer_time=5)
    assert t == 113
    flops_bound = dict(TINY, bandwidth=10)  # bytes 10.8 s < FLOPs 68 s
    assert f.speculative_step_time(**flops_bound, batch=2, context=3, speculative_tokens=1, proposer_time=0) == 68
    assert f.speculative_intensity(batch=2, context=3, speculative_tokens=1, weight_bytes=Fraction(100),
                                   kv_bytes_per_token=1, flops_per_token=10,
                                   attention_flops_per_token=2) == Fraction(68, 108)


def test_speedup_and_memory_bound_hand_values():
    """Weights only, no proposer cost: the speed-up is the tokens per step; Theorem 3.8 at k = 3, alpha 1/2, r 1/10."""
    weights_only = dict(TINY, kv_bytes_per_token=0, flops_per_token=1, attention_flops_per_token=0)
    assert f.speculative_speedup(**weights_only, batch=1, context=0, speculative_tokens=2,
                                 acceptance_rate=Fraction(1, 2), proposer_time=0) == Fraction(7, 4)
    assert f.speculative_speedup_memory_bound(speculative_tokens=3, acceptance_rate=Fraction(1, 2),
                                              draft_cost_ratio=Fraction(1, 10)) == Fraction(15, 8) / Fraction(13, 10)


def test_critical_batch_hand_values_and_k_zero_is_plain_decode():
    """Weights only, k = 3: ceil(295.3 x 2 / (4 x 2)) = 74; k = 0 is roofline.formulas.critical_batch."""
    hw = dict(peak_flops=Fraction(9894, 10) * 10**12, bandwidth=Fraction(335, 100) * 10**12)
    assert f.speculative_critical_batch(context=0, speculative_tokens=3, weight_bytes=2, kv_bytes_per_token=0,
                                        flops_per_token=2, attention_flops_per_token=0, **hw) == 74
    terms = {n: v for n, v in get_model("llama-3.1-8b").step_terms("exact").items()}
    for context in (0, 100, 256, 392, 393, 1000):
        assert f.speculative_critical_batch(**terms, **hw, context=context, speculative_tokens=0) == f.critical_batch(
            **terms, **hw, context=context)


@given(batch=st.integers(1, 4096), context=st.integers(0, 32768), alpha=st.fractions(Fraction(1, 100), 1))
def test_k_zero_without_a_proposer_is_no_speed_up(batch, context, alpha):
    """k = 0 and no proposer: the step is the plain decode step and the speed-up exactly 1 (Llama 3.1 8B, H100)."""
    terms = get_model("llama-3.1-8b").step_terms("exact")
    hw = H100.step_terms("bf16")
    kw = dict(terms, **hw, batch=batch, context=context, speculative_tokens=0, overhead=0, proposer_time=0)
    assert f.speculative_step_time(**kw) == f.step_time(**terms, **hw, batch=batch, context_sum=batch * context,
                                                        overhead=0)
    assert f.speculative_speedup(**kw, acceptance_rate=alpha) == 1


def test_speculative_step_on_llama():
    """N-gram, k = 3, alpha = 0.7 at 1,000 tokens: 2.533 tokens per step at almost no extra step time."""
    s = speculative_step(LLAMA, NGRAM3, batch=1, context=1000, acceptance_rate=Fraction(7, 10))
    assert s.tokens_per_step == Fraction(2533, 1000) and s.proposer_time == 0
    bw = Fraction(H100.bandwidth)
    assert s.plain_step_time == (LLAMA.model.weight_bytes + 1000 * LLAMA.model.kv_bytes_per_token) / bw
    assert s.step_time == (LLAMA.model.weight_bytes + 1003 * LLAMA.model.kv_bytes_per_token) / bw
    assert s.speedup == s.tokens_per_step * s.plain_step_time / s.step_time
    d = speculative_step(LLAMA, DRAFT4, batch=1, context=256, acceptance_rate=Fraction(7, 10))
    assert round(float(d.speedup), 3) == 1.716 and d.critical_batch == 73 and d.plain_critical_batch == 907


def test_break_even_batch_is_the_first_batch_not_faster():
    """The floats' scan, decided exactly near 1, gives the batch an exact scan gives (n-gram at 100 tokens: 239)."""
    alpha = Fraction(7, 10)
    be = break_even_batch(LLAMA, NGRAM3, context=100, acceptance_rate=alpha)
    assert be == 239
    assert speculative_step(LLAMA, NGRAM3, batch=238, context=100, acceptance_rate=alpha).speedup > 1
    assert speculative_step(LLAMA, NGRAM3, batch=239, context=100, acceptance_rate=alpha).speedup <= 1
    assert break_even_batch(LLAMA, NGRAM3, context=1000, acceptance_rate=alpha) is None  # KV reads dominate
    assert break_even_batch(LLAMA, DRAFT4, context=256, acceptance_rate=alpha) == 176
    assert best_speculative_tokens(LLAMA, DRAFT4, batch=1, context=256, acceptance_rate=alpha) == 3


@pytest.mark.parametrize(("text", "field"), [
    ("{bad", "speculative_config"),
    ("[1, 2]", "speculative_config"),
    ('{"num_speculative_tokens": 2}', "speculative_config.method"),
    ('{"method": "medusa", "model": "x", "num_speculative_tokens": 2}', "speculative_config.method"),
    ('{"method": "mlp_speculator", "model": "x", "num_speculative_tokens": 2}', "speculative_config.method"),
    ('{"method": "eagle", "num_speculative_tokens": 2}', "speculative_config.model"),
    ('{"method": "eagle3", "model": 3, "num_speculative_tokens": 2}', "speculative_config.model"),
    ('{"method": "ngram"}', "speculative_config.num_speculative_tokens"),
    ('{"method": "ngram", "num_speculative_tokens": 0}', "speculative_config.num_speculative_tokens"),
    ('{"method": "ngram", "num_speculative_tokens": 2.5}', "speculative_config.num_speculative_tokens"),
    ('{"method": "ngram", "num_speculative_tokens": 65}', "speculative_config.num_speculative_tokens"),
    ('{"method": "ngram", "num_speculative_tokens": 1e999}', "speculative_config.num_speculative_tokens"),
    ('{"method": "ngram", "model": "llama-3.2-1b", "num_speculative_tokens": 2}', "speculative_config.model"),
    ('{"method": "draft_model", "num_speculative_tokens": 2}', "speculative_config.model"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4}',
     "speculative_config.prompt_lookup_max"),
])
def test_bad_speculative_configs_are_refused_by_field(text, field):
    with pytest.raises(InvalidValueError) as info:
        SpeculativeConfig.parse(text)
    assert info.value.field == field


def test_what_is_not_modelled_is_refused_by_name():
    """An estimate, sliding windows, recurrent layers, sparse attention (target or draft), MTP on a target
    without MTP modules and an EAGLE head derived from a MoE target are refused, not priced."""
    alpha = Fraction(7, 10)
    mtp = SpeculativeConfig.parse('{"method": "mtp", "num_speculative_tokens": 1}')
    eagle = SpeculativeConfig.parse('{"method": "eagle", "model": "org/no-such-head", "num_speculative_tokens": 2}')
    cases = [
        (Deployment(get_model("llama-3.1-8b"), H100, estimate=get_engine_profile("vllm")), NGRAM3, "estimate"),
        (Deployment(get_model("gemma-3-27b"), get_accelerator("h200")), NGRAM3, "model"),
        (Deployment(get_model("qwen3-next-80b-a3b"), get_accelerator("h200")), NGRAM3, "model"),
        (Deployment(get_model("deepseek-v3.2"), get_accelerator("h200"), 8), NGRAM3, "model"),
        (LLAMA, mtp, "speculative_config.method"),
        (Deployment(get_model("qwen3-30b-a3b"), H100), eagle, "speculative_config.model"),
        (LLAMA, SpeculativeConfig.parse('{"model": "gemma-3-27b", "num_speculative_tokens": 2}'),
         "speculative_config.model"),
    ]
    for deployment, config, field in cases:
        with pytest.raises(InvalidValueError) as info:
            speculative_step(deployment, config, batch=1, context=100, acceptance_rate=alpha)
        assert info.value.field == field
        assert "not modelled" in str(info.value) or "no MTP module" in str(info.value)


def test_report_prints_the_speculative_section(capsys):
    """`roofline report --speculative-config ... --acceptance-rate 0.7` prints step, tokens, speed-up, break-even."""
    cfg = '{"method": "draft_model", "model": "llama-3.2-1b", "num_speculative_tokens": 4}'
    assert main(["report", "--context", "256", "--batch", "1", "--speculative-config", cfg,
                 "--acceptance-rate", "0.7"]) == 0
    out = capsys.readouterr().out
    assert "Speculative decoding (draft_model: draft model llama-3.2-1b; k = 4" in out
    assert "tokens per step          2.7731" in out
    assert "      1     4.804 ms   2.961 ms     7.766 ms     1.716x" in out
    assert "break-even batch      176" in out and "critical batch        73" in out
    assert main(["report", "--json", "--context", "256", "--batch", "1", "--speculative-config", cfg,
                 "--acceptance-rate", "0.7"]) == 0
    r = json.loads(capsys.readouterr().out)["speculative"]
    assert (r["method"], r["num_speculative_tokens"], r["acceptance_rate"], r["break_even_batch"]) == (
        "draft_model", 4, 0.7, 176)
    assert r["best_num_speculative_tokens_batch_1"] == 3 and r["plain_critical_batch"] == 907
    assert r["table"][0]["batch"] == 1 and round(r["table"][0]["speedup"], 3) == 1.716
    assert main(["report", "--batch", "1"]) == 0
    assert "Speculative decoding" not in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["--speculative-config", "{bad", "--acceptance-rate", "0.7"], "speculative_config="),
    (["--speculative-config", '{"method": "eagle", "num_speculative_tokens": 2}', "--acceptance-rate", "0.7"],
     "speculative_config.model=None: eagle needs a preset name"),
    (["--speculative-config", '{"method": "medusa", "model": "x", "num_speculative_tokens": 2}',
      "--acceptance-rate", "0.7"], "speculative_config.method='medusa'"),
    (["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}'], "needs --acceptance-rate"),
    (["--acceptance-rate", "0.7"], "acceptance_rate=0.7: given without --speculative-config"),
    (["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}', "--acceptance-rate", "1.5"],
     "--acceptance-rate='1.5': must be <= 1"),
])
def test_report_refuses_bad_speculative_input_in_one_line(capsys, args, message):
    try:
        status = main(["report", "--batch", "1", *args])
    except SystemExit as exit_:  # argparse's own refusals
        status = exit_.code
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
