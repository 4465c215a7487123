import math

import pytest
import torch

from roll_agentic.train.advantages import group_advantages, grpo_advantages


def test_hand_computed_group():
    # mean 0.5, sample std sqrt((4 * 0.25) / 3) = 0.57735 -> +-0.866025
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), eps=0.0)
    assert adv.tolist() == pytest.approx([0.866025, -0.866025, -0.866025, 0.866025], abs=1e-6)


def test_uneven_group():
    r = torch.tensor([0.9, 0.1, 0.2])
    mean = 0.4
    std = math.sqrt(((0.5) ** 2 + (0.3) ** 2 + (0.2) ** 2) / 2)
    expected = [(x - mean) / std for x in (0.9, 0.1, 0.2)]
    assert grpo_advantages(r, eps=0.0).tolist() == pytest.approx(expected, abs=1e-6)


def test_equal_rewards_give_zero_advantage():
    assert grpo_advantages(torch.tensor([0.5, 0.5, 0.5])).abs().max().item() == 0.0


def test_single_reward_is_refused():
    with pytest.raises(ValueError, match="at least 2"):
        grpo_advantages(torch.tensor([1.0]))


@pytest.mark.parametrize("value", [0.1, 0.3, 0.7, 1 / 3, 2.2, 1e-3])
@pytest.mark.parametrize("n", [2, 3, 6, 8])
@pytest.mark.parametrize("eps", [0.0, 1e-12, 1e-6])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_equal_but_inexact_rewards_give_exactly_zero_advantage(value, n, eps, dtype):
    # mean() of n copies of an inexact float can be off by an ulp: `centered` is then
    # ~1e-17 and `std` ~1e-17, so the advantages came out nan (eps=0) or O(1) (tiny eps)
    # instead of the documented 0 for a group that carries no signal.
    adv = grpo_advantages(torch.full((n,), value, dtype=dtype), eps=eps)
    assert torch.isfinite(adv).all()
    assert adv.abs().max().item() == 0.0


def test_grpo_without_std_only_centers():
    # Dr. GRPO: r - mean, whatever the spread
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), "grpo_no_std")
    assert adv.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_rloo_baseline_leaves_each_one_out():
    r = torch.tensor([1.0, 0.0, 0.5])
    expected = [1.0 - 0.25, 0.0 - 0.75, 0.5 - 0.5]  # r_i - mean of the other two
    assert group_advantages(r, "rloo").tolist() == pytest.approx(expected)


@pytest.mark.parametrize("estimator", ["grpo", "grpo_no_std", "rloo"])
def test_every_estimator_gives_a_tied_group_exactly_zero(estimator):
    assert group_advantages(torch.full((6,), 0.1, dtype=torch.float32), estimator).abs().max().item() == 0.0


def test_an_unknown_estimator_is_named():
    with pytest.raises(ValueError, match="one of grpo, grpo_no_std, rloo, not 'ppo'"):
        group_advantages(torch.tensor([1.0, 0.0]), "ppo")
