"""A run's YAML file read before Hydra composes it: its mistakes said with file, line and column.

Hydra's own errors about a config file are many lines, of which `load_config`
kept the first: "mapping values are not allowed here" for a key indented one
space too far, "while constructing a mapping" for a key given twice, without
the file or the line. And a defaults list with `_self_` before `config` is
valid Hydra that silently throws the file's own values away (the default run
is merged over them).
"""

from __future__ import annotations

from pathlib import Path

import yaml

BASES = ("config", "base_config")  # what a run's file starts from (hydra_config.load_config)


class _NoDuplicateKeys(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys, silently; Hydra refuses them in many lines."""


def _mapping(loader: _NoDuplicateKeys, node: yaml.MappingNode, deep: bool = False) -> dict:
    first: dict[object, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            line = first.setdefault(key, key_node.start_mark.line)
        except TypeError:  # an unhashable key: the plain constructor says so
            continue
        if line != key_node.start_mark.line:
            raise yaml.constructor.ConstructorError(
                None, None, f"{key!r} is given twice (first on line {line + 1}); keep one", key_node.start_mark
            )
    return loader.construct_mapping(node, deep=deep)


_NoDuplicateKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def config_file_problem(path: Path) -> str:
    """What is wrong with the run's YAML file at `path` before Hydra reads it, or ""."""
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_NoDuplicateKeys)  # a SafeLoader
    except OSError as err:
        return f"cannot read {path}: {err.strerror or err}"
    except UnicodeDecodeError:
        return f"{path} is not UTF-8 text"
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = " ".join(str(p) for p in (err.context, err.problem) if p)
        hint = "" if "given twice" in what else " (a key indented differently from its neighbours, or a bracket left open?)"
        return f"{path}{where}: {what}{hint}"
    except yaml.YAMLError as err:
        return f"{path}: not YAML ({str(err).splitlines()[0]})"
    return _self_first_problem(path, doc)


def _self_first_problem(path: Path, doc: object) -> str:
    """A defaults list with `_self_` before the run it starts from: the file's values lose."""
    if not isinstance(doc, dict) or not isinstance(doc.get("defaults"), list):
        return ""
    entries = doc["defaults"]
    if "_self_" not in entries or len(doc) == 1:
        return ""
    base = next((e for e in entries if e in BASES), None)
    if base is None or entries.index("_self_") > entries.index(base):
        return ""
    return (f"{path}: its defaults list puts _self_ before {base}, so {base}'s values are merged over this "
            f"file's and its own settings are lost: put _self_ last (defaults: [{base}, _self_])")
