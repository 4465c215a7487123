"""Long-lived actors take their start-up heap out of the collector's scans (cluster.freeze_startup_heap)."""

import gc

from roll_agentic.cluster import freeze_startup_heap


def test_start_up_objects_are_frozen_and_new_ones_still_collected():
    class Node:
        def __init__(self):
            self.me = self  # a cycle: only the cyclic collector frees it

    freeze_startup_heap(only_in_actor=False)
    frozen = gc.get_freeze_count()
    assert frozen > 0
    cycle = Node()
    del cycle
    assert gc.collect() >= 1  # what the run allocates after start-up is still collected
    assert gc.get_freeze_count() >= frozen
    gc.unfreeze()  # leave the test process as it was


def test_outside_an_actor_nothing_is_frozen():
    gc.unfreeze()
    freeze_startup_heap()
    assert gc.get_freeze_count() == 0
