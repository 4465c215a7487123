"""LoRA (trainer.lora_rank > 0): adapters train, the base stays, engines get merged weights,
and a run resumes exactly from its checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from roll_agentic.config import AlgoConfig, ConfigError, TrainerConfig
from roll_agentic.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from roll_agentic.train.lora import ALL_PROJECTIONS, LoraLinear, form_of
from roll_agentic.train.trainer import PolicyTrainer
from tests.train.batches import random_batch

LORA = TrainerConfig(lr=1e-2, lora_rank=4, lora_alpha=8.0)
Q = "model.layers.0.self_attn.q_proj.weight"


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_only_the_adapters_train_and_the_first_step_starts_from_the_base(tiny_model_path):
    full = PolicyTrainer(tiny_model_path, TrainerConfig(), AlgoConfig())
    lora = PolicyTrainer(tiny_model_path, LORA, AlgoConfig())
    wrapped = [m for m in lora.model.modules() if isinstance(m, LoraLinear)]
    layers = lora.model.config.num_hidden_layers
    assert len(wrapped) == layers * len(ALL_PROJECTIONS)  # every projection of every layer
    # B starts at zero: the merged weights are the base's, under the base's own names.
    base, merged = full.engine_state_dict(), lora.engine_state_dict()
    assert merged.keys() == base.keys()
    assert all(torch.equal(merged[k], base[k]) for k in base)
    # The optimizer holds the adapters only: a few percent of the model.
    stepped = sum(p.numel() for g in lora.optimizer.param_groups for p in g["params"])
    total = sum(p.numel() for p in full.model.parameters())
    assert 0 < stepped < 0.1 * total
    assert stepped == sum(p.numel() for n, p in lora.model.named_parameters() if ".lora_" in n)

    lora.train_step(random_batch(0))
    after = lora.engine_state_dict()
    assert not torch.equal(after[Q], base[Q])  # the adapters moved the merged weight
    assert torch.equal(after["model.embed_tokens.weight"], base["model.embed_tokens.weight"])  # frozen
    assert torch.equal(lora.model.model.layers[0].self_attn.q_proj.base.weight, base[Q])  # the base itself stays


def test_an_engine_loading_the_merged_weights_computes_what_the_trainer_does(tiny_model_path):
    from transformers import AutoModelForCausalLM

    lora = PolicyTrainer(tiny_model_path, LORA, AlgoConfig())
    for seed in range(2):
        lora.train_step(random_batch(seed))
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    missing, unexpected = plain.load_state_dict(lora.engine_state_dict(), strict=False)
    assert unexpected == [] and set(missing) <= {"lm_head.weight"}  # tied to the embedding
    ids = torch.tensor([random_batch(5)[0].token_ids])
    assert torch.allclose(_logits(plain, ids), _logits(lora.model, ids), atol=1e-4)


def test_a_resumed_lora_run_takes_the_same_next_step_as_one_never_stopped(tiny_model_path, tmp_path):
    steady = PolicyTrainer(tiny_model_path, LORA, AlgoConfig())
    steady.train_step(random_batch(0))
    save_checkpoint(tmp_path, steady.step, steady.engine_state_dict(), steady.state(), {"buffer": {}})
    steady.train_step(random_batch(1))

    weights, state, _ = load_checkpoint(latest_checkpoint(tmp_path))
    assert "lora" in state and all(".lora_" in k for k in state["lora"])
    resumed = PolicyTrainer(tiny_model_path, LORA, AlgoConfig())
    resumed.load_state(state, weights)
    assert resumed.step == 1
    resumed.train_step(random_batch(1))
    a, b = steady.engine_state_dict(), resumed.engine_state_dict()
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-6


def _checkpoint(trainer: PolicyTrainer, root) -> tuple[dict, dict]:
    trainer.train_step(random_batch(0))
    save_checkpoint(root, trainer.step, trainer.engine_state_dict(), trainer.state(), {"buffer": {}})
    weights, state, _ = load_checkpoint(latest_checkpoint(root))
    return weights, state


def test_resuming_with_the_other_kind_of_training_says_which_setting_to_pass(tiny_model_path, tmp_path):
    weights, state = _checkpoint(PolicyTrainer(tiny_model_path, LORA, AlgoConfig()), tmp_path / "lora")
    with pytest.raises(ValueError, match="resume it with the run's own trainer.lora_rank"):
        PolicyTrainer(tiny_model_path, TrainerConfig(), AlgoConfig()).load_state(state, weights)
    weights, state = _checkpoint(PolicyTrainer(tiny_model_path, TrainerConfig(), AlgoConfig()), tmp_path / "full")
    with pytest.raises(ValueError, match="trainer.lora_rank=0"):
        PolicyTrainer(tiny_model_path, LORA, AlgoConfig()).load_state(state, weights)


def test_a_lora_checkpoint_of_another_rank_or_base_is_refused_in_one_line(tiny_model_path, tmp_path):
    weights, state = _checkpoint(PolicyTrainer(tiny_model_path, LORA, AlgoConfig()), tmp_path)
    other_rank = PolicyTrainer(tiny_model_path, TrainerConfig(lora_rank=2), AlgoConfig())
    with pytest.raises(ValueError, match="LoRA adapters do not fit") as err:
        other_rank.load_state(state, weights)
    assert "\n" not in str(err.value)
    # The same adapters on another base: the merged weights in the checkpoint say so.
    weights[Q] = weights[Q] + 0.5
    fresh = PolicyTrainer(tiny_model_path, LORA, AlgoConfig())
    before = {k: v.clone() for k, v in fresh.engine_state_dict().items()}
    with pytest.raises(ValueError, match=r"not model.path's base plus the run's LoRA adapters \(.*q_proj"):
        fresh.load_state(state, weights)
    after = fresh.engine_state_dict()  # refused: nothing of it stays loaded
    assert fresh.step == 0 and all(torch.equal(before[k], after[k]) for k in before)


def test_targets_that_name_no_linear_layer_are_refused_listing_the_models(tiny_model_path):
    with pytest.raises(ValueError, match=r"name none of the model's linear layers; .*'q_proj'"):
        PolicyTrainer(tiny_model_path, TrainerConfig(lora_rank=4, lora_targets=["qkv"]), AlgoConfig())
    # A subset is fine: attention only.
    t = PolicyTrainer(tiny_model_path, TrainerConfig(lora_rank=4, lora_targets=["q_proj", "v_proj"]), AlgoConfig())
    assert sum(isinstance(m, LoraLinear) for m in t.model.modules()) == 2 * t.model.config.num_hidden_layers


@pytest.mark.parametrize(("override", "message"), [
    ("trainer.lora_rank=-1", "trainer.lora_rank: expected an integer >= 0"),
    ("trainer.lora_alpha=0", "trainer.lora_alpha: expected a number > 0"),
    ("trainer.lora_targets=[]", "trainer.lora_targets: expected a non-empty list"),
])
def test_bad_lora_settings_are_refused_before_anything_starts(override, message):
    from roll_agentic.hydra_config import load_config

    extra = [] if override.startswith("trainer.lora_rank") else ["trainer.lora_rank=8"]
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_config([*extra, override])


@pytest.mark.slow
def test_a_lora_run_trains_syncs_its_engines_resumes_and_exports(tmp_path, tiny_model_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from roll_agentic.hydra_config import load_config
    from roll_agentic.model.export import export_checkpoint
    from roll_agentic.train.job import TrainingJob

    def cfg(*extra):
        return load_config([
            f"output_dir={tmp_path}", "run_name=lora", "engine=hf", "trainer.total_steps=2",
            "trainer.lora_rank=8", "trainer.lr=2e-2", "algo.groups_per_step=2", "tasks.0.group_size=4",
            "tasks.1.group_size=4", "rollout.num_workers=1", "rollout.groups_in_flight=2",
            "telemetry.progress=false", *extra])

    TrainingJob(cfg()).run()
    # Resumed without its LoRA settings: refused before anything starts, with the overrides to pass.
    plain = cfg("trainer.total_steps=3", "trainer.resume=true", "trainer.lora_rank=0")
    with pytest.raises(ValueError, match=r"resume it with trainer.lora_rank=8$"):
        TrainingJob(plain).run()
    TrainingJob(cfg("trainer.total_steps=3", "trainer.resume=true")).run()
    run = tmp_path / "lora"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["train/tokens"] > 0 for r in rows)
    # On-policy up to the staleness bound: the engines sampled with the merged weights the
    # trainer scores with (a wrong merge would show as a large logprob gap).
    assert all(r["train/logprob_diff"] < 0.05 for r in rows if r["rollout/staleness_max"] == 0)
    export_checkpoint(run, tmp_path / "policy")
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "policy").state_dict()
    trained = load_file(run / "checkpoints" / "step_000003" / "weights.safetensors")
    assert trained.keys() <= exported.keys() and not any("lora" in k for k in exported)
    assert all(torch.equal(exported[k], v) for k, v in trained.items())


@pytest.mark.slow
def test_two_data_parallel_lora_workers_match_one_process(tiny_model_path):
    import ray

    from roll_agentic.cluster import init_ray
    from roll_agentic.config import RayConfig
    from roll_agentic.train.parallel import DataParallelTrainer
    from tests.train.batches import DP_WEIGHT_TOLERANCE

    init_ray(RayConfig(num_cpus=4))
    try:
        dp = DataParallelTrainer(tiny_model_path, TrainerConfig(lr=1e-2, lora_rank=4, num_workers=2,
                                                                micro_batch_size=4), AlgoConfig())
        single = PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, lora_rank=4, micro_batch_size=4),
                               AlgoConfig())
        for step in range(2):
            dp.train_step(random_batch(step))
            single.train_step(random_batch(step))
            a, b = dp.parameters_per_worker()
            assert torch.equal(a, b), f"workers diverged at step {step}"
        merged_dp, merged_single = dp.engine_state_dict(), single.engine_state_dict()
        assert max(float((merged_dp[k] - merged_single[k]).abs().max()) for k in merged_single) < DP_WEIGHT_TOLERANCE
        dp.close()
    finally:
        ray.shutdown()


@pytest.mark.parametrize("whole", [[], ["embed_tokens"]])
def test_the_kl_reference_is_the_base_with_adapters_off_and_no_second_copy(tiny_model_path, whole):
    """With modules trained whole (a tied embedding here), the adapters off left them trained:
    the reference followed the policy and the KL term shrank toward 0."""
    from dataclasses import replace

    from roll_agentic.train.trainer import reference_model

    algo = AlgoConfig(kl_coef=0.1)
    cfg = replace(LORA, lora_full_modules=whole)
    own = PolicyTrainer(tiny_model_path, cfg, algo)
    assert own.ref_model is None  # no copy of the frozen weights kept for the KL term
    copied = PolicyTrainer(tiny_model_path, cfg, algo)
    copied.ref_model = reference_model(tiny_model_path, "cpu")  # the full fine-tune's way
    for seed in range(3):
        a, b = own.train_step(random_batch(seed)), copied.train_step(random_batch(seed))
        assert a["train/kl"] == pytest.approx(b["train/kl"], rel=1e-4, abs=1e-9)
    assert a["train/kl"] > 0  # the policy moved away from the base, and the term sees it
    # Adapters are back on after each reference pass: both trainers took the same steps.
    x, y = own.engine_state_dict(), copied.engine_state_dict()
    assert max(float((x[k] - y[k]).abs().max()) for k in x) < 1e-5


def test_modules_trained_whole_beside_the_adapters_train_and_resume(tiny_model_path, tmp_path):
    cfg = TrainerConfig(lr=1e-2, lora_rank=4, lora_full_modules=["embed_tokens"])
    trainer = PolicyTrainer(tiny_model_path, cfg, AlgoConfig())
    emb = "model.embed_tokens.weight"
    before = trainer.engine_state_dict()[emb].clone()  # on the CPU the state aliases the parameter
    weights, state = _checkpoint(trainer, tmp_path)
    assert not torch.equal(weights[emb], before)  # trained whole
    assert emb in state["lora"]  # a resume cannot rebuild it from the base
    resumed = PolicyTrainer(tiny_model_path, cfg, AlgoConfig())
    resumed.load_state(state, weights)
    assert torch.equal(resumed.engine_state_dict()[emb], weights[emb])
    for wrong in ("embeddings", "1"):  # "1": a list position (layers.1), not a module's name
        with pytest.raises(ValueError, match=rf"lora_full_modules \['{wrong}'\] name no module of the model"):
            PolicyTrainer(tiny_model_path, TrainerConfig(lora_rank=4, lora_full_modules=[wrong]), AlgoConfig())


def test_a_resume_with_other_lora_settings_names_the_runs_own():
    from roll_agentic.train.resume_record import lora_mismatch

    run = {"trainer.lora_rank": 8, "trainer.lora_alpha": 32.0, "trainer.lora_targets": ["q_proj", "v_proj"],
           "trainer.lora_full_modules": []}
    assert lora_mismatch(run, dict(run)) is None
    assert lora_mismatch({"trainer.lora_rank": 0}, {"trainer.lora_rank": 0}) is None
    assert lora_mismatch({}, {"trainer.lora_rank": 0}) is None  # a run from before LoRA
    now = {**run, "trainer.lora_rank": 0, "trainer.lora_targets": ["q_proj"]}
    assert lora_mismatch(run, now).endswith("resume it with trainer.lora_rank=8 'trainer.lora_targets=[q_proj,v_proj]'")
    assert "trained every weight" in lora_mismatch({"trainer.lora_rank": 0}, run)


@pytest.mark.slow
def test_two_fsdp_lora_workers_match_one_process_and_resume(tiny_model_path):
    """Under FSDP2 (gloo on the CPU here) the adapters are sharded like any parameter: the
    merged weights, the adapters and their optimizer state are gathered whole, and loaded
    back shard by shard."""
    import ray

    from roll_agentic.cluster import init_ray
    from roll_agentic.config import RayConfig
    from roll_agentic.train.parallel import DataParallelTrainer
    from tests.train.batches import DP_WEIGHT_TOLERANCE

    # The KL term on, with a module trained whole: its reference values are sharded too.
    algo = AlgoConfig(kl_coef=0.1)

    def one_process():
        return PolicyTrainer(tiny_model_path, TrainerConfig(lr=1e-2, lora_rank=4, micro_batch_size=4,
                                                            lora_full_modules=["embed_tokens"]), algo)

    def worst(a: dict, b: dict) -> float:
        assert a.keys() == b.keys()
        return max(float((a[k] - b[k]).abs().max()) for k in a)

    init_ray(RayConfig(num_cpus=4))
    cfg = TrainerConfig(lr=1e-2, lora_rank=4, num_workers=2, micro_batch_size=4, strategy="fsdp",
                        lora_full_modules=["embed_tokens"])
    fsdp = resumed = None
    try:
        fsdp, single = DataParallelTrainer(tiny_model_path, cfg, algo), one_process()
        for step in range(3):
            m_fsdp, m_single = fsdp.train_step(random_batch(step, 11)), single.train_step(random_batch(step, 11))
            assert m_fsdp["train/loss"] == pytest.approx(m_single["train/loss"], rel=1e-5)
            assert m_fsdp["train/grad_norm"] == pytest.approx(m_single["train/grad_norm"], rel=1e-4)
            assert m_fsdp["train/kl"] == pytest.approx(m_single["train/kl"], rel=1e-3, abs=1e-9)
        assert m_single["train/kl"] > 0
        weights, state = fsdp.engine_state_dict(), fsdp.state()
        assert not any("lora" in k for k in weights)  # merged, under the model's own names
        assert worst(weights, single.engine_state_dict()) < DP_WEIGHT_TOLERANCE
        assert all(isinstance(v, torch.Tensor) and not hasattr(v, "full_tensor") for v in state["lora"].values())
        fsdp.close()
        fsdp = None
        resumed, again = DataParallelTrainer(tiny_model_path, cfg, algo), one_process()
        resumed.load_state(state, weights)
        again.load_state(single.state(), single.engine_state_dict())
        resumed.train_step(random_batch(7, 11))
        again.train_step(random_batch(7, 11))
        assert worst(resumed.engine_state_dict(), again.engine_state_dict()) < DP_WEIGHT_TOLERANCE
    finally:
        for t in (fsdp, resumed):
            if t is not None:
                t.close()
        ray.shutdown()


def test_a_runs_trainer_form_names_what_a_trainer_must_be_built_as_to_take_its_state(tmp_path):
    """Equal forms swap states into one trainer (the multiplexer's warm switch); any LoRA
    setting, or the base (however its path is spelled), makes another form."""
    (tmp_path / "m").mkdir()
    lora = TrainerConfig(lora_rank=8, lora_targets=["q_proj", "v_proj"], lora_full_modules=["embed_tokens"])
    assert form_of(str(tmp_path / "m"), TrainerConfig()) == form_of("elsewhere", TrainerConfig()) == "full"
    form = form_of(str(tmp_path / "m"), lora)
    assert form.startswith("lora r=8 alpha=32 on q_proj,v_proj + embed_tokens whole of ") and str(tmp_path) in form
    assert form_of(str(tmp_path / "x" / ".." / "m"), lora) == form
    for other in (TrainerConfig(lora_rank=4, lora_targets=["q_proj", "v_proj"], lora_full_modules=["embed_tokens"]),
                  TrainerConfig(lora_rank=8, lora_targets=["q_proj"], lora_full_modules=["embed_tokens"]),
                  TrainerConfig(lora_rank=8, lora_alpha=16, lora_targets=["q_proj", "v_proj"],
                                lora_full_modules=["embed_tokens"])):
        assert form_of(str(tmp_path / "m"), other) != form
    assert form_of(str(tmp_path / "other"), lora) != form
