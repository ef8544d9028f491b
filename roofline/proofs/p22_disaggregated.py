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
* The scheduler part uses fixed step durations (a prefill step 1/5 s, a decode step 1/50 s) so
  that its times are hand-checked numbers.

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
    received = [len(held) * unit_bytes for held in receivers]
    return max(max(sent), max(received))


def derive(p: Proof) -> None:
    """Derive and check the claim (see the module docstring)."""
    from .. import formulas as f
    from ..hardware import get_accelerator
    from ..models import get_model
    from ..sim import KVPool, Pool, Request, TransferLink, UnitCostModel, serve_disaggregated
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

    p.section("The reference scheduler: a prefill step 1/5 s, a decode step 1/50 s, 1,000 B/token per decode GPU")
    prefill_step, decode_step = Fraction(1, 5), Fraction(1, 50)
    unit = UnitCostModel(decode=decode_step, prefill=prefill_step)
    wire = TransferLink(bandwidth=10**6, latency=Fraction(1, 1000))
    pools = Pool(unit, kv_bytes_per_token=1000, tensor_parallel_size=2)
    prompt, out = 100, 11
    transfer = Fraction(prompt * 1000, 10**6) + Fraction(1, 1000)
    lone = [Request(id=0, arrival_s=0, prompt_tokens=prompt, output_tokens=out)]
    runs = [serve_disaggregated(lone, pools, pools, link=wire, engine=e) for e in ("step", "event")]
    r = runs[0].requests[0]
    p.equal("a lone request's TTFT = its prefill step + its transfer (0.2 + 0.1 + 0.001 s)", r.ttft_s,
            prefill_step + transfer, value=f"TTFT {float(r.ttft_s):.3f} s")
    p.equal("its TPOT = the decode step at batch 1, and E2E = TTFT + (O - 1) TPOT", (r.tpot_s, r.e2e_s),
            (decode_step, prefill_step + transfer + (out - 1) * decode_step))
    p.holds("the stretch clock gives the same record", runs[1].requests[0] == r)
    # a decode pool that holds one request's lifetime KV (P + O - 1 = 110 tokens: 7 blocks of 16)
    full = Pool(unit, kv_bytes_per_token=1000, tensor_parallel_size=2, kv_pool=KVPool.blocks(7, block_size=16))
    pair = [Request(id=j, arrival_s=0, prompt_tokens=prompt, output_tokens=out) for j in range(2)]
    both = serve_disaggregated(pair, pools, full, link=wire)
    first, second = both.requests
    ready = prefill_step + transfer  # both prefill in one step; both transfers end together
    p.equal("a decode pool of 7 blocks: both TTFTs are prefill + transfer; the second is admitted at the first's "
            "finish", (first.ttft_s, second.ttft_s, first.handed_back_s, second.handed_back_s),
            (ready, ready, ready + 10 * decode_step, ready + 20 * decode_step),
            value=f"TPOT {float(first.tpot_s) * 1e3:.0f} ms and {float(second.tpot_s) * 1e3:.0f} ms")
    spread = serve_disaggregated(pair, pools, Pool(unit, kv_bytes_per_token=1000, tensor_parallel_size=2,
                                                   kv_pool=KVPool.blocks(7, block_size=16), instances=2), link=wire)
    p.equal("two such decode instances, round robin: each takes one, both finish at TTFT + 10 decode steps",
            [x.handed_back_s for x in spread.requests], [ready + 10 * decode_step] * 2)
    p.conclude(f"Llama 3.1 70B, 1,000 prompt tokens at T = 2: {moved:,} B per NIC, {float(t) * 1e3:.4f} ms over "
               f"400 Gb/s; a lone request's TTFT = prefill + transfer ({float(r.ttft_s):.3f} s in the unit case)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run as a script; exit status 0 if every check passed."""
    return run_script(NAME, derive, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
