"""A `ray.address` where nothing listens is one line at once, not minutes of Ray's retries."""

from __future__ import annotations

import socket

import pytest

from roll_agentic.cluster import init_ray
from roll_agentic.config import RayConfig


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # free once closed: nothing listens there


@pytest.mark.parametrize("form", ["127.0.0.1:{}", "ray://127.0.0.1:{}"])
def test_an_address_where_nothing_listens_is_refused_before_ray_init(form, monkeypatch):
    import ray

    def no_init(*_a, **_k):
        raise AssertionError("ray.init was called: it retries a dead address for minutes")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", no_init)
    address = form.format(_closed_port())
    with pytest.raises(RuntimeError, match="nothing answers there"):
        init_ray(RayConfig(address=address))


def test_a_listening_address_goes_on_to_ray_init(monkeypatch):
    import ray

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw["address"]))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        address = f"127.0.0.1:{s.getsockname()[1]}"
        assert init_ray(RayConfig(address=address))
    assert init_ray(RayConfig(address="auto")) and calls == [address, "auto"]
