"""Config resources -> Ray actor options: CPU/GPU lifted out, node types kept."""

from roll_agentic.engine.placement import placement


def test_plain_actor_takes_the_default_cpu():
    assert placement({}).options() == {"num_cpus": 1.0, "num_gpus": 0.0, "resources": None}


def test_node_type_pins_without_a_cpu_slot_unless_asked():
    p = placement({"gpu_h20": 1})
    assert (p.num_cpus, p.num_gpus, p.resources) == (0.0, 0.0, {"gpu_h20": 1.0})
    assert placement({"gpu_h20": 1, "CPU": 2}).num_cpus == 2.0


def test_gpu_becomes_num_gpus_and_never_a_custom_resource():
    p = placement({"GPU": 1, "gpu_h800": 1})
    assert p.num_gpus == 1.0 and p.resources == {"gpu_h800": 1.0} and p.num_cpus == 0.0
    import ray

    ray.remote(**p.options())(object)  # Ray accepts it (it refuses "GPU" inside resources)
