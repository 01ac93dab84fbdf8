"""Profile `gemini-mcp`: jamubc/gemini-mcp-tool's ask-gemini, brainstorm, fetch-chunk, ping, Help, timeout-test.

ask-gemini and brainstorm run Gemini CLI as relay jobs; changeMode asks Gemini for OLD/NEW edits,
parses them, and serves them in chunks (cached in RELAY_HOME, 10 minutes) through fetch-chunk. The
cache is the caller's own: another principal's cache key misses exactly as an unknown or expired one.
Long calls send a progress notification every 25 s, as the original does, so clients do not time out.
"""

import hashlib
import json
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from relay.errors import ErrorCode, RelayError
from relay.jobs.engine import JobRequest
from relay.principal import current
from relay.server.results import error_result
from relay.server.toolsets import _compat as compat
from relay.server.toolsets._registry import READ_ONLY, RUNS_AGENT, Deps, ToolRegistry, Toolset, seed_errors

PROFILE = "gemini-mcp"
PRO = "gemini-2.5-pro"
FLASH = "gemini-2.5-flash"
# The original's keepalive: a progress notification every 25 s while Gemini works.
KEEPALIVE_S = 25.0
# changeMode chunks: at most this many estimated characters each; cached 10 minutes, 50 files at most.
CHUNK_CHARS = 20_000
EDIT_OVERHEAD_CHARS = 250
CACHE_TTL_S = 600.0
CACHE_MAX_FILES = 50
# timeout-test reports progress every 5 s.
TIMEOUT_TEST_STEP_MS = 5000
CACHE_KEY_RE = re.compile(r"^[a-f0-9]{8}$")
EDIT_RE = re.compile(r"\*\*FILE:\s*(.+?):(\d+)\*\*\s*\n```\s*\nOLD:\s*\n([\s\S]*?)\nNEW:\s*\n([\s\S]*?)\n```")

# The original's `sandbox` flag: `gemini -s` (Gemini CLI's own sandbox).
SANDBOX_ARGS = ("-s",)

# The original's texts, in one place.
TEXTS = {
    "no_prompt": (
        "Please provide a prompt for analysis. Use @ syntax to include files "
        "(e.g., '@largefile.js explain what this does') or ask general questions"
    ),
    "no_challenge": "You must provide a valid brainstorming challenge or question to explore",
    "response": "Gemini response:",
    "keepalive": "⏳ Still processing... Gemini is working on your request",
    "no_edits": "No edits found in Gemini's response. Please ensure Gemini uses the OLD/NEW format. \n\n{raw}",
    "bad_chunk_key": "❌ Invalid chunkCacheKey format. Expected 8 lowercase hex characters (got {got}).",
    "cache_miss": (
        '❌ Cache miss: No chunks found for cache key "{key}". \n\n  Possible reasons:\n'
        "  1. The cache key is incorrect, Have you ran ask-gemini with changeMode enabled?\n"
        "  2. The cache has expired (10 minute TTL)\n"
        "  3. The MCP server was restarted and the file-based cache was cleared\n\n"
        "Please re-run the original changeMode request to regenerate the chunks."
    ),
    "bad_index": (
        "❌ Invalid chunk index: {index}\n\nAvailable chunks: 1 to {total}\nYou requested: {index}\n\n"
        "Please use a valid chunk index."
    ),
    "quota_failed": "{pro} quota exceeded, {flash} fallback also failed: {error}",
    "changemode": (
        "[CHANGEMODE INSTRUCTIONS]\nAn automated system applies your answer as exact text replacements, "
        "so its format matters more than its prose.\n\n"
        "For every change, write one block exactly like this:\n"
        "**FILE: <path>:<first line number>**\n```\nOLD:\n<the exact lines to replace, copied verbatim>\n"
        "NEW:\n<the complete replacement lines>\n```\n\n"
        "Rules: OLD must match the file exactly (whitespace included) and be unique in it: add "
        "surrounding lines until it is; use whole lines only; do not call tools to edit files.\n\n"
        "USER REQUEST:\n{prompt}\n"
    ),
}
METHODOLOGIES = {
    "divergent": "Divergent thinking: generate many ideas without judging them; build on wild ones; "
    "combine unrelated concepts; evaluate only at the end.",
    "convergent": "Convergent thinking: refine and combine existing concepts; apply critical criteria; "
    "prioritise by feasibility and impact; outline how to implement the best.",
    "scamper": "SCAMPER: Substitute, Combine, Adapt, Modify, Put to other use, Eliminate, Reverse.",
    "design-thinking": "Design thinking: empathise with the users, define the problem from their view, "
    "ideate user-focused solutions, think through the whole journey, favour testable concepts.",
    "lateral": "Lateral thinking: connect unrelated fields, challenge assumptions, use analogies and "
    "random associations, reverse the usual approach.",
    "auto": "Choose the best mix of divergent exploration, SCAMPER triggers, lateral thinking and a "
    "human-centred view{domain}.",
}


@dataclass(frozen=True)
class Edit:
    """One OLD/NEW replacement Gemini proposed (the original's ChangeModeEdit, with its field names)."""

    filename: str
    oldStartLine: int
    oldEndLine: int
    oldCode: str
    newStartLine: int
    newEndLine: int
    newCode: str


Methodology = Literal["divergent", "convergent", "scamper", "design-thinking", "lateral", "auto"]


def build(reg: ToolRegistry, deps: Deps) -> None:
    @reg.tool(
        name="ask-gemini",
        description="model selection [-m], sandbox [-s], and changeMode:boolean for providing edits",
        annotations=RUNS_AGENT,
    )
    async def ask_gemini(
        ctx: Context[Any, Any],
        prompt: Annotated[
            str,
            Field(
                # published as the original's minLength; a blank prompt gets the original's message below
                json_schema_extra={"minLength": 1},
                description="Analysis request. Use @ syntax to include files (e.g., '@largefile.js explain what this "
                "does') or ask general questions",
            ),
        ],
        model: Annotated[
            str | None,
            Field(
                description="Optional model to use (e.g., 'gemini-2.5-flash'). If not specified, uses the default "
                "model (gemini-2.5-pro)."
            ),
        ] = None,
        sandbox: Annotated[
            bool, Field(description="Use sandbox mode (-s flag) to safely test code changes (relay: runs read-only)")
        ] = False,
        changeMode: Annotated[
            bool,
            Field(description="Enable structured change mode: returns structured edit suggestions to apply directly"),
        ] = False,
        chunkIndex: Annotated[int | str | None, Field(description="Which chunk to return (1-based)")] = None,
        chunkCacheKey: Annotated[str | None, Field(description="Optional cache key for continuation")] = None,
    ) -> CallToolResult:
        if not prompt.strip():
            return _error(
                ErrorCode.INVALID_ARGUMENT,
                TEXTS["no_prompt"],
                "pass prompt: a question or task, with @path to include files",
            )
        index = _chunk_number(chunkIndex)
        if changeMode and index and chunkCacheKey:
            if not CACHE_KEY_RE.match(chunkCacheKey):
                return _text(TEXTS["bad_chunk_key"].format(got=json.dumps(chunkCacheKey)))
            chunks = _cache(deps).get(chunkCacheKey)
            if chunks and 1 <= index <= len(chunks):
                return _text(_render_chunk(chunks, index, chunkCacheKey, summary_on_first=False))
        request = TEXTS["changemode"].format(prompt=re.sub(r"file:(\S+)", r"@\1", prompt)) if changeMode else prompt
        # sandbox: relay's gemini runs read-only unless config grants more, which is what -s protects.
        reply = await _gemini(deps, ctx, "ask-gemini", request, model, sandbox=sandbox)
        if isinstance(reply, CallToolResult):
            return reply
        if not changeMode:
            return _text(f"{TEXTS['response']}\n{reply}")
        return _text(_change_mode(deps, reply, prompt, index))

    @reg.tool(
        description="Generate novel ideas with dynamic context gathering. --> Creative frameworks (SCAMPER, Design "
        "Thinking, etc.), domain context integration, idea clustering, feasibility analysis, and iterative refinement.",
        annotations=RUNS_AGENT,
    )
    async def brainstorm(
        ctx: Context[Any, Any],
        prompt: Annotated[
            str,
            Field(
                json_schema_extra={"minLength": 1},
                description="Primary brainstorming challenge or question to explore",
            ),
        ],
        model: Annotated[str | None, Field(description="Optional model to use")] = None,
        methodology: Annotated[
            Methodology,
            Field(
                description="Brainstorming framework: 'divergent', 'convergent', 'scamper', 'design-thinking', "
                "'lateral', 'auto'"
            ),
        ] = "auto",
        domain: Annotated[str | None, Field(description="Domain context for specialized brainstorming")] = None,
        constraints: Annotated[str | None, Field(description="Known limitations, requirements, or boundaries")] = None,
        existingContext: Annotated[
            str | None,
            Field(description="Background information, previous attempts, or current state to build upon"),
        ] = None,
        ideaCount: Annotated[int, Field(gt=0, description="Target number of ideas to generate (default: 10-15)")] = 12,
        includeAnalysis: Annotated[
            bool, Field(description="Include feasibility, impact, and implementation analysis for generated ideas")
        ] = True,
    ) -> CallToolResult:
        if not prompt.strip():
            return _error(
                ErrorCode.INVALID_ARGUMENT,
                TEXTS["no_challenge"],
                "pass prompt: the challenge or question to brainstorm",
            )
        request = _brainstorm_prompt(
            prompt.strip(), methodology, domain, constraints, existingContext, ideaCount, includeAnalysis
        )
        reply = await _gemini(deps, ctx, "brainstorm", request, model)
        return reply if isinstance(reply, CallToolResult) else _text(reply)

    @reg.tool(
        name="fetch-chunk",
        description="Retrieves cached chunks from a changeMode response. Use this to get subsequent chunks after "
        "receiving a partial changeMode response.",
        annotations=READ_ONLY,
    )
    async def fetch_chunk(
        cacheKey: Annotated[str, Field(description="The cache key provided in the initial changeMode response")],
        chunkIndex: Annotated[int, Field(ge=1, description="Which chunk to retrieve (1-based index)")],
    ) -> CallToolResult:
        chunks = _cache(deps).get(cacheKey)
        if not chunks:
            return _text(TEXTS["cache_miss"].format(key=cacheKey))
        if chunkIndex > len(chunks):
            return _text(TEXTS["bad_index"].format(index=chunkIndex, total=len(chunks)))
        return _text(_render_chunk(chunks, chunkIndex, cacheKey, summary_on_first=True))

    @reg.tool(description="Echo", annotations=READ_ONLY)
    async def ping(prompt: Annotated[str, Field(description="Message to echo ")] = "") -> CallToolResult:
        return _text(prompt or "Pong!")

    @reg.tool(name="Help", description="receive help information", annotations=READ_ONLY)
    async def help_() -> CallToolResult:
        try:
            return _text(await compat.cli_output(deps.settings, "gemini", ["--help"]))
        except RelayError as err:
            return error_result(err)

    @reg.tool(
        name="timeout-test",
        description="Test timeout prevention by running for a specified duration",
        annotations=READ_ONLY,
    )
    async def timeout_test(
        ctx: Context[Any, Any],
        duration: Annotated[float, Field(ge=10, description="Duration in milliseconds (minimum 10ms)")],
    ) -> CallToolResult:
        steps = max(1, -(-int(duration) // TIMEOUT_TEST_STEP_MS))
        started = time.monotonic()
        lines = [f"Starting timeout test for {_num(duration)}ms ({_num(duration / 1000)}s)"]
        for step in range(1, steps + 1):
            await anyio.sleep(duration / steps / 1000)
            elapsed = time.monotonic() - started
            lines.append(f"Step {step}/{steps} completed - Elapsed: {round(elapsed)}s")
            await ctx.report_progress(step, steps, lines[-1])
        total = int((time.monotonic() - started) * 1000)
        lines += ["\nTimeout test completed successfully!", f"Target duration: {_num(duration)}ms"]
        lines.append(f"Actual duration: {total}ms")
        return _text("\n".join(lines))


async def _gemini(
    deps: Deps, ctx: Context[Any, Any], tool: str, prompt: str, model: str | None, *, sandbox: bool = False
) -> str | CallToolResult:
    """Run Gemini on `prompt` as a relay job and return its answer; on a Pro quota error, retry once on Flash."""
    chosen = model or PRO
    reply = await _run_once(deps, ctx, tool, prompt, chosen, sandbox)
    if isinstance(reply, RelayError) and reply.code == ErrorCode.RATE_LIMITED and chosen != FLASH:
        retry = await _run_once(deps, ctx, tool, prompt, FLASH, sandbox)
        if isinstance(retry, RelayError):
            message = TEXTS["quota_failed"].format(pro=PRO, flash=FLASH, error=retry.message)
            return _error(retry.code, message, retry.hint)
        return retry
    return error_result(reply) if isinstance(reply, RelayError) else reply


async def _run_once(
    deps: Deps, ctx: Context[Any, Any], tool: str, prompt: str, model: str, sandbox: bool
) -> str | RelayError:
    engine = deps.engine()
    req = JobRequest(
        agent="gemini",
        prompt=prompt,
        model=model,
        permission="read-only" if sandbox else None,
        cli_args=SANDBOX_ARGS if sandbox else (),
    )
    try:
        job_id = await compat.start(engine, req, profile=PROFILE, tool=tool)
    except RelayError as err:
        return err
    rec = await compat.wait_sync(engine, job_id, ctx, keepalive_s=KEEPALIVE_S, keepalive_message=TEXTS["keepalive"])
    if rec.status != "completed":
        err = RelayError.from_dict(rec.error or {"code": "AGENT_FAILED", "message": compat.error_message(rec)})
        return RelayError(err.code, err.message, err.hint or f"relay job {rec.id}")
    return compat.output_text(engine, job_id)


# -- changeMode -------------------------------------------------------------------------------------


def parse_edits(reply: str) -> list[Edit]:
    """The OLD/NEW blocks in Gemini's reply, in order."""
    edits: list[Edit] = []
    for match in EDIT_RE.finditer(reply):
        filename, start_raw, old_raw, new_raw = match.groups()
        start = int(start_raw)
        old, new = old_raw.rstrip(), new_raw.rstrip()
        old_lines = len(old.split("\n")) if old else 0
        new_lines = len(new.split("\n")) if new else 0
        edits.append(
            Edit(filename.strip(), start, start + max(old_lines - 1, 0), old, start, start + max(new_lines - 1, 0), new)
        )
    return edits


def edit_problems(edits: list[Edit]) -> list[str]:
    problems: list[str] = []
    for e in edits:
        if not e.filename:
            problems.append("Edit missing filename")
        if not e.oldCode and not e.newCode:
            problems.append(f"Empty edit for {e.filename}")
    return problems


def chunk_edits(edits: list[Edit], limit: int = CHUNK_CHARS) -> list[list[Edit]]:
    """Edits grouped by file into chunks of about `limit` characters; a file larger than that is split."""
    by_file: dict[str, list[Edit]] = {}
    for e in edits:
        by_file.setdefault(e.filename, []).append(e)
    chunks: list[list[Edit]] = []
    current: list[Edit] = []
    size = 0
    for file_edits in by_file.values():
        units = [[e] for e in file_edits] if _size(file_edits) > limit else [file_edits]
        for unit in units:
            if current and size + _size(unit) > limit:
                chunks.append(current)
                current, size = [], 0
            current += unit
            size += _size(unit)
    if current or not chunks:
        chunks.append(current)
    return chunks


def _size(edits: list[Edit]) -> int:
    return sum(EDIT_OVERHEAD_CHARS + 2 * len(e.filename) + len(e.oldCode) + len(e.newCode) for e in edits)


def _change_mode(deps: Deps, reply: str, prompt: str, index: int | None) -> str:
    edits = parse_edits(reply)
    if not edits:
        return TEXTS["no_edits"].format(raw=reply)
    problems = edit_problems(edits)
    if problems:
        return "Edit validation failed:\n" + "\n".join(problems)
    chunks = chunk_edits(edits)
    key = _cache(deps).put(prompt, chunks) if len(chunks) > 1 else None
    current = index if index and 1 <= index <= len(chunks) else 1
    text = render_edits(chunks[current - 1], current, len(chunks), key)
    if current == 1 and len(edits) > 5:
        text = summarize(edits, partial=len(chunks) > 1) + "\n\n" + text
    return text


def _render_chunk(chunks: list[list[Edit]], index: int, key: str, *, summary_on_first: bool) -> str:
    text = render_edits(chunks[index - 1], index, len(chunks), key)
    every = [e for chunk in chunks for e in chunk]
    if index == 1 and (len(chunks) > 1 if summary_on_first else len(chunks[0]) > 5):
        text = summarize(every, partial=summary_on_first) + "\n\n" + text
    return text


def render_edits(edits: list[Edit], current: int, total: int, key: str | None) -> str:
    """One chunk of edits as the original presents them, with how to fetch the next chunk."""
    n = len(edits)
    if total > 1:
        head = (
            f"[CHANGEMODE OUTPUT - Chunk {current} of {total}]\n\n"
            f"Gemini has analyzed your codebase and generated edits across {total} chunks.\n"
            f"This chunk contains {n} complete edit{'' if n == 1 else 's'} that can be applied independently.\n\n"
            "Each chunk contains self-contained edits grouped by file. You can safely apply these edits\n"
            "before fetching the next chunk.\n\n"
        )
    else:
        head = (
            "[CHANGEMODE OUTPUT - Gemini has analyzed the files and provided these edits]\n\n"
            f"I have prepared {n} modification{'' if n == 1 else 's'} for your codebase.\n\n"
            "IMPORTANT: Apply these edits directly WITHOUT reading the files first. The edits below contain exact "
            "text matches from the current file contents.\n\n"
        )
    body = "\n".join(
        f"### Edit {i}: {e.filename}\n\nReplace this exact text:\n```\n{e.oldCode}\n```\n\n"
        f"With this text:\n```\n{e.newCode}\n```\n"
        for i, e in enumerate(edits, 1)
    )
    foot = (
        "\n---\nApply these edits in order. Each edit uses exact string matching, so the old_str must match "
        "exactly what appears between the code blocks."
    )
    if key and current < total:
        left = total - current
        foot += (
            f"\n\n---\n**Next Step**: After applying the edits above, retrieve the next chunk "
            f'({current + 1} of {total}) using:\n\n```\nfetch-chunk cacheKey="{key}" chunkIndex={current + 1}\n```\n\n'
            f"There {'is' if left == 1 else 'are'} {left} more chunk{'' if left == 1 else 's'} containing additional "
            "edits.\n\n**CONTINUE**: You are working on a multi-chunk changeMode response. After applying these "
            "edits, fetch the next chunk to continue with the remaining modifications."
        )
    return head + body + foot


def summarize(edits: list[Edit], *, partial: bool) -> str:
    counts: dict[str, int] = {}
    for e in edits:
        counts[e.filename] = counts.get(e.filename, 0) + 1
    lines = "\n".join(f"- {f}: {c} edit{'' if c == 1 else 's'}" for f, c in counts.items())
    title = "ChangeMode Summary (Complete analysis across all chunks):" if partial else "ChangeMode Summary:"
    across = " (across all chunks)" if partial else ""
    return f"{title}\nTotal edits: {len(edits)}{across}\nFiles affected: {len(counts)}\n\n{lines}"


class ChunkCache:
    """changeMode chunks as JSON files in RELAY_HOME, by an 8-hex key from the prompt; 10 minutes, 50 files.

    Each principal (relay/principal.py) has a folder of its own, so one principal's key names nothing of
    another's (a miss, as an unknown key), and two principals sending one prompt do not overwrite each other."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _own(self) -> Path:
        """The current principal's folder (named by a hash: a principal's name never becomes a path)."""
        return self.folder / hashlib.sha256(current().name.encode("utf-8")).hexdigest()[:16]

    def put(self, prompt: str, chunks: list[list[Edit]]) -> str:
        folder = self._own()
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._prune(folder)
        key = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:8]
        data = {"created": time.time(), "chunks": [[asdict(e) for e in chunk] for chunk in chunks]}
        tmp = folder / f"{key}.json.tmp"
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, folder / f"{key}.json")
        return key

    def get(self, key: str) -> list[list[Edit]] | None:
        if not CACHE_KEY_RE.match(key):  # no file is named by anything else: a miss, whatever the key holds
            return None
        path = self._own() / f"{key}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if time.time() - float(data.get("created", 0)) > CACHE_TTL_S:
            path.unlink(missing_ok=True)
            return None
        return [[Edit(**e) for e in chunk] for chunk in data["chunks"]]

    def _prune(self, folder: Path) -> None:
        files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
        now = time.time()
        for i, path in enumerate(files):
            if i < len(files) - (CACHE_MAX_FILES - 1) or now - path.stat().st_mtime > CACHE_TTL_S:
                path.unlink(missing_ok=True)


def _cache(deps: Deps) -> ChunkCache:
    return deps.service("gemini-mcp.chunks", lambda: ChunkCache(deps.settings.home / "compat" / "gemini-chunks"))


# -- small helpers ----------------------------------------------------------------------------------


def _brainstorm_prompt(
    prompt: str,
    methodology: str,
    domain: str | None,
    constraints: str | None,
    context: str | None,
    count: int,
    analysis: bool,
) -> str:
    framework = METHODOLOGIES[methodology].format(domain=f" for the {domain} domain" if domain else "")
    parts = [f"# BRAINSTORMING SESSION\n\n## Core Challenge\n{prompt}\n\n## Methodology Framework\n{framework}"]
    context_lines = [
        f"**Domain Focus:** {domain}" if domain else "",
        f"**Constraints & Boundaries:** {constraints}" if constraints else "",
        f"**Background Context:** {context}" if context else "",
    ]
    if any(context_lines):
        parts.append("## Context\n" + "\n".join(line for line in context_lines if line))
    parts.append(
        f"## Output Requirements\n- Generate {count} distinct, creative, non-obvious ideas\n"
        "- Actionable, clearly named, each briefly explained"
    )
    if analysis:
        parts.append(
            "## Analysis\nFor each idea: **Feasibility** (1-5), **Impact** (1-5), **Innovation** (1-5) "
            "and a one-sentence **Assessment**."
        )
    parts.append("## Format\n### Idea [N]: [Name]\n**Description:** [2-3 sentences]\n\nBegin brainstorming session:")
    return "\n\n".join(parts)


def _chunk_number(raw: int | str | None) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _text(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)])


def _error(code: ErrorCode, message: str, hint: str = "") -> CallToolResult:
    return error_result(RelayError(code, message, hint))


TOOLSET = Toolset(
    name=PROFILE,
    description="jamubc/gemini-mcp-tool's ask-gemini, brainstorm, fetch-chunk, ping, Help, timeout-test (seed 000)",
    build=build,
    error_envelope=seed_errors(compat.words_error),
)
