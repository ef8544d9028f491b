"""p11: a 70B model on 8 GPUs pays the all-reduce's latency, not its bandwidth, until batch 132.

Claim
-----
Under tensor parallelism each layer of a decode step all-reduces the batch's activations
twice (after attention, after the MLP). A ring all-reduce of M bytes over T GPUs costs
2 (T - 1) / T x M / beta (bandwidth) + 2 (T - 1) x alpha (latency, one per ring step).
For Llama 3.1 70B in BF16 on 8 H100 SXM over NVLink 4 (beta = 450 GB/s per direction,
alpha = 0.6 us per ring step), a batch-1 decode step all-reduces 16 KiB 160 times: the
latency term is 160 x 14 x 0.6 us = 1.344 ms, the bandwidth term 10.2 us, about 132
times smaller. The bandwidth term takes over only from the batch where the two are equal,
B_x = T alpha beta / (h e) = 131.8, so from B = 132 on; the number of layers cancels.
At batch 1 the all-reduces add a quarter to the 5.3 ms it takes one GPU to read its
17.6 GB share of the weights.

Assumptions
-----------
* docs/conventions.md, "Tensor parallelism": the ring all-reduce, two per layer, no
  overlap of communication with the roofline of one GPU's share; the step time is
  max(memory time, compute time) + all-reduce time (+ overhead, 0 here).
* The per-GPU split of Llama 3.1 70B is worked here by hand from its config: attention
  and MLP projections split 1/T (column then row parallel), embeddings and lm_head split
  by vocabulary (128,256 = 8 x 16,032), norms replicated on every GPU; 8 KV heads over 8
  GPUs is one KV head per GPU.
* Link figures from :mod:`roofline.hardware`: NVLink 4, 900 GB/s bidirectional per GPU
  (450 GB/s per direction), 0.6 us per ring step (NCCL's ring latency model). NCCL's
  fixed per-call latency and its faster small-message algorithms are outside the
  convention's ring.

Sources
-------
meta-llama/Llama-3.1-70B config.json (80 layers, hidden 8192, intermediate 28672, 64
heads, 8 KV heads, head_dim 128, vocab 128256, untied; 70,553,706,496 parameters);
NVIDIA H100 datasheet (NVLink 900 GB/s, HBM3 3.35 TB/s, 989.4 TFLOP/s dense BF16);
NVIDIA/nccl src/graph/tuning.cc (ring all-reduce latency 2 (nRanks - 1) x hwLat,
hwLat NVLink ring LL = 0.6 us).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from fractions import Fraction

from ._proof import Proof, run_script, si

NAME = "p11_tensor_parallel"
T_GPUS, CONTEXT, BF16 = 8, 1000, 2

# Llama 3.1 70B, config.json
LAYERS, HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 80, 8192, 28672, 64, 8, 128, 128256
PUBLISHED_PARAMETERS = 70_553_706_496


def split_llama_70b(t: int) -> dict[str, int]:
    """Parameters of Llama 3.1 70B by class, whole and on one GPU of a group of ``t`` (worked by hand).

    Returns
    -------
    dict with ``projections``, ``embeddings`` (embedding + lm_head), ``norms`` (whole
    model) and ``per_gpu`` (projections / t + embeddings / t + norms), ``per_gpu_matmul``
    (projections / t + lm_head / t: the parameters one GPU multiplies by), in parameters.
    """
    q = o = HIDDEN * HEADS * HEAD_DIM
    k = v = HIDDEN * KV_HEADS * HEAD_DIM
    mlp = 3 * HIDDEN * INTER  # gate, up, down
    projections = LAYERS * (q + k + v + o + mlp)
    embeddings = 2 * VOCAB * HIDDEN  # untied: embedding and lm_head
    norms = LAYERS * 2 * HIDDEN + HIDDEN  # two RMSNorms per layer and the final one
    return dict(
        projections=projections, embeddings=embeddings, norms=norms,
        per_gpu=projections // t + embeddings // t + norms,
        per_gpu_matmul=projections // t + VOCAB * HIDDEN // t,
    )


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..hardware import get_accelerator
    from ..symbolic import parallel as sp_
    from ..symbolic import step_time as st
    from ..symbolic import symbols_for
    from ..symbolic._symbols import S

    gpu = get_accelerator("h100-sxm")
    link = gpu.link(T_GPUS)
    beta, alpha = Fraction(link.bandwidth.value), Fraction(link.latency.value)
    T, M = sp_.T, sp_.M

    p.title("p11 tensor parallelism: Llama 3.1 70B on 8 H100 SXM, the all-reduce at batch 1 pays latency")

    p.section("The ring all-reduce, derived step by step")
    p.say("A ring all-reduce is a reduce-scatter then an all-gather, T - 1 steps each. In every step each GPU "
          "sends one chunk of M_ar / T bytes to its neighbour: one link latency plus M_ar / (T beta).")
    p.show("t_ring = sum over the 2 (T - 1) steps", sp_.ring_allreduce_time)
    p.legend("message_bytes", "tensor_parallel_size", "link_bandwidth", "link_latency")
    convention = 2 * (T - 1) / T * M / sp_.beta + 2 * (T - 1) * sp_.alpha
    p.equal("it is the convention's 2 (T - 1) / T x M_ar / beta + 2 (T - 1) x alpha", sp_.ring_allreduce_time,
            convention)
    p.equal("one GPU all-reduces nothing: t_ring(T = 1) = 0", sp_.ring_allreduce_time.subs(T, 1), 0)
    p.equal("the latency term is the limit as beta -> oo: 2 (T - 1) alpha", sp_.ring_allreduce_latency_time,
            2 * (T - 1) * sp_.alpha)
    p.equal("the two terms add up to the whole", sp_.ring_allreduce_bandwidth_time
            + sp_.ring_allreduce_latency_time, sp_.ring_allreduce_time)

    p.section("Two all-reduces per layer per decode step, of B x h x e bytes each")
    p.show("t_AR per step", sp_.decode_allreduce_time)
    p.legend("batch", "hidden_size", "activation_bytes", "num_hidden_layers")
    p.equal("t_AR = 2 L x t_ring(M_ar = B h e_a)", sp_.decode_allreduce_time,
            2 * S.num_hidden_layers * sp_.ring_allreduce_time.subs(M, S.batch * sp_.h * sp_.e_a))
    p.show("step time of the group", sp_.step_time_tp)
    p.equal("T = 1 is exactly today's step time (docs/conventions.md, 'One step')", sp_.step_time_tp.subs(T, 1),
            st.step_time)

    p.section(f"Llama 3.1 70B split over T = {T_GPUS} GPUs, by hand from its config")
    p.say("Rule: attention (q, k, v, o) and MLP (gate, up, down) projections split 1/T; embeddings and lm_head "
          "split by vocabulary; RMSNorm weights replicated on every GPU. KV heads split T ways.")
    whole, part = split_llama_70b(1), split_llama_70b(T_GPUS)
    total = whole["projections"] + whole["embeddings"] + whole["norms"]
    p.equal("projections + embeddings + lm_head + norms = the published 70,553,706,496", total,
            PUBLISHED_PARAMETERS, value=f"{total:,} parameters")
    p.holds(f"heads divide by T: 64 % {T_GPUS} = 0 and 8 KV heads % {T_GPUS} = 0; vocab % {T_GPUS} = 0",
            HEADS % T_GPUS == 0 and KV_HEADS % T_GPUS == 0 and VOCAB % T_GPUS == 0)
    per_gpu = part["per_gpu"]
    p.table(["class", "whole model", f"one GPU of {T_GPUS}"], [
        ["projections", f"{whole['projections']:,}", f"{part['projections'] // T_GPUS:,}"],
        ["embedding + lm_head", f"{whole['embeddings']:,}", f"{part['embeddings'] // T_GPUS:,}"],
        ["norms (replicated)", f"{whole['norms']:,}", f"{part['norms']:,}"],
        ["total", f"{total:,}", f"{per_gpu:,}"],
    ])
    p.equal("per GPU = 8,556,380,160 + 262,668,288 + 1,318,912 parameters", per_gpu, 8_820_367_360,
            value=f"{per_gpu:,} parameters")
    p.holds("per GPU x T >= whole model (replicated norms make it larger, never smaller)",
            per_gpu * T_GPUS >= total, f"{per_gpu * T_GPUS:,} >= {total:,}")
    w_gpu = per_gpu * BF16
    k_gpu = 2 * LAYERS * (KV_HEADS // T_GPUS) * HEAD_DIM * BF16
    f_gpu = 2 * part["per_gpu_matmul"]
    a_gpu = 4 * LAYERS * (HEADS // T_GPUS) * HEAD_DIM
    p.equal("weight bytes per GPU (BF16)", w_gpu, 17_640_734_720, value=si(w_gpu, "B"))
    p.equal("KV bytes per token per GPU: 2 x 80 x 1 KV head x 128 x 2", k_gpu, 40_960, value=f"{k_gpu:,} B")

    p.section("Batch 1 on 8 H100 SXM: the latency term is what the all-reduces cost")
    kw = dict(num_hidden_layers=LAYERS, batch=1, hidden_size=HIDDEN, activation_bytes=BF16,
              tensor_parallel_size=T_GPUS, link_bandwidth=beta, link_latency=alpha)
    p.say(f"Link: {link.name}, {si(beta, 'B/s')} per direction, {si(alpha, 's')} per ring step; "
          f"{f.allreduce_bytes(batch=1, hidden_size=HIDDEN, activation_bytes=BF16):,} B per all-reduce.")
    lat = f.decode_allreduce_latency_time(**kw)
    bw = f.decode_allreduce_bandwidth_time(**kw)
    p.equal("latency term 2 L x 2 (T - 1) x alpha = 160 x 14 x 0.6 us", lat, Fraction(1344, 10**6),
            value=si(lat, "s"))
    p.equal("bandwidth term 2 L x 2 (T - 1) / T x B h e / beta (fast path = symbolic)", bw,
            sp_.decode_allreduce_bandwidth_time.subs(symbols_for(kw)), value=si(bw, "s"))
    message = f.allreduce_bytes(batch=1, hidden_size=HIDDEN, activation_bytes=BF16)
    one_ring = f.ring_allreduce_time(message_bytes=message, tensor_parallel_size=T_GPUS, link_bandwidth=beta,
                                     link_latency=alpha)
    p.equal("the two terms are 2 L all-reduces of one ring each: 2 L x t_ring(B h e) (fast path ring_allreduce_time)",
            lat + bw, 2 * LAYERS * one_ring, value=f"160 x {si(one_ring, 's')}")
    p.holds("at B = 1 the latency term exceeds the bandwidth term", lat > bw,
            f"{si(lat, 's')} > {si(bw, 's')}, x{float(lat / bw):.1f}")
    step = dict(batch=1, context_sum=CONTEXT, weight_bytes=w_gpu, kv_bytes_per_token=k_gpu, flops_per_token=f_gpu,
                attention_flops_per_token=a_gpu, bandwidth=Fraction(gpu.bandwidth),
                peak_flops=Fraction(gpu.peak_flops), overhead=0)
    mem = f.memory_time(weight_bytes=w_gpu, kv_bytes_per_token=k_gpu, context_sum=CONTEXT,
                        bandwidth=Fraction(gpu.bandwidth))
    t_tp = f.step_time_tp(**step, **{k: v for k, v in kw.items() if k != "batch"})
    p.equal(f"step time at c = {CONTEXT:,}: memory time + all-reduces (fast path = symbolic)", t_tp,
            sp_.step_time_tp.subs(symbols_for(dict(step, **kw))), value=si(t_tp, "s"))
    p.equal("memory-bound at B = 1: step = W_gpu + k_gpu c over BW, plus the all-reduces", t_tp, mem + lat + bw,
            value=f"{si(mem, 's')} + {si(lat + bw, 's')}")
    p.equal("fast path throughput_tp = B / step time", f.throughput_tp(**step, **{k: v for k, v in kw.items()
                                                                                  if k != "batch"}), 1 / t_tp)
    p.within("the all-reduces add about a quarter to one GPU's memory time", (lat + bw) / mem, Fraction(1, 5),
             Fraction(3, 10))
    whole_w, whole_k = total * BF16, 2 * LAYERS * KV_HEADS * HEAD_DIM * BF16
    one_gpu = f.step_time(batch=1, context_sum=CONTEXT, weight_bytes=whole_w, kv_bytes_per_token=whole_k,
                          flops_per_token=2 * (whole["projections"] + VOCAB * HIDDEN),
                          attention_flops_per_token=4 * LAYERS * HEADS * HEAD_DIM,
                          bandwidth=Fraction(gpu.bandwidth), peak_flops=Fraction(gpu.peak_flops), overhead=0)
    p.equal("one GPU holding it all is memory-bound at B = 1: its step = (W + k c) / BW", one_gpu,
            Fraction(whole_w + whole_k * CONTEXT) / Fraction(gpu.bandwidth), value=si(one_gpu, "s"))
    comp_gpu = f.compute_time(batch=1, context_sum=CONTEXT, flops_per_token=f_gpu, attention_flops_per_token=a_gpu,
                              peak_flops=Fraction(gpu.peak_flops))
    p.equal("compute time per GPU at B = 1 = (F_gpu + a_gpu c) / peak (fast path compute_time)", comp_gpu,
            Fraction(f_gpu + a_gpu * CONTEXT) / Fraction(gpu.peak_flops), value=si(comp_gpu, "s"))
    p.holds("below the memory time, so the step is memory-bound as used above", comp_gpu < mem)
    p.holds("never below the whole model's roofline / T", t_tp >= one_gpu / T_GPUS,
            f"{si(t_tp, 's')} >= {si(one_gpu, 's')} / {T_GPUS} = {si(one_gpu / T_GPUS, 's')}")
    p.say(f"Against one (imaginary) GPU holding all {si(whole_w, 'B')}: {si(one_gpu, 's')} per step, so 8 GPUs "
          f"are {float(one_gpu / t_tp):.2f}x faster at batch 1, not 8x.")

    p.section("From what batch the bandwidth term takes over: solve(bandwidth = latency, B)")
    p.show("B_x", sp_.allreduce_crossover_batch)
    p.holds("the number of layers cancels", S.num_hidden_layers not in sp_.allreduce_crossover_batch.free_symbols)
    p.equal("B_x = T alpha beta / (h e)", sp_.allreduce_crossover_batch, T * sp_.alpha * sp_.beta / (sp_.h * sp_.e_a))
    ckw = dict(hidden_size=HIDDEN, activation_bytes=BF16, tensor_parallel_size=T_GPUS, link_bandwidth=beta,
               link_latency=alpha)
    b_x = f.allreduce_crossover_batch(**ckw)
    p.equal("8 x 0.6 us x 450 GB/s / (8192 x 2 B) (fast path = symbolic)", b_x,
            sp_.allreduce_crossover_batch.subs(symbols_for(ckw)), value=f"{float(b_x):.2f} sequences")
    first = math.ceil(b_x)
    below = dict(kw, batch=first - 1)
    above = dict(kw, batch=first)
    p.holds(f"at B = {first - 1} latency still dominates",
            f.decode_allreduce_latency_time(**below) > f.decode_allreduce_bandwidth_time(**below))
    p.holds(f"at B = {first} bandwidth dominates",
            f.decode_allreduce_bandwidth_time(**above) > f.decode_allreduce_latency_time(**above))
    p.equal("the crossover is B = 132", first, 132)
    p.equal("at B = 1 the latency term is B_x times the bandwidth term", lat / bw, b_x)

    p.section("The same crossover on every preset that holds a group of 8")
    from ..hardware import ACCELERATORS

    rows = []
    for key in sorted(ACCELERATORS):
        a = ACCELERATORS[key]
        try:
            lk = a.link(T_GPUS)
        except ValueError:
            continue
        x = f.allreduce_crossover_batch(**dict(ckw, link_bandwidth=Fraction(lk.bandwidth.value),
                                               link_latency=Fraction(lk.latency.value)))
        rows.append([key, lk.name, si(lk.bandwidth.value, "B/s"), si(lk.latency.value, "s"), f"{float(x):.1f}"])
    p.table(["accelerator", f"link for T = {T_GPUS}", "per direction", "ring step", "B_x (h = 8192, BF16)"], rows)
    l40s = get_accelerator("l40s").link(T_GPUS)
    x_pcie = f.allreduce_crossover_batch(**dict(ckw, link_bandwidth=Fraction(l40s.bandwidth.value),
                                                link_latency=Fraction(l40s.latency.value)))
    p.equal("L40S over PCIe Gen4: B_x = 8 x 1 us x 32 GB/s / 16 KiB = 15.6", x_pcie, Fraction(125, 8))
    p.within("so over PCIe the bandwidth term takes over about 8x sooner than over NVLink", b_x / x_pcie, 7, 10)

    p.conclude(f"batch 1: all-reduce latency {si(lat, 's')} vs bandwidth {si(bw, 's')} per step "
               f"(Llama 3.1 70B, 8 H100 SXM, {si(w_gpu, 'B')} per GPU); bandwidth takes over from B = {first} "
               f"(B_x = {float(b_x):.1f})")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the derivation and the verdict; exit status 0 if every check passed, else 1."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
