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
    (["--acceptance-rate", "0.7"], "--acceptance-rate=0.7: given without --speculative-config"),
    (["--speculative-config", '{"model": "llama-3.2-1b", "num_speculative_tokens": 4}'],
     """--speculative-config='{"model": "llama-3.2-1b", "num_speculative_tokens": 4}': needs --acceptance-rate"""),
    (["--speculative-config", '{"model": "llama-3.2-1b", "num_speculative_tokens": 4}', "--acceptance-rate",
      "0.7", "-pp", "2"], "pipeline_parallel_size=2: speculative decoding through pipeline stages: not modelled"),
    (["--speculative-config", '{"model": "nemotron-h-56b", "num_speculative_tokens": 4}', "--acceptance-rate",
      "0.7"], "speculative_config.model='nemotron-h-56b': speculative decoding of a hybrid model"),
    (["--speculative-config", '{"model": "x", "num_speculative_tokens": 4}', "--acceptance-rate", "0.7"],
     "speculative_config.model: unknown model 'x'"),
    (["--speculative-config", '{"model": null, "num_speculative_tokens": 4}', "--acceptance-rate", "0.7"],
     "speculative_config.model=None: expected a preset name"),
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
    assert len(err) <= 200 or "unknown model" in err, err  # no object repr (the missing rate printed 1,110)


# ---------------------------------------------------------------- heads on the target: MTP and EAGLE
H200 = get_accelerator("h200-sxm")
MTP1 = SpeculativeConfig.parse('{"method": "deepseek_mtp", "num_speculative_tokens": 1}')


def test_num_nextn_predict_layers_is_read_through_the_families_table():
    """The field is read for the families that have MTP modules (DeepSeek-V3, GLM-4.5, MiMo), ignored elsewhere,
    refused by name when malformed."""
    from roofline.errors import ConfigError
    from roofline.models import ModelConfig

    base = json.loads(json.dumps({k: v for k, v in _v3_config().items()}))
    assert ModelConfig.from_hf_config(dict(base, num_nextn_predict_layers=2)).num_nextn_predict_layers == 2
    assert ModelConfig.from_hf_config({k: v for k, v in base.items() if k != "num_nextn_predict_layers"}
                                      ).num_nextn_predict_layers == 0
    llama = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=4, vocab_size=100, num_nextn_predict_layers=3)
    assert ModelConfig.from_hf_config(llama).num_nextn_predict_layers == 0  # llama has no MTP module
    with pytest.raises(ConfigError, match="num_nextn_predict_layers"):
        ModelConfig.from_hf_config(dict(base, num_nextn_predict_layers=-1))
    assert get_model("glm-4.5").num_nextn_predict_layers == 1 and get_model("kimi-k2").num_nextn_predict_layers == 0


def _v3_config():
    from importlib.resources import files

    raw = json.loads((files("roofline") / "data" / "models" / "deepseek-v3.json").read_text())
    return {k: v for k, v in raw.items() if not k.startswith("_")}


def test_the_mtp_module_parameters_match_the_published_counts():
    """DeepSeek-V3: 671B + MTP within 0.1 % of the published 685B; GLM-4.5: its checkpoint's MTP layer 92,
    5,539,962,272 parameters (the safetensors inventory); by hand: one MoE layer + eh_proj + norms + embedding,
    lm_head."""
    v3 = get_model("deepseek-v3")
    assert abs(v3.parameters + v3.mtp_parameters - 685e9) < 685e6
    assert get_model("glm-4.5").mtp_parameters == 5_539_962_272
    h, V = 7168, 129280
    # one MoE layer of DeepSeek-V3: MLA projections and norms, 256 routed + 1 shared expert (3 h 2048 each),
    # the router (256 h) and its e_score_correction_bias (256); eh_proj 2h^2, enorm, hnorm, shared_head.norm (h)
    mla = h * 1536 + 1536 + 1536 * 128 * 192 + h * (512 + 64) + 512 + 512 * 128 * (128 + 128) + 128 * 128 * h
    layer = mla + 257 * 3 * h * 2048 + 256 * h + 256 + 2 * h
    assert v3.mtp_parameters == layer + 2 * h * h + 3 * h + 2 * V * h


def test_an_mtp_step_is_the_module_s_decode_step_and_a_moe_verification():
    """DeepSeek-V3 on 8 H200: the plain step is the package's decode step; the proposer one decode step of the
    MTP module + eh_proj's replicated read; k = 3 runs the module 3 times, at contexts c .. c + 2."""
    from roofline.estimate import decode_step

    d = Deployment(get_model("deepseek-v3"), H200, 8)
    head = d.model.mtp_module
    extra = Fraction(2 * 7168 * 7168 + 2 * 7168) * 2 / Fraction(H200.bandwidth)
    for k in (1, 3):
        s = speculative_step(d, MTP1, batch=1, context=4096, acceptance_rate=Fraction(85, 100), speculative_tokens=k)
        assert s.plain_step_time == decode_step(d.model, H200, batch=1, context=4096, tensor_parallel_size=8).step_time
        assert s.proposer_time == sum(decode_step(head, H200, batch=1, context=4096 + j, tensor_parallel_size=8)
                                      .step_time + extra for j in range(k))
        assert s.tokens_per_step == sum(Fraction(85, 100) ** i for i in range(k + 1))
        assert s.speedup == s.tokens_per_step * s.plain_step_time / s.step_time
    # the verification of 2 positions reads the experts 2 tokens touch: more than the plain step's 1 token
    s = speculative_step(d, MTP1, batch=1, context=4096, acceptance_rate=Fraction(85, 100))
    two = decode_step(d.model, H200, batch=2, context=4096, tensor_parallel_size=8)
    one = decode_step(d.model, H200, batch=1, context=4096, tensor_parallel_size=8)
    kv = Fraction(d.share.kv_bytes_per_token)
    # bytes of the verification: W(2 tokens) + kv (c + 1), memory-bound: its time less the all-reduce
    verify = s.step_time - s.proposer_time - two.allreduce_time
    assert verify == (two.bytes - kv * 2 * 4096 + kv * 4097) / Fraction(H200.bandwidth)
    assert verify > one.memory_time


def test_break_even_and_critical_batch_of_a_moe_target_are_found_by_scanning():
    """MTP on DeepSeek-V3 (8 H200, 4,096 tokens): the speed-up stays above 1 to batch 4,096 (KV-bound), so no
    break-even and no critical batch; at 64 tokens of context the verification turns compute-bound."""
    d = Deployment(get_model("deepseek-v3"), H200, 8)
    assert break_even_batch(d, MTP1, context=4096, acceptance_rate=Fraction(85, 100)) is None
    ridge = Fraction(1_978_900_000_000_000) / Fraction(H200.bandwidth)  # the FP8 dense peak (datasheet)
    assert ridge == Fraction(H200.step_terms("fp8")["peak_flops"]) / Fraction(H200.bandwidth)
    s = speculative_step(d, MTP1, batch=1, context=64, acceptance_rate=Fraction(85, 100))
    assert s.critical_batch is not None
    for b, compute in ((s.critical_batch - 1, False), (s.critical_batch, True)):
        t = speculative_step(d, MTP1, batch=b, context=64, acceptance_rate=Fraction(85, 100))
        assert (t.intensity >= ridge) is compute


def test_an_eagle_head_derived_from_the_target_is_one_layer_and_its_fc():
    """EAGLE on Llama 3.1 8B (a Hugging Face id, not a preset): one decoder layer of the target's shape, the
    shared lm_head; fc 2h x h + h (EAGLE), or 3h x h plus q, k, v over 2h (EAGLE-3), all memory-bound at batch 1."""
    import attrs

    from roofline.estimate import decode_step

    target = get_model("llama-3.1-8b")
    layer = attrs.evolve(target, num_hidden_layers=1, published_parameters=None)
    h, bw = 4096, Fraction(H100.bandwidth)
    for method, fc in (("eagle", 2 * h * h + h), ("eagle3", 3 * h * h + h * (4096 + 2 * 1024))):
        c = SpeculativeConfig.parse(f'{{"method": "{method}", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", '
                                    '"num_speculative_tokens": 2}')
        assert c.draft is None and "derived from the target" in c.describe()
        s = speculative_step(LLAMA, c, batch=1, context=512, acceptance_rate=Fraction(7, 10))
        assert s.proposer_time == sum(decode_step(layer, H100, batch=1, context=512 + j).step_time
                                      + Fraction(fc * 2) / bw for j in range(2))
    # a preset given as the head is used as it is, its fc over the target's hidden states (2 x 4,096 wide)
    c = SpeculativeConfig.parse('{"method": "eagle", "model": "llama-3.2-1b", "num_speculative_tokens": 1}')
    s = speculative_step(LLAMA, c, batch=1, context=512, acceptance_rate=Fraction(7, 10))
    assert s.proposer_time == decode_step(get_model("llama-3.2-1b"), H100, batch=1, context=512).step_time + \
        Fraction((2 * h * h + h) * 2) / bw


def test_report_prints_the_mtp_step_on_8_h200(capsys):
    """`roofline report --model deepseek-v3 --tp 8 --speculative-config '{"method": "deepseek_mtp", ...}'`."""
    assert main(["report", "--model", "deepseek-v3", "--accelerator", "h200-sxm", "--tensor-parallel-size", "8",
                 "--context", "4096", "--batch", "1", "--speculative-config",
                 '{"method": "deepseek_mtp", "num_speculative_tokens": 1}', "--acceptance-rate", "0.85"]) == 0
    out = capsys.readouterr().out
    assert "deepseek_mtp: the target's MTP module, run k times; k = 1" in out
    assert "      1     2.328 ms  175.98 us     3.027 ms     1.423x" in out
    assert "break-even batch      none (the speed-up stays above 1 up to batch 4,096)" in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_the_scheduler_takes_a_head_with_the_target_s_deployment_only():
    """A head on the target needs the target's Deployment (field ``target``); a target without MTP modules is
    refused by name, as the report refuses it; EAGLE-3 runs, at the target's T."""
    from roofline.sim.speculative import Speculation

    for method in ("mtp", "eagle3"):
        with pytest.raises(InvalidValueError) as info:
            Speculation.from_config(f'{{"method": "{method}", "model": "x/y", "num_speculative_tokens": 1}}', H100,
                                    acceptance_rate=Fraction(1, 2))
        assert info.value.field == "target"
    d = Deployment(get_model("llama-3.1-8b"), H100)
    with pytest.raises(InvalidValueError) as info:
        Speculation.from_config('{"method": "mtp", "num_speculative_tokens": 1}', H100,
                                acceptance_rate=Fraction(1, 2), target=d)
    assert info.value.field == "speculative_config.method" and "has no MTP module" in info.value.reason
    spec = Speculation.from_config('{"method": "eagle3", "model": "x/y", "num_speculative_tokens": 2}', H100,
                                   acceptance_rate=Fraction(1, 2), target=Deployment(get_model("llama-3.1-70b"),
                                                                                     H100, 4))
    assert spec.proposer.tensor_parallel_size == 4 and spec.model == "x/y"


def test_simulate_refuses_mtp_without_mtp_modules_in_one_line_and_runs_it_with_them(capsys):
    base = ["simulate", "--policy", "continuous", "--num-prompts", "2", "--random-input-len", "16",
            "--random-output-len", "4", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}',
            "--acceptance-rate", "0.8"]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "speculative_config.method: llama-3.1-8b has no MTP module" in err
    assert main([*base, "--model", "deepseek-v3", "--accelerator", "h200-sxm", "--tensor-parallel-size", "8"]) == 0
    assert "speculative decoding on: mtp, k = 1, acceptance rate 0.8" in capsys.readouterr().out


def test_the_report_takes_a_per_position_vector():
    """alpha = 0.9, 0.8, 0.7 with a 1B draft, k = 3: tokens per step 3.124 (by hand, 1 + 0.9 + 0.72 + 0.504); the
    speed-up is that x plain / step, the step itself the one-rate step's (the rates change only the tokens); the
    best k compares k = 0 .. 3, each k its first k rates; a vector of another length is refused by name."""
    from roofline.speculative import best_speculative_tokens, break_even_batch, speculative_step

    d = Deployment(get_model("llama-3.1-8b"), H100)
    c = SpeculativeConfig.parse('{"model": "llama-3.2-1b", "num_speculative_tokens": 3}')
    rates = (Fraction(9, 10), Fraction(8, 10), Fraction(7, 10))
    vec = speculative_step(d, c, batch=1, context=1000, acceptance_rate=rates)
    one = speculative_step(d, c, batch=1, context=1000, acceptance_rate=Fraction(7, 10))
    assert vec.tokens_per_step == Fraction(3124, 1000) and vec.step_time == one.step_time
    assert vec.speedup == Fraction(3124, 1000) * vec.plain_step_time / vec.step_time
    two = speculative_step(d, c, batch=1, context=1000, acceptance_rate=rates, speculative_tokens=2)
    assert two.tokens_per_step == 1 + Fraction(9, 10) + Fraction(72, 100)
    assert best_speculative_tokens(d, c, batch=1, context=1000, acceptance_rate=rates) == 3
    assert break_even_batch(d, c, context=1000, acceptance_rate=rates) is None
    for bad, field in (((Fraction(1, 2),) * 2, "acceptance_rate"), ((Fraction(1, 2), 0, Fraction(1, 2)),
                                                                    "acceptance_rate")):
        with pytest.raises(InvalidValueError) as info:
            speculative_step(d, c, batch=1, context=1000, acceptance_rate=bad)
        assert info.value.field == field
    with pytest.raises(InvalidValueError) as info:
        speculative_step(d, c, batch=1, context=1000, acceptance_rate=rates, speculative_tokens=4)
    assert info.value.field == "speculative_tokens"


def test_report_prints_a_vector_s_tokens_per_step(capsys):
    assert main(["report", "--speculative-config", '{"model": "llama-3.2-1b", "num_speculative_tokens": 3}',
                 "--acceptance-rate", "0.9,0.8,0.7"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "acceptance rates 0.9, 0.8, 0.7 by position" in out
    assert "tokens per step 3.1240 = 1 + sum_i prod_{j<=i} alpha_j per sequence" in out
    assert "best k at batch 1 3 (k = 0 .. 3 compared)" in out
    assert main(["report", "--speculative-config", '{"model": "llama-3.2-1b", "num_speculative_tokens": 3}',
                 "--acceptance-rate", "0.9,0.8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--acceptance-rate='0.9,0.8'" in err and "k = 3 rates" in err
