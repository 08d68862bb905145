"""The settings table of docs/guide/configuration.md, written from the settings model itself, so the
reference cannot drift from the code (tests/test_docs_site.py compares them).

    python scripts/settings_reference.py          # print the table
    python scripts/settings_reference.py --write  # rewrite it in docs/guide/configuration.md
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel

from gpulab import RunConfig
from gpulab.config import TableNames

PAGE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "configuration.md"
BEGIN = "<!-- settings table: written by scripts/settings_reference.py -->"
END = "<!-- end of settings table -->"


def _type(annotation: object) -> str:
    """`int | Literal['auto'] | None` -> `int|auto|None`: what a user may write, not Python's spelling."""
    if typing.get_origin(annotation) is typing.Literal:
        return "|".join(str(a) for a in typing.get_args(annotation))
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return "|".join(_type(a) for a in typing.get_args(annotation))
    if typing.get_origin(annotation) is list:
        return f"list of {_type(typing.get_args(annotation)[0])}"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def _default(field) -> str:
    if field.is_required():
        return "(required)"
    value = field.get_default(call_default_factory=True)
    return "" if isinstance(value, BaseModel) else f"`{value!r}`"


def _rows(model: type[BaseModel], prefix: str = "") -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            rows += _rows(field.annotation, f"{prefix}{name}.")
            continue
        table = next((m for m in field.metadata if isinstance(m, TableNames)), None)  # precisions.py's names
        kind = "|".join(table.names()) if table else _type(field.annotation)
        cells = [f"`{prefix}{name}`", kind, _default(field), field.description or ""]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")  # | inside a cell
    return rows


def table() -> str:
    return "\n".join(
        ["| setting | type | default | what it does |", "| --- | --- | --- | --- |", *_rows(RunConfig)]
    )


def block() -> str:
    return f"{BEGIN}\n{table()}\n{END}"


def page_block(text: str) -> str:
    return text[text.index(BEGIN) : text.index(END) + len(END)]


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        text = PAGE.read_text()
        PAGE.write_text(text.replace(page_block(text), block()))
    else:
        print(table())
