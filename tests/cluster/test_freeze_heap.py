"""Long-lived actors take their start-up heap out of the collector's scans (cluster.freeze_startup_heap)."""

import gc
import weakref

from roll_agentic.cluster import freeze_startup_heap


def test_start_up_objects_are_frozen_and_new_ones_still_collected():
    class Node:
        def __init__(self):
            self.me = self  # a cycle: only the cyclic collector frees it

    gc.disable()  # no automatic collection between the steps below
    try:
        before = Node()  # allocated during "start-up"
        frozen_ref = weakref.ref(before)
        freeze_startup_heap(only_in_actor=False)
        assert gc.get_freeze_count() > 0
        del before
        after = Node()  # allocated by the run
        new_ref = weakref.ref(after)
        del after
        gc.collect()
        assert frozen_ref() is not None  # frozen: never scanned, so not even its garbage is found
        assert new_ref() is None  # what the run allocates is still collected
    finally:
        gc.unfreeze()  # leave the test process as it was
        gc.enable()
    gc.collect()
    assert frozen_ref() is None


def test_outside_an_actor_nothing_is_frozen():
    gc.unfreeze()
    freeze_startup_heap()
    assert gc.get_freeze_count() == 0


def test_outside_ray_it_does_not_start_ray():
    """A process that builds a worker or an engine without Ray must not get a local Ray
    (20 s, and an instance nobody asked for) just to learn it is not an actor. In a
    process of its own: the test process may hold another test's Ray."""
    import subprocess
    import sys

    code = ("import ray; from roll_agentic.cluster import freeze_startup_heap; "
            "freeze_startup_heap(); print(ray.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout + out.stderr
