"""A downstream result cut to what a client's context can take; the whole of it kept as text to page.

A tool result can be any size (a 50 MB file read, a database dump). What goes back to the client
is at most `cap` characters of its text; the whole result, as text, is handed to the caller to keep
(relay keeps it as a job's output, paged with `job_result`). A result the stdio transport spilled as it
arrived (`_spill.py`) comes already cut, its whole text in a file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mcp.types import CallToolResult, ContentBlock, TextContent

from relay.gateway._spill import Spilled

# What a downstream result may carry back to the client, in characters of text (about 1 MB).
DEFAULT_RESULT_CAP_CHARS = 1_000_000


@dataclass(frozen=True)
class Bounded:
    """The result to send (`result`), and when it was cut, the whole of it as text (or a file of it) and its length."""

    result: CallToolResult
    full_text: str | None = None
    total_chars: int = 0
    # The whole text in a file, for a result too large to hold (whoever keeps it removes the file).
    full_path: Path | None = None

    @property
    def cut(self) -> bool:
        return self.full_text is not None or self.full_path is not None


def _block_text(block: ContentBlock) -> str:
    text = getattr(block, "text", None)
    if isinstance(text, str):
        return text
    return json.dumps(block.model_dump(mode="json", by_alias=True, exclude_none=True), ensure_ascii=False)


def _size(result: CallToolResult) -> int:
    """Characters the result carries (text, base64 data and resources, structured content); stops past any cap."""
    total = 0
    for block in result.content:
        for attr in ("text", "data", "blob"):
            value = getattr(block, attr, None) or getattr(getattr(block, "resource", None), attr, None)
            if isinstance(value, str):
                total += len(value)
    if result.structured_content is not None:
        total += len(json.dumps(result.structured_content, ensure_ascii=False))
    return total


def bound(result: CallToolResult, cap: int, spilled: Spilled | None = None) -> Bounded:
    """`result` as it came when it fits in `cap` characters; else its first `cap` characters of text, and the whole.

    `spilled`: the transport already cut `result` and kept the whole in a file.
    """
    if spilled is not None:
        head = CallToolResult(content=result.content, is_error=result.is_error)
        if spilled.total_chars <= cap:  # a long line whose text fits: nothing to keep
            spilled.path.unlink(missing_ok=True)
            return Bounded(head)
        return Bounded(head, total_chars=spilled.total_chars, full_path=spilled.path)
    if _size(result) <= cap:
        return Bounded(result)
    full = "\n".join(_block_text(block) for block in result.content)
    if result.structured_content is not None:
        structured = json.dumps(result.structured_content, ensure_ascii=False)
        if len(structured) > len(full):  # usually the content's text is this same JSON: keep the one that says more
            full = structured
    head = CallToolResult(content=[TextContent(type="text", text=full[:cap])], is_error=result.is_error)
    return Bounded(head, full, len(full))
