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


def test_a_kill_between_the_two_renames_of_a_step_saved_again_loses_nothing(tmp_path, monkeypatch):
    """A step saved again (an interrupt's untrained save after a save) sets its first copy
    aside, then renames the new one in: killed between the two, with keep=1, the run had no
    checkpoint at all, and the next save swept both whole copies."""
    import os

    import pytest

    _save(tmp_path, 4, keep=1)
    real_replace, calls = os.replace, []

    def killed_after_setting_aside(src, dst):
        calls.append(dst)
        real_replace(src, dst)
        if ".tmp-old-" in str(dst):
            raise KeyboardInterrupt  # a second Ctrl-C, or SIGKILL, right there

    monkeypatch.setattr(os, "replace", killed_after_setting_aside)
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path, 4, keep=1)
    monkeypatch.setattr(os, "replace", real_replace)
    assert not (tmp_path / "step_000004").exists()  # as the kill left it
    assert latest_checkpoint(tmp_path).name == "step_000004"  # the set-aside copy, put back
    assert load_checkpoint(latest_checkpoint(tmp_path))[2]["step"] == 4
    _save(tmp_path, 5, keep=1)
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_000005"]
