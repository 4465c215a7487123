"""SamplingParams refuses values no engine can serve, where the request is made."""

from __future__ import annotations

import pytest

from roll_agentic.engine.protocol import SamplingParams


@pytest.mark.parametrize("kwargs", [
    {"max_tokens": 0}, {"max_tokens": -3}, {"temperature": -0.5}, {"temperature": float("nan")},
    {"top_p": 0.0}, {"top_p": 1.5},
], ids=str)
def test_values_no_engine_can_serve_are_refused(kwargs: dict) -> None:
    key = next(iter(kwargs))
    with pytest.raises(ValueError, match=f"SamplingParams.{key}"):
        SamplingParams(**kwargs)


def test_greedy_and_the_edges_of_the_ranges_are_accepted() -> None:
    params = SamplingParams(max_tokens=1, temperature=0.0, top_p=1.0)
    assert (params.max_tokens, params.temperature, params.top_p) == (1, 0.0, 1.0)
