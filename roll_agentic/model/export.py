"""A run's checkpoint as a Hugging Face model directory: the policy a user takes away.

A checkpoint (`train/checkpoint.py`) holds the policy's weights under
Hugging Face names, the optimizer state and the run's counters: enough to
resume, but no config or tokenizer, so nothing outside roll-agentic could
load it. `export_checkpoint` writes a directory that transformers
(`from_pretrained`), vLLM (`LLM(model=...)`) and a new roll-agentic run
(`model.path=`) load as they load the base model: the base model's
config, generation config, tokenizer and chat template, with the trained
weights in place of its own, in the base model's dtype unless told
otherwise. The weights are checked tensor by tensor against the base
model's (names and shapes) before anything is written, and the directory
appears whole or not at all.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from roll_agentic.train.checkpoint import checkpoint_name, latest_checkpoint, load_run_state

WEIGHTS = "weights.safetensors"
# The base model's own weights: never copied (the trained ones take their place).
_WEIGHT_FILE = re.compile(r".*\.(safetensors|bin|pt|pth|h5|msgpack|ckpt|gguf)$|.*\.index\.json$")
# The tiny model's build stamp (`model/tiny.py`): it describes that build, not the export.
_NOT_COPIED = {"roll_agentic_tiny.json"}
DTYPES = ("auto", "float32", "bfloat16", "float16")


class ExportError(ValueError):
    """A checkpoint that cannot be exported, said in one line naming what to change."""


@dataclass(frozen=True)
class Exported:
    out: Path
    checkpoint: Path
    step: int
    base: Path
    dtype: str
    tensors: int
    bytes: int


def find_checkpoint(source: str | Path, step: int | None = None) -> Path:
    """The checkpoint of `source`: a run directory (its newest, or `step`) or a checkpoint itself."""
    src = Path(source)
    if (src / WEIGHTS).is_file():
        if step is not None and src.name != checkpoint_name(step):
            raise ExportError(f"{src} is the checkpoint of {src.name}, not of step {step}; drop --step "
                              "or name the run directory")
        return src
    root = src / "checkpoints"
    if not src.exists():
        close = difflib.get_close_matches(src.name, _entries(src.parent), n=1, cutoff=0.6)
        raise ExportError(f"{src} does not exist" + (f" (did you mean {src.parent / close[0]}?)" if close else
                          ": give a run directory (the `run dir:` a run prints) or one of its checkpoints"))
    if not root.is_dir():
        raise ExportError(f"{src} is neither a run directory (no checkpoints/ in it) nor a checkpoint "
                          f"(no {WEIGHTS} in it)")
    if step is None:
        ckpt = latest_checkpoint(root)
        if ckpt is None:
            raise ExportError(f"{src} has no complete checkpoint yet (a run saves one every "
                              "trainer.save_every steps and when it stops)")
        return ckpt
    ckpt = root / checkpoint_name(step)
    if not (ckpt / WEIGHTS).is_file():
        kept = sorted(p.name for p in root.glob("step_*") if (p / WEIGHTS).is_file())
        raise ExportError(f"{src} keeps no checkpoint of step {step}; it keeps {', '.join(kept) or 'none'} "
                          "(trainer.keep_checkpoints sets how many)")
    return ckpt


def base_model_of(ckpt: Path, base: str | Path | None = None) -> Path:
    """The model the run started from: `base` if given, else the one its checkpoint or config names."""
    if base is not None:
        candidates = [Path(base)]
    else:
        candidates = []
        try:  # recorded by runs since checkpoints carried it: the resolved path
            recorded = load_run_state(ckpt).get("model_path")
        except (OSError, ValueError):
            recorded = None
        if recorded:
            candidates.append(Path(recorded))
        config = ckpt.parent.parent / "config.json"  # <run>/checkpoints/step_N
        if config.is_file():
            model = json.loads(config.read_text()).get("model", {})
            # Relative paths as the run read them: from the folder it was started in.
            candidates.append(Path(model.get("path") or model.get("tiny_dir") or ".cache/tiny-model"))
    for c in candidates:
        if (c / "config.json").is_file():
            return c.resolve()
    tried = ", ".join(str(c) for c in candidates) or "nothing recorded"
    raise ExportError(f"the base model of {ckpt} is not found (looked at: {tried}); pass --base DIR, the "
                      "model.path the run trained from (its config, tokenizer and weight names are the export's)")


def _base_tensors(base: Path) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the base model's weights, read from their headers alone."""
    from safetensors import safe_open

    index = base / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in base.glob("*.safetensors"))
    if not files:  # weights in another format (.bin): the names and shapes its config builds
        return _built_tensors(base)
    shapes: dict[str, tuple[int, ...]] = {}
    for name in files:
        with safe_open(str(base / name), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                shapes[key] = tuple(f.get_slice(key).get_shape())
    return shapes


def _built_tensors(base: Path) -> dict[str, tuple[int, ...]]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        with torch.device("meta"):  # shapes only: no memory for the weights
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(base))
    except (ValueError, OSError, KeyError) as err:
        raise ExportError(f"the base model {base} has no safetensors weights, and transformers cannot build "
                          f"it from its config ({err}); pass --base DIR, a model directory") from None
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _check_fits(weights: dict, base_shapes: dict[str, tuple[int, ...]], tied: bool, ckpt: Path, base: Path) -> None:
    expected = dict(base_shapes)
    if tied:  # saved or not, the tied head is the embedding (the export leaves it out)
        expected.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(weights))
    extra = sorted(set(weights) - set(expected))
    wrong = sorted(k for k in set(expected) & set(weights) if tuple(weights[k].shape) != expected[k])
    if missing or extra or wrong:
        parts = [f"{len(missing)} missing (e.g. {missing[0]})" if missing else "",
                 f"{len(extra)} not in it (e.g. {extra[0]})" if extra else "",
                 f"{len(wrong)} of other shapes (e.g. {wrong[0]}: {tuple(weights[wrong[0]].shape)} against "
                 f"{expected[wrong[0]]})" if wrong else ""]
        raise ExportError(f"the weights of {ckpt} do not fit the base model {base}: "
                          f"{'; '.join(p for p in parts if p)}; pass --base DIR, the model the run trained from")


def _tied(base: Path, text_config: dict) -> bool:
    """Whether the base model's head is its embedding: as transformers reads its config (a key
    left out takes the model class's default, which differs between classes)."""
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(base)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        return bool(getattr(text, "tie_word_embeddings", False))
    except (ValueError, OSError, KeyError):  # a model type this transformers does not know
        return bool(text_config.get("tie_word_embeddings", False))


def _dtype_of(config: dict) -> str:
    text = config.get("text_config") or {}
    return str(config.get("torch_dtype") or config.get("dtype") or text.get("torch_dtype") or "float32")


def _set_dtype(config: dict, dtype: str) -> None:
    keys = [k for k in ("torch_dtype", "dtype") if k in config] or ["torch_dtype"]
    config.update(dict.fromkeys(keys, dtype))
    text = config.get("text_config")
    if isinstance(text, dict):
        text.update({k: dtype for k in ("torch_dtype", "dtype") if k in text})


def export_checkpoint(source: str | Path, out: str | Path, step: int | None = None,
                      base: str | Path | None = None, dtype: str = "auto") -> Exported:
    """Writes the checkpoint of `source` (see `find_checkpoint`) to `out` as a Hugging Face model.

    `dtype` "auto" keeps the base model's (a policy trained in float32 on a bfloat16 base is
    exported as bfloat16, the size of the base); any other of `DTYPES` casts to it and says so
    in the config.
    """
    import torch
    from safetensors.torch import load_file, save_file

    if dtype not in DTYPES:
        raise ExportError(f"dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not empty; export to a new directory")
    ckpt = find_checkpoint(source, step)
    base_dir = base_model_of(ckpt, base)
    config = json.loads((base_dir / "config.json").read_text())
    text_config = config.get("text_config") or config
    weights = load_file(str(ckpt / WEIGHTS))
    tied = _tied(base_dir, text_config)
    if tied:
        weights.pop("lm_head.weight", None)
    _check_fits(weights, _base_tensors(base_dir), tied, ckpt, base_dir)
    target = _dtype_of(config) if dtype == "auto" else dtype
    if target not in DTYPES[1:]:
        raise ExportError(f"the base model's dtype {target!r} is not one to export in; pass --dtype "
                          f"({', '.join(DTYPES[1:])})")
    cast = getattr(torch, target)
    weights = {k: (v.to(cast) if v.is_floating_point() else v).contiguous() for k, v in weights.items()}

    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        for item in base_dir.iterdir():  # config, generation config, tokenizer, chat template
            if item.is_file() and not _WEIGHT_FILE.fullmatch(item.name) and item.name not in _NOT_COPIED \
                    and not item.name.startswith("."):
                shutil.copy2(item, partial / item.name)
        if dtype != "auto":  # the config says what the weights are
            _set_dtype(config, target)
            (partial / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        save_file(weights, str(partial / "model.safetensors"), metadata={"format": "pt"})
        umask = os.umask(0)
        os.umask(umask)
        # Readable as the copied files are (safetensors writes 0600): a model directory is shared.
        os.chmod(partial / "model.safetensors", 0o666 & ~umask)
        os.chmod(partial, 0o777 & ~umask)
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.replace(partial, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    run_step = int(ckpt.name.removeprefix("step_")) if ckpt.name.removeprefix("step_").isdigit() else -1
    return Exported(out=out, checkpoint=ckpt, step=run_step, base=base_dir, dtype=target, tensors=len(weights),
                    bytes=(out / "model.safetensors").stat().st_size)


def _entries(folder: Path) -> list[str]:
    """The names in `folder`, or none if it cannot be listed."""
    try:
        return [p.name for p in folder.iterdir()]
    except OSError:
        return []
