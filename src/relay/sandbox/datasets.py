"""Reduce a large JSON dataset before it reaches a caller's context (seed 003's process_large_dataset).

Built-in operations, chosen by name and driven by `parameters`: filter, select, sort, top_k,
group_count, sample, dedupe, stats (and head). Any other operation is taken as plain language: a
configured model writes a `process(data, parameters)` function, which runs in the sandbox.
"""

from __future__ import annotations

import json
import math
import random
import re
import statistics
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, cast

from relay.errors import ErrorCode, RelayError, invalid

Asker = Callable[[str, str], Awaitable[str]]
Records = list[Any]

OPERATIONS = ("filter", "select", "sort", "top_k", "group_count", "sample", "dedupe", "stats", "head")
ALIASES = {
    "filter": "filter",
    "where": "filter",
    "select": "select",
    "select_fields": "select",
    "project": "select",
    "pick": "select",
    "sort": "sort",
    "order_by": "sort",
    "top_k": "top_k",
    "topk": "top_k",
    "top": "top_k",
    "group_count": "group_count",
    "group_by": "group_count",
    "group": "group_count",
    "count_by": "group_count",
    "count": "group_count",
    "sample": "sample",
    "dedupe": "dedupe",
    "dedup": "dedupe",
    "distinct": "dedupe",
    "unique": "dedupe",
    "stats": "stats",
    "describe": "stats",
    "summary": "stats",
    "head": "head",
    "limit": "head",
    "first": "head",
}
COMPARATORS = ("eq", "ne", "gt", "gte", "lt", "lte", "contains", "in", "exists", "startswith")
SYMBOLS = {"==": "eq", "=": "eq", "!=": "ne", ">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}
DEFAULT_K = 10
# The data sample a model sees to write its function (items, and characters of each).
PREVIEW_ITEMS = 3
PREVIEW_CHARS = 2000
FUNCTION_SYSTEM = (
    "You write one Python 3 function `process(data, parameters)` that performs the requested operation on `data` "
    "(parsed JSON) and returns JSON-serializable output, as small as the operation allows. Standard library only; "
    "no network, no files. Answer with the code only, in one ```python block."
)
HARNESS = """
import json as _json
with open("input.json", encoding="utf-8") as _fh:
    _payload = _json.load(_fh)
print(_json.dumps(process(_payload["data"], _payload["parameters"]), default=str))
"""


def operation_of(operation: str) -> str | None:
    """The built-in operation `operation` names (case, spaces and dashes ignored), or None."""
    key = re.sub(r"[\s-]+", "_", operation.strip().lower())
    return ALIASES.get(key)


def size_of(value: Any) -> int:
    """Seed 003's size: items of an array, keys of an object, 1 for anything else."""
    if isinstance(value, (list, dict)):
        return len(value)  # pyright: ignore[reportUnknownArgumentType]
    return 1


def reduction(original: int, processed: int) -> float:
    return round(max(0.0, (1 - processed / original) * 100), 1) if original else 0.0


def _child(node: Any, part: str) -> tuple[bool, Any]:
    """(found, value) of one step of a dotted path: a key of an object or an index of an array."""
    if isinstance(node, dict):
        obj = cast(dict[str, Any], node)
        return (True, obj[part]) if part in obj else (False, None)
    if isinstance(node, list):
        arr = cast(list[Any], node)
        return (True, arr[int(part)]) if part.isdigit() and int(part) < len(arr) else (False, None)
    return False, None


def records_of(data: Any, parameters: dict[str, Any]) -> Records:
    """The items an operation works on: the array itself, the array at `parameters.path`, or an object's entries."""
    path = parameters.get("path")
    if isinstance(path, str) and path:
        for part in path.split("."):
            found, data = _child(data, part)
            if not found:
                raise invalid(f"path {path!r} is not in the data", "name a list inside the data, like 'results.items'")
    if isinstance(data, list):
        return list(cast(list[Any], data))
    if isinstance(data, dict):
        return [{"key": k, "value": v} for k, v in cast(dict[str, Any], data).items()]
    raise invalid("data must be a JSON array or object", "pass the dataset as an array of records")


def _get(item: Any, field: str) -> Any:
    node = item
    for part in field.split("."):
        found, node = _child(node, part) if isinstance(node, dict) else (False, None)
        if not found:
            return None
    return node


def _field(parameters: dict[str, Any], *names: str, required: bool = True) -> str | None:
    for name in names:
        value = parameters.get(name)
        if isinstance(value, str) and value:
            return value
    if required:
        raise invalid(f"parameters.{names[0]} is required", f"pass parameters {{'{names[0]}': 'a field name'}}")
    return None


def _int(parameters: dict[str, Any], names: tuple[str, ...], default: int) -> int:
    for name in names:
        value = parameters.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                raise invalid(f"parameters.{name} must not be negative", f"pass a count, like {default}")
            return value
    return default


def _compare(value: Any, op: str, target: Any) -> bool:
    try:
        if op == "exists":
            return value is not None
        if op == "eq":
            return value == target
        if op == "ne":
            return value != target
        if op == "contains":
            return target in value if isinstance(value, (str, list, dict)) else False
        if op == "in":
            return value in target if isinstance(target, (list, str)) else False
        if op == "startswith":
            return isinstance(value, str) and isinstance(target, str) and value.startswith(target)
        if value is None:
            return False
        return {"gt": value > target, "gte": value >= target, "lt": value < target, "lte": value <= target}[op]
    except TypeError:
        return False


def _conditions(parameters: dict[str, Any]) -> list[tuple[str, str, Any]]:
    found: list[tuple[str, str, Any]] = []
    where = parameters.get("where")
    if isinstance(where, dict):
        found += [(str(k), "eq", v) for k, v in where.items()]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    raw = parameters.get("conditions")
    items: list[Any] = raw if isinstance(raw, list) else []  # pyright: ignore[reportUnknownVariableType]
    if isinstance(parameters.get("field"), str):
        items.append(parameters)
    for cond in items:
        spec = cast(dict[str, Any], cond) if isinstance(cond, dict) else {}
        if not isinstance(spec.get("field"), str):
            raise invalid("each condition needs a field", "pass {'field': 'value', 'op': 'gt', 'value': 100}")
        op = str(spec.get("op", "eq"))
        op = SYMBOLS.get(op, op)
        if op not in COMPARATORS:
            raise invalid(f"op {op!r} is unknown", f"use one of: {', '.join(COMPARATORS)}, or ==, !=, >, >=, <, <=")
        found.append((spec["field"], op, spec.get("value")))
    if not found:
        raise invalid(
            "filter needs a condition",
            "pass parameters {'field': 'value', 'op': 'gt', 'value': 100}, {'where': {'status': 'open'}} "
            "or {'conditions': [...]}",
        )
    return found


def _sort_key(field: str) -> Callable[[Any], tuple[int, Any]]:
    def key(item: Any) -> tuple[int, Any]:
        value = _get(item, field)
        if isinstance(value, bool) or value is None:
            return (2, str(value))
        if isinstance(value, (int, float)):
            return (0, value)
        return (1, str(value))

    return key


def _descending(parameters: dict[str, Any], default: bool) -> bool:
    order = parameters.get("order")
    if isinstance(order, str):
        return order.lower().startswith("desc")
    flag = parameters.get("descending", parameters.get("reverse"))
    return flag if isinstance(flag, bool) else default


def _stats(records: Records, fields: list[str] | None) -> dict[str, Any]:
    keys = {str(k) for r in records if isinstance(r, dict) for k in cast(dict[str, Any], r)}
    names = fields or sorted(keys)
    if not names and records:
        names = ["."]
    out: dict[str, Any] = {"count": len(records), "fields": {}}
    for name in names:
        values = records if name == "." else [_get(r, name) for r in records]
        numbers = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        numbers = [n for n in numbers if math.isfinite(n)]
        present = [v for v in values if v is not None]
        entry: dict[str, Any] = {"count": len(present), "missing": len(values) - len(present)}
        if numbers:
            entry.update(
                min=min(numbers),
                max=max(numbers),
                mean=round(statistics.fmean(numbers), 6),
                median=statistics.median(numbers),
                sum=sum(numbers),
            )
        else:
            counts = Counter(json.dumps(v, sort_keys=True, default=str) for v in present)
            entry.update(distinct=len(counts), top=[[json.loads(k), n] for k, n in counts.most_common(3)])
        out["fields"][name] = entry
    return out


def run_builtin(name: str, data: Any, parameters: dict[str, Any]) -> Any:
    """Apply built-in operation `name` (from `operation_of`) to the data."""
    records = records_of(data, parameters)
    if name == "filter":
        conds = _conditions(parameters)
        kept = [r for r in records if all(_compare(_get(r, f), op, v) for f, op, v in conds)]
        limit = parameters.get("limit")
        return kept[:limit] if isinstance(limit, int) and limit >= 0 else kept
    if name == "select":
        raw_names = parameters.get("fields")
        names = [str(f) for f in cast(list[Any], raw_names)] if isinstance(raw_names, list) else []
        if not names:
            raise invalid("select needs parameters.fields", "pass parameters {'fields': ['id', 'name']}")
        return [{f: _get(r, f) for f in names} for r in records]
    if name == "sort":
        field = _field(parameters, "field", "by", "key")
        assert field is not None
        return sorted(records, key=_sort_key(field), reverse=_descending(parameters, False))
    if name == "top_k":
        field = _field(parameters, "field", "by", "key")
        assert field is not None
        k = _int(parameters, ("k", "limit", "n", "top"), DEFAULT_K)
        present = [r for r in records if _get(r, field) is not None]
        return sorted(present, key=_sort_key(field), reverse=_descending(parameters, True))[:k]
    if name == "group_count":
        field = _field(parameters, "field", "by", "group_by", "key")
        assert field is not None
        counts = Counter(json.dumps(_get(r, field), sort_keys=True, default=str) for r in records)
        return [{field: json.loads(k), "count": n} for k, n in counts.most_common()]
    if name == "sample":
        n = _int(parameters, ("n", "k", "limit", "size"), DEFAULT_K)
        seed = parameters.get("seed")
        rng = random.Random(seed if isinstance(seed, (int, str)) else None)
        return rng.sample(records, min(n, len(records)))
    if name == "dedupe":
        raw_fields = parameters.get("fields")
        fields: list[str] | None = raw_fields if isinstance(raw_fields, list) else None  # pyright: ignore[reportUnknownVariableType]
        seen: set[str] = set()
        unique: Records = []
        for r in records:
            key = json.dumps([_get(r, f) for f in fields] if fields else r, sort_keys=True, default=str)
            if key not in seen:
                seen.add(key)
                unique.append(r)
        return unique
    if name == "stats":
        raw = parameters.get("fields")
        return _stats(records, [str(f) for f in cast(list[Any], raw)] if isinstance(raw, list) else None)
    if name == "head":
        return records[: _int(parameters, ("n", "k", "limit"), DEFAULT_K)]
    raise invalid(f"operation {name!r} is not built in", f"use one of: {', '.join(OPERATIONS)}")


def _preview(data: Any) -> str:
    sample: Any = data[:PREVIEW_ITEMS] if isinstance(data, list) else data  # pyright: ignore[reportUnknownVariableType]
    return json.dumps(sample, default=str)[:PREVIEW_CHARS]


def function_prompt(operation: str, data: Any, parameters: dict[str, Any]) -> str:
    kind = f"an array of {len(data)} items" if isinstance(data, list) else type(data).__name__  # pyright: ignore[reportUnknownArgumentType]
    return (
        f"Operation: {operation}\n"
        f"parameters: {json.dumps(parameters, default=str)[:PREVIEW_CHARS]}\n"
        f"data is {kind}; its start: {_preview(data)}\n"
        "Write process(data, parameters)."
    )


def extract_code(answer: str) -> str:
    """The Python code in a model's answer (a fenced block, or the whole answer when it defines process)."""
    fenced = re.search(r"```(?:python|py)?\s*\n(.*?)```", answer, re.DOTALL)
    code = fenced.group(1) if fenced else answer
    if "def process" not in code:
        raise RelayError(
            ErrorCode.UPSTREAM_ERROR,
            "the model's answer holds no process(data, parameters) function",
            f"retry, or use a built-in operation: {', '.join(OPERATIONS)}",
        )
    return code.strip() + "\n" + HARNESS


async def write_function(ask: Asker, operation: str, data: Any, parameters: dict[str, Any]) -> str:
    """A program (the model's function plus a harness reading input.json) that performs `operation`."""
    return extract_code(await ask(function_prompt(operation, data, parameters), FUNCTION_SYSTEM))
