"""A YAML config file read as UTF-8 into a mapping, with one line for each way it can be wrong: missing, a
folder, too big, not UTF-8, not YAML, a key given twice, empty, not a mapping. ``yaml_bounds`` refuses
first what would expand, nest or loop past any real config; thousands of keys written out are told as
unknown settings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpulab.config.schema import RunConfig
from gpulab.config.validate import MAX_UNKNOWN, many_unknown
from gpulab.config.yaml_bounds import TooManyValues, check_bounds
from gpulab.errors import ConfigError


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, noting a key given twice in one mapping (PyYAML keeps the last silently, so
    the first value a user wrote would be ignored without a word)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: overriding it is the point
                continue
            key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
            if not isinstance(key, (str, int, float)):  # a list or mapping as a key: PyYAML refuses it
                continue
            if key in first:
                self.duplicates.append(f"key {key!r} is given twice, at line {first[key]} and line {line}")
            first.setdefault(key, line)
        return super().construct_mapping(node, deep=deep)


def safe_load(text: str, where: str) -> tuple[Any, list[str]]:
    """``yaml.safe_load`` with duplicate keys collected (each described with both line numbers), after
    ``yaml_bounds`` has refused what would expand, nest or loop past any real config (``where``: how the
    one line names the text)."""
    check_bounds(text, where)
    loader = _UniqueKeyLoader(text)
    try:
        return loader.get_single_data(), loader.duplicates
    finally:
        loader.dispose()


CONFIG_LIMIT = 4 << 20  # bytes: far above any run's settings, far below a wrong file's


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping, with one-line errors for a missing file, bytes that are not UTF-8 text, bad
    YAML and keys given twice (one line each)."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config file {str(p)!r} is a folder; give the YAML file of the run's settings")
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    if (size := p.stat().st_size) > CONFIG_LIMIT:  # a 16 GiB file was read whole into memory
        raise ConfigError(
            f"config file {str(p)!r} is {size:,} bytes; a run's settings take a few KB (at most "
            f"{CONFIG_LIMIT:,} bytes): give the YAML file of the run's settings"
        )
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"config file {str(p)!r} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at line {line}); "
            "save it as UTF-8"
        ) from None
    try:
        data, duplicates = safe_load(text, f"config file {str(p)!r}")
    except TooManyValues as exc:  # thousands of keys written out: told as unknown keys, not as a bomb
        unknown = [k for k in exc.keys if k not in RunConfig.model_fields]
        if len(unknown) > MAX_UNKNOWN:
            raise ConfigError(f"config file {str(p)!r}: {many_unknown(RunConfig, unknown)}") from None
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        if "'\\t'" in str(getattr(exc, "problem", "")):  # PyYAML says "found character '\t'"
            where += ": a tab, which YAML does not take for indenting; indent with spaces"
        raise ConfigError(f"config file {str(p)!r} is not valid YAML{where}") from None
    if duplicates:
        raise ConfigError("\n".join(f"config file {str(p)!r}: {d}; keep one" for d in duplicates))
    if data is None:  # an unsaved buffer or the wrong file: training on defaults would hide it
        raise ConfigError(
            f"config file {str(p)!r} is empty (it sets nothing); write settings in it, or leave out "
            "--config to train with the recipe's defaults"
        )
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {str(p)!r} must hold a mapping of settings, not {type(data).__name__}"
        )
    return data
