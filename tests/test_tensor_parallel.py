"""Tensor parallelism of degree T: one GPU's share, the all-reduce in every step, report / fit / simulate."""

from __future__ import annotations

import json
from fractions import Fraction

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import estimate, get_accelerator, get_model
from roofline.cli import main
from roofline.commands.fit import build_fit, format_fit
from roofline.commands.report import build_report, format_report
from roofline.errors import InvalidValueError, NoKVBudgetError, RooflineError
from roofline.models import model_names
from roofline.sim import RooflineCostModel
from roofline.testing.strategies import model_configs

H100 = get_accelerator("h100-sxm")
LLAMA70 = get_model("llama-3.1-70b")


# --------------------------------------------------------------------------- what each GPU holds


@pytest.mark.parametrize("T", [2, 4, 8])
def test_llama_70b_per_gpu_weights_and_kv_by_hand(T: int) -> None:
    """Llama 3.1 70B per GPU: projections and MLP / T, vocabulary / T, norms replicated; KV heads 8 / T (exact)."""
    L, h, inter, d, V = 80, 8192, 28_672, 128, 128_256
    H, Hkv = 64, 8
    per_layer = (h * (H // T) * d * 2          # q_proj and o_proj, split by heads
                 + h * (Hkv // T) * d * 2      # k_proj and v_proj, split by KV heads
                 + 3 * h * inter // T)         # gate, up (columns) and down (rows)
    params = L * per_layer + L * 2 * h + 2 * (V // T) * h + h  # norms replicated; embedding, lm_head by vocabulary
    share = LLAMA70.per_gpu(T)
    assert share.weight_bytes == 2 * params
    assert share.kv_bytes_per_token == 2 * L * (Hkv // T) * d * 2 == Fraction(327_680, T)
    assert share.tensor_parallel_size == T and share.num_key_value_heads == Hkv // T
    assert {2: 70_555_025_408, 4: 35_278_831_616, 8: 17_640_734_720}[T] == share.weight_bytes
    # replicated: the norms, (T - 1) extra copies of 2 x (80 x 2 + 1) x 8192 bytes over all GPUs
    assert share.weight_bytes * T - LLAMA70.weight_bytes == (T - 1) * 2 * (L * 2 * h + h)


@pytest.mark.parametrize("T,fits", [(2, 4), (4, 61), (8, 175)])
def test_llama_70b_sequences_that_fit_on_h100_by_hand(T: int, fits: int) -> None:
    """Sequences of 8,192 tokens the group holds: floor((usable x 0.9 - weights per GPU) / (KV per GPU x c))."""
    budget = Fraction(H100.usable_memory) * Fraction(9, 10) - LLAMA70.per_gpu(T).weight_bytes
    by_hand = budget // (Fraction(327_680, T) * 8192)
    assert estimate.kv_budget_for(LLAMA70, H100, tensor_parallel_size=T) == budget
    cap = estimate.kv_capacity(LLAMA70, budget=budget, context=8192, tensor_parallel_size=T)
    assert cap.sequences == by_hand == fits
    assert cap.kv_bytes_per_token == Fraction(327_680, T)


def test_a_budget_of_exactly_zero_is_refused() -> None:
    """A reserve that leaves exactly 0 bytes on each of 4 GPUs is no KV budget; 1 byte less reserve leaves 1 byte."""
    zero = Fraction(H100.usable_memory) * Fraction(9, 10) - 35_278_831_616
    with pytest.raises(NoKVBudgetError, match="leave no KV budget on 4 x NVIDIA H100 SXM5 80GB"):
        estimate.kv_budget_for(LLAMA70, H100, reserved=zero, tensor_parallel_size=4)
    assert estimate.kv_budget_for(LLAMA70, H100, reserved=zero - 1, tensor_parallel_size=4) == 1


@pytest.mark.parametrize("T,kw,message", [
    (1, dict(utilization=Fraction(1, 2)), "KV budget -98.59 GB: llama-3.1-70b weights (141.11 GB) leave no KV budget "
     "on NVIDIA H100 SXM5 80GB at utilization 0.5; the smallest tensor-parallel size that fits is 4"),
    (2, dict(utilization=Fraction(1, 2)), "KV budget -28.03 GB: llama-3.1-70b weights (70.56 GB per GPU) leave no KV "
     "budget on 2 x NVIDIA H100 SXM5 80GB at utilization 0.5; the smallest tensor-parallel size that fits is 4"),
    (2, dict(reserved=10**10), "KV budget -4.02 GB: llama-3.1-70b weights (70.56 GB per GPU) leave no KV budget on "
     "2 x NVIDIA H100 SXM5 80GB at utilization 0.9; the smallest tensor-parallel size that fits is 4"),
])
def test_no_budget_names_the_group_and_the_smallest_t_at_the_same_utilization_and_reserve(T, kw, message) -> None:
    """The refusal names T x the GPU and weights per GPU at T > 1, and the smallest T that fits at the given
    utilization and reserve (at 0.9 with no reserve T = 2 would fit: 70.56 GB of 76.5 GB)."""
    usable = Fraction(H100.usable_memory)
    assert usable * Fraction(9, 10) > 70_555_025_408 > usable / 2
    assert usable * Fraction(9, 10) - 70_555_025_408 < 10**10 < usable * Fraction(9, 10) - 35_278_831_616
    with pytest.raises(NoKVBudgetError) as info:
        estimate.kv_budget_for(LLAMA70, H100, tensor_parallel_size=T, **kw)
    assert str(info.value) == f"{message} (--tensor-parallel-size 4)"


def test_a_share_that_does_not_fit_gets_the_whole_models_hint() -> None:
    """Llama 3.1 405B's share at T = 2 (405.86 GB per GPU) leaves no budget. A share records its whole model and T
    (the Deployment value), so the refusal gives the whole model's hint: no T of one H100 server fits, and the cards
    where some T does."""
    share = get_model("llama-3.1-405b").per_gpu(2)
    with pytest.raises(NoKVBudgetError) as info:
        estimate.kv_budget_for(share, H100)
    assert str(info.value) == ("KV budget -329.32 GB: llama-3.1-405b weights (405.86 GB per GPU) leave no KV budget "
                               "on 2 x NVIDIA H100 SXM5 80GB at utilization 0.9; no tensor-parallel size of 1, 2, 4, 8 "
                               "fits on one server of it (groups across servers: roofline fit, T x P up to 64 GPUs); "
                               "it fits on "
                               "b200 at T = 8, gb200 at T = 8, h200-sxm at T = 8, mi300x at T = 8, mi325x at T = 4 "
                               "(--accelerator, --tensor-parallel-size)")


def test_kv_heads_replicated_when_t_exceeds_them() -> None:
    """8 KV heads at T = 16 and 4 KV heads at T = 8: one (replicated) KV head per GPU; KV per token stops falling."""
    s16 = LLAMA70.per_gpu(16)
    assert s16.num_key_value_heads == 1 and s16.num_attention_heads == 4
    assert s16.kv_bytes_per_token == 2 * 80 * 1 * 128 * 2 == LLAMA70.per_gpu(8).kv_bytes_per_token
    four = attrs.evolve(get_model("llama-3.1-8b"), num_key_value_heads=4)
    s8 = four.per_gpu(8)
    assert s8.num_key_value_heads == 1 and s8.num_attention_heads == 4
    assert s8.kv_bytes_per_token == 2 * 32 * 1 * 128 * 2 == four.per_gpu(4).kv_bytes_per_token
    # T = 16 on an HGX A100 needs two servers, and no NIC fact is sourced for it: no step time
    with pytest.raises(InvalidValueError, match="no sourced network link between nodes"):
        estimate.decode_step(LLAMA70, get_accelerator("a100-80gb"), batch=1, context=0, tensor_parallel_size=16)
    # on two HGX H100 nodes the group all-reduces hierarchically over InfiniBand
    assert estimate.decode_step(LLAMA70, H100, batch=1, context=0, tensor_parallel_size=16).allreduce_time > 0
    # ... but a GB200 NVL72 rack spans 72 GPUs on NVLink
    gb200 = get_accelerator("gb200")
    step = estimate.decode_step(LLAMA70, gb200, batch=1, context=0, tensor_parallel_size=16)
    assert step.allreduce_time > 0 and step.tensor_parallel_size == 16


def test_heads_that_t_does_not_divide_are_refused_with_the_numbers() -> None:
    """40 heads at T = 3, 10 KV heads at T = 4, 4 KV heads at T = 6 and an MLP width T does not divide are refused."""
    phi = get_model("phi-4")
    assert phi.num_attention_heads == 40 and phi.num_key_value_heads == 10
    with pytest.raises(InvalidValueError) as info:
        phi.per_gpu(3)
    assert info.value.field == "tensor_parallel_size" and "num_attention_heads=40" in str(info.value)
    assert "not divisible by 3" in str(info.value)
    with pytest.raises(InvalidValueError, match="num_key_value_heads=10 is not divisible by 4"):
        phi.per_gpu(4)
    odd = attrs.evolve(get_model("llama-3.1-8b"), num_attention_heads=48, num_key_value_heads=4)
    with pytest.raises(InvalidValueError, match="exceeds num_key_value_heads=4 and is not a multiple of it"):
        odd.per_gpu(6)
    with pytest.raises(InvalidValueError, match="intermediate_size=14336 is not divisible by 48"):
        attrs.evolve(get_model("llama-3.1-8b"), num_attention_heads=48, num_key_value_heads=8).per_gpu(48)
    with pytest.raises(InvalidValueError, match="already one GPU's share"):
        LLAMA70.per_gpu(2).per_gpu(2)
    with pytest.raises(InvalidValueError):
        LLAMA70.per_gpu(0)


def test_mla_latent_and_moe_router_are_replicated() -> None:
    """DeepSeek-V3's latent KV per token is the same on every GPU; Mixtral's router and norms are replicated,
    its experts split 1/T."""
    ds = get_model("deepseek-v3")
    assert ds.per_gpu(8).kv_bytes_per_token == ds.kv_bytes_per_token == 61 * (512 + 64) * 2
    mix = get_model("mixtral-8x7b")
    whole, half = mix.weight_bytes_by_class(), mix.per_gpu(2).weight_bytes_by_class()
    assert half["router"] == whole["router"] and half["norms"] == whole["norms"]
    assert half["experts"] * 2 == whole["experts"] and half["projections"] * 2 == whole["projections"]
    assert mix.per_gpu(2).experts_touched(8) == mix.experts_touched(8)


def test_t_equals_one_is_todays_model_exactly() -> None:
    """T = 1: the model itself, and every API gives the single-GPU numbers exactly."""
    assert LLAMA70.per_gpu(1) is LLAMA70
    m = get_model("llama-3.1-8b")
    for b, c in [(1, 0), (8, 1000), (300, 4096)]:
        assert estimate.decode_step(m, H100, batch=b, context=c, tensor_parallel_size=1) == \
            estimate.decode_step(m, H100, batch=b, context=c)
    assert estimate.criticality(m, H100, context=1000, tensor_parallel_size=1) == \
        estimate.criticality(m, H100, context=1000)
    assert estimate.kv_budget_for(m, H100, tensor_parallel_size=1) == estimate.kv_budget_for(m, H100)
    one, plain = RooflineCostModel.for_model(m, H100, tensor_parallel_size=1), RooflineCostModel.for_model(m, H100)
    assert one == plain
    for args in [(1, 1), (64, 64_000)]:
        assert one.decode_time(*args) == plain.decode_time(*args)
    assert one.prefill_time(512, 512 * 513 // 2) == plain.prefill_time(512, 512 * 513 // 2)
    assert one.mixed_time(4, 4000, 256, 0, 256 * 257 // 2) == plain.mixed_time(4, 4000, 256, 0, 256 * 257 // 2)


# --------------------------------------------------------------------------- the step with its all-reduce


def test_decode_step_adds_the_allreduce_by_hand() -> None:
    """Llama 3.1 70B on 8 H100 SXM, batch 1: 17.64 GB / 3.35 TB/s + 160 all-reduces of 16 KiB over NVLink, exact."""
    s = estimate.decode_step(LLAMA70, H100, batch=1, context=0, tensor_parallel_size=8)
    link = H100.link(8)
    beta, alpha = Fraction(link.bandwidth.value), Fraction(link.latency.value)
    allreduce = 160 * (Fraction(14, 8) * 8192 * 2 / beta + 14 * alpha)
    memory = Fraction(17_640_734_720) / Fraction(H100.bandwidth)
    assert s.allreduce_time == allreduce and s.memory_time == memory
    assert s.step_time == memory + allreduce and s.throughput == 1 / (memory + allreduce)
    assert s.allreduce_latency_time == 160 * 14 * alpha and round(float(s.step_time) * 1e3, 3) == 6.62


def _llama70_step_at_t4_by_hand(batch: int, context: int, overhead: Fraction = Fraction(0),
                                peak: Fraction = Fraction(9_894 * 10**11), kv_reads: bool = True) -> dict:
    """Every field of decode_step(llama-3.1-70b, h100-sxm, T = 4), from the config and the datasheet by hand.

    ``peak`` is the H100 SXM's 989.4 TFLOP/s dense BF16 unless another is given; ``kv_reads=False``
    drops the KV bytes and the attention FLOPs.
    """
    L, h, inter, d, V, T = 80, 8192, 28_672, 128, 128_256, 4
    per_layer = h * (64 // T) * d * 2 + h * (8 // T) * d * 2 + 3 * h * inter // T  # q, o; k, v; gate, up, down
    weights = 2 * (L * per_layer + L * 2 * h + 2 * (V // T) * h + h)  # BF16; norms replicated; vocabulary / T
    kv = 2 * L * (8 // T) * d * 2                    # 2 of the 8 KV heads per GPU
    matmul = 2 * (L * per_layer + (V // T) * h)      # projections and the lm_head, not the embedding lookup
    attention = 4 * L * (64 // T) * d                # 16 query heads per GPU
    assert (weights, kv, matmul, attention) == (35_278_831_616, 81_920, 34_750_857_216, 655_360)
    bw = Fraction(3_350 * 10**9)                                  # H100 SXM: 3.35 TB/s
    beta, alpha = Fraction(450 * 10**9), Fraction(6, 10**7)       # NVLink 4: 450 GB/s per direction, 0.6 us a hop
    if not kv_reads:
        kv = attention = 0
    S = batch * context
    nbytes, flops = weights + kv * S, batch * matmul + attention * S
    memory, compute = nbytes / bw, flops / peak
    ar_bw = 2 * L * Fraction(2 * (T - 1), T) * batch * h * 2 / beta  # 160 ring all-reduces of B x h x 2 bytes
    ar_lat = 2 * L * 2 * (T - 1) * alpha
    step = max(memory, compute) + ar_bw + ar_lat + overhead
    return dict(batch=batch, context=context, bytes=nbytes, flops=flops, memory_time=memory, compute_time=compute,
                step_time=step, step_time_no_overlap=memory + compute + ar_bw + ar_lat + overhead,
                throughput=batch / step, math_busy_share=compute / step, bandwidth_share=memory / step,
                intensity=Fraction(flops, nbytes), bound="compute" if compute >= memory else "memory",
                flops_convention="exact", time_kind="bound", tensor_parallel_size=T,
                allreduce_time=ar_bw + ar_lat, allreduce_bandwidth_time=ar_bw, allreduce_latency_time=ar_lat,
                pipeline_parallel_size=1, send_time=0)


@pytest.mark.parametrize("batch,context,overhead,bound", [
    (1, 1000, 0, "memory"), (64, 1000, 0, "memory"), (1024, 128, 0, "compute"),
    (64, 1000, Fraction(1, 10**5), "memory"),
])
def test_every_field_of_a_tp4_decode_step_by_hand(batch: int, context: int, overhead: Fraction, bound: str) -> None:
    """Llama 3.1 70B on 4 H100 SXM: bytes, FLOPs, times, no-overlap time, shares, throughput and all-reduce, exact."""
    link = H100.link(4)
    assert (link.bandwidth.value, link.latency.value) == (450 * 10**9, Fraction(6, 10**7))
    s = estimate.decode_step(LLAMA70, H100, batch=batch, context=context, overhead=overhead, tensor_parallel_size=4)
    expected = _llama70_step_at_t4_by_hand(batch, context, Fraction(overhead))
    assert attrs.asdict(s) == expected
    assert s.bound == bound
    # the shares are of the whole step, all-reduce included, so neither reaches 1 even in its own regime
    assert s.bandwidth_share < 1 and s.math_busy_share < 1
    assert s.step_time_no_overlap - s.step_time == min(s.memory_time, s.compute_time)
    # one GPU's share, priced at its own T, is the same step
    share = estimate.decode_step(LLAMA70.per_gpu(4), H100, batch=batch, context=context, overhead=overhead)
    assert attrs.asdict(share) == expected


def test_a_tp4_step_without_kv_reads_by_hand() -> None:
    """kv_reads=False at T = 4 (batch 64, context 1,000): the weights-only step, all-reduce included, exact."""
    s = estimate.decode_step(LLAMA70, H100, batch=64, context=1000, kv_reads=False, tensor_parallel_size=4)
    expected = _llama70_step_at_t4_by_hand(64, 1000, kv_reads=False)
    assert expected["bytes"] == 35_278_831_616 and expected["flops"] == 64 * 34_750_857_216
    assert attrs.asdict(s) == expected


def test_a_tp4_step_exactly_at_the_ridge_is_compute_bound() -> None:
    """With the peak set so that compute time = memory time (B = 64, c = 1,000, T = 4), the step is compute-bound."""
    by_hand = _llama70_step_at_t4_by_hand(64, 1000)
    peak = by_hand["intensity"] * 3_350 * 10**9  # the ridge point = this step's intensity
    at_ridge = attrs.evolve(H100, peak_bf16=attrs.evolve(H100.peak_bf16, value=peak))
    s = estimate.decode_step(LLAMA70, at_ridge, batch=64, context=1000, tensor_parallel_size=4)
    expected = _llama70_step_at_t4_by_hand(64, 1000, peak=peak)
    assert expected["memory_time"] == expected["compute_time"] and expected["bound"] == "compute"
    assert attrs.asdict(s) == expected


def test_cost_model_prices_every_step_with_its_allreduce() -> None:
    """Decode, prefill and mixed steps on 4 GPUs add 2 L ring all-reduces of their tokens x h x 2 bytes."""
    cost = RooflineCostModel.for_model(LLAMA70, H100, tensor_parallel_size=4)
    share = RooflineCostModel.for_model(LLAMA70.per_gpu(4), H100)  # a share prices its own T
    link = H100.link(4)

    def ar(tokens: int) -> Fraction:
        return 160 * (Fraction(6, 4) * tokens * 8192 * 2 / Fraction(link.bandwidth.value)
                      + 6 * Fraction(link.latency.value))

    bare = RooflineCostModel(**{k: getattr(cost, k) for k in ("weight_bytes", "kv_bytes_per_token", "flops_per_token",
                                                              "attention_flops_per_token", "bandwidth", "peak_flops")})
    assert cost.decode_time(16, 16_000) == bare.decode_time(16, 16_000) + ar(16) == share.decode_time(16, 16_000)
    assert cost.decode_time(16, 16_000) == estimate.decode_step(LLAMA70, H100, batch=16, context=1000,
                                                                tensor_parallel_size=4).step_time
    assert cost.prefill_time(2048, 2048 * 2049 // 2) == bare.prefill_time(2048, 2048 * 2049 // 2) + ar(2048)
    assert cost.mixed_time(8, 8000, 500, 100, 500 * 100 + 500 * 501 // 2) == \
        bare.mixed_time(8, 8000, 500, 100, 500 * 100 + 500 * 501 // 2) + ar(508)
    assert cost.allreduce_time(0) == 0


@pytest.mark.parametrize("T", [2, 4, 8])
def test_step_time_never_below_the_whole_roofline_over_t(T: int) -> None:
    """At any batch and context the group's step is >= max(memory, compute) / T of the whole model."""
    for b, c in [(1, 0), (1, 8000), (64, 1000), (1024, 128)]:
        whole = estimate.decode_step(LLAMA70, H100, batch=b, context=c)
        group = estimate.decode_step(LLAMA70, H100, batch=b, context=c, tensor_parallel_size=T)
        assert group.step_time >= max(whole.memory_time, whole.compute_time) / T
        assert group.step_time > group.allreduce_time > 0


_SIZES = st.sampled_from([1, 2, 4, 8, 16])


@settings(max_examples=60, deadline=None)
@given(model=model_configs(architecture="any", max_layers=16, max_hidden=2048), T=_SIZES,
       batch=st.integers(1, 512), context=st.integers(0, 8192))
def test_share_properties(model, T: int, batch: int, context: int) -> None:
    """Per-GPU weight bytes x T >= the whole's; the step with T GPUs >= max(memory, compute) / T of the whole model."""
    try:
        share = model.per_gpu(T)
    except InvalidValueError as exc:
        assert exc.field == "tensor_parallel_size"
        return
    assert share.weight_bytes * T >= model.weight_bytes
    assert share.kv_bytes_per_token * T >= model.kv_bytes_per_token
    assert share.flops_per_token()[0] * T >= model.flops_per_token()[0]
    gb200 = get_accelerator("gb200")  # its NVLink spans 72 GPUs: every T here has a link
    if model.compute_dtype == "fp8" and gb200.peak_fp8 is None:
        return
    whole = estimate.decode_step(model, gb200, batch=batch, context=context)
    group = estimate.decode_step(model, gb200, batch=batch, context=context, tensor_parallel_size=T)
    assert group.step_time >= max(whole.memory_time, whole.compute_time) / T
    assert (group.allreduce_time > 0) == (T > 1)


# --------------------------------------------------------------------------- report, fit, simulate, plot


def test_report_at_tp_4_is_per_gpu_and_for_the_group(capsys) -> None:
    """`roofline report --model llama-3.1-70b --tp 4` prints the full report, per GPU and for the group."""
    assert main(["report", "--model", "llama-3.1-70b", "--tp", "4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("roofline report: llama-3.1-70b (weights bfloat16, KV bfloat16) on 4 x NVIDIA H100")
    assert "Tensor parallelism: 4 GPUs (--tensor-parallel-size 4) over NVLink 4 (NVSwitch)" in out
    assert "35.28 GB per GPU x 4" in out and "2 KV head(s) per GPU" in out and "81,920 B per token per GPU" in out
    assert "Step time, throughput and intensity against batch size" in out
    r = build_report(LLAMA70, H100, tensor_parallel_size=4)
    tp = r["tensor_parallel"]
    one = estimate.decode_step(LLAMA70, H100, batch=1, context=0, tensor_parallel_size=4)
    assert tp["batch_1"]["allreduce_time_s"] == float(one.allreduce_time) and tp["size"] == 4
    assert r["weights"]["bytes"] == 35_278_831_616 and r["model"]["total_parameters"] == LLAMA70.parameters
    limit = next(row for row in r["table"] if row["kv_limit"])
    assert tp["group_throughput_at_kv_limit_tokens_per_s"] == limit["with_kv"]["throughput_tokens_per_s"]


def test_report_of_a_model_too_big_for_one_gpu_picks_the_smallest_t(capsys) -> None:
    """Without --tp, a 70B model in BF16 on one H100 is reported at T = 2, said so; 671B on H100 is refused."""
    assert main(["report", "--model", "llama-3.1-70b", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tensor_parallel"]["size"] == 2 and doc["tensor_parallel"]["chosen"] == "smallest that fits"
    assert main(["report", "--model", "llama-3.1-70b"]) == 0
    out = capsys.readouterr().out  # the notice wraps at 100 columns, its continuation indented 4
    assert out.split("\n\n")[0].replace("\n    ", " ") == (
        "llama-3.1-70b does not fit one NVIDIA H100 SXM5 80GB (weights 141.11 GB); the smallest tensor-parallel "
        "size that fits is 2: the report below is for --tensor-parallel-size 2")
    assert main(["report", "--model", "deepseek-v3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no tensor-parallel size of 1, 2, 4, 8 fits on one server" in err
    assert main(["report", "--model", "llama-3.1-70b", "--tp", "3"]) == 2
    assert "num_attention_heads=64 is not divisible by 3" in capsys.readouterr().err


def test_report_without_tp_is_unchanged(capsys) -> None:
    """A model that fits one GPU: the report's text and JSON are the same with --tp 1 and without, no TP key."""
    for extra in ([], ["--json"]):
        assert main(["report", "--model", "qwen3-30b-a3b", *extra]) == 0
        plain = capsys.readouterr().out
        assert main(["report", "--model", "qwen3-30b-a3b", "--tp", "1", *extra]) == 0
        assert capsys.readouterr().out == plain and "tensor_parallel" not in plain and "Tensor parallelism" not in plain
    assert format_report(build_report(get_model("llama-3.1-8b"), H100)) == \
        format_report(build_report(get_model("llama-3.1-8b"), H100, tensor_parallel_size=1))


def test_fit_table_for_llama_70b_on_h100() -> None:
    """`roofline fit`: T = 1 leaves no budget, T = 2 is the answer; each row's numbers are the API's."""
    r = build_fit(LLAMA70, H100, context=8192)
    rows = {row["tensor_parallel_size"]: row for row in r["rows"] if row["pipeline_parallel_size"] == 1}
    assert r["smallest_fitting"] == 2 and rows[1]["status"] == "does not fit"
    for T, fits in [(2, 4), (4, 61), (8, 175)]:
        row = rows[T]
        assert row["status"] == "fits" and row["sequences"] == fits
        assert row["weight_bytes_per_gpu"] == float(LLAMA70.per_gpu(T).weight_bytes)
        one = estimate.decode_step(LLAMA70, H100, batch=1, context=8192, tensor_parallel_size=T)
        assert row["batch_1"]["step_time_s"] == float(one.step_time)
        assert row["batch_1"]["allreduce_latency_time_s"] == float(one.allreduce_latency_time)
        at = estimate.decode_step(LLAMA70, H100, batch=row["kv_limit"]["batch"], context=8192, tensor_parallel_size=T)
        assert row["kv_limit"]["tokens_per_s"] == float(at.throughput)
    assert "answer: llama-3.1-70b fits on 2 x NVIDIA H100 SXM5 80GB" in format_fit(r)


def test_fit_subtracts_the_reserve_report_does_and_marks_the_upper_bounds(capsys) -> None:
    """Llama 3.1 8B on H100: T = 1 takes report's real budget, 79.2 GiB x 0.9 - 16.06 GB - 3.05 GiB (vLLM log)
    = 57.20 GB, 436 sequences of 1,000 (432 in blocks); T = 2 has no published reserve: reserve 0, marked *."""
    llama8 = get_model("llama-3.1-8b")
    rows = {row["tensor_parallel_size"]: row for row in build_fit(llama8, H100)["rows"]
            if row["pipeline_parallel_size"] == 1}
    one, two = rows[1], rows[2]
    reserve = Fraction(305, 100) * 2**30
    budget = Fraction(H100.usable_memory) * Fraction(9, 10) - 16_060_522_496 - reserve
    assert one["reserve_bytes"] == float(reserve) and one["kv_budget_per_gpu_bytes"] == float(budget)
    assert round(budget / 10**7) == 5720 and one["sequences"] == 436 and one["sequences_blocks"] == 432
    assert one["kv_budget_kind"] == "real (published reserve)" and "pull/10511" in one["reserve"]["citation"]
    real = build_report(llama8, H100)["kv"]["real_budget"]
    assert one["kv_budget_per_gpu_bytes"] == real["budget_bytes"]
    assert one["sequences_blocks"] == real["sequences_blocks"]
    upper = Fraction(H100.usable_memory) * Fraction(9, 10) - llama8.per_gpu(2).weight_bytes
    assert two["reserve_bytes"] == 0 and two["reserve"] is None and two["kv_budget_per_gpu_bytes"] == float(upper)
    assert two["kv_budget_kind"] == "upper bound (reserve 0)"
    assert main(["fit"]) == 0
    text = capsys.readouterr().out
    assert "   1      |    16.06 GB     57.20 GB         8    131,072    432\n" in text
    assert "   2      |     8.03 GB     68.51 GB*        4     65,536  1,037\n" in text
    assert "   1 x 2  |     8.03 GB     68.51 GB*        8     65,536  1,037\n" in text  # one stage per GPU
    assert ("    T = 1: reserve 3.05 GiB from a published vLLM log,\n"
            "        https://github.com/vllm-project/vllm/pull/10511 (2024-12-14); --json quotes it") in text
    assert all(len(line) <= 100 for line in text.splitlines())
    assert "    * reserve 0: no published log for that per-GPU model size on this card" in text
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    assert "vLLM sizes its KV cache after taking" in capsys.readouterr().out


@pytest.mark.parametrize("acc", ["h100-sxm", "a100-40gb", "l40s", "mi300x"])
def test_fit_answers_for_every_preset(acc: str) -> None:
    """Every model preset on a few accelerators: a table with an answer, or one refusal by name, never a traceback."""
    accelerator = get_accelerator(acc)
    for name in model_names():
        try:
            r = build_fit(get_model(name), accelerator, sizes=(1, 2, 4, 8), pipeline_sizes=(1,))
        except RooflineError as exc:  # e.g. FP8 activations on a card without an FP8 peak
            assert "fp8" in str(exc).lower(), (name, acc, exc)
            continue
        text = format_fit(r)
        assert "answer:" in text and len(r["rows"]) == 4
        smallest = r["smallest_fitting"]
        assert smallest is None or all(row["status"] != "fits" for row in r["rows"]
                                       if row["tensor_parallel_size"] < smallest)


@settings(settings.get_profile("fuzz"))
@given(name=st.sampled_from(["llama-3.1-8b", "llama-3.1-405b", "qwen3-0.6b", "mixtral-8x7b"]),
       acc=st.sampled_from(["h100-sxm", "a100-40gb", "l40s"]),
       sizes=st.lists(st.integers(1, 24), min_size=1, max_size=4, unique=True))
def test_fit_says_why_no_size_fits(name: str, acc: str, sizes: list[int]) -> None:
    """When no size fits, the answer gives the rows' own reason: every size refused (heads that do not divide
    by 3 are not the network's fault), or the largest size that ran too small; the network between servers
    only when the accelerator's links cannot hold one GPU more than that size."""
    accelerator = get_accelerator(acc)
    r = build_fit(get_model(name), accelerator, sizes=sizes, pipeline_sizes=(1,))
    text = format_fit(r)
    answer = " ".join(text[text.rindex("  answer:"):].split())  # the answer's lines, unwrapped (fit_width)
    if r["smallest_fitting"] is not None:
        assert r["none_fit_because"] is None and f"--tensor-parallel-size {r['smallest_fitting']}" in answer
        return
    ran = [row["tensor_parallel_size"] for row in r["rows"] if row["status"] != "refused"]
    if not ran:
        assert answer.endswith("every size is refused (the reasons above)") and "network" not in answer
        return
    assert f"T = {max(ran)} do not fit" in answer
    try:
        accelerator.link(max(ran) + 1)
        one_more_has_a_link = True
    except InvalidValueError:
        one_more_has_a_link = accelerator.network is not None  # beyond a node: the network, where sourced
    assert ("network between servers" in answer) is not one_more_has_a_link, answer


def test_fit_cli_json_and_bad_input(capsys) -> None:
    """`roofline fit --json` parses; a bad size exits 2 with one line."""
    assert main(["fit", "--model", "phi-4", "--accelerator", "l40s", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    status = {row["tensor_parallel_size"]: row["status"] for row in doc["rows"] if row["pipeline_parallel_size"] == 1}
    assert status == {1: "fits", 2: "fits", 4: "refused", 8: "refused", 16: "refused", 32: "refused",
                      64: "refused"} and doc["smallest_fitting"] == 1 and doc["smallest_fitting_pipeline"] == 1
    with pytest.raises(SystemExit) as info:
        main(["fit", "--tp", "0"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--tensor-parallel-size='0': must be >= 1" in err


def test_simulate_on_a_group(capsys) -> None:
    """`roofline simulate --tp 2`: the KV pool is one GPU's budget over one GPU's KV share; the run names the group."""
    args = ["simulate", "--model", "llama-3.1-70b", "--tp", "2", "--policy", "continuous", "--num-prompts", "20",
            "--random-input-len", "100", "--random-output-len", "20", "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    budget = estimate.kv_budget_for(LLAMA70, H100, tensor_parallel_size=2)
    assert doc["tensor_parallel_size"] == 2 and doc["kv_pool"]["budget_bytes"] == float(budget)
    assert doc["kv_pool"]["capacity_tokens"] == int(budget // 163_840) // 16 * 16


def test_plot_curves_of_a_group() -> None:
    """throughput_curves of one GPU's share gives the group's tokens/s, as decode_step does."""
    pytest.importorskip("numpy")
    from roofline.plotting import throughput_curves

    c = throughput_curves(LLAMA70.per_gpu(8), H100, max_batch=64, flops="2p")
    for b in (1, 64):
        s = estimate.decode_step(LLAMA70, H100, batch=b, context=0, flops="2p", tensor_parallel_size=8)
        assert c["weights_only"][b - 1] == pytest.approx(float(s.throughput), rel=1e-12)


def test_an_array_of_degrees_is_refused_naming_the_field():
    """per_gpu and the cost model take one T: an array of degrees is refused naming the field (was a TypeError)."""
    import numpy as np

    from roofline.errors import InvalidValueError
    from roofline.sim import RooflineCostModel

    model = get_model("llama-3.1-8b")
    for call in (lambda: model.per_gpu(np.array([1, 2])),
                 lambda: RooflineCostModel.for_model(model, get_accelerator("h100-sxm"),
                                                     tensor_parallel_size=np.array([1, 2]))):
        with pytest.raises(InvalidValueError, match=r"^tensor_parallel_size=.*not an array"):
            call()


def test_windows_for_another_count_of_layers_are_refused_naming_the_field():
    """Break-it: 3 windows beside num_hidden_layers=4 (T = 2) were taken: a token-layer was priced at
    kv_bytes_per_token / 3 while the all-reduce counted 4 layers (decode_time(1, 6) = 180, a number for neither).
    Refused naming layer_windows; the for_model cost models of windowed presets give one window per layer."""
    kw = dict(weight_bytes=100, kv_bytes_per_token=8, flops_per_token=10, attention_flops_per_token=1, bandwidth=1,
              peak_flops=1, tensor_parallel_size=2, num_hidden_layers=4, hidden_size=4)
    with pytest.raises(InvalidValueError) as err:
        RooflineCostModel(**kw, layer_windows=(2, None, 2))
    assert err.value.field == "layer_windows"
    assert RooflineCostModel(**kw, layer_windows=(2, None, 2, None)).decode_time(1, 8) == \
        RooflineCostModel(**kw).decode_time(1, 2)  # 8 token-layers over 4 layers cost 2 tokens' KV
    gemma = get_model("gemma-3-27b")
    for T in (1, 2):
        assert len(RooflineCostModel.for_model(gemma, H100, tensor_parallel_size=T).layer_windows) == 62
