"""Reward clients: score a trajectory summary in process or on a Lambda-compatible service."""

from roll_agentic.reward.factory import make_reward_client
from roll_agentic.reward.lambda_client import ServerlessRewardClient
from roll_agentic.reward.local import LocalRewardClient
from roll_agentic.reward.outcome import RewardClient, RewardOutcome, parse_reward
from roll_agentic.reward.service import LocalServerless, deploy_rewards

__all__ = [
    "LocalRewardClient",
    "LocalServerless",
    "RewardClient",
    "RewardOutcome",
    "ServerlessRewardClient",
    "deploy_rewards",
    "make_reward_client",
    "parse_reward",
]
