"""Hydra at the entry point only: compose conf/ + overrides into a validated Config.

Hydra's own errors are many lines; `load_config` turns each into one line
that names the key and what was expected.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import shlex
import typing
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigIndexError,
    ConfigKeyError,
    ConfigTypeError,
    OmegaConfBaseException,
    ValidationError,
)

from roll_agentic import config as schema
from roll_agentic.config import Config, ConfigError
from roll_agentic.config_check import validate
from roll_agentic.config_yaml import config_file_problem

DEFAULT_CONF_DIR = Path(__file__).resolve().parent.parent / "conf"

_registered = False


def _open_mappings(node: DictConfig) -> None:
    """Lets the command line add keys to the schema's free-form mappings (envs.resources,
    trainer.resources, router.hardware: their keys are the user's own names).

    Hydra composes in struct mode, which refuses a key the schema does not list: there
    `envs.resources={node_a:1}`, as the README writes it, was refused as "unknown config
    key 'envs.resources.node_a'". Their values keep their types, and every dataclass node,
    the values of router.hardware included, still refuses a key it does not have."""
    for key in node:
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing():
            if OmegaConf.get_type(child) is dict:
                OmegaConf.set_struct(child, False)
            else:
                _open_mappings(child)


def register_schema() -> None:
    global _registered
    if not _registered:
        node = OmegaConf.structured(Config)
        _open_mappings(node)
        ConfigStore.instance().store(name="base_config", node=node)
        _registered = True


def _one_line(err: BaseException) -> str:
    if isinstance(err, OverrideParseException):
        return _parse_error_line(err.override, err.message)
    sweep = re.match(r"(?:Ambiguous value for argument|Sweep parameters) '(.+)'", str(err))
    if isinstance(err, ConfigCompositionException) and sweep:
        return _sweep_line(sweep.group(1))
    present = re.match(r"Could not append to config\. An item is already at '([^']+)'", str(err))
    if isinstance(err, ConfigCompositionException) and present:
        return _present_key_line(present.group(1), str(err))
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, OmegaConfBaseException):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)):
        m = re.search(r"Key '([^']+)' not in '([^']+)'", str(cause))
        fm = re.search(r"full_key: (\S+)", str(cause))
        name = fm.group(1) if fm else (m.group(1) if m else "?")
        cls = getattr(schema, m.group(2), None) if m else None
        if cls is None or not dataclasses.is_dataclass(cls):
            return f"unknown config key '{name}'"
        return unknown_key_line(name, cls)
    if isinstance(cause, ConfigTypeError) and "Cannot merge" in str(cause):
        # A list where the schema has a mapping or the reverse; Hydra said only "Error merging override".
        key = getattr(cause, "full_key", "")
        override = str(err).splitlines()[0].removeprefix("Error merging override ")
        return (f"override {override}: a list [...] where a mapping {{...}} belongs, or the reverse"
                f"{f' (at {key!r})' if key else ''}; tasks is a list of mappings, e.g. tasks=[{{name:cliff,env_id:CliffWalking-v1}}], "
                "and env_kwargs a mapping, e.g. env_kwargs:{size:5}")
    entry = re.fullmatch(r"(\w+)\[(\d+)\]", getattr(cause, "full_key", "") or "")
    if entry and (isinstance(cause, ConfigIndexError) or str(cause).startswith(
            "Invalid type assigned: dict is not a subclass")):
        # `tasks.2.group_size=4` on a two-task list: Hydra said "Invalid type assigned: dict
        # is not a subclass of TaskConfig. value: {}" or "Error merging override".
        name, index = entry.groups()
        return (f"config key '{name}.{index}': {name} has no entry {index} (entries are numbered from 0); "
                f"to add one, give the whole list, e.g. {name}=[{{...}},{{...}}]")
    group = re.search(r"str is not a subclass of (\w+)\. value: (\S+)", str(cause or err))
    if group:
        # `engine: hf` in the body of a run's yaml: a group's option goes in its defaults list.
        names = [f.name for f in dataclasses.fields(Config) if str(f.type) == group.group(1)]
        if names and (DEFAULT_CONF_DIR / names[0]).is_dir():
            name, option = names[0], group.group(2)
            return (f"'{name}: {option}' sets the whole {name} section to a string: {name} is a config group, "
                    f"so choose its option in the yaml's defaults list (`- override {name}: {option}`, "
                    f"after `- config`) or on the command line ({name}={option})")
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


# A key as Hydra's override grammar takes it (+, ++ or ~ first; dots, group/option, @package):
# an override whose key matches fails in its value, the part a user can quote.
_KEY = re.compile(r"(?:~|\+\+?)?[\w$-]+(?:[./][\w$-]+)*(?:@[\w.$-]*)?")
_LEXER = "LexerNoViableAltException: "


def _shell_quoted(override: str) -> str:
    """`override` with its value quoted, as typed in a shell: 'key="a b"'. Hydra's grammar takes a
    quoted value as one string; the outer quotes keep the shell from splitting or expanding it."""
    key, _, value = override.partition("=")
    if '"' not in value:
        inner = f'{key}="{value}"'
    elif "'" not in value:
        inner = f"{key}='{value}'"
    else:
        inner = f'{key}="{value.replace(chr(34), chr(92) + chr(34))}"'
    return shlex.quote(inner)


def _parse_error_line(override: str, message: str) -> str:
    """One line for an override Hydra's grammar refused; its own first line named neither the
    override nor the fix (it was "no viable alternative at input '[1,2'" and the like)."""
    lines = message.splitlines()
    detail = lines[0] if lines else "syntax error"
    if detail.startswith(_LEXER):  # the line after it puts a caret under the character
        at = lines[1].find("^") - len(_LEXER) if len(lines) > 1 else -1
        detail = f"unexpected {override[at]!r} at character {at + 1}" if 0 <= at < len(override) else "syntax error"
    if "=" not in override:
        # Also what the shell leaves of `env.name=a b`: its last word comes as an override of its own.
        return (f"cannot parse override {override!r} (no '='): write key=value, e.g. trainer.total_steps=5; "
                "a value with spaces must be quoted, or the shell splits it into words: 'key=\"value with spaces\"'")
    detail = detail.removeprefix(f"Error parsing override '{override}'").strip() or "syntax error"
    if not _KEY.fullmatch(override.partition("=")[0]):
        return (f"cannot parse override {override!r} ({detail}): write key=value; a list entry is key.N "
                "(tasks.0.group_size=4), a mapping {key:value,...}")
    if not override.partition("=")[2].isprintable():  # a pasted newline or tab: no quoting helps there
        return (f"cannot parse override {override!r} ({detail}): its value holds a control character "
                "(a newline or tab, often pasted with it): remove it")
    return (f"cannot parse override {override!r} ({detail}): quote a value with spaces, commas, brackets, braces, "
            f"quotes, '=' or other special characters, in the shell {_shell_quoted(override)}; a list is [a,b] "
            "and a mapping {key:value}, their brackets closed")


def _sweep_line(override: str) -> str:
    """One line for `key=a,b` or `key=choice(a,b)`: Hydra reads several values as a sweep, and its
    hints (a list, quotes, --multirun) were dropped with all but its first line."""
    key, _, value = override.partition("=")
    first = value.split(",", 1)[0] if "(" not in value else "VALUE"
    return (f"override {override!r} gives several values, a sweep, which roll-agentic train does not run "
            f"(no --multirun): give one value per run ({key}={first}); to keep the commas in one string, quote "
            f"the value, in the shell {_shell_quoted(override)}; for a key that takes a list, write {key}=[a,b]")


def _present_key_line(key: str, message: str) -> str:
    """One line for `+key=value` where the config already has `key`: `+` only adds a key. Hydra's
    first line, all that was kept, said "Could not append to config. An item is already at
    'trainer.lr'." and dropped its hint to use key=value or ++key=value."""
    # Hydra's second line gives the override without its '+': "Either remove + prefix: 'KEY=VALUE'".
    typed = re.search(r"^Either remove \+ prefix: '(.*)'$", message, re.MULTILINE)
    plain = typed.group(1) if typed else f"{key}=VALUE"
    return f"override {'+' + plain!r}: {key} already exists; set it with {plain} (or ++{plain} to set-or-add)"


def unknown_key_line(name: str, cls: type) -> str:
    """One line for a key schema class `cls` lacks: the closest one it has, and all of them."""
    # As an override writes it (tasks.0.max_turn): OmegaConf's tasks[0].max_turn is a form the
    # override parser refuses, so a user who copied it got a second error.
    name = re.sub(r"\[(\d+)\]", r".\1", name)
    fields = [f.name for f in dataclasses.fields(cls)]
    close = difflib.get_close_matches(name.rsplit(".", 1)[-1], fields, n=1)
    # A key inside a list literal (tasks=[{...,max_turn:5}]) comes without its path.
    where = f" in a {cls.__name__.removesuffix('Config').lower()} entry" if "." not in name \
        and cls is not Config else ""
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown config key '{name}'{where}{hint}; valid keys here: " + ", ".join(fields)


def load_config(overrides: list[str], config_dir: str | Path | None = None, config_name: str = "config") -> Config:
    """Composes and validates; raises ConfigError with one line on any bad key or value."""
    for override in overrides:
        problem = _unsupported_override(override)
        if problem:
            raise ConfigError(problem)
    register_schema()
    conf_dir = Path(config_dir or DEFAULT_CONF_DIR).resolve()
    given = conf_dir / config_name
    config_name = config_name.removesuffix(".yaml")
    if not (conf_dir / f"{config_name}.yaml").exists():
        # Hydra reads NAME.yaml only: `--config my_run.yml` said "no my_run.yml.yaml in DIR".
        if given.is_file() or given.suffix == ".yml":
            there = f"rename {given} to {given.stem}.yaml" if given.is_file() else f"no {given.stem}.yaml in {conf_dir}"
            raise ConfigError(f"config files must end in .yaml (Hydra loads no other): {there}")
        raise ConfigError(f"no {config_name}.yaml in {conf_dir}")
    problem = config_file_problem(conf_dir / f"{config_name}.yaml")
    if problem:  # with its file, line and column, which Hydra's first line did not give
        raise ConfigError(problem)
    own_dir = conf_dir != DEFAULT_CONF_DIR.resolve()
    if own_dir and config_name == "config" and _defaults_name_config(conf_dir / "config.yaml"):
        # In its own folder, searched first, `config` in its defaults list is the file itself: Hydra
        # recursed until "maximum recursion depth exceeded".
        raise ConfigError(_SHADOW.format(path=conf_dir / "config.yaml"))
    overrides = list(overrides)
    if conf_dir != DEFAULT_CONF_DIR.resolve() and not any(o.startswith("hydra.searchpath") for o in overrides):
        # A folder of the user's own sees the repo's conf/ too: a file there may start from
        # the default run (`defaults: [config, _self_]`) and pick groups (`override engine: hf`).
        overrides.append(f"hydra.searchpath=[file://{DEFAULT_CONF_DIR.resolve()}]")
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base=None):
            composed = compose(config_name=config_name, overrides=overrides)
        obj = OmegaConf.to_object(composed)
    except (ConfigCompositionException, MissingConfigException, OmegaConfBaseException) as err:
        raise ConfigError(_one_line(err)) from None
    except RecursionError:  # a defaults list that names its own file, through another one or so
        if own_dir and (conf_dir / "config.yaml").is_file():
            raise ConfigError(_SHADOW.format(path=conf_dir / "config.yaml")) from None
        raise ConfigError(f"{conf_dir / config_name}.yaml: its defaults list comes back to itself (a loop): "
                          "name each file once, and the built-in run as `config`") from None
    except Exception as err:  # hydra's override grammar errors and the like
        raise ConfigError(_one_line(err)) from None
    if not isinstance(obj, Config):
        raise ConfigError(f"{conf_dir / config_name}.yaml must start from the schema: put `defaults: "
                          "[config, _self_]` at its top to start from the default run, or `defaults: "
                          "[base_config, _self_]` to give every key yourself")
    # Struct mode refuses `trainer.total_stepz=5`, but `+trainer.total_stepz=5` (Hydra's own
    # advice for a key it does not know) adds the key: the run went on ignoring it.
    unknown = _unknown_keys(composed, Config, "")
    if unknown:
        key, cls = unknown[0]
        raise ConfigError(unknown_key_line(key, cls))
    return validate(obj)


def _unsupported_override(override: str) -> str:
    """Why `override` is refused before Hydra sees it, or "". Hydra's compose() takes these and
    they did nothing: it reads no hydra.* setting (hydra.run.dir made no directory; the run's is
    <output_dir>/<run_name>), and `~trainer` or `~tasks` deleted a section that to_object filled
    back with its defaults (`~trainer.lr` failed as a bare "Error merging override"). `+key=` and
    `++key=` pass: `++` sets a key, and a `+` key the schema lacks is refused by _unknown_keys."""
    key = override.partition("=")[0].strip()
    if key.startswith("~"):
        name = key.lstrip("~") or "KEY"
        return (f"override {override!r}: deleting a key (~{name}) is not supported by roll-agentic train, as every "
                f"key has a value in the schema: set {name} to its default value (roll_agentic/config.py) or remove "
                "it from your config file")
    name = key.lstrip("+")
    # hydra.searchpath does work with compose(): load_config sets it for a folder of the user's own.
    if name.split(".", 1)[0].split("/", 1)[0] != "hydra" or name.startswith("hydra.searchpath"):
        return ""
    if "dir" in name:  # hydra.run.dir, hydra.sweep.dir, hydra.runtime.output_dir, hydra.job.chdir
        instead = ("the run's directory is <output_dir>/<run_name>: set output_dir=DIR (and run_name=NAME) "
                   "instead")
    else:
        instead = "set the run's own keys instead (roll_agentic/config.py; `roll-agentic train --help`)"
    return (f"override {override!r}: Hydra's own settings (hydra.*, hydra/...) are not supported by roll-agentic "
            f"train, which composes the config only and would ignore them; {instead}")


_SHADOW = ("{path}: rename your file (e.g. to my_run.yaml): a file named config.yaml shadows the built-in "
           "conf/config.yaml that its defaults list names")


def _defaults_name_config(path: Path) -> bool:
    """Whether the YAML file's defaults list names `config` (the built-in run, as the README writes it)."""
    import yaml

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    defaults = doc.get("defaults") if isinstance(doc, dict) else None
    if not isinstance(defaults, list):
        return False
    return any(isinstance(d, str) and d.strip().lstrip("/").removesuffix(".yaml") == "config" for d in defaults)


def _unknown_keys(node: object, cls: type, prefix: str) -> list[tuple[str, type]]:
    """(dotted key, the schema class it is not a field of) for each key of the composed
    `node` that schema `cls` does not have; the free-form mappings take any key."""
    if not isinstance(node, DictConfig):
        return []
    hints = typing.get_type_hints(cls)
    out: list[tuple[str, type]] = []
    for key in node.keys():
        name = f"{prefix}{key}"
        if key not in hints:
            out.append((name, cls))
            continue
        child = node._get_node(key)
        hint = hints[key]
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if dataclasses.is_dataclass(hint):
            out += _unknown_keys(child, hint, f"{name}.")
        elif origin is list and args and dataclasses.is_dataclass(args[0]) and isinstance(child, ListConfig):
            for i, item in enumerate(child):
                out += _unknown_keys(item, args[0], f"{name}[{i}].")
        elif origin is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]) and isinstance(child, DictConfig):
            for k in child.keys():
                out += _unknown_keys(child._get_node(k), args[1], f"{name}.{k}.")
    return out
