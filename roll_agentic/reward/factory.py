"""The reward client a run's RewardConfig asks for."""

from __future__ import annotations

from roll_agentic.config import RewardConfig
from roll_agentic.reward.local import LocalRewardClient
from roll_agentic.reward.outcome import RewardClient


def make_reward_client(cfg: RewardConfig, endpoint_url: str = "") -> RewardClient:
    """`local`: rewards.<function> in this process. `serverless`: Lambda Invoke at `endpoint_url`,
    else cfg.endpoint_url (the emulator from LocalServerless, or e.g. AWS's regional endpoint)."""
    if cfg.mode == "local":
        return LocalRewardClient(max_concurrency=cfg.max_concurrency, timeout_s=cfg.timeout_s)
    if cfg.mode != "serverless":
        raise ValueError(f"reward.mode: expected local or serverless, got {cfg.mode!r}")
    url = endpoint_url or cfg.endpoint_url
    if not url:
        raise ValueError(
            "reward.mode=serverless needs an endpoint: set reward.endpoint_url, or start the local "
            "emulator (roll_agentic.reward.LocalServerless().start(state_dir)) and pass its URL"
        )
    from roll_agentic.reward.lambda_client import ServerlessRewardClient

    return ServerlessRewardClient(
        url, region=cfg.region, function_prefix=cfg.function_prefix, max_concurrency=cfg.max_concurrency,
        max_retries=cfg.max_retries, timeout_s=cfg.timeout_s,
    )
