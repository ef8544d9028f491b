"""Break-it faults: each test is an input that once misbehaved, and the value it must give."""

from __future__ import annotations

import numpy as np
import pytest

from roofline.sim import Request, UnitCostModel, serve_continuous


def test_the_event_engines_requests_take_a_numpy_index_as_the_step_engines_tuple_does():
    """RequestTable[np.int64(1)] raised IndexError ("request index 1 out of range for 10 requests") where the step
    engine's tuple gives the record; a float or str index raised IndexError where a tuple raises TypeError."""
    reqs = [Request(id=i, arrival_s=0, prompt_tokens=3, output_tokens=2) for i in range(4)]
    event, step = serve_continuous(reqs, UnitCostModel()), serve_continuous(reqs, UnitCostModel(), engine="step")
    assert event.options["engine"] == "event"
    for i in (np.int64(1), np.int32(-1), np.intp(0)):
        assert event.requests[i] == step.requests[i]
    for bad in (1.0, "a"):
        with pytest.raises(TypeError):
            step.requests[bad]  # type: ignore[call-overload]
        with pytest.raises(TypeError):
            event.requests[bad]  # type: ignore[call-overload]
    with pytest.raises(IndexError):
        event.requests[np.int64(4)]
