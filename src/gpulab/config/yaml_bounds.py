"""YAML read with bounds: a config is refused in one line, before anything is built from it, when its
aliases would expand it past what any real config holds, when it nests deeper, or when an alias sits
inside the value it names (a cycle).

Why: PyYAML builds an alias as a shared reference, so a 512-byte "billion laughs" file loads quickly and
then explodes in whatever walks it (pydantic ran past 120 s and 8 GB); 10,000 levels of nesting end in a
RecursionError inside PyYAML's own composer; a self-referencing list is a TypeError in the code that reads
it. The check walks the parser's events (no tree, no recursion) with libyaml where it is installed, counts
each alias as the size of what it names, and stops at the first limit passed: its time and memory are
bounded by the limits, not by the file.

A file that passes the limit with no alias (5,000 keys written out) is not a bomb: its size is bounded by
the config's byte limit, so the walk goes on through it, noting only its top-level keys, and says so with
``TooManyValues``, which carries them (the caller names the unknown ones; the alias message misled there).
"""

from __future__ import annotations

import yaml

from gpulab.errors import ConfigError

MAX_VALUES = 10_000  # every key, value and item once each alias is expanded; real configs hold tens
MAX_DEPTH = 64  # nested mappings and lists; the deepest real setting is three levels down
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_OPEN = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSE = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


class TooManyValues(ConfigError):
    """A file of more than ``MAX_VALUES`` values written out (no alias): ``keys`` are its top-level keys."""

    def __init__(self, message: str, keys: list[str]) -> None:
        super().__init__(message)
        self.keys = keys


def check_bounds(text: str, where: str) -> None:
    """Raise a one-line ConfigError naming ``where`` when ``text`` passes a limit. Malformed YAML is left
    to the loader, which says where it is wrong."""
    for kind in dict.fromkeys((_LOADER, yaml.SafeLoader)):
        loader = kind(text)
        try:
            _walk(loader, where)
            return
        except yaml.YAMLError:
            # libyaml stops at 1,000 levels with its own error; PyYAML's parser (a state stack, no
            # recursion) reaches the depth limit first, or the same malformed spot
            continue
        finally:
            loader.dispose()


def _walk(loader: yaml.SafeLoader, where: str) -> None:
    sizes: dict[str, int] = {}  # anchor -> expanded size of the value it names
    stack: list[list] = []  # each open mapping or list: [anchor, expanded size so far, children, is a map]
    total, aliased, passed_at = 0, False, None
    keys: list[str] = []  # the top-level mapping's keys
    while loader.check_event():
        event = loader.get_event()
        if len(stack) == 1 and stack[0][3] and stack[0][2] % 2 == 0 and isinstance(event, yaml.ScalarEvent):
            keys.append(event.value[:40])
        if stack and not isinstance(event, _CLOSE):
            stack[-1][2] += 1
        if isinstance(event, _OPEN):
            if len(stack) >= MAX_DEPTH:
                raise ConfigError(
                    f"{where} nests deeper than {MAX_DEPTH} levels (line {event.start_mark.line + 1}); "
                    "no gpulab setting is more than a few levels deep"
                )
            stack.append([event.anchor, 1, 0, isinstance(event, yaml.MappingStartEvent)])
            total += 1
        elif isinstance(event, _CLOSE):
            anchor, size, _, _ = stack.pop()
            if anchor is not None:
                sizes[anchor] = size
            if stack:
                stack[-1][1] += size
            continue
        elif isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
            size = _alias_size(event, sizes, stack, where) if isinstance(event, yaml.AliasEvent) else 1
            aliased = aliased or isinstance(event, yaml.AliasEvent)
            if isinstance(event, yaml.ScalarEvent) and event.anchor is not None:
                sizes[event.anchor] = 1
            if stack:
                stack[-1][1] += size
            total += size
        if total > MAX_VALUES and aliased:
            raise ConfigError(
                f"{where} expands to more than {MAX_VALUES:,} values (line {event.start_mark.line + 1}, "
                "through YAML aliases (*name)); a gpulab config holds tens: write the settings out"
            )
        if total > MAX_VALUES and passed_at is None:
            passed_at = event.start_mark.line + 1
    if passed_at is not None:  # written out, no alias: as long as its bytes, which the caller bounds
        raise TooManyValues(
            f"{where} holds more than {MAX_VALUES:,} values (line {passed_at}); a gpulab config holds tens",
            keys,
        )


def _alias_size(event: yaml.AliasEvent, sizes: dict[str, int], stack: list[list], where: str) -> int:
    if any(anchor == event.anchor for anchor, *_ in stack):
        raise ConfigError(
            f"{where}: alias *{event.anchor} at line {event.start_mark.line + 1} is inside the value "
            f"&{event.anchor} names (a cycle); write the value out"
        )
    return sizes.get(event.anchor, 1)  # an undefined alias: the loader says so
