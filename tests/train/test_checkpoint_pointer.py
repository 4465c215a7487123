"""`latest` against the step directories: a kill between a checkpoint's rename and its pointer."""

import torch

from roll_agentic.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint


def _save(root, step, keep=2):
    return save_checkpoint(root, step, {"w": torch.full((2,), float(step))}, {"step": step}, {"buffer": {}}, keep=keep)


def test_a_checkpoint_renamed_in_before_its_pointer_is_the_one_resumed(tmp_path):
    """Killed after step 4's directory was complete and renamed in, before `latest` named it:
    the resume went back to step 2 and redid two finished steps."""
    _save(tmp_path, 2)
    _save(tmp_path, 4)
    (tmp_path / "latest").write_text("step_000002")  # as the kill left it
    assert latest_checkpoint(tmp_path).name == "step_000004"
    assert load_checkpoint(latest_checkpoint(tmp_path))[2]["step"] == 4


def test_a_save_drops_checkpoints_of_steps_after_it_and_never_prunes_itself(tmp_path):
    """A run gone back to step 2 (a pointer left behind) and saving step 3 with keep=1: the
    prune kept step 4, of the abandoned steps, and deleted the step 3 just written, so the
    next resume loaded step 4 on top of a history that went on from step 2."""
    _save(tmp_path, 2)
    _save(tmp_path, 4)
    (tmp_path / "latest").write_text("step_000002")  # a run that went back to step 2 (before the fix above)
    _save(tmp_path, 3, keep=1)
    assert latest_checkpoint(tmp_path).name == "step_000003"
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_000003"]
