"""Deployment: the model on its accelerators, validated once, priced the same by every layer."""

from __future__ import annotations

from fractions import Fraction

import attrs
import numpy as np
import pytest

from roofline import Deployment, ModelConfig, Parallelism, estimate, get_accelerator, get_model
from roofline.deployment import as_deployment
from roofline.errors import InvalidValueError
from roofline.models import ModelShare
from roofline.profiles import get_engine_profile
from roofline.sim import RooflineCostModel

H100 = get_accelerator("h100-sxm")
LLAMA70 = get_model("llama-3.1-70b")
T4 = Deployment(LLAMA70, H100, 4)


def test_model_config_has_no_deployment_field() -> None:
    """The model describes the network only: where it runs (T) is the deployment's."""
    assert "tensor_parallel_size" not in attrs.fields_dict(ModelConfig)
    assert not hasattr(LLAMA70, "tensor_parallel_size")
    assert T4.model is LLAMA70 and T4.tensor_parallel_size == 4 and T4.parallelism == Parallelism(tensor=4)


def test_llama_70b_at_t4_on_h100_gives_todays_step_times() -> None:
    """The values for_model and decode_step gave before the Deployment existed, exactly."""
    cost = RooflineCostModel.for_deployment(T4)
    assert cost == RooflineCostModel.for_model(LLAMA70, H100, tensor_parallel_size=4)
    assert cost.decode_time(16, 16_000) == Fraction(114_221_237, 9_814_453_125)
    assert cost.prefill_time(2048, 2048 * 2049 // 2) == Fraction(22_173_025_703, 241_552_734_375)
    assert round(float(cost.decode_time(1, 0)) * 1e3, 3) == 11.116
    step = estimate.decode_step(T4, batch=16, context=1000)
    assert step.step_time == cost.decode_time(16, 16_000) and step.tensor_parallel_size == 4
    assert step.allreduce_time == Fraction(20_971, 29_296_875)
    assert step == estimate.decode_step(LLAMA70, H100, batch=16, context=1000, tensor_parallel_size=4)
    assert estimate.kv_budget_for(T4) == Fraction(1_031_437_139_968, 25)
    assert T4.share.weight_bytes == 35_278_831_616 and T4.share.num_key_value_heads == 2
    c = estimate.criticality(T4, context=1000, flops="2p")
    assert (c.critical_batch, c.critical_batch_weights_only, c.ridge_point) == (941, 296, Fraction(19_788, 67))


def test_an_estimate_deployment_prices_the_profile() -> None:
    """A Deployment with vLLM's profile: decode_step and the cost model give its estimate, labelled."""
    vllm = Deployment(LLAMA70, H100, 4, estimate=get_engine_profile("vllm"))
    step = estimate.decode_step(vllm, batch=16, context=1000)
    assert step.step_time == Fraction(26_901_045_247, 1_317_099_609_375)
    assert step.time_kind == vllm.time_kind == "estimate: vLLM with CUDA graphs"
    assert RooflineCostModel.for_deployment(vllm).decode_time(16, 16_000) == step.step_time
    assert RooflineCostModel.for_deployment(vllm) == RooflineCostModel.for_model(LLAMA70, H100, estimate="vllm",
                                                                                 tensor_parallel_size=4)
    assert vllm.as_bound() == T4 and estimate.decode_step(vllm, batch=1, context=0, estimate=None).time_kind == "bound"


def test_moe_2p_estimate_at_t2_is_unchanged() -> None:
    """Mixtral 8x7B, T = 2, 2 x P FLOPs, vLLM's estimate: the durations of before, exactly."""
    mix = Deployment(get_model("mixtral-8x7b"), H100, 2, flops="2p", estimate=get_engine_profile("vllm"))
    cost = RooflineCostModel.for_deployment(mix)
    assert cost.decode_time(16, 16_000) == Fraction(203_202_441_565_553, 10_115_325_000_000_000)
    assert cost.prefill_time(2048, 2048 * 2049 // 2) == Fraction(2_914_763_152_342, 81_886_376_953_125)


@pytest.mark.parametrize("kwargs, field", [
    (dict(model="llama", accelerator=H100), "model"),
    (dict(model=LLAMA70, accelerator="h100-sxm"), "accelerator"),
    (dict(model=LLAMA70, accelerator=H100, parallelism=0), "tensor_parallel_size"),
    (dict(model=LLAMA70, accelerator=H100, parallelism=True), "tensor_parallel_size"),
    (dict(model=LLAMA70, accelerator=H100, parallelism=np.array([2, 4])), "tensor_parallel_size"),
    (dict(model=LLAMA70, accelerator=H100, parallelism=3), "tensor_parallel_size"),  # 64 heads / 3
    (dict(model=LLAMA70, accelerator=H100, flops="3p"), "flops"),
    (dict(model=LLAMA70, accelerator=H100, flops=None), "flops"),
    (dict(model=LLAMA70, accelerator=H100, estimate="vllm"), "estimate"),  # a name: look it up first
    (dict(model=LLAMA70, accelerator=H100, estimate=42), "estimate"),
    (dict(model=LLAMA70.per_gpu(2), accelerator=H100), "model"),  # already a share
    (dict(model=LLAMA70.per_gpu(2), accelerator=H100, parallelism=2), "model"),
])
def test_bad_fields_are_refused_naming_the_field(kwargs, field) -> None:
    with pytest.raises(InvalidValueError) as info:
        Deployment(**kwargs)
    assert info.value.field == field


def test_double_sharding_is_refused_by_name() -> None:
    """A share made by per_gpu records what it is a share of: never split again, priced at its own T."""
    share = LLAMA70.per_gpu(2)
    assert isinstance(share, ModelShare) and share.whole is LLAMA70 and share.tensor_parallel_size == 2
    with pytest.raises(InvalidValueError, match="already one GPU's share of 2"):
        share.per_gpu(2)
    with pytest.raises(InvalidValueError, match="already one GPU's share of 2"):
        estimate.decode_step(share, H100, batch=1, context=0, tensor_parallel_size=2)
    with pytest.raises(InvalidValueError, match="already one GPU's share of 2"):
        Deployment(share, H100)
    assert as_deployment(share, H100) == Deployment(LLAMA70, H100, 2)


def test_a_deployment_beside_its_own_fields_is_refused() -> None:
    """An accelerator or another T beside a Deployment would be a second answer: refused naming it."""
    with pytest.raises(InvalidValueError) as info:
        estimate.decode_step(T4, H100, batch=1, context=0)
    assert info.value.field == "accelerator"
    with pytest.raises(InvalidValueError) as info:
        estimate.kv_budget_for(T4, tensor_parallel_size=2)
    assert info.value.field == "tensor_parallel_size"
    assert estimate.kv_budget_for(T4, tensor_parallel_size=4) == estimate.kv_budget_for(T4)
    with pytest.raises(InvalidValueError) as info:
        RooflineCostModel.for_deployment(LLAMA70)  # type: ignore[arg-type]
    assert info.value.field == "deployment"


def test_the_link_is_checked_where_the_allreduce_is_priced() -> None:
    """T = 16 on an HGX A100 (no sourced NIC): sizes and budgets exist, the step time does not (two servers)."""
    d = Deployment(LLAMA70, get_accelerator("a100-80gb"), 16)
    assert d.share.num_key_value_heads == 1 and estimate.kv_budget_for(d) > 0
    with pytest.raises(InvalidValueError, match="no sourced network link between nodes"):
        RooflineCostModel.for_deployment(d)
    d = Deployment(LLAMA70, H100, 16)
    assert d.where == "16 x NVIDIA H100 SXM5 80GB" and Deployment(LLAMA70, H100).where == H100.name


def test_one_gpu_deployment_is_the_model_itself() -> None:
    """T = 1: the share is the model, no all-reduce, today's single-GPU cost model exactly."""
    m = get_model("llama-3.1-8b")
    d = Deployment(m, H100)
    assert d.share is m and d.gpus == 1 and d.step_terms() == m.step_terms("exact")
    assert d.allreduce_terms()["link_latency"] == 0
    assert RooflineCostModel.for_deployment(d) == RooflineCostModel.for_model(m, H100)
    assert RooflineCostModel.for_deployment(d, exact=False, overhead=Fraction(1, 1000)) == \
        RooflineCostModel.for_model(m, H100, exact=False, overhead=Fraction(1, 1000))


def test_a_kv_pool_is_built_from_a_deployment_as_from_its_share() -> None:
    """KVPool.for_model takes a Deployment (its per-GPU share): Llama 3.1 70B at T = 4 on H100 SXM, the budget
    kv_budget_for gives, 16-token blocks: the same pool as from the share by hand."""
    from roofline.estimate import kv_budget_for
    from roofline.sim import KVPool

    d = Deployment(get_model("llama-3.1-70b"), get_accelerator("h100-sxm"), 4)
    budget = kv_budget_for(d)
    share = get_model("llama-3.1-70b").per_gpu(4)
    assert KVPool.for_model(d, budget=budget) == KVPool.for_model(share, budget=budget)
    assert KVPool.for_model(d, budget=budget).capacity_blocks == budget // (16 * share.kv_bytes_per_token)
