"""p20: Llama 3.1 405B in BF16 needs 16 H100 SXM (two nodes); TP 16 beats TP 8 x PP 2 at batch 1.

Claim
-----
Llama 3.1 405B (811.7 GB of BF16 weights, 126 layers) does not fit one HGX H100 node of 8
(101.5 GB per GPU at T = 8 > 71.3 GB usable x 0.9). The smallest T x P on H100 SXM nodes that
holds the weights and the KV of one request of its full 131,072-token context is 16 GPUs,
two nodes: TP 16 (a tensor-parallel group spanning the nodes, all-reducing hierarchically:
reduce-scatter on NVLink, ring over InfiniBand NDR, all-gather on NVLink) or TP 8 x PP 2 (a
stage per node, one send across the nodes per step). At batch 1 (context 1,000) both are
memory-bound; PP adds capacity, not speed: TP 8 x PP 2 reads all 101.5 GB of one GPU's
share of T = 8 per step (30.3 ms) plus 252 NVLink all-reduces (2.1 ms) and one send over
InfiniBand (3.4 us), 32.5 ms in all; TP 16 reads half (15.3 ms) and pays 252 hierarchical
all-reduces (3.5 ms), whose latency (0.46 us per effective ring step: 7 NVLink steps of
0.6 us and 2 InfiniBand steps of 2.7 us over 30) dominates the communication, 18.9 ms in all.
The pipeline send is about 1/600 of TP 8 x PP 2's all-reduces.

Assumptions
-----------
* docs/conventions.md, "Groups that span nodes" and "Pipeline parallelism": the hierarchical
  all-reduce with G = 8 GPUs per node; stages split by vLLM's get_pp_indices; each stage
  boundary sends B x h x 2 bytes once per step, over the NIC when it crosses nodes (TP groups
  inside nodes, stages in order over nodes); one max(memory, compute) over all stages.
* The bound: datasheet bandwidth and peak, no overhead; KV budget = 0.9 x usable memory -
  weights, reserve 0 (no published vLLM log covers these shares), 16-token blocks.
* Links from roofline.hardware: NVLink 4 450 GB/s per direction and 0.6 us per ring step;
  InfiniBand NDR (one ConnectX-7 per GPU) 50 GB/s per direction and NCCL's NET ring latency 2.7 us.

Sources
-------
meta-llama/Llama-3.1-405B config.json (126 layers, hidden 16384, 128 heads, 8 KV heads,
vocab 128256; 405,853,388,800 parameters); NVIDIA H100 datasheet; NVIDIA DGX BasePOD
reference architecture (eight single-port ConnectX-7, 400 Gb/s); NVIDIA/nccl
src/graph/tuning.cc (hwLat NET ring LL 2.7 us); vllm/distributed/utils.py get_pp_indices.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction

from ._proof import Proof, run_script, si

NAME = "p20_pipeline_parallel"
CONTEXT, MAX_CONTEXT, BLOCK = 1000, 131_072, 16


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    import sympy as sp

    from .. import formulas as f
    from ..deployment import Deployment, Parallelism, stage_layers
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..symbolic import parallel as sp_
    from ..symbolic import pipeline as pp
    from ..symbolic import symbols_for
    from ..symbolic._symbols import S

    gpu = get_accelerator("h100-sxm")
    model = get_model("llama-3.1-405b")
    nv, net = gpu.link(8), gpu.network
    assert net is not None
    beta, alpha = Fraction(nv.bandwidth.value), Fraction(nv.latency.value)
    beta_n, alpha_n = Fraction(net.bandwidth.value), Fraction(net.latency.value)
    H, L = model.hidden_size, model.num_hidden_layers

    p.title("p20 pipeline parallelism and groups across nodes: Llama 3.1 405B BF16 on H100 SXM nodes")

    p.section("The hierarchical all-reduce over T / G nodes of G GPUs")
    p.say("Reduce-scatter inside each node (G - 1 steps of M / G), a ring all-reduce of the M / G each GPU holds "
          "among the T / G GPUs of its local rank over the NIC, all-gather inside each node (G - 1 steps).")
    p.show("t_hier", sp_.hierarchical_allreduce_time)
    p.legend("node_gpus", "network_bandwidth", "network_latency")
    T, G, M = sp_.T, sp_.G, sp_.M
    p.equal("at G = T (one node) it is the ring", sp_.hierarchical_allreduce_time.subs(G, T),
            sp_.ring_allreduce_time)
    ring_eff = sp_.ring_allreduce_time.subs({sp_.beta: sp_.hierarchical_link_bandwidth,
                                             sp_.alpha: sp_.hierarchical_link_latency}, simultaneous=True)
    p.equal("it is the ring over T at beta_eff, alpha_eff, for every M (so every ring formula prices it)",
            ring_eff, sp_.hierarchical_allreduce_time)
    p.equal("beta_eff = beta at G = T", sp.simplify(sp_.hierarchical_link_bandwidth.subs(G, T)), sp_.beta)
    p.equal("alpha_eff = alpha at G = T", sp.simplify(sp_.hierarchical_link_latency.subs(G, T)), sp_.alpha)
    hk = dict(tensor_parallel_size=16, node_gpus=8, link_bandwidth=beta, link_latency=alpha,
              network_bandwidth=beta_n, network_latency=alpha_n)
    msg = f.allreduce_bytes(batch=1, hidden_size=H, activation_bytes=2)
    t_h = f.hierarchical_allreduce_time(message_bytes=msg, **hk)
    by_hand = (2 * Fraction(7, 8) * msg / beta + 14 * alpha + 2 * Fraction(8, 16) * msg / (8 * beta_n)
               + 2 * alpha_n)
    p.equal("T = 16, G = 8, M = 32 KiB: 14 NVLink steps + 2 InfiniBand steps, by hand", t_h, by_hand,
            value=si(t_h, "s"))
    p.equal("fast path = symbolic", t_h, sp_.hierarchical_allreduce_time.subs(symbols_for(dict(hk, message_bytes=msg))))
    b_eff, a_eff = f.hierarchical_link_bandwidth(**hk), f.hierarchical_link_latency(**hk)
    p.equal("alpha_eff = (7 x 0.6 us + 1 x 2.7 us) / 15 = 0.46 us", a_eff, Fraction(46, 10**8), value=si(a_eff, "s"))
    p.equal("beta_eff = 15 x 8 x beta beta_n / (16 x 7 beta_n + 8 beta) (fast path = symbolic)", b_eff,
            sp_.hierarchical_link_bandwidth.subs(symbols_for(hk)), value=si(b_eff, "B/s"))
    p.equal("the ring at (beta_eff, alpha_eff) is the hierarchical time (fast paths)",
            f.ring_allreduce_time(message_bytes=msg, tensor_parallel_size=16, link_bandwidth=b_eff,
                                  link_latency=a_eff), t_h)
    d16 = Deployment(model, gpu, 16)
    p.equal("Deployment.allreduce_terms of TP 16 gives exactly these", (d16.allreduce_terms()["link_bandwidth"],
            d16.allreduce_terms()["link_latency"]), (b_eff, a_eff))

    p.section("Pipeline stages: vLLM's split, the sends, one batch's step")
    split = stage_layers(L, 4)
    p.equal("126 layers over 4 stages: 31 each, the 2 left over to stages 2 and 1 (get_pp_indices)", split,
            (31, 32, 32, 31), value=str(split))
    p.show("t_pp", pp.step_time_pp)
    p.legend("intra_node_sends", "inter_node_sends", "send_bandwidth", "send_latency")
    p.equal("no send: it is step_time_tp", pp.step_time_pp.subs({S.intra_node_sends: 0, S.inter_node_sends: 0}),
            sp_.step_time_tp)
    p.equal("one send = B h e / beta + alpha", pp.pipeline_send_time,
            S.batch * S.hidden_size * S.activation_bytes / S.send_bandwidth + S.send_latency)
    p.equal("bubble share with n of P in flight = (P - n) / P", pp.pipeline_bubble_share,
            (S.pipeline_parallel_size - S.batches_in_flight) / S.pipeline_parallel_size)

    p.section("What fits: the smallest T x P on H100 SXM nodes holding the weights and one 131,072-token request")
    rows, fits = [], []
    for gpus in (8, 16):
        for t in (1, 2, 4, 8, 16):
            if gpus % t:
                continue
            d = Deployment(model, gpu, Parallelism(t, gpus // t))
            blocks = d.kv_blocks(block_size=BLOCK, utilization=Fraction(9, 10))
            need = f.blocks_per_sequence(context=MAX_CONTEXT, block_size=BLOCK)
            ok = blocks >= need
            rows.append([f"{t} x {gpus // t}", si(max(s.weight_bytes for s in d.stages()), "B"), f"{blocks:,}",
                         "yes" if ok else "no", si(_step(d), "s")])
            if ok:
                fits.append(d)
    p.table(["TP x PP", "weights/GPU (largest stage)", "KV blocks", f"holds {MAX_CONTEXT:,} tokens",
             f"batch-1 step at {CONTEXT:,}"], rows)
    p.holds("no group of 8 GPUs holds it", all(d.gpus == 16 for d in fits))
    p.holds("every T x P of 16 GPUs holds it", len(fits) == 5)
    best = min(fits, key=_step)
    p.holds("of these the fastest at batch 1 is TP 16 x PP 1: the smallest deployment (fewest GPUs, then fastest)",
            (best.tensor_parallel_size, best.pipeline_parallel_size) == (16, 1), si(_step(best), "s"))

    p.section("Batch 1 at context 1,000: which term dominates")
    d82 = Deployment(model, gpu, Parallelism(8, 2))
    terms82 = {**d82.cost_terms(), **d82.send_terms()}
    step_kw = {k: terms82[k] for k in ("weight_bytes", "kv_bytes_per_token", "flops_per_token",
                                       "attention_flops_per_token", "bandwidth", "peak_flops", "overhead",
                                       "num_hidden_layers", "hidden_size", "activation_bytes",
                                       "tensor_parallel_size", "link_bandwidth", "link_latency",
                                       "intra_node_sends", "inter_node_sends", "send_bandwidth", "send_latency",
                                       "network_bandwidth", "network_latency")}
    step_kw = dict(step_kw, batch=1, context_sum=CONTEXT)
    t82 = f.step_time_pp(**step_kw)
    p.equal("TP 8 x PP 2: one boundary, across the two nodes", d82.pipeline_sends(), (0, 1))
    p.equal("fast path = symbolic", t82, pp.step_time_pp.subs(symbols_for(step_kw)), value=si(t82, "s"))
    sends = f.pipeline_sends_time(**{k: step_kw[k] for k in ("batch", "hidden_size", "activation_bytes",
                                                              "intra_node_sends", "inter_node_sends",
                                                              "send_bandwidth", "send_latency",
                                                              "network_bandwidth", "network_latency")})
    one = f.pipeline_send_time(batch=1, hidden_size=H, activation_bytes=2, send_bandwidth=beta_n,
                               send_latency=alpha_n)
    p.equal("the send: 32 KiB over InfiniBand + 2.7 us, by hand", one, Fraction(32768) / beta_n + alpha_n,
            value=si(one, "s"))
    p.equal("pipeline_sends_time = that one send", sends, one)
    ar82 = f.decode_allreduce_time(**{k: step_kw[k] for k in ("num_hidden_layers", "batch", "hidden_size",
                                                               "activation_bytes", "tensor_parallel_size",
                                                               "link_bandwidth", "link_latency")})
    mem82 = f.memory_time(weight_bytes=step_kw["weight_bytes"], kv_bytes_per_token=step_kw["kv_bytes_per_token"],
                          context_sum=CONTEXT, bandwidth=step_kw["bandwidth"])
    p.equal("step = memory time of T = 8 alone + 252 NVLink all-reduces + the send", t82, mem82 + ar82 + sends,
            value=f"{si(mem82, 's')} + {si(ar82, 's')} + {si(sends, 's')}")
    d8 = Deployment(model, gpu, 8)
    p.equal("the memory term is that of T = 8 alone (PP adds capacity, not speed)", mem82,
            f.memory_time(weight_bytes=d8.share.weight_bytes, kv_bytes_per_token=d8.share.kv_bytes_per_token,
                          context_sum=CONTEXT, bandwidth=Fraction(gpu.bandwidth)))
    p.within("the send is about 1/600 of the all-reduces", ar82 / sends, 500, 700)
    terms16 = d16.cost_terms()
    s16 = {k: terms16[k] for k in ("weight_bytes", "kv_bytes_per_token", "flops_per_token",
                                   "attention_flops_per_token", "bandwidth", "peak_flops", "overhead",
                                   "num_hidden_layers", "hidden_size", "activation_bytes", "tensor_parallel_size",
                                   "link_bandwidth", "link_latency")}
    s16 = dict(s16, batch=1, context_sum=CONTEXT)
    t16 = f.step_time_tp(**s16)
    ar16 = f.decode_allreduce_time(**{k: s16[k] for k in ("num_hidden_layers", "batch", "hidden_size",
                                                           "activation_bytes", "tensor_parallel_size",
                                                           "link_bandwidth", "link_latency")})
    lat16 = f.decode_allreduce_latency_time(**{k: s16[k] for k in ("num_hidden_layers", "batch", "hidden_size",
                                                                    "activation_bytes", "tensor_parallel_size",
                                                                    "link_bandwidth", "link_latency")})
    p.equal("TP 16: 252 hierarchical all-reduces = 252 x t_hier(32 KiB)", ar16, 2 * L * t_h, value=si(ar16, "s"))
    p.holds("their latency dominates them (over 95 %)", lat16 / ar16 > Fraction(95, 100),
            f"{float(lat16 / ar16):.1%}")
    p.holds("TP 16 is faster at batch 1 than TP 8 x PP 2", t16 < t82, f"{si(t16, 's')} < {si(t82, 's')}")

    p.section("Throughput with P batches in flight, the bubble, and the slowest stage")
    tkw = dict(step_kw, batches_in_flight=2, pipeline_parallel_size=2)
    thr = f.throughput_pp(**tkw)
    p.equal("2 batches in flight: 2 x B / t_pp (fast path = symbolic)", thr, pp.throughput_pp.subs(symbols_for(tkw)),
            value=f"{float(thr):.2f} tokens/s")
    p.equal("one in flight: half that, the bubble 1/2", f.throughput_pp(**dict(tkw, batches_in_flight=1)) * 2, thr)
    p.equal("pipeline_bubble_share(1 of 2) = 1/2", f.pipeline_bubble_share(batches_in_flight=1,
                                                                        pipeline_parallel_size=2), Fraction(1, 2))
    p.equal("pipeline_bubble_share(4 of 4) = 0", f.pipeline_bubble_share(batches_in_flight=4,
                                                                      pipeline_parallel_size=4), 0)
    d44 = Deployment(model, gpu, Parallelism(4, 4))
    st = d44.stages()
    stage_times = []
    sk = d44.send_terms()
    for s in st:
        mem = f.memory_time(weight_bytes=s.weight_bytes, kv_bytes_per_token=s.kv_bytes_per_token,
                            context_sum=CONTEXT, bandwidth=Fraction(gpu.bandwidth))
        comp = f.compute_time(batch=1, context_sum=CONTEXT, flops_per_token=s.flops_per_token,
                              attention_flops_per_token=s.attention_flops_per_token,
                              peak_flops=Fraction(gpu.peak_flops))
        ar = dict(d44.allreduce_terms(), num_hidden_layers=s.layers)
        send = 0 if s.index == 3 else f.pipeline_send_time(
            batch=1, hidden_size=H, activation_bytes=2,
            send_bandwidth=beta_n if s.index == 1 else sk["send_bandwidth"],
            send_latency=alpha_n if s.index == 1 else sk["send_latency"])
        stage_times.append(max(mem, comp) + f.decode_allreduce_time(batch=1, **ar) + send)
    slow = max(stage_times)
    p.equal("TP 4 x PP 4: stages 1 and 2 hold 32 layers, the slowest is one of them",
            stage_times.index(slow) in (1, 2), True, value=si(slow, "s"))
    full = f.slowest_stage_throughput(batch=1, stage_time=slow)
    p.equal("slowest-stage throughput = B / t_stage", full, 1 / slow, value=f"{float(full):.2f} tokens/s")
    kw44 = {**d44.cost_terms(), **d44.send_terms()}
    kw44 = {k: kw44[k] for k in step_kw if k not in ("batch", "context_sum")}
    even = f.throughput_pp(**kw44, batch=1, context_sum=CONTEXT, batches_in_flight=4, pipeline_parallel_size=4)
    p.within("with L mod P != 0 it is below P B / t_pp by about the slowest stage over the mean (32 / 31.5)",
             even / full, Fraction(100, 100), Fraction(103, 100))

    p.conclude(f"Llama 3.1 405B BF16 needs 16 H100 SXM (2 nodes); batch 1: TP 16 {si(t16, 's')} "
               f"(hierarchical all-reduces {si(ar16, 's')}, latency-bound), TP 8 x PP 2 {si(t82, 's')} "
               f"(all-reduces {si(ar82, 's')}, send {si(sends, 's')})")


def _step(d: object) -> Fraction:
    """One batch-1 decode step at context CONTEXT of deployment ``d`` (step_time_pp of its cost terms)."""
    from .. import formulas as f

    terms = {"tensor_parallel_size": 1, "link_bandwidth": 1, "link_latency": 0,
             **d.cost_terms(), **d.send_terms()}  # type: ignore[attr-defined]
    names = [n for n in f.REGISTRY["step_time_pp"].domains if n not in ("batch", "context_sum")]
    return f.step_time_pp(batch=1, context_sum=CONTEXT, **{n: terms[n] for n in names})


def main(argv: Sequence[str] | None = None) -> int:
    """Print the derivation and the verdict; exit status 0 if every check passed, else 1."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
