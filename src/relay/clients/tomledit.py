"""Edit one table of a TOML document in place (`[mcp_servers.relay]` and its sub-tables), the rest byte for byte.

The table is a block of lines from its header to the next header that is not one of its own
sub-tables. Replacing or removing that block leaves every other line as it was; the result
is checked with tomllib so an edit can never leave a file the client cannot read.
"""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

from relay.errors import ErrorCode, RelayError

HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _invalid(where: str, why: str) -> RelayError:
    return RelayError(ErrorCode.CONFIG_INVALID, f"{where}: {why}", "fix the file by hand, then run the command again")


def load(text: str, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _invalid(where, f"not valid TOML ({exc})") from None


def _split_name(name: str) -> tuple[str, ...]:
    parts: list[str] = []
    for raw in re.findall(r'"(?:[^"\\]|\\.)*"|\'[^\']*\'|[^.]+', name):
        piece = raw.strip()
        if piece.startswith('"'):
            piece = json.loads(piece)
        elif piece.startswith("'"):
            piece = piece[1:-1]
        parts.append(piece)
    return tuple(parts)


def _headers(lines: list[str]) -> list[tuple[int, tuple[str, ...]]]:
    """(line index, dotted name) of every table header outside multi-line strings."""
    found: list[tuple[int, tuple[str, ...]]] = []
    in_string: str | None = None
    for index, line in enumerate(lines):
        if in_string is None:
            match = HEADER.match(line)
            if match:
                found.append((index, _split_name(match.group(1))))
                continue
        for quote in ('"""', "'''"):
            count = line.count(quote)
            if in_string in (None, quote) and count % 2 == 1:
                in_string = quote if in_string is None else None
    return found


def _block(lines: list[str], table: tuple[str, ...]) -> tuple[int, int] | None:
    """[start, end) line range of `table` with its sub-tables (and the blank lines after it), or None."""
    headers = _headers(lines)
    for position, (index, name) in enumerate(headers):
        if name == table:
            end = len(lines)
            for later_index, later_name in headers[position + 1 :]:
                if later_name[: len(table)] != table:
                    end = later_index
                    break
            return index, end
    return None


def _key(part: str) -> str:
    return part if BARE_KEY.match(part) else json.dumps(part)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        items: list[Any] = value  # pyright: ignore[reportUnknownVariableType]
        return "[" + ", ".join(_value(v) for v in items) + "]"
    if isinstance(value, dict):
        table: dict[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in table.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def render_table(table: tuple[str, ...], body: dict[str, Any]) -> str:
    """`[a.b]` with `body`'s scalars, then a `[a.b.KEY]` sub-table for each value that is a table of tables."""
    lines = ["[" + ".".join(_key(p) for p in table) + "]"]
    subtables: list[tuple[str, dict[str, Any]]] = []
    for key, value in body.items():
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType]
            subtables.append((key, value))  # pyright: ignore[reportUnknownArgumentType]
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    text = "\n".join(lines) + "\n"
    for key, group in subtables:
        for sub, sub_body in group.items():
            text += "\n" + render_table((*table, key, sub), sub_body)
    return text


def _get(doc: dict[str, Any], table: tuple[str, ...]) -> Any:
    node: Any = doc
    for part in table:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]  # pyright: ignore[reportUnknownVariableType]
    return node  # pyright: ignore[reportUnknownVariableType]


def _without(doc: dict[str, Any], table: tuple[str, ...]) -> dict[str, Any]:
    """The document minus `table`, with parents it leaves empty dropped (what an edit must keep equal)."""
    copy: dict[str, Any] = json.loads(json.dumps(doc, default=str))
    chain: list[dict[str, Any]] = [copy]
    for part in table[:-1]:
        nxt = chain[-1].get(part)
        if not isinstance(nxt, dict):
            return copy
        chain.append(nxt)  # pyright: ignore[reportUnknownArgumentType]
    chain[-1].pop(table[-1], None)
    for depth in range(len(chain) - 1, 0, -1):
        if not chain[depth]:
            chain[depth - 1].pop(table[depth - 1], None)
    return copy


def set_table(text: str, table: tuple[str, ...], body: dict[str, Any], where: str) -> str:
    """`text` with `table` replaced by (or appended as) the rendering of `body`."""
    before = load(text, where)
    rendered = render_table(table, body)
    lines = text.splitlines(keepends=True)
    span = _block(lines, table)
    if span is None:
        if _get(before, table) is not None:
            raise _invalid(where, f"{'.'.join(table)} is written in a form relay cannot edit (inline or dotted keys)")
        new = rendered if not text else text + ("" if text.endswith("\n") else "\n") + "\n" + rendered
    else:
        start, end = span
        trailing = "".join(lines[start:end])
        keep_gap = trailing[len(trailing.rstrip("\n")) :] if end < len(lines) else ""
        gap = "\n" if keep_gap.count("\n") >= 2 else ""
        new = "".join(lines[:start]) + rendered + gap + "".join(lines[end:])
    after = load(new, where)
    if _without(after, table) != _without(before, table) or _get(after, table) != body:
        raise _invalid(where, f"editing {'.'.join(table)} would change other settings; edit the file by hand")
    return new


def remove_table(text: str, table: tuple[str, ...], where: str) -> str:
    """`text` without `table` (and the blank line set_table put before it)."""
    before = load(text, where)
    lines = text.splitlines(keepends=True)
    span = _block(lines, table)
    if span is None:
        if _get(before, table) is not None:
            raise _invalid(where, f"{'.'.join(table)} is written in a form relay cannot edit (inline or dotted keys)")
        return text
    start, end = span
    if end == len(lines) and start > 0 and lines[start - 1].strip() == "":
        start -= 1  # the separator line set_table added
    new = "".join(lines[:start]) + "".join(lines[end:])
    if _without(load(new, where), table) != _without(before, table):
        raise _invalid(where, f"removing {'.'.join(table)} would change other settings; edit the file by hand")
    return new
