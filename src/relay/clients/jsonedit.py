"""Edit a JSON (or JSONC) document in place: set or remove one member, add or remove one array item.

Everything outside the edited member keeps its bytes (comments, key order, indentation, other
servers): the document is scanned for spans, and only the span of the edit is rewritten. An
insertion followed by the matching removal gives the original text back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from relay.errors import ErrorCode, RelayError

Path = tuple[str, ...]


@dataclass
class Node:
    kind: str  # object, array, scalar
    start: int
    end: int
    # object: (key, key_start, value); array: ("", item_start, item)
    members: list[tuple[str, int, Node]] = field(default_factory=lambda: [])
    value: Any = None  # scalars only


class _Scanner:
    def __init__(self, text: str, where: str) -> None:
        self.text = text
        self.where = where
        self.pos = 0

    def fail(self, why: str) -> RelayError:
        line = self.text.count("\n", 0, self.pos) + 1
        return RelayError(
            ErrorCode.CONFIG_INVALID,
            f"{self.where} is not valid JSON (line {line}: {why})",
            "fix the file by hand (relay edits only files it can read), then run the command again",
        )

    def skip(self) -> None:
        text = self.text
        while self.pos < len(text):
            ch = text[self.pos]
            if ch in " \t\r\n\ufeff":
                self.pos += 1
            elif text.startswith("//", self.pos):
                nl = text.find("\n", self.pos)
                self.pos = len(text) if nl < 0 else nl + 1
            elif text.startswith("/*", self.pos):
                close = text.find("*/", self.pos + 2)
                if close < 0:
                    raise self.fail("unclosed comment")
                self.pos = close + 2
            else:
                return

    def string(self) -> str:
        decoder = json.JSONDecoder()
        try:
            value, end = decoder.raw_decode(self.text, self.pos)
        except ValueError as exc:
            raise self.fail(str(exc)) from None
        if not isinstance(value, str):
            raise self.fail("expected a string")
        self.pos = end
        return value

    def value(self) -> Node:
        self.skip()
        if self.pos >= len(self.text):
            raise self.fail("unexpected end")
        start = self.pos
        ch = self.text[start]
        if ch in "{[":
            kind = "object" if ch == "{" else "array"
            close = "}" if ch == "{" else "]"
            node = Node(kind, start, start)
            self.pos += 1
            while True:
                self.skip()
                if self.text.startswith(close, self.pos):
                    self.pos += 1
                    node.end = self.pos
                    return node
                item_start = self.pos
                key = ""
                if kind == "object":
                    if not self.text.startswith('"', self.pos):
                        raise self.fail("expected a key")
                    key = self.string()
                    self.skip()
                    if not self.text.startswith(":", self.pos):
                        raise self.fail("expected ':'")
                    self.pos += 1
                node.members.append((key, item_start, self.value()))
                self.skip()
                if self.text.startswith(",", self.pos):
                    self.pos += 1
                elif not self.text.startswith(close, self.pos):
                    raise self.fail(f"expected ',' or '{close}'")
        decoder = json.JSONDecoder()
        try:
            value, end = decoder.raw_decode(self.text, start)
        except ValueError as exc:
            raise self.fail(str(exc)) from None
        self.pos = end
        return Node("scalar", start, end, value=value)


def parse(text: str, where: str) -> Node:
    """The document's tree of spans; an empty file is an empty object."""
    if not text.strip():
        return Node("object", 0, 0)
    scanner = _Scanner(text, where)
    root = scanner.value()
    scanner.skip()
    if scanner.pos != len(text):
        raise scanner.fail("extra text after the document")
    return root


def to_python(node: Node, text: str) -> Any:
    """The plain value of a node (comments dropped)."""
    if node.kind == "object":
        return {key: to_python(child, text) for key, _, child in node.members}
    if node.kind == "array":
        return [to_python(child, text) for _, _, child in node.members]
    return node.value


def load(text: str, where: str) -> Any:
    return to_python(parse(text, where), text)


def _find(node: Node, key: str) -> Node | None:
    for name, _, child in node.members:
        if name == key:
            return child
    return None


def _line_indent(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = start
    while end < len(text) and text[end] in " \t":
        end += 1
    return text[start:end]


def _unit(text: str) -> str:
    """The document's indentation step (two spaces when it has none)."""
    for line in text.splitlines():
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            return line[: len(line) - len(stripped)]
    return "  "


def _render(value: Any, indent: str, unit: str) -> str:
    dumped = json.dumps(value, indent=unit, ensure_ascii=False)
    return dumped.replace("\n", "\n" + indent)


def _insert(text: str, container: Node, entry: str, unit: str) -> str:
    """`entry` (a rendered member or item, without indentation) appended as the container's last element."""
    if container.members:
        _, first_start, _ = container.members[0]
        indent = _line_indent(text, first_start)
        if text.rfind("\n", container.start, first_start) < 0:  # a one-line container: keep it on one line
            last = container.members[-1][2]
            return text[: last.end] + ", " + entry.replace("\n", " ") + text[last.end :]
        last = container.members[-1][2]
        eol = text.find("\n", last.end)
        eol = len(text) if eol < 0 else eol
        tail = text[last.end : eol]
        # A `// comment` ending the last member's line stays there, on its own member's line.
        after = eol if tail.lstrip(" \t").startswith("//") else last.end
        return (
            text[: last.end]
            + ","
            + text[last.end : after]
            + "\n"
            + indent
            + entry.replace("\n", "\n" + indent)
            + text[after:]
        )
    outer = _line_indent(text, container.start)
    inner = outer + unit
    body = "\n" + inner + entry.replace("\n", "\n" + inner) + "\n" + outer
    return text[: container.start + 1] + body + text[container.end - 1 :]


def _remove(text: str, container: Node, index: int) -> str:
    members = container.members
    _, start, node = members[index]
    if len(members) == 1:
        return text[: container.start + 1] + text[container.end - 1 :]
    if index > 0:
        before = members[index - 1][2].end
        line = text[before:start].split("\n", 1)[0] if "\n" in text[before:start] else ""
        kept = line.replace(",", "", 1) if line.lstrip(" \t,").startswith("//") else ""  # its `// comment` (_insert)
        return text[:before] + kept + text[node.end :]
    return text[:start] + text[members[1][1] :]


def set_value(text: str, path: Path, value: Any, where: str) -> str:
    """`text` with the member at `path` set to `value` (parents created as needed)."""
    unit = _unit(text)
    if not text.strip():
        return json.dumps(_nest(path, value), indent=unit, ensure_ascii=False) + "\n"
    node = parse(text, where)
    for depth, key in enumerate(path):
        if node.kind != "object":
            raise _not_object(where, path[:depth])
        child = _find(node, key)
        if child is None:
            rest = _nest(path[depth + 1 :], value)
            entry = json.dumps(key) + ": " + _render(rest, "", unit)
            return _insert(text, node, entry, unit)
        if depth == len(path) - 1:
            if to_python(child, text) == value:
                return text
            indent = _line_indent(text, child.start)
            return text[: child.start] + _render(value, indent, unit) + text[child.end :]
        node = child
    return text


def remove_value(text: str, path: Path, where: str) -> str:
    """`text` without the member at `path`; parents it leaves empty are removed too."""
    if not text.strip():
        return text
    chain: list[tuple[Node, int]] = []
    node = parse(text, where)
    for key in path:
        if node.kind != "object":
            return text
        index = next((i for i, (name, _, _) in enumerate(node.members) if name == key), None)
        if index is None:
            return text
        chain.append((node, index))
        node = node.members[index][2]
    while len(chain) > 1 and len(chain[-1][0].members) == 1:
        chain.pop()  # the parent would be left empty: remove it instead
    container, index = chain[-1]
    return _remove(text, container, index)


def add_item(text: str, path: Path, item: Any, where: str) -> str:
    """`text` with `item` in the array at `path` (created if missing); unchanged when it is there already."""
    node = parse(text, where) if text.strip() else None
    target = _walk(node, path, where) if node is not None else None
    if target is None:
        return set_value(text, path, [item], where)
    if target.kind != "array":
        raise _not_object(where, path, "an array")
    if any(to_python(child, text) == item for _, _, child in target.members):
        return text
    return _insert(text, target, _render(item, "", _unit(text)), _unit(text))


def remove_item(text: str, path: Path, item: Any, where: str) -> str:
    """`text` without `item` in the array at `path`; an array (and parents) it leaves empty are removed."""
    if not text.strip():
        return text
    target = _walk(parse(text, where), path, where)
    if target is None or target.kind != "array":
        return text
    index = next((i for i, (_, _, child) in enumerate(target.members) if to_python(child, text) == item), None)
    if index is None:
        return text
    if len(target.members) == 1:
        return remove_value(text, path, where)
    return _remove(text, target, index)


def _walk(node: Node, path: Path, where: str) -> Node | None:
    for depth, key in enumerate(path):
        if node.kind != "object":
            raise _not_object(where, path[:depth])
        child = _find(node, key)
        if child is None:
            return None
        node = child
    return node


def _nest(path: Path, value: Any) -> Any:
    for key in reversed(path):
        value = {key: value}
    return value


def _not_object(where: str, path: Path, what: str = "an object") -> RelayError:
    name = ".".join(path) or "the document"
    return RelayError(
        ErrorCode.CONFIG_INVALID,
        f"{where}: {name} is not {what}",
        "fix the file by hand, then run the command again",
    )
