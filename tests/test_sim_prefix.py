"""Prefix caching in continuous batching: the formulas against the scheduler, both clocks, the Mooncake traces.

docs/conventions.md, "Prefix caching"; formulas: roofline.formulas.prefix_cached_tokens,
shared_prefix_blocks, cached_prefill_time; proof p19.
"""

from __future__ import annotations

import gzip
import json
from fractions import Fraction

import pytest
from _text import unwrapped
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline.formulas as f
from roofline.cli import main as cli_main
from roofline.errors import InvalidValueError, TraceError
from roofline.hardware import get_accelerator
from roofline.models import get_model
from roofline.sim import KVPool, Request, RooflineCostModel, UnitCostModel, serve_continuous, synthetic_workload
from roofline.sim.requests import MOONCAKE_BLOCK_TOKENS, load_trace, parse_trace, shipped_trace

COST = RooflineCostModel.for_model(get_model("llama-3.1-8b"), get_accelerator("h100-sxm"))


def _shared(n: int, prompt: int, output: int, shared: int, b: int, arrival: int = 0) -> list[Request]:
    """n requests whose first ``shared`` tokens (floor(shared / b) full blocks) are equal, the rest their own."""
    blocks = -(-prompt // b)
    return [Request(id=i, arrival_s=arrival, prompt_tokens=prompt, output_tokens=output,
                    block_hashes=tuple(range(shared // b)) + tuple(10_000 * (i + 1) + j
                                                                 for j in range(blocks - shared // b)),
                    hash_block_size=b) for i in range(n)]


@settings(max_examples=25)
@given(n=st.integers(1, 5), prompt=st.integers(1, 80), output=st.integers(1, 6), b=st.sampled_from([1, 3, 8, 16]),
       share=st.floats(0, 1), chunked=st.booleans(), on_demand=st.booleans())
def test_saved_work_and_the_peak_pool_equal_the_formulas(n, prompt, output, b, share, chunked, on_demand):
    """n prompts of P tokens sharing S < P, all at t = 0, unlimited pool: the first computes its prompt, each other
    hits h = prefix_cached_tokens(P, floor(S / b), b) and saves h tokens and causal(P) - chunk(P - h, h) attention
    pairs; the pool peaks at shared_prefix_blocks(n, P + O - 1, S, b); the stretch clock gives the same result."""
    shared = int(share * (prompt - 1))
    reqs = _shared(n, prompt, output, shared, b)
    kw = dict(kv_pool=KVPool.unlimited(block_size=b), max_num_seqs=n, admission="on_demand" if on_demand else "reserve",
              enable_prefix_caching=True, record_steps=True)
    if chunked:
        kw.update(prefill="chunked", max_num_batched_tokens=n * prompt + n)
    step = serve_continuous(reqs, COST, engine="step", **kw)
    h = f.prefix_cached_tokens(prompt_tokens=prompt, matched_blocks=shared // b, block_size=b)
    cache = step.options["prefix_cache"]
    assert cache["prefill_tokens_saved"] == (n - 1) * h == n * prompt - sum(r.prefill_tokens for r in step.requests)
    assert cache["hit_blocks"] == (n - 1) * (h // b) and cache["evictions"] == 0
    assert step.steps is not None
    pairs = sum(s.attention_pairs for s in step.steps if s.kind != "decode")
    full = f.causal_attention_pairs(prompt_tokens=prompt)
    assert pairs == full + (n - 1) * f.chunk_attention_pairs(chunk_tokens=prompt - h, cached_tokens=h)
    assert n * full - pairs == (n - 1) * h * (h + 1) // 2
    assert step.summary.peak_kv_blocks == f.shared_prefix_blocks(batch=n, context=prompt + output - 1,
                                                                  shared_prefix_tokens=shared, block_size=b)
    event = serve_continuous(reqs, COST, engine="event", **{**kw, "record_steps": False})
    assert event.options["engine"] == "event" and step.options["engine"] == "step"
    assert event.summary == step.summary
    assert event.options["prefix_cache"] == cache


def test_a_cached_prefill_is_priced_by_the_chunk_formula():
    """Two 2,048-token prompts sharing 1,536 tokens, the second arriving after the first is done: its prefill step
    takes cached_prefill_time(q = 512, h = 1,536) (Llama 3.1 8B, H100 SXM, exact)."""
    reqs = _shared(2, 2048, 1, 1536, 16)
    reqs[1] = Request(id=1, arrival_s=10, prompt_tokens=2048, output_tokens=1, block_hashes=reqs[1].block_hashes,
                      hash_block_size=16)
    r = serve_continuous(reqs, COST, kv_pool=KVPool.unlimited(block_size=16), enable_prefix_caching=True,
                         record_steps=True, engine="step")
    assert r.steps is not None
    gpu = get_accelerator("h100-sxm")
    terms = dict(weight_bytes=COST.weight_bytes, kv_bytes_per_token=COST.kv_bytes_per_token,
                 flops_per_token=COST.flops_per_token, attention_flops_per_token=COST.attention_flops_per_token,
                 bandwidth=Fraction(gpu.bandwidth), peak_flops=Fraction(gpu.peak("bf16")), overhead=0)
    first, second = r.steps[0], r.steps[1]
    assert first.duration_s == f.cached_prefill_time(chunk_tokens=2048, cached_tokens=0, **terms)
    assert second.duration_s == f.cached_prefill_time(chunk_tokens=512, cached_tokens=1536, **terms)
    assert round(float(second.duration_s) * 1e3, 1) == 8.3 and round(float(first.duration_s) * 1e3, 1) == 32.2
    off = serve_continuous(reqs, COST, kv_pool=KVPool.unlimited(block_size=16), record_steps=True, engine="step")
    assert off.options["enable_prefix_caching"] is False and "prefix_cache" not in off.options
    assert off.steps is not None and off.steps[1].duration_s == first.duration_s


def test_free_blocks_stay_cached_and_are_evicted_least_recently_freed_first():
    """Pool of 12 blocks of 4: A (9 tokens) leaves 2 full blocks cached; B (41 tokens, 11 blocks) evicts A's last
    block (freed first); C, A's prompt again, hits A's first block only, and its admission evicts one of B's."""
    a = (1, 2, 3)
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=9, output_tokens=1, block_hashes=a, hash_block_size=4),
            Request(id=1, arrival_s=1, prompt_tokens=41, output_tokens=1),
            Request(id=2, arrival_s=2, prompt_tokens=9, output_tokens=1, block_hashes=a, hash_block_size=4)]
    for engine in ("step", "event"):
        r = serve_continuous(reqs, UnitCostModel(), kv_pool=KVPool.blocks(12, block_size=4), engine=engine,
                             enable_prefix_caching=True, admission="on_demand")
        cache = r.options["prefix_cache"]
        assert (cache["hit_tokens"], cache["evictions"]) == (4, 2)
        assert [x.prefill_tokens for x in r.requests] == [9, 41, 5]
    roomy = serve_continuous(reqs, UnitCostModel(), kv_pool=KVPool.blocks(16, block_size=4), enable_prefix_caching=True)
    assert (roomy.options["prefix_cache"]["hit_tokens"], roomy.options["prefix_cache"]["evictions"]) == (8, 0)


def test_a_preempted_request_hits_its_own_blocks_and_both_clocks_agree():
    """No hashes: nothing is shared between requests, but a recompute prefill after a preemption hits the full
    blocks its own KV left cached (on-demand admission, a tight pool), on both clocks and both prefill modes."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=20 + 3 * i, output_tokens=30) for i in range(6)]
    for prefill in ("separate", "chunked"):
        kw = dict(kv_pool=KVPool.blocks(30, block_size=4), admission="on_demand", prefill=prefill,
                  enable_prefix_caching=True)
        step = serve_continuous(reqs, COST, engine="step", **kw)
        event = serve_continuous(reqs, COST, engine="event", **kw)
        assert sum(x.preemptions for x in step.requests) > 0
        assert step.options["prefix_cache"]["hit_tokens"] > 0
        assert event.summary == step.summary and event.options["prefix_cache"] == step.options["prefix_cache"]
        plain = serve_continuous(reqs, COST, kv_pool=KVPool.unlimited(block_size=4), enable_prefix_caching=True)
        assert plain.options["prefix_cache"]["hit_tokens"] == 0


def test_hashes_map_onto_an_engine_block_of_another_size_and_are_taken_as_given():
    """Trace blocks of 512: engine blocks of 16 share the 32 inside a common trace block; an engine block of 1,024
    covering two trace blocks is shared only if both agree; lists that disagree early share nothing after."""
    def hit(first, second, prompt, b):
        reqs = [Request(id=0, arrival_s=0, prompt_tokens=prompt, output_tokens=1, block_hashes=first,
                        hash_block_size=512),
                Request(id=1, arrival_s=1, prompt_tokens=prompt, output_tokens=1, block_hashes=second,
                        hash_block_size=512)]
        r = serve_continuous(reqs, UnitCostModel(), kv_pool=KVPool.unlimited(block_size=b), enable_prefix_caching=True)
        return r.options["prefix_cache"]["hit_tokens"]

    assert hit((7, 8), (7, 9), 1024, 16) == 512
    assert hit((7, 8), (7, 9), 1024, 1024) == 0
    assert hit((7, 8, 1), (7, 8, 2), 1100, 1024) == 1024
    assert hit((0, 5), (1, 5), 1024, 16) == 0  # block 1 agrees, but not the prefix before it
    assert hit((0, 5), (0, 6), 1024, 16) == 512


def test_prefix_caching_is_refused_where_it_is_not_modelled():
    gemma = RooflineCostModel.for_model(get_model("gemma-3-27b"), get_accelerator("h200"))
    reqs = [Request(id=0, arrival_s=0, prompt_tokens=8, output_tokens=2)]
    with pytest.raises(InvalidValueError, match="enable_prefix_caching"):
        serve_continuous(reqs, gemma, enable_prefix_caching=True)
    with pytest.raises(InvalidValueError, match="enable_prefix_caching"):
        serve_continuous(reqs, UnitCostModel(), enable_prefix_caching=1)
    with pytest.raises(InvalidValueError, match="block_hashes"):
        Request(id=0, arrival_s=0, prompt_tokens=512, output_tokens=1, block_hashes=(1, 2), hash_block_size=512)
    with pytest.raises(InvalidValueError, match="hash_block_size"):
        Request(id=0, arrival_s=0, prompt_tokens=512, output_tokens=1, block_hashes=(1,))


def test_the_mooncake_reader_reads_every_row_of_both_shipped_traces():
    """12,031 and 3,993 rows, in order, each with one hash per 512-token block; ms become exact seconds."""
    for name, rows, source in (("mooncake-conv", 12_031, "conversation_trace"),
                               ("mooncake-synthetic", 3_993, "synthetic_trace")):
        path = shipped_trace(name)
        reqs = load_trace(path)
        raw = [json.loads(line) for line in gzip.decompress(path.read_bytes()).decode().splitlines()]
        assert len(reqs) == len(raw) == rows, source
        assert all(r.id == j and r.prompt_tokens == x["input_length"] and r.output_tokens == x["output_length"]
                   and r.arrival_s == Fraction(x["timestamp"], 1000) and list(r.block_hashes) == x["hash_ids"]
                   and r.hash_block_size == MOONCAKE_BLOCK_TOKENS
                   for j, (r, x) in enumerate(zip(reqs, raw, strict=True)))
        if name == "mooncake-conv":
            first = reqs[0]
            assert (first.prompt_tokens, first.output_tokens, len(first.block_hashes)) == (6758, 500, 14)


@pytest.mark.parametrize(("row", "field"), [
    ('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}', "hash_ids"),
    ('{"timestamp": 0, "input_length": 600, "output_length": 1}', "hash_ids"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [-1]}', "hash_ids"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": "1"}', "hash_ids"),
    ('{"timestamp": -5, "input_length": 10, "output_length": 1, "hash_ids": [1]}', "timestamp"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}', "input_length"),
])
def test_a_bad_mooncake_row_is_refused_naming_its_line_and_field(row, field):
    good = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}'
    with pytest.raises(TraceError, match=rf":2: field '{field}'"):
        parse_trace(f"{good}\n{row}\n", path="t.jsonl")


def test_simulate_says_whether_prefix_caching_was_on_and_static_refuses_it(tmp_path, capsys):
    """Six 1,500-token prompts whose first two 512-token blocks are equal, one after another: five hit 1,024."""
    rows = [{"timestamp": 100_000 * j, "input_length": 1500, "output_length": 4, "hash_ids": [0, 1, 2 + j]}
            for j in range(6)]
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cmd = ["simulate", "--trace", str(trace), "--policy", "continuous"]
    assert cli_main([*cmd, "--enable-prefix-caching"]) == 0
    on = unwrapped(capsys.readouterr().out)
    assert "prefix caching on: hit rate 56.9% of prompt tokens, 57.3% of blocks; 5,120 prefill tokens saved" in on
    assert cli_main(cmd) == 0
    assert "prefix caching off" in capsys.readouterr().out
    assert cli_main([*cmd[:-1], "static", "--enable-prefix-caching"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--enable-prefix-caching" in err


@st.composite
def _hashed_workloads(draw):
    """Up to 8 requests whose prompts draw their block ids from a small alphabet (so that prefixes repeat)."""
    b = draw(st.sampled_from([2, 4, 8]))
    reqs, t = [], 0
    for i in range(draw(st.integers(1, 8))):
        t += draw(st.integers(0, 3))
        prompt = draw(st.integers(1, 24))
        ids = draw(st.lists(st.integers(0, 2), min_size=-(-prompt // b), max_size=-(-prompt // b)))
        reqs.append(Request(id=i, arrival_s=t, prompt_tokens=prompt, output_tokens=draw(st.integers(1, 30)),
                            block_hashes=ids, hash_block_size=b))
    return reqs, b


@settings(max_examples=40)
@given(work=_hashed_workloads(), blocks=st.integers(3, 24), chunked=st.booleans(), on_demand=st.booleans(),
       seqs=st.integers(1, 6))
def test_the_stretch_clock_equals_the_step_clock_with_prefix_caching(work, blocks, chunked, on_demand, seqs):
    """Repeated prefixes, a tight pool (evictions, preemptions under on-demand admission): both clocks agree on
    every request, the summary and the prefix cache's counts."""
    reqs, b = work
    kw = dict(kv_pool=KVPool.blocks(blocks, block_size=b), max_num_seqs=seqs, enable_prefix_caching=True,
              admission="on_demand" if on_demand else "reserve")
    if chunked:
        kw.update(prefill="chunked", max_num_batched_tokens=max(seqs, 6))
    step = serve_continuous(reqs, COST, engine="step", **kw)
    event = serve_continuous(reqs, COST, engine="event", **kw)
    assert event.options["engine"] == "event"
    assert event.requests == step.requests and event.summary == step.summary
    assert event.options["prefix_cache"] == step.options["prefix_cache"]


# --------------------------------------------------------------------------- generated prefix workloads

@settings(max_examples=25)
@given(n=st.integers(1, 6), prefix=st.integers(0, 64), drawn=st.integers(1, 40), output=st.integers(1, 6),
       prefixes=st.integers(1, 3), b=st.sampled_from([1, 4, 16]), chunked=st.booleans(), on_demand=st.booleans(),
       seed=st.integers(0, 5))
def test_a_generated_shared_prefix_saves_the_formulas_work_and_peaks_at_its_blocks(n, prefix, drawn, output,
                                                                                  prefixes, b, chunked, on_demand,
                                                                                  seed):
    """n requests at t = 0 of P = S + u tokens, each after one of N prefixes of S tokens (synthetic_workload,
    hashes at the engine's block), unlimited pool: the n_k requests of prefix k save (n_k - 1) h with
    h = prefix_cached_tokens(P, floor(S / b), b), and the pool peaks at the sum over k of
    shared_prefix_blocks(n_k, P + O - 1, S, b); the event clock gives the same result and cache counts."""
    prefixes = prefixes if prefix else 1
    w = synthetic_workload(n, arrival="burst", input_len=drawn, output_len=output, prefix_len=prefix,
                           num_prefixes=prefixes, hash_block_size=b, seed=seed)
    p = prefix + drawn
    groups: dict[tuple[int, ...], int] = {}
    for r in w:
        groups[r.block_hashes] = groups.get(r.block_hashes, 0) + 1
    if prefix >= b:  # below one block no hash names the prefix: every request is its own group
        assert len(groups) <= prefixes
    h = f.prefix_cached_tokens(prompt_tokens=p, matched_blocks=prefix // b, block_size=b)
    kw = dict(kv_pool=KVPool.unlimited(block_size=b), max_num_seqs=n, admission="on_demand" if on_demand else "reserve",
              enable_prefix_caching=True, record_steps=False)
    if chunked:
        kw.update(prefill="chunked", max_num_batched_tokens=n * p + n)
    step = serve_continuous(w, COST, engine="step", **kw)
    cache = step.options["prefix_cache"]
    assert cache["prefill_tokens_saved"] == sum(k - 1 for k in groups.values()) * h
    assert cache["prefill_tokens_saved"] == n * p - sum(r.prefill_tokens for r in step.requests)
    assert cache["evictions"] == 0
    assert step.summary.peak_kv_blocks == sum(f.shared_prefix_blocks(batch=k, context=p + output - 1,
                                                                     shared_prefix_tokens=prefix, block_size=b)
                                              for k in groups.values())
    event = serve_continuous(w, COST, engine="event", **kw)
    assert event.summary == step.summary and event.options["prefix_cache"] == cache


@settings(max_examples=25)
@given(n=st.integers(1, 4), prefix=st.integers(0, 40), drawn=st.integers(1, 30), output=st.integers(1, 20),
       turns=st.integers(2, 4), b=st.sampled_from([1, 4, 16]), chunked=st.booleans())
def test_each_turn_of_a_generated_conversation_hits_the_previous_turns_prompt(n, prefix, drawn, output, turns, b,
                                                                            chunked):
    """n conversations of T turns, fixed lengths, turns 1,000 s apart (each answered before the next), unlimited
    pool: turn 1 hits the shared prefix (all but the first conversation), turn t + 1 hits the full blocks of turn
    t's prompt (the scheduler caches prompt blocks: turn t's output is computed again by turn t + 1), so the
    saved tokens are (n - 1) h(P1, S) + n sum_t prefix_cached_tokens(P(t + 1), floor(P(t) / b), b), with
    P(1) = S + u and P(t + 1) = P(t) + O + u; both clocks agree."""
    w = synthetic_workload(n, arrival="burst", input_len=drawn, output_len=output, prefix_len=prefix,
                           num_turns=turns, turn_gap_s=1000, hash_block_size=b)
    prompts = [prefix + drawn]
    for _ in range(turns - 1):
        prompts.append(prompts[-1] + output + drawn)
    assert sorted({r.prompt_tokens for r in w}) == prompts
    saved = (n - 1) * f.prefix_cached_tokens(prompt_tokens=prompts[0], matched_blocks=prefix // b, block_size=b)
    saved += n * sum(f.prefix_cached_tokens(prompt_tokens=later, matched_blocks=earlier // b, block_size=b)
                     for earlier, later in zip(prompts, prompts[1:], strict=False))
    kw = dict(kv_pool=KVPool.unlimited(block_size=b), max_num_seqs=n, enable_prefix_caching=True)
    if chunked:
        kw.update(prefill="chunked", max_num_batched_tokens=n * prompts[-1] + n)
    step = serve_continuous(w, COST, engine="step", **kw)
    assert step.summary.completed == n * turns
    assert step.options["prefix_cache"]["prefill_tokens_saved"] == saved
    event = serve_continuous(w, COST, engine="event", **kw)
    assert event.summary == step.summary and event.options["prefix_cache"] == step.options["prefix_cache"]


def test_prefix_caching_beside_sliding_windows_is_refused_by_name() -> None:
    """Mistral 7B v0.1's layers have 4,096-token windows: serve_continuous refuses prefix caching with the reason
    roofline.sim.policies.prefix_caching_refusal gives (the plan skips such a configuration with it)."""
    from roofline import Deployment, Parallelism
    from roofline.sim.policies import prefix_caching_refusal

    cost = RooflineCostModel.for_deployment(Deployment(get_model("mistral-7b-v0.1"), get_accelerator("h100-sxm"),
                                                       Parallelism(tensor=1)))
    why = prefix_caching_refusal(cost, None)
    assert why is not None and why.startswith("prefix caching is not modelled with sliding-window layers")
    with pytest.raises(InvalidValueError) as err:
        serve_continuous([Request(id=0, arrival_s=0, prompt_tokens=8, output_tokens=2)], cost,
                         enable_prefix_caching=True)
    assert err.value.field == "enable_prefix_caching" and err.value.reason == why
    assert prefix_caching_refusal(RooflineCostModel.for_deployment(Deployment(
        get_model("llama-3.1-8b"), get_accelerator("h100-sxm"), Parallelism(tensor=1))), None) is None
