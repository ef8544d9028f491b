"""p21: expert parallelism: DeepSeek-V3 on 8 and 16 H200, its dispatch and combine against tensor parallelism.

Claim
-----
With expert parallelism over R ranks (E / R whole experts each) and uniform routing, a token's
k experts lie on R (1 - C(E - E/R, k) / C(E, k)) distinct ranks in expectation, (R - 1)(1 - q)
of them remote: for DeepSeek-V3 (E = 256, k = 8) 5.29 of 8 ranks (4.63 remote) and 6.52 of 16
(6.12 remote). Each MoE layer dispatches every token's hidden state to its remote ranks,
combines one partial sum back from each, and all-gathers its output for the next
tensor-parallel attention. Per GPU the routed experts' bytes and every FLOP equal tensor
parallelism inside the experts; the shared experts (replicated: 2.24 GB more read per step on 8
GPUs, 2.40 GB on 16) and the communication do not. At batch 1 the all-to-alls and all-gathers
cost less than the MoE layers' all-reduces (on 8 and on 16 GPUs); at batch 256 on 16 GPUs
(2 nodes) they cost more, half of every all-to-all's copies crossing the 50 GB/s NIC. The
replicated shared experts make EP's step longer than TP's in all four cases; the all-to-alls
are 3 % of the EP step on 8 GPUs and 11 % on 16 (the printed table). On the same 16 GPUs TP 8 x
PP 2 (the stages priced from their own dense and MoE layers) steps in 2.286 ms at batch 1, below
EP's 2.863 ms, and in 24.32 ms at batch 256, above EP's 18.74 ms; with its two batches in
flight it still emits more tokens per second (21,051 against 13,657).

Assumptions
-----------
* docs/conventions.md, "Expert parallelism": R = T (no data-parallel attention yet), attention
  tensor-parallel over T with its all-reduce, vLLM's all-to-all path (tokens B / R per rank,
  dispatch, combine, all-gather over T; shared experts replicated); one copy per remote rank
  reached; an all-to-all costs one latency plus its bytes per GPU over NVLink (on the node) and
  the NIC (off it) at the same time; no overlap of communication and compute; the mean rank
  (the most loaded rank is not modelled).
* "Groups that span nodes": the attention's all-reduce over 16 GPUs on 2 nodes is the
  hierarchical all-reduce (intra-node reduce-scatter, inter-node ring, intra-node all-gather).
* DeepSeek-V3 as its checkpoint ships it (the preset: FP8 block-quantized weights, BF16
  activations; 61 layers, 3 dense, 58 MoE, hidden 7168, 256 routed experts
  of width 2048, 8 per token, 1 shared expert), context 1,000 tokens per sequence.
* TP 8 x PP 2 on the same 16 GPUs (docs/conventions.md, "Pipeline parallelism"): vLLM's
  get_pp_indices split (31 | 30 layers), each stage priced from the layers it holds (DeepSeek-V3's
  three dense layers in stage 0), one batch's step the one-max rule over both stages plus the one
  send of B x h x 2 bytes across the nodes; with two batches in flight (vLLM's virtual engines)
  the pipeline emits 2 B tokens per step latency.

Sources
-------
deepseek-ai/DeepSeek-V3 config.json; NVIDIA H200 product brief (4.8 TB/s HBM3e, 989.4 TFLOP/s
dense BF16, NVLink 900 GB/s); NVIDIA/nccl src/graph/tuning.cc (0.6 us per NVLink step, 2.7 us per
network step); NVIDIA DGX BasePOD reference architecture (one 400 Gb/s ConnectX-7 per GPU);
vllm/model_executor/models/deepseek_v2.py (``DeepseekV2MoE``: ``sequence_parallel_chunk``, the
shared experts built with ``is_sequence_parallel``, ``tensor_model_parallel_all_gather``).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from fractions import Fraction
from math import comb

from ._proof import Proof, run_script, si

NAME = "p21_expert_parallel"
E, K, L, L_MOE, H, BF16, CONTEXT = 256, 8, 61, 58, 7168, 2, 1000
GROUPS, BATCHES = (8, 16), (1, 256)


def _ranks_by_counting(e: int, k: int, r: int) -> tuple[Fraction, Fraction]:
    """(distinct ranks, remote ranks) per token, counted over every k-subset and every own rank."""
    per = e // r
    reached = [frozenset(x // per for x in s) for s in itertools.combinations(range(e), k)]
    distinct = Fraction(sum(len(x) for x in reached), len(reached))
    remote = Fraction(sum(len(x - {own}) for x in reached for own in range(r)), len(reached) * r)
    return distinct, remote


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    import sympy as sp

    from .. import formulas as f
    from ..deployment import Deployment, Parallelism
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..sim import RooflineCostModel
    from ..symbolic import expert as sx
    from ..symbolic import moe as sm

    p.title("p21 expert parallelism: DeepSeek-V3 on 8 and 16 H200, dispatch and combine against TP")

    p.section("Distinct ranks a token reaches, derived as experts touched is")
    p.say("A rank holds E / R of the E experts; one token's k distinct experts all miss it with probability "
          "q = C(E - E/R, k) / C(E, k). Summing the indicator 'reached' over the R ranks:")
    p.show("ranks reached", sx.ranks_reached)
    p.legend("num_experts", "experts_per_token", "expert_parallel_size")
    Rs = sx.R
    p.equal("= R (1 - q)", sx.ranks_reached, Rs * (1 - sx.miss_rank))
    p.equal("remote = ranks reached - P(its own rank reached) = (R - 1)(1 - q)", sx.remote_ranks_reached,
            (Rs - 1) * (1 - sx.miss_rank))
    p.equal("experts touched on one rank x R = experts touched (every rank the same expectation)",
            sx.experts_touched_per_rank * Rs, sm.experts_touched)
    p.equal("the all-gather over T is half the ring all-reduce", 2 * sx.ring_allgather_time,
            sp.expand(sx._par.ring_allreduce_time))
    distinct, remote = _ranks_by_counting(8, 2, 4)
    kw = dict(num_experts=8, experts_per_token=2, expert_parallel_size=4)
    p.equal("E = 8, k = 2, R = 4: counted over the 28 pairs, 13/7 ranks (fast path)", f.ranks_reached(**kw),
            distinct, value=f"{distinct}")
    p.equal("and 39/28 remote, counted over every own rank too (fast path)", f.remote_ranks_reached(**kw), remote,
            value=f"{remote}")
    p.equal("experts touched on a rank, E = 8, k = 2, R = 4, B = 3: 2 (1 - (3/4)^3) (fast path)",
            f.experts_touched_per_rank(batch=3, **kw), 2 * (1 - Fraction(3, 4) ** 3))
    p.equal("R = 1: one rank, always reached, none remote", (f.ranks_reached(num_experts=8, experts_per_token=2,
            expert_parallel_size=1), f.remote_ranks_reached(num_experts=8, experts_per_token=2,
                                                            expert_parallel_size=1)), (1, 0))

    p.section("DeepSeek-V3 (E = 256, k = 8) over 8 and 16 ranks")
    gpu = get_accelerator("h200")
    nv, net = gpu.link(8), gpu.network
    if net is None:  # pragma: no cover - a sourced fact of the H200 preset
        raise AssertionError("the H200 preset has no network link")
    beta, alpha = Fraction(nv.bandwidth.value), Fraction(nv.latency.value)
    beta_n, alpha_n = Fraction(net.bandwidth.value), Fraction(net.latency.value)
    G = gpu.node_gpus
    p.say(f"{gpu.name}: {nv.name} {si(beta, 'B/s')} per direction, {si(alpha, 's')} per transfer; "
          f"{net.name} {si(beta_n, 'B/s')}, {si(alpha_n, 's')}; {G} GPUs per node.")
    q = {r: Fraction(comb(E - E // r, K), comb(E, K)) for r in GROUPS}
    for r in GROUPS:
        kw = dict(num_experts=E, experts_per_token=K, expert_parallel_size=r)
        p.equal(f"R = {r}: ranks reached R (1 - C({E - E // r}, 8) / C(256, 8)) (fast path)", f.ranks_reached(**kw),
                r * (1 - q[r]), value=f"{float(r * (1 - q[r])):.3f} of {r}")
        p.equal(f"R = {r}: remote ranks (R - 1)(1 - q) (fast path)", f.remote_ranks_reached(**kw),
                (r - 1) * (1 - q[r]), value=f"{float((r - 1) * (1 - q[r])):.3f}")

    def a2a_hand(r: int, b: int) -> tuple[Fraction, Fraction]:
        """(bytes one GPU sends per all-to-all, its time), by hand."""
        copy = Fraction(b, r) * (1 - q[r]) * H * BF16
        on, off = min(r, G) - 1, max(r - G, 0)
        time = max(on * copy / beta, off * copy / beta_n) + (max(alpha, alpha_n) if off else alpha)
        return (r - 1) * copy, time

    rows = []
    for r in GROUPS:
        for b in BATCHES:
            nbytes, t = a2a_hand(r, b)
            a2a = dict(batch=b, hidden_size=H, activation_bytes=BF16, num_experts=E, experts_per_token=K,
                       expert_parallel_size=r)
            links = dict(scale_up_bandwidth=beta, scale_up_latency=alpha, node_gpus=min(r, G), network_bandwidth=beta_n,
                         network_latency=alpha_n)
            p.equal(f"R = {r}, B = {b}: bytes per GPU per all-to-all (B / R)(R - 1)(1 - q) h e (fast path)",
                    f.alltoall_bytes(**a2a), nbytes, value=si(nbytes, "B"))
            p.equal(f"R = {r}, B = {b}: one all-to-all, NVLink {min(r, G) - 1} peers, NIC {max(r - G, 0)} (fast path)",
                    f.alltoall_time(**a2a, **links), t, value=si(t, "s"))
            p.equal(f"R = {r}, B = {b}: 2 L_moe = 116 of them per step (fast path)",
                    f.decode_alltoall_time(num_moe_layers=L_MOE, **a2a, **links), 2 * L_MOE * t,
                    value=si(2 * L_MOE * t, "s"))
            rows.append([r, b, si(nbytes, "B"), si(t, "s"), si(2 * L_MOE * t, "s")])
    p.table(["R", "B", "sent per GPU per all-to-all", "one all-to-all", "116 per step"], rows)

    p.section("What each GPU reads and computes: EP against TP inside the experts")
    model = get_model("deepseek-v3")
    X, S = Fraction(model.routed_expert_bytes), Fraction(model.shared_expert_bytes)
    terms = {}
    for r in GROUPS:
        tp = Deployment(model, gpu, r).cost_terms()
        ep = Deployment(model, gpu, Parallelism(r, expert=True)).cost_terms()
        terms[r] = (tp, ep)
        p.equal(f"T = R = {r}: routed bytes per touched expert, X / T (TP's split) = X / R (EP's mean)",
                Fraction(tp["routed_expert_bytes"]), X / r, value=si(X / r, "B"))
        p.equal(f"T = R = {r}: EP's X / R x E (1 - (1 - k/E)^B) is X x (E / R)(1 - (1 - k/E)^B): the same",
                ep["routed_expert_bytes"] * E, X * (E // r))
        p.equal(f"T = R = {r}: FLOPs per token per GPU equal (B k / R experts whole = B k experts / T)",
                (ep["flops_per_token"], ep["attention_flops_per_token"]),
                (tp["flops_per_token"], tp["attention_flops_per_token"]))
        p.equal(f"T = R = {r}: EP reads (1 - 1/R) more of the shared experts (replicated)",
                ep["weight_bytes"] - tp["weight_bytes"], S * (1 - Fraction(1, r)),
                value=si(S * (1 - Fraction(1, r)), "B"))

    p.section("Step times: DeepSeek-V3 on 8 and 16 H200, context 1,000, EP against TP")

    def touched(b: int) -> Fraction:
        return E * (1 - Fraction(E - K, E) ** b)

    def group_ring(r: int) -> tuple[Fraction, Fraction]:
        """The ring all-reduce of one token's h e bytes as (bandwidth part per token, latency), by hand."""
        m = H * BF16
        if r <= G:
            return 2 * Fraction(r - 1, r) * m / beta, 2 * (r - 1) * alpha
        n = r // G  # hierarchical: reduce-scatter and all-gather in the node, a ring over the n nodes of M / G
        return (2 * Fraction(G - 1, G) * m / beta + 2 * Fraction(n - 1, n) * Fraction(m, G) / beta_n,
                2 * (G - 1) * alpha + 2 * (n - 1) * alpha_n)

    rows, results = [], {}
    for r in GROUPS:
        tp_terms, ep_terms = terms[r]
        for mode, t_ in (("TP", tp_terms), ("EP", ep_terms)):
            d = Deployment(model, gpu, Parallelism(r, expert=mode == "EP"))
            cost = RooflineCostModel.for_deployment(d)
            bw, peak = Fraction(t_["bandwidth"]), Fraction(t_["peak_flops"])
            for b in BATCHES:
                ctx = b * CONTEXT
                mem = (t_["weight_bytes"] + t_["routed_expert_bytes"] * touched(b)
                       + t_["kv_bytes_per_token"] * ctx) / bw
                comp = (b * t_["flops_per_token"] + t_["attention_flops_per_token"] * ctx) / peak
                slope, lat = group_ring(r)
                ring = b * slope + lat
                if mode == "TP":
                    comm, a2a_t = 2 * L * ring, Fraction(0)
                else:
                    a2a_t = 2 * L_MOE * a2a_hand(r, b)[1]
                    comm = (2 * L - L_MOE) * ring + L_MOE * ring / 2 + a2a_t
                step = max(mem, comp) + comm
                if b == 256:  # the compute side by its own fast paths, so that its value is checked too
                    fl = dict(batch=b, context_sum=ctx, flops_per_token=t_["flops_per_token"],
                              attention_flops_per_token=t_["attention_flops_per_token"])
                    p.equal(f"{r} GPUs {mode}, B = 256: FLOPs per GPU B F + a S (fast path decode_flops)",
                            f.decode_flops(**fl), b * t_["flops_per_token"] + t_["attention_flops_per_token"] * ctx)
                    p.equal(f"{r} GPUs {mode}, B = 256: compute time below the memory time (fast path compute_time)",
                            f.compute_time(peak_flops=peak, **fl), comp, value=f"{si(comp, 's')} < {si(mem, 's')}")
                got = cost.decode_time(b, ctx)
                p.equal(f"{r} GPUs {mode}, B = {b}: the cost model's step = max(memory, compute) + communication, "
                        "by hand", got, step, value=si(step, "s"))
                results[(r, mode, b)] = (step, comm, a2a_t)
                rows.append([r, mode, b, si(mem, "s"), si(comp, "s"), si(comm, "s"), si(a2a_t, "s"),
                             f"{float(a2a_t / step):.1%}", si(step, "s")])
            if mode == "EP":
                ar = d.allreduce_terms()
                reg = f.step_time_ep(
                    batch=1, context_sum=CONTEXT,
                    weight_bytes=t_["weight_bytes"] + t_["routed_expert_bytes"] * touched(1),
                    kv_bytes_per_token=t_["kv_bytes_per_token"], flops_per_token=t_["flops_per_token"],
                    attention_flops_per_token=t_["attention_flops_per_token"], bandwidth=bw, peak_flops=peak,
                    overhead=0, num_hidden_layers=L, num_moe_layers=L_MOE, tensor_parallel_size=r, hidden_size=H,
                    activation_bytes=BF16, num_experts=E, experts_per_token=K, expert_parallel_size=r,
                    link_bandwidth=ar["link_bandwidth"], link_latency=ar["link_latency"],
                    **{k_: t_[k_] for k_ in ("scale_up_bandwidth", "scale_up_latency", "node_gpus",
                                             "network_bandwidth", "network_latency")})
                p.equal(f"{r} GPUs EP, B = 1: the registered step_time_ep is the same step", reg,
                        results[(r, "EP", 1)][0])
                reg_comm = f.decode_comm_time_ep(
                    batch=256, num_hidden_layers=L, num_moe_layers=L_MOE, tensor_parallel_size=r, hidden_size=H,
                    activation_bytes=BF16, num_experts=E, experts_per_token=K, expert_parallel_size=r,
                    link_bandwidth=ar["link_bandwidth"], link_latency=ar["link_latency"],
                    **{k_: t_[k_] for k_ in ("scale_up_bandwidth", "scale_up_latency", "node_gpus",
                                             "network_bandwidth", "network_latency")})
                p.equal(f"{r} GPUs EP, B = 256: decode_comm_time_ep is its communication", reg_comm,
                        results[(r, "EP", 256)][1])
    p.table(["GPUs", "", "B", "memory", "compute", "communication", "all-to-all", "a2a share", "step"], rows)
    moe = dict(shared_weight_bytes=model.shared_weight_bytes, routed_expert_bytes=model.routed_expert_bytes,
               num_experts=E, experts_per_token=K, batch=256)
    p.equal("the whole model's weights a step of 256 reads (fast path moe_decode_weight_bytes)",
            f.moe_decode_weight_bytes(**moe), model.shared_weight_bytes + X * touched(256))
    pf = dict(weight_bytes=model.weight_bytes, kv_bytes_per_token=model.kv_bytes_per_token,
              flops_per_token=model.flops_per_token("exact")[0], attention_flops_per_token=0,
              bandwidth=Fraction(gpu.bandwidth), peak_flops=Fraction(gpu.peak_flops), overhead=0)
    p.equal("its bytes: W + 4,096 tokens' KV written (fast path prefill_bytes)",
            f.prefill_bytes(weight_bytes=pf["weight_bytes"], kv_bytes_per_token=pf["kv_bytes_per_token"],
                            prefill_tokens=4096), pf["weight_bytes"] + pf["kv_bytes_per_token"] * 4096)
    p.equal("a prefill of 4,096 tokens on one (imaginary) GPU: compute-bound, 4096 F / peak (fast path)",
            f.prefill_step_time(prefill_tokens=4096, attention_pairs=0, **pf),
            max(Fraction(pf["weight_bytes"] + pf["kv_bytes_per_token"] * 4096) / pf["bandwidth"],
                4096 * Fraction(pf["flops_per_token"]) / pf["peak_flops"]))
    p.section("EP 16 against TP 8 x PP 2 on the same 16 H200 (two pipeline stages of dense-then-MoE layers)")
    import attrs

    pp = Deployment(model, gpu, Parallelism(8, 2))
    st = pp.stages()
    p.equal("vLLM's get_pp_indices: stage 0 holds layers 0-30 (3 dense + 28 MoE), stage 1 layers 31-60 (30 MoE)",
            [(s.first_layer, s.layers, s.moe_layers) for s in st], [(0, 31, 28), (31, 30, 30)])
    # each stage by hand: the model cut to the stage's layers, split over 8 (its own inventory), less the
    # embedding (stage 1) or the final norm and lm_head (stage 0), which the other stage holds
    one = model.per_gpu(8)
    embed = Fraction(one.embedding_parameters * BF16)
    head = Fraction(one.lm_head_parameters + one.hidden_size) * BF16
    cut0 = attrs.evolve(model, num_hidden_layers=31, num_moe_layers=28).per_gpu(8)
    cut1 = attrs.evolve(model, num_hidden_layers=30, num_moe_layers=30).per_gpu(8)
    p.equal("stage 0's weights per GPU: the 31-layer cut's, less its final norm and lm_head", st[0].weight_bytes,
            cut0.weight_bytes - head, value=si(st[0].weight_bytes, "B"))
    p.equal("stage 1's weights per GPU: the 30-layer cut's, less its embedding", st[1].weight_bytes,
            cut1.weight_bytes - embed, value=si(st[1].weight_bytes, "B"))
    p.equal("stage 0 holds 28 / 58 of each routed expert's bytes, stage 1 30 / 58", (st[0].routed_expert_bytes,
            st[1].routed_expert_bytes), (Fraction(one.routed_expert_bytes) * 28 / 58,
                                         Fraction(one.routed_expert_bytes) * 30 / 58))
    intra, inter = pp.pipeline_sends()
    p.equal("its one stage boundary (ranks 7 | 8) crosses the two nodes", (intra, inter), (0, 1))
    cost_pp = RooflineCostModel.for_deployment(pp)
    rows = []
    for b in BATCHES:
        tp_step = RooflineCostModel.for_deployment(Deployment(model, gpu, 8)).decode_time(b, b * CONTEXT)
        send = Fraction(b * H * BF16) / beta_n + alpha_n
        p.equal(f"TP 8 x PP 2, B = {b}: step = TP 8's step (the stages sum to its share) + one send over the NIC",
                cost_pp.decode_time(b, b * CONTEXT), tp_step + send, value=si(tp_step + send, "s"))
        results[(16, "PP", b)] = (tp_step + send, send, Fraction(0))
        ep_step, _, ep_a2a = results[(16, "EP", b)]
        rows.append(["EP 16", b, si(ep_step, "s"), f"{float(ep_a2a / ep_step):.1%}", f"{float(b / ep_step):,.0f}",
                     f"{float(b / ep_step):,.0f}"])
        rows.append(["TP 8 x PP 2", b, si(tp_step + send, "s"), "0.0%", f"{float(b / (tp_step + send)):,.0f}",
                     f"{float(2 * b / (tp_step + send)):,.0f}"])
    p.table(["16 H200", "B", "step", "a2a share", "tokens/s, 1 batch", "with P in flight"], rows)
    p.holds("B = 1: TP 8 x PP 2's step is shorter than EP 16's (its all-reduces stay on NVLink; one send crosses)",
            results[(16, "PP", 1)][0] < results[(16, "EP", 1)][0])
    p.holds("B = 256: EP 16's step is shorter (each GPU reads 1/16 of the experts, not 1/8), but two batches "
            "in flight give TP 8 x PP 2 more tokens/s", results[(16, "EP", 256)][0] < results[(16, "PP", 256)][0]
            and 2 * 256 / results[(16, "PP", 256)][0] > 256 / results[(16, "EP", 256)][0])

    for r in GROUPS:
        p.holds(f"{r} GPUs, B = 1: EP's communication is below TP's (an all-gather and two all-to-alls cost less "
                "than the MoE layers' all-reduce)", results[(r, "EP", 1)][1] < results[(r, "TP", 1)][1])
    p.holds("8 GPUs, B = 256: below TP's too (one node: every copy over NVLink)",
            results[(8, "EP", 256)][1] < results[(8, "TP", 256)][1])
    p.holds("16 GPUs, B = 256: above TP's (half of each all-to-all's copies over the NIC)",
            results[(16, "EP", 256)][1] > results[(16, "TP", 256)][1])
    for b in BATCHES:
        p.holds(f"B = {b}: EP's step is longer than TP's on 8 and on 16 GPUs (the replicated shared experts)",
                results[(8, "EP", b)][0] > results[(8, "TP", b)][0]
                and results[(16, "EP", b)][0] > results[(16, "TP", b)][0])
    share = results[(16, "EP", 256)][2] / results[(16, "EP", 256)][0]
    p.within("16 GPUs EP, B = 256: the all-to-alls are about a tenth of the step", share, Fraction(1, 10),
             Fraction(3, 25))
    p.within("8 GPUs EP, B = 256: and a fortieth on one node", results[(8, "EP", 256)][2] / results[(8, "EP", 256)][0],
             Fraction(1, 50), Fraction(3, 100))
    _most_loaded_rank(p)
    p.conclude(f"DeepSeek-V3 on 16 H200: EP {si(results[(16, 'EP', 1)][0], 's')} / "
               f"{si(results[(16, 'EP', 256)][0], 's')} at B = 1 / 256 against TP "
               f"{si(results[(16, 'TP', 1)][0], 's')} / {si(results[(16, 'TP', 256)][0], 's')}; all-to-all "
               f"{float(share):.0%} of the EP step at B = 256")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the derivation and the verdict; exit status 0 if every check passed, else 1."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


def _most_loaded_rank(p: Proof) -> None:
    """The most loaded rank, numerically (roofline.expert_load): exact by enumeration, against brute force and
    against a seeded Monte Carlo; reported, not priced."""
    from ..expert_load import expected_max_rank_load, reach_set_counts, sampled_max_rank_load

    p.section("The most loaded rank: E[max_r N_r], exact for small sizes (not priced)")
    E, k, R, B = 6, 2, 3, 3
    subsets = list(itertools.combinations(range(E), k))
    total = 0
    for picks in itertools.product(subsets, repeat=B):  # every step of B tokens, equally likely
        counts = [sum(1 for s in picks if any(e // (E // R) == r for e in s)) for r in range(R)]
        total += max(counts)
    brute = Fraction(total, len(subsets) ** B)
    p.equal(f"E = {E}, k = {k}, R = {R}, B = {B}: the dynamic programme = brute force over all "
            f"{len(subsets) ** B:,} steps", expected_max_rank_load(num_experts=E, experts_per_token=k,
                                                                    expert_parallel_size=R, batch=B), brute,
            value=str(brute))
    a = reach_set_counts(num_experts=256, experts_per_token=8, expert_parallel_size=8)
    p.equal("DeepSeek-V3, EP 8: sum_j C(8, j) a_j = C(256, 8) (every token reaches some set of ranks)",
            sum(comb(8, j) * a[j] for j in range(9)), comb(256, 8))
    exact = expected_max_rank_load(num_experts=256, experts_per_token=8, expert_parallel_size=8, batch=4)
    mean = 4 * (1 - Fraction(comb(224, 8), comb(256, 8)))
    sampled, se = sampled_max_rank_load(num_experts=256, experts_per_token=8, expert_parallel_size=8, batch=4,
                                        trials=4000, seed=0)
    p.within("DeepSeek-V3, EP 8, B = 4: the seeded Monte Carlo within 4 standard errors of the exact value",
             Fraction(sampled) - exact, Fraction(-4 * se), Fraction(4 * se))
    bound = float(mean) + (float(mean) * (1 - float(mean) / 4) * 7) ** 0.5
    p.holds(f"B = 4: mean {float(mean):.3f} <= E[max] {float(exact):.3f} <= the any-dependence bound {bound:.3f} "
            f"({float(exact / mean - 1):.1%} above the mean)", mean <= exact <= bound)
