"""A stateful test of continuous batching (prefill separate or chunked): interleaved arrivals and clock advances.

The reference scheduler has a batch API only (``serve_continuous(requests, ..., record_steps=True)``,
no engine to feed one request or one step at a time), so the state machine drives it
the way a client would see it: it keeps a clock and a growing workload; rules add
requests arriving *now* (on a step boundary, in the middle of a step, or while the
device is idle) and move the clock forward by whole steps, half steps or idle time.
After every rule the whole workload so far is simulated again and checked:

* causality: requests arriving at time t do not change anything that started before t
  (every step record and every request finished before t is identical to the previous
  run's), which is what an incremental engine would guarantee by construction;
* after every simulated step: KV blocks in use <= the pool, batch <= max_num_seqs,
  prefill tokens <= the per-step budget (with chunked prefill: decode rows + chunk tokens
  <= max_num_batched_tokens), one step at a time, each duration the cost model's time for
  that composition (a mixed step's from its decode rows and chunks);
* per request: rejected exactly when it can never fit (lifetime KV > pool, or prompt
  > the prefill budget); otherwise admitted at a step boundary no earlier than its
  arrival, handed back when its last token comes, with exactly O tokens, each produced
  once (token count over the step records = sum of O).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from roofline.sim import KVPool, Request, SimResult, serve_continuous
from roofline.testing.strategies import batch_sizes, cost_models, kv_pools, workloads

MAX_REQUESTS = 24


def _records(result: SimResult | None, before: Any) -> list[Any]:
    if result is None:
        return []
    return [s for s in result.steps if s.start_s < before]


class ContinuousScheduler(RuleBasedStateMachine):
    """Clock + growing workload; the continuous scheduler re-run and checked after every rule."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Request] = []
        self.now: Any = Fraction(0)
        self.result: SimResult | None = None

    @initialize(
        cost=cost_models(kind="any"),
        pool=st.one_of(kv_pools(max_blocks=40, max_block_size=8), kv_pools(unlimited=True)),
        max_num_seqs=batch_sizes(max_value=6),
        admission=st.sampled_from(["on_demand", "reserve"]),
        max_prefill=st.one_of(st.none(), st.integers(1, 120)),
        chunked=st.booleans(),
        first=workloads(max_size=6, max_prompt_tokens=60, max_output_tokens=30),
    )
    def configure(self, cost: Any, pool: KVPool, max_num_seqs: int, admission: str, max_prefill: int | None,
                  chunked: bool, first: tuple[Request, ...]) -> None:
        """Pick the scheduler's settings and a first workload (the clock at its last arrival); with chunked
        prefill the budget is max(max_num_seqs, the drawn prefill budget or 2,048)."""
        self.cost, self.pool, self.max_num_seqs = cost, pool, max_num_seqs
        self.chunked = chunked
        self.budget = max(max_num_seqs, 2048 if max_prefill is None else max_prefill) if chunked else None
        self.admission, self.max_prefill = admission, None if chunked else max_prefill
        self.requests = list(first)
        if first:
            self.now = first[-1].arrival_s
            self.result = self.simulate()

    def simulate(self) -> SimResult:
        if self.chunked:
            return serve_continuous(self.requests, self.cost, max_num_seqs=self.max_num_seqs,
                                    admission=self.admission, kv_pool=self.pool, prefill="chunked",
                                    max_num_batched_tokens=self.budget, record_steps=True)
        return serve_continuous(self.requests, self.cost, max_num_seqs=self.max_num_seqs, admission=self.admission,
                                kv_pool=self.pool, max_prefill_tokens=self.max_prefill, record_steps=True)

    # ------------------------------------------------------------------ rules

    @precondition(lambda self: len(self.requests) < MAX_REQUESTS)
    @rule(prompt=st.integers(1, 60), output=st.integers(1, 30), count=st.integers(1, 3))
    def arrive(self, prompt: int, output: int, count: int) -> None:
        """``count`` identical requests arrive now; the past (steps started before now) must not change."""
        for _ in range(count):
            self.requests.append(Request(id=len(self.requests), arrival_s=self.now, prompt_tokens=prompt,
                                         output_tokens=output))
        before = self.result
        self.result = self.simulate()
        assert _records(self.result, self.now) == _records(before, self.now)
        if before is not None:
            for old, new in zip(before.requests, self.result.requests[:len(before.requests)], strict=True):
                if old.handed_back_s is not None and old.handed_back_s <= self.now:
                    assert new == old

    def _ends_after_now(self) -> list[Any]:
        return [] if self.result is None else [s.end_s for s in self.result.steps if s.end_s > self.now]

    @rule(k=st.integers(0, 6))
    def advance_whole_steps(self, k: int) -> None:
        """Move the clock to the end of the k-th step still to come (a step boundary), or by 1 s if idle."""
        ends = self._ends_after_now()
        self.now = ends[min(k, len(ends) - 1)] if ends else self.now + 1

    @rule()
    def advance_half_a_step(self) -> None:
        """Move the clock into the middle of the step in progress (or the next one)."""
        if self.result is not None:
            for s in self.result.steps:
                if s.end_s > self.now:
                    self.now = max(self.now, s.start_s) + s.duration_s / 2
                    return
        self.now += Fraction(1, 2)

    @rule(gap=st.fractions(min_value=0, max_value=3, max_denominator=8))
    def go_idle(self, gap: Fraction) -> None:
        """Move the clock past the end of all work, by ``gap`` s more (the device idles)."""
        ends = self._ends_after_now()
        self.now = (ends[-1] if ends else self.now) + gap

    # ------------------------------------------------------------------ invariants

    @invariant()
    def every_step_respects_the_limits(self) -> None:
        """KV within the pool, batch within max_num_seqs, prefill within budget, one step at a time, exact cost."""
        if self.result is None:
            return
        end = None
        capacity = self.pool.capacity_blocks
        for s in self.result.steps:
            assert capacity is None or s.kv_blocks <= capacity
            assert 1 <= s.batch <= self.max_num_seqs and s.useful_rows + s.partial_rows == s.batch
            assert s.kv_tokens <= s.kv_blocks * self.pool.block_size
            if self.chunked:
                assert s.decode_rows + s.prefill_tokens <= self.budget
                assert s.duration_s == (self.cost.mixed_time(s.decode_rows, s.context_sum, s.prefill_tokens,
                                                             s.cached_tokens, s.attention_pairs)
                                        if s.prefill_tokens else self.cost.decode_time(s.batch, s.context_sum))
            elif s.kind == "prefill":
                assert self.max_prefill is None or s.prefill_tokens <= self.max_prefill
                assert s.duration_s == self.cost.prefill_time(s.prefill_tokens, s.attention_pairs)
            else:
                assert s.duration_s == self.cost.decode_time(s.batch, s.context_sum)
            assert end is None or s.start_s >= end
            end = s.end_s

    @invariant()
    def every_request_is_served_once_or_rejected_for_a_reason(self) -> None:
        """Rejected iff it can never fit; otherwise admitted at a boundary after arrival, with exactly O tokens."""
        if self.result is None:
            return
        prefill_starts = {s.start_s for s in self.result.steps if s.prefill_tokens}
        produced = sum(s.useful_rows for s in self.result.steps)
        total = 0
        for r in self.result.requests:
            p, o = r.request.prompt_tokens, r.request.output_tokens
            never = self.pool.never_fits_reason(p, o) is not None or (self.max_prefill is not None
                                                                     and p > self.max_prefill)
            if r.rejected and r.admitted_s is None:
                assert never
                continue
            if r.rejected:  # preempted, then its recompute prefill exceeds the per-step budget
                assert self.max_prefill is not None and r.preemptions >= 1 and not never
                total += r.generated_tokens
                continue
            assert not never
            assert r.request.arrival_s <= r.admitted_s < r.first_token_s <= r.finish_s == r.handed_back_s
            assert r.admitted_s in prefill_starts
            assert r.generated_tokens == o
            assert r.prefill_tokens >= p and (r.preemptions > 0 or r.prefill_tokens == p)
            total += o
        assert produced == total


ContinuousScheduler.TestCase.settings = settings(stateful_step_count=25)
TestContinuousScheduler = ContinuousScheduler.TestCase
