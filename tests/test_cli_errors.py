"""An argument a command does not know is named with that command's usage, and the closest option."""

import pytest

from roll_agentic.cli import main


def test_a_typo_in_a_sub_command_flag_shows_its_usage_and_the_flag_meant(capsys):
    with pytest.raises(SystemExit) as ended:
        main(["sim", "compare", "--jbos", "30"])
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: roll-agentic sim compare")
    assert "roll-agentic sim compare: error: unrecognized arguments: --jbos 30 (did you mean --jobs?)" in err


def test_an_extra_word_is_named_without_a_guess(capsys):
    with pytest.raises(SystemExit):
        main(["sim", "scale", "--jobs", "10", "extra"])
    err = capsys.readouterr().err
    assert "roll-agentic sim scale: error: unrecognized arguments: extra" in err and "did you mean" not in err
