"""p22: disaggregated prefill and decode: the KV transfer, and a request's TTFT and TPOT across the two pools.

Claim
-----
A request's KV moves from the prefill pool to the decode pool through every GPU's NIC at once;
the busiest NIC moves P k_d max(1, T_d / T_p) bytes (k_d the KV bytes per token one decode GPU
holds), which equals the per-NIC count of every KV head's (or MLA latent's) copies, head by head,
for GQA and MLA layouts and tensor-parallel sizes 1 to 16 on each side. Llama 3.1 70B in BF16, a
1,000-token prompt, tensor parallelism 2 on both sides: 163,840,000 B per NIC, 3.2795 ms over
DGX H100's 400 Gb/s InfiniBand NDR per GPU (50 GB/s, 2.7 us). A lone request's TTFT is its
prefill step + that transfer, its TPOT the decode side's step at batch 1; a decode pool full with
one request admits the next when it finishes, and the reference scheduler gives exactly these
times on both clocks.

Assumptions
-----------
* docs/conventions.md, "Disaggregated prefill and decode": the transfer starts at the prefill's
  end, does not overlap it, and transfers do not contend; the KV units are spread evenly (the
  tensor-parallel layout of docs/conventions.md, "Tensor parallelism"); TTFT includes the transfer
  (vLLM's disaggregated proxy streams the decode instance's response).
* The scheduler part prices steps with a small roofline of round constants (the bound: max of
  bytes / bandwidth and FLOPs / peak), so that its times are hand-checked numbers.

Sources
-------
vLLM ``benchmarks/disagg_benchmarks/disagg_prefill_proxy_server.py`` (prefill with
``max_tokens=1``, then the decode instance's stream to the client); Llama 3.1 70B config.json;
the DGX H100 NIC facts of roofline.hardware (``Accelerator.network``: ConnectX-7 400 Gb/s per GPU;
NCCL's 2.7 us network latency).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction

import attrs

from ._proof import Proof, run_script

NAME = "p22_disaggregated"


def _layout(units: int, gpus: int) -> list[list[int]]:
    """The KV units (heads, or one MLA latent) each of ``gpus`` GPUs holds: split, or one each when replicated."""
    if gpus <= units:
        per = units // gpus
        return [list(range(g * per, (g + 1) * per)) for g in range(gpus)]
    return [[g * units // gpus] for g in range(gpus)]


def _busiest_nic(units: int, tp: int, td: int, unit_bytes: int) -> Fraction:
    """Bytes per token of the busiest NIC, counted copy by copy: each decode GPU receives every unit it holds;
    the prefill GPUs holding a unit share the sending of its copies evenly."""
    senders, receivers = _layout(units, tp), _layout(units, td)
    holders = {u: [g for g, held in enumerate(senders) if u in held] for u in range(units)}
    sent = [Fraction(0)] * tp
    for held in receivers:
        for u in held:
            for g in holders[u]:
                sent[g] += Fraction(unit_bytes, len(holders[u]))
    received = [Fraction(len(held) * unit_bytes) for held in receivers]
    return max([*sent, *received])


def _ms(seconds: Fraction | None) -> str:
    return "-" if seconds is None else f"{float(seconds) * 1e3:.4f} ms"


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..sim import KVPool, Pool, Request, RooflineCostModel, TransferLink, serve_disaggregated
    from ..symbolic import disaggregated as sd

    p.title("p22 disaggregated prefill and decode: the KV transfer and a request across two pools")

    p.section("Bytes on the busiest NIC: each decode GPU receives its share, the prefill GPUs send them evenly")
    p.show("M_kv", sd.kv_transfer_bytes)
    p.legend("prompt_tokens", "decode_kv_bytes_per_token", "prefill_tensor_parallel_size",
             "decode_tensor_parallel_size")
    sizes = (1, 2, 4, 8, 16)
    cases = [(units, tp, td) for units in (8, 1) for tp in sizes for td in sizes]
    p.holds("equals the count of every unit's copies, NIC by NIC (8 KV heads; 1 MLA latent on every GPU)", all(
        f.kv_transfer_bytes(prompt_tokens=7, decode_kv_bytes_per_token=len(_layout(units, td)[0]) * 3,
                            prefill_tensor_parallel_size=tp, decode_tensor_parallel_size=td)
        == 7 * _busiest_nic(units, tp, td, 3) for units, tp, td in cases), f"{len(cases)} layouts")
    model = get_model("llama-3.1-70b")
    k = model.kv_bytes_per_token
    p.equal("Llama 3.1 70B in BF16: k = 2 x 80 layers x 8 KV heads x 128 x 2 B", k, 2 * 80 * 8 * 128 * 2,
            value=f"{k:,} B/token")
    k2, k4 = model.per_gpu(2).kv_bytes_per_token, model.per_gpu(4).kv_bytes_per_token
    p.equal("its share at T = 2 and T = 4: k / 2, k / 4", (k2, k4), (k // 2, k // 4))
    moved = f.kv_transfer_bytes(prompt_tokens=1000, decode_kv_bytes_per_token=k2, prefill_tensor_parallel_size=2,
                                decode_tensor_parallel_size=2)
    p.equal("1,000 prompt tokens, T = 2 on both sides: P k / 2", moved, 1000 * k // 2, value=f"{moved:,} B")
    up = f.kv_transfer_bytes(prompt_tokens=1000, decode_kv_bytes_per_token=k4, prefill_tensor_parallel_size=2,
                             decode_tensor_parallel_size=4)
    down = f.kv_transfer_bytes(prompt_tokens=1000, decode_kv_bytes_per_token=k2, prefill_tensor_parallel_size=4,
                               decode_tensor_parallel_size=2)
    p.equal("T 2 -> 4 (a prefill NIC feeds two decode GPUs) and 4 -> 2 (a decode NIC takes two shares): the same",
            (up, down), (1000 * k // 2, 1000 * k // 2))

    p.section("Time: the busiest NIC's bytes at its bandwidth, after its latency")
    p.show("t_kv", sd.kv_transfer_time)
    p.legend("transfer_bytes", "transfer_bandwidth", "transfer_latency")
    gpu = get_accelerator("h100-sxm")
    link = TransferLink.between(gpu, gpu)
    p.equal("DGX H100: 400 Gb/s per GPU per direction = 50e9 B/s; 2.7 us", (link.bandwidth, link.latency),
            (Fraction(400 * 10**9, 8), Fraction(27, 10**7)))
    t = f.kv_transfer_time(transfer_bytes=Fraction(moved), transfer_bandwidth=link.bandwidth,
                           transfer_latency=link.latency)
    p.equal("163,840,000 B / 50e9 B/s + 2.7 us", t, Fraction(163_840_000, 50 * 10**9) + Fraction(27, 10**7),
            value=f"{float(t) * 1e3:.4f} ms")

    p.section("The reference scheduler: a small roofline (W = 1 GB, k = 100 kB/token, 1 TB/s, 1 PFLOP/s)")
    weights, kv, flops, attention, bw, peak = 10**9, 10**5, 2 * 10**10, 10**8, 10**12, 10**15
    cost = RooflineCostModel(weight_bytes=weights, kv_bytes_per_token=kv, flops_per_token=flops,
                             attention_flops_per_token=attention, bandwidth=bw, peak_flops=peak)

    def prefill_step(tokens: int, pairs: int) -> Fraction:  # by hand: max(bytes / BW, FLOPs / peak)
        return max(Fraction(weights + kv * tokens, bw), Fraction(tokens * flops + attention * pairs, peak))

    def decode_step(context: int) -> Fraction:  # batch 1
        return max(Fraction(weights + kv * context, bw), Fraction(flops + attention * context, peak))

    wire = TransferLink(bandwidth=10**10, latency=Fraction(1, 10**5))  # 10 GB/s, 10 us
    pools = Pool(cost, kv_bytes_per_token=kv, tensor_parallel_size=2)
    prompt, out = 100, 11
    transfer = Fraction(prompt * kv, 10**10) + Fraction(1, 10**5)
    lone = [Request(id=0, arrival_s=0, prompt_tokens=prompt, output_tokens=out)]
    ttft = prefill_step(prompt, prompt * (prompt + 1) // 2) + transfer
    steps = [decode_step(prompt + j) for j in range(1, out)]
    for engine in ("step", "event"):
        r = serve_disaggregated(lone, pools, pools, link=wire, engine=engine).requests[0]
        p.equal(f"{engine} clock: a lone request's TTFT = its prefill step (compute-bound) + its transfer", r.ttft_s,
                ttft, value=f"TTFT {_ms(r.ttft_s)} = {_ms(ttft - transfer)} + {_ms(transfer)}")
        p.equal(f"{engine} clock: its TPOT = the mean of the decode side's batch-1 steps over contexts P + 1 .. "
                "P + O - 1", (r.tpot_s, r.e2e_s), (sum(steps) / (out - 1), ttft + sum(steps)),
                value=f"TPOT {_ms(r.tpot_s)}")
    for other, bound in ((10**13, "compute"), (10**17, "memory")):  # every step compute-bound, then memory-bound
        slow = attrs.evolve(cost, peak_flops=other)

        def prefill_at(tokens: int, peak: int = other) -> Fraction:
            pairs = tokens * (tokens + 1) // 2
            return max(Fraction(weights + kv * tokens, bw), Fraction(tokens * flops + attention * pairs, peak))

        def decode_at(context: int, peak: int = other) -> Fraction:
            return max(Fraction(weights + kv * context, bw), Fraction(flops + attention * context, peak))
        alone = Pool(slow, kv_bytes_per_token=kv, tensor_parallel_size=2)
        for engine in ("step", "event"):
            x = serve_disaggregated(lone, alone, alone, link=wire, engine=engine).requests[0]
            p.equal(f"{engine} clock, peak {other:.0e} FLOP/s (every step {bound}-bound): TTFT and E2E by hand",
                    (x.ttft_s, x.e2e_s),
                    (prefill_at(prompt) + transfer,
                     prefill_at(prompt) + transfer + sum(decode_at(prompt + j) for j in range(1, out))))
    # a decode pool that holds one request's lifetime KV (P + O - 1 = 112 tokens: 7 blocks of 16)
    one = KVPool.blocks(7, block_size=16)
    full = Pool(cost, kv_bytes_per_token=kv, tensor_parallel_size=2, kv_pool=one)
    pair = [Request(id=j, arrival_s=0, prompt_tokens=prompt, output_tokens=13) for j in range(2)]
    pair.append(Request(id=2, arrival_s=0, prompt_tokens=prompt, output_tokens=14))  # 113 tokens: 8 blocks
    both = serve_disaggregated(pair, pools, full, link=wire)
    first, second, third = both.requests
    ready = prefill_step(2 * prompt, prompt * (prompt + 1)) + transfer  # one prefill step for both; transfers end
    lifetime = sum(decode_step(prompt + j) for j in range(1, 13))
    p.equal("a decode pool of 7 blocks: both TTFTs are the shared prefill + transfer; the second is admitted at "
            "the first's finish", (first.ttft_s, second.ttft_s, first.handed_back_s, second.handed_back_s),
            (ready, ready, ready + lifetime, ready + 2 * lifetime),
            value=f"TPOT {_ms(first.tpot_s)} and {_ms(second.tpot_s)}")
    p.holds("a request of 113 lifetime tokens (8 blocks) is refused before its prefill, naming the pool",
            (third.rejected_reason, third.admitted_s, third.prefill_tokens)
            == ("decode pool: lifetime KV of 113 tokens needs 8 blocks of 16; the pool has 7", None, 0),
            str(third.rejected_reason))
    spread = serve_disaggregated(pair[:2], pools, attrs.evolve(full, instances=2), link=wire)
    p.equal("two such decode instances, round robin: each takes one, both finish a lifetime after the transfer",
            [x.handed_back_s for x in spread.requests], [ready + lifetime] * 2)
    p.conclude(f"Llama 3.1 70B, 1,000 prompt tokens at T = 2: {moved:,} B per NIC, {float(t) * 1e3:.4f} ms over "
               "400 Gb/s; a lone request's TTFT = prefill + transfer, its TPOT the decode side's batch-1 steps")


def main(argv: Sequence[str] | None = None) -> int:
    """Run as a script; exit status 0 if every check passed."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
