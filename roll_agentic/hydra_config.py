"""Hydra at the entry point only: compose conf/ + overrides into a validated Config.

Hydra's own errors are many lines; `load_config` turns each into one line
that names the key and what was expected.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    ConfigTypeError,
    OmegaConfBaseException,
    ValidationError,
)

from roll_agentic import config as schema
from roll_agentic.config import Config, ConfigError, validate

DEFAULT_CONF_DIR = Path(__file__).resolve().parent.parent / "conf"

_registered = False


def register_schema() -> None:
    global _registered
    if not _registered:
        ConfigStore.instance().store(name="base_config", node=Config)
        _registered = True


def _one_line(err: BaseException) -> str:
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, OmegaConfBaseException):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)):
        m = re.search(r"Key '([^']+)' not in '([^']+)'", str(cause))
        fm = re.search(r"full_key: (\S+)", str(cause))
        name = fm.group(1) if fm else (m.group(1) if m else "?")
        valid = ""
        cls = getattr(schema, m.group(2), None) if m else None
        if cls is not None and dataclasses.is_dataclass(cls):
            valid = "; valid keys here: " + ", ".join(f.name for f in dataclasses.fields(cls))
        return f"unknown config key '{name}'{valid}"
    if isinstance(cause, ConfigTypeError) and "Cannot merge" in str(cause):
        # A list where the schema has a mapping or the reverse; Hydra said only "Error merging override".
        key = getattr(cause, "full_key", "")
        override = str(err).splitlines()[0].removeprefix("Error merging override ")
        return (f"override {override}: a list [...] where a mapping {{...}} belongs, or the reverse"
                f"{f' (at {key!r})' if key else ''}; tasks is a list of mappings, e.g. tasks=[{{name:cliff,env_id:CliffWalking-v1}}], "
                "and env_kwargs a mapping, e.g. env_kwargs:{size:5}")
    if isinstance(cause, ValidationError):
        key = getattr(cause, "full_key", "") or "?"
        first = str(cause).splitlines()[0]
        return f"config key '{key}': {first}"
    if isinstance(err, MissingConfigException) or "Could not find" in str(err):
        m = re.search(r"Could not find '([^/']+)/([^']+)'", str(err))
        if m:
            group_dir = DEFAULT_CONF_DIR / m.group(1)
            options = sorted(p.stem for p in group_dir.glob("*.yaml"))
            return f"config group {m.group(1)} has no option '{m.group(2)}'; choose one of {options}"
        return f"{str(err).splitlines()[0]}"
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    if text.startswith("Error parsing override"):
        text += ": write key=value, e.g. trainer.total_steps=5"
    elif "noviablealt" in text.replace(" ", "").lower():  # the override grammar's words, e.g. tasks[0].x=1
        text = (f"cannot parse an override ({text.removeprefix('LexerNoViableAltException: ')}): write "
                "key=value; a list entry is key.N (tasks.0.group_size=4), a mapping {key:value,...}")
    return text


def load_config(overrides: list[str], config_dir: str | Path | None = None, config_name: str = "config") -> Config:
    """Composes and validates; raises ConfigError with one line on any bad key or value."""
    register_schema()
    conf_dir = Path(config_dir or DEFAULT_CONF_DIR).resolve()
    if not (conf_dir / f"{config_name}.yaml").exists():
        raise ConfigError(f"no {config_name}.yaml in {conf_dir}")
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base=None):
            composed = compose(config_name=config_name, overrides=list(overrides))
        obj = OmegaConf.to_object(composed)
    except (ConfigCompositionException, MissingConfigException, OmegaConfBaseException) as err:
        raise ConfigError(_one_line(err)) from None
    except Exception as err:  # hydra's override grammar errors and the like
        raise ConfigError(_one_line(err)) from None
    if not isinstance(obj, Config):
        raise ConfigError("conf/config.yaml must start from base_config (the schema)")
    return validate(obj)
