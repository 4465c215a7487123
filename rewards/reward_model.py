"""A learned reward's shape in a serverless function: a torch MLP over hashed bag-of-tokens features.

What it is for: a reward that imports torch at init and loads a model once per
warm environment, as a reward model deployed to Lambda does (the serverless
benchmark's heavy reward). Its built-in weights are untrained: made from seed 0,
they score every text deterministically, and mean nothing. To score for real,
train a state dict of this shape for your task and name its file in
$REWARD_MODEL_WEIGHTS (a file of another shape is refused, naming both).

Features: the summary's `text` (else the whole summary as sorted JSON) split
into word and punctuation tokens, each hashed (BLAKE2b, stable across
processes) into one of FEATURES buckets; the counts are log1p-scaled. The
model is Linear(FEATURES, HIDDEN) -> tanh -> Linear(HIDDEN, 1) -> sigmoid, so
the reward lies in (0, 1).

The model loads once per process (a warm Lambda environment keeps it; the
module-level cache is what makes warm invocations cheap). The seed-0 weights
come from a private generator (the caller's RNG is left alone), so every
environment and the in-process client score identically, with no file
shared between them (a file in a shared temp folder could be planted, or be
left over from another shape).
"""

import hashlib
import json
import math
import os
import re
import threading

import torch  # at import time: Lambda's init phase, paid once per environment
from torch import nn

LAMBDA_MEMORY_MB = 1024  # torch's CPU libraries alone take ~225 MB resident
LAMBDA_TIMEOUT_S = 60
FEATURES = 512
HIDDEN = 32
SEED = 0
_TOKEN = re.compile(r"\w+|[^\w\s]")

_MODEL = None
_LOADS = 0  # how many times this process built or loaded the model
_LOCK = threading.Lock()


def featurize(text: str):
    """(1, FEATURES) float tensor of log1p token counts per hash bucket."""
    x = torch.zeros(1, FEATURES)
    for tok in _TOKEN.findall(text.lower()):
        h = int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=8).digest(), "little")
        x[0, h % FEATURES] += 1.0
    return torch.log1p(x)


def _build():
    g = torch.Generator().manual_seed(SEED)
    with torch.random.fork_rng(devices=[]):  # nn.Linear's own init draws from the global RNG
        model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    with torch.no_grad():
        for layer in (model[0], model[2]):
            bound = 1.0 / math.sqrt(layer.in_features)
            layer.weight.copy_((torch.rand(layer.weight.shape, generator=g) * 2 - 1) * bound)
            layer.bias.copy_((torch.rand(layer.bias.shape, generator=g) * 2 - 1) * bound)
    return model


def load_model():
    """The process-wide model, built (and loaded from $REWARD_MODEL_WEIGHTS, if set) on first use."""
    global _MODEL, _LOADS
    with _LOCK:
        if _MODEL is not None:
            return _MODEL
        model = _build()
        path = os.environ.get("REWARD_MODEL_WEIGHTS")
        if path:
            model.load_state_dict(_weights(path))
        model.eval()
        _MODEL, _LOADS = model, _LOADS + 1
        return model


def _weights(path: str) -> dict:
    """The state dict in `path`, checked against this model's shapes."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"REWARD_MODEL_WEIGHTS={path} does not exist")
    state = torch.load(path, map_location="cpu", weights_only=True)
    want = {k: tuple(v.shape) for k, v in _build().state_dict().items()}
    got = {k: tuple(v.shape) for k, v in state.items()} if isinstance(state, dict) else None
    if got != want:
        raise ValueError(f"REWARD_MODEL_WEIGHTS={path} holds {got}, not this model's state dict {want} "
                         f"(FEATURES={FEATURES}, HIDDEN={HIDDEN})")
    return state


def _text(summary: dict) -> str:
    text = summary.get("text")
    return text if isinstance(text, str) else json.dumps(summary, sort_keys=True, default=str)


def reward(summary: dict) -> float:
    model = load_model()
    with torch.inference_mode():
        return float(torch.sigmoid(model(featurize(_text(summary))))[0, 0])


def handler(event, context):
    if _MODEL is None:
        torch.set_num_threads(1)  # one request per environment: no thread pool to fill
    summary = json.loads(event) if isinstance(event, str) else event
    return {"reward": reward(summary), "model_loads": _LOADS}
