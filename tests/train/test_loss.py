import math

import pytest
import torch

from roll_agentic.train.loss import ppo_clip_loss_sum, token_logprobs, token_logprobs_and_entropy


def test_ppo_clip_hand_computed():
    # token 0: ratio e^0.1 = 1.10517 inside the clip range, A=1 -> -1.10517
    # token 1: ratio e^0.3 = 1.34986 > 1.2, A=1 -> max(-1.34986, -1.2) = -1.2 (clipped)
    # token 2: mask 0 -> ignored
    lp = torch.tensor([[0.1, 0.3, 5.0]])
    old = torch.zeros(1, 3)
    mask = torch.tensor([[1, 1, 0]])
    s = ppo_clip_loss_sum(lp, old, torch.tensor([1.0]), mask, clip_eps=0.2)
    assert s.loss.item() == pytest.approx(-math.exp(0.1) - 1.2, abs=1e-5)
    assert s.tokens == 2
    assert s.clipped == 1


def test_ppo_clip_negative_advantage():
    # A=-1, ratio 0.7 < 0.8: unclipped 0.7, clipped 0.8 -> max = 0.8
    lp = torch.tensor([[math.log(0.7)]])
    s = ppo_clip_loss_sum(lp, torch.zeros(1, 1), torch.tensor([-1.0]), torch.ones(1, 1), clip_eps=0.2)
    assert s.loss.item() == pytest.approx(0.8, abs=1e-6)


def test_gradient_only_through_unclipped_tokens():
    lp = torch.tensor([[0.1, 0.3]], requires_grad=True)
    s = ppo_clip_loss_sum(lp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), clip_eps=0.2)
    s.loss.backward()
    assert lp.grad[0, 0].item() == pytest.approx(-math.exp(0.1), abs=1e-5)
    assert lp.grad[0, 1].item() == 0.0  # clipped: no gradient


def test_kl_k3_term():
    lp = torch.tensor([[0.0]])
    ref = torch.tensor([[math.log(0.5)]])
    # d = ref - lp = -0.693; k3 = e^d - d - 1 = 0.5 + 0.693 - 1 = 0.19315
    s = ppo_clip_loss_sum(lp, torch.zeros(1, 1), torch.tensor([0.0]), torch.ones(1, 1), 0.2, ref, kl_coef=2.0)
    assert s.kl == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)
    assert s.loss.item() == pytest.approx(2.0 * (0.5 + math.log(2) - 1), abs=1e-6)


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_an_impossible_token_or_a_huge_kl_leaves_loss_and_gradients_finite(advantage):
    """A behaviour logprob of -inf on a trained token (the ratio was inf, its gradient nan,
    and clip_grad_norm_ spread the nan to every weight), -inf outside the mask (-inf * 0 was
    nan), and a reference 100 nats above the policy (exp overflowed in the k3 term)."""
    lp = torch.tensor([[-1.0, -2.0, -0.5, -3.0]], requires_grad=True)
    old = torch.tensor([[-float("inf"), -2.1, -float("inf"), -3.0]])
    ref = torch.tensor([[-1.0, 98.0, 0.0, -3.0]])
    mask = torch.tensor([[1, 1, 0, 1]])
    s = ppo_clip_loss_sum(lp, old, torch.tensor([advantage]), mask, 0.2, ref, kl_coef=0.1)
    s.loss.backward()
    assert math.isfinite(s.loss.item()) and math.isfinite(s.kl)
    assert torch.isfinite(lp.grad).all() and lp.grad[0, 2] == 0.0
    # the tokens within range are scored as before the clamp
    plain = ppo_clip_loss_sum(lp[:, 3:], old[:, 3:], torch.tensor([advantage]), mask[:, 3:], 0.2, ref[:, 3:],
                              kl_coef=0.1)
    assert plain.loss.item() == pytest.approx(-advantage, abs=1e-6)


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_a_token_past_the_ratio_limit_trains_nothing_and_leaves_the_metrics_readable(advantage):
    """Its gradient was 0 already, but for A < 0 its term, |A| e^20, made `train/loss` and
    `train/ratio_mean` 4.9e8 and `train/logprob_diff` inf."""
    lp = torch.tensor([[0.0, -1.0, -0.5, -float("inf")]], requires_grad=True)
    old = torch.tensor([[0.0, -float("inf"), -0.5, -0.7]])  # -inf behaviour; a token the nucleus left
    mask = torch.tensor([[0, 1, 1, 1]])
    s = ppo_clip_loss_sum(lp, old, torch.tensor([advantage]), mask, 0.2)
    s.loss.backward()
    assert s.at_limit == 1.0 and s.tokens == 3.0
    # ratio 1 on the in-range token; 0 on the one the nucleus left (clipped up to 0.8 for A < 0)
    assert s.loss.item() == pytest.approx(-1.0 if advantage > 0 else 1.8, abs=1e-6)
    assert s.ratio == pytest.approx(1.0) and s.logprob_abs_diff == pytest.approx(20.0)
    assert lp.grad[0, 1] == 0.0 and lp.grad[0, 2] == pytest.approx(-advantage)


def test_token_logprobs_shift():
    logits = torch.zeros(1, 3, 4)
    logits[0, 0, 2] = 10.0  # position 0 predicts token 2
    ids = torch.tensor([[1, 2, 3]])
    lp = token_logprobs(logits, ids)
    assert lp.shape == (1, 3)
    assert lp[0, 0].item() == 0.0
    assert lp[0, 1].item() == pytest.approx(torch.log_softmax(logits[0, 0], -1)[2].item())
    assert lp[0, 2].item() == pytest.approx(math.log(0.25), abs=1e-6)


def test_entropy_of_each_sampling_distribution_and_its_bonus():
    logits = torch.zeros(1, 3, 4)  # position 0: uniform over 4 tokens -> entropy ln 4
    logits[0, 1] = torch.tensor([0.0, 0.0, -1e4, -1e4])  # position 1: two live tokens -> ln 2
    ids = torch.tensor([[1, 2, 0]])
    lp, ent = token_logprobs_and_entropy(logits, ids)
    assert ent[0, 0].item() == 0.0  # nothing was sampled before the first token
    assert ent[0, 1].item() == pytest.approx(math.log(4), abs=1e-5)
    assert ent[0, 2].item() == pytest.approx(math.log(2), abs=1e-5)
    mask = torch.tensor([[0, 1, 1]])
    plain = ppo_clip_loss_sum(lp, lp.detach(), torch.tensor([0.0]), mask, 0.2, entropy=ent)
    bonus = ppo_clip_loss_sum(lp, lp.detach(), torch.tensor([0.0]), mask, 0.2, entropy=ent, entropy_coef=0.5)
    assert plain.entropy == pytest.approx(math.log(4) + math.log(2), abs=1e-5)
    assert plain.loss.item() == pytest.approx(0.0, abs=1e-6)  # A = 0: the surrogate is 0
    assert bonus.loss.item() == pytest.approx(-0.5 * (math.log(4) + math.log(2)), abs=1e-5)


def test_clip_higher_raises_only_the_upper_bound():
    # eps 0.2, eps_high 0.28, A=1: ratio e^0.2 = 1.221 is no longer clipped (it was at 1.2);
    # ratio e^0.25 = 1.284 is past 1.28, so clipped there.
    lp = torch.tensor([[0.2, 0.25]], requires_grad=True)
    s = ppo_clip_loss_sum(lp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), 0.2, clip_eps_high=0.28)
    assert s.loss.item() == pytest.approx(-math.exp(0.2) - 1.28, abs=1e-5)
    assert s.clipped == 1
    s.loss.backward()
    assert lp.grad[0, 0].item() == pytest.approx(-math.exp(0.2), abs=1e-5) and lp.grad[0, 1].item() == 0.0
    # the lower bound is clip_eps's: A=-1, ratio 0.7 -> 0.8
    low = ppo_clip_loss_sum(torch.tensor([[math.log(0.7)]]), torch.zeros(1, 1), torch.tensor([-1.0]),
                            torch.ones(1, 1), 0.2, clip_eps_high=0.28)
    assert low.loss.item() == pytest.approx(0.8, abs=1e-6)


def test_dual_clip_caps_a_negative_advantage_token_and_stops_its_gradient():
    # A=-2, ratio e^2 = 7.39: PPO's loss 14.78, dual clip c=3 caps it at 6 with no gradient;
    # ratio e^0.5 = 1.65 (loss 3.30 < 6) keeps PPO's value and gradient.
    lp = torch.tensor([[2.0, 0.5]], requires_grad=True)
    s = ppo_clip_loss_sum(lp, torch.zeros(1, 2), torch.tensor([-2.0]), torch.ones(1, 2), 0.2, dual_clip=3.0)
    assert s.loss.item() == pytest.approx(6.0 + 2 * math.exp(0.5), abs=1e-5)
    assert s.clipped == 1
    s.loss.backward()
    assert lp.grad[0, 0].item() == 0.0 and lp.grad[0, 1].item() == pytest.approx(2 * math.exp(0.5), abs=1e-5)
    # a positive advantage is left to PPO's clip alone
    pos = ppo_clip_loss_sum(torch.tensor([[2.0]]), torch.zeros(1, 1), torch.tensor([2.0]), torch.ones(1, 1), 0.2,
                            dual_clip=3.0)
    assert pos.loss.item() == pytest.approx(-2.4, abs=1e-6)


def test_sequence_mean_weighs_each_row_alike():
    # row 0: one token of loss -1 (ratio 1, A=1); row 1: three tokens, A=-1 -> +1 each;
    # a padded row with no trained token counts for nothing.
    lp = torch.zeros(3, 3)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1], [0, 0, 0]])
    adv = torch.tensor([1.0, -1.0, 5.0])
    tok = ppo_clip_loss_sum(lp, torch.zeros(3, 3), adv, mask, 0.2)
    seq = ppo_clip_loss_sum(lp, torch.zeros(3, 3), adv, mask, 0.2, loss_agg="seq_mean_token_mean")
    assert tok.loss.item() == pytest.approx(2.0) and tok.tokens == 4
    assert seq.loss.item() == pytest.approx(0.0, abs=1e-6) and seq.rows == 2  # (-1 + 1) over 2 rows: 0
    assert seq.policy == tok.policy == pytest.approx(2.0)  # the metric sums stay over tokens
    with pytest.raises(ValueError, match="loss_agg must be one of"):
        ppo_clip_loss_sum(lp, torch.zeros(3, 3), adv, mask, 0.2, loss_agg="sum")
