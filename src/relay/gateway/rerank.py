"""Model reranking for `recommend_tools`: the keyword search's best candidates and the task go to a model.

Off unless the user names a model (`[gateway.search] rerank_model` in config.toml, or
RELAY_RECOMMEND_MODEL). The model gets the task and the top candidates (30 by default) and answers
with the tool names in its order and a one-sentence recommendation. It goes through relay's `ask`
path, so the question is a durable job whose usage and cost are recorded like any `ask`. Its time is
bounded: past `rerank_timeout_s` the keyword order stands and the job is cancelled. An answer is kept
per (model, task, catalog version), so asking again for the same task over the same tools costs
nothing, and a new or changed tool makes a fresh answer.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

import anyio

from relay.agents.api.registry import read_config_table
from relay.ask import AskArgs, submit_ask
from relay.config import Settings
from relay.errors import ErrorCode, RelayError
from relay.gateway.search import Ranked
from relay.jobs.engine import Engine

__all__ = [
    "ModelAnswer",
    "RerankConfig",
    "Reranker",
    "Reranking",
    "engine_asker",
    "parse_rerank",
    "rerank_config",
    "rerank_prompt",
]

# How many of the keyword search's best tools the model chooses among.
RERANK_CANDIDATES = 30
# How long the model may take before the keyword order is used (the "bounded time").
DEFAULT_TIMEOUT_S = 20.0
# Answers kept (least recently used goes first): one per (model, task, catalog version).
CACHE_SIZE = 256
# Each candidate's description is cut to this many characters in the prompt.
DESCRIPTION_CHARS = 240

SYSTEM = (
    "You pick the tools an agent should call for a task. Answer with JSON only, no prose: "
    '{"tools": ["server/tool", ...], "recommendation": "one sentence"}. List the candidates that fit the task, '
    "best first, named exactly as given; leave out those that do not fit. The recommendation says in one "
    "sentence which tool to call and with which key arguments."
)


@dataclass(frozen=True)
class RerankConfig:
    """`[gateway.search]` in config.toml: which model reranks (None: no reranking), how long it may take."""

    model: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    candidates: int = RERANK_CANDIDATES


def rerank_config(settings: Settings) -> RerankConfig:
    """The reranking settings; RELAY_RECOMMEND_MODEL, when set, names the model instead of the file."""
    section = read_config_table(settings, "gateway").get("search", {})
    if not isinstance(section, dict):
        raise _config_error("[gateway.search] must be a table", "write it as [gateway.search] with rerank_model = ...")
    table: dict[str, Any] = section  # pyright: ignore[reportUnknownVariableType]
    model = settings.environ.get("RELAY_RECOMMEND_MODEL") or table.get("rerank_model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise _config_error("[gateway.search] rerank_model must be a model name", 'e.g. rerank_model = "haiku"')
    timeout = table.get("rerank_timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise _config_error("[gateway.search] rerank_timeout_s must be a positive number", "e.g. rerank_timeout_s = 20")
    candidates = table.get("rerank_candidates", RERANK_CANDIDATES)
    if isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 1:
        raise _config_error(
            "[gateway.search] rerank_candidates must be a positive integer", "e.g. rerank_candidates = 30"
        )
    return RerankConfig(model.strip() if model else None, float(timeout), candidates)


def _config_error(message: str, hint: str) -> RelayError:
    return RelayError(ErrorCode.CONFIG_INVALID, message, f"fix config.toml: {hint}")


# --- the question and the answer -----------------------------------------------------------


def _key(r: Ranked) -> str:
    return f"{r.doc.server}/{r.doc.name}"


def rerank_prompt(task: str, candidates: Sequence[Ranked]) -> str:
    """The task and each candidate (server/tool, arguments, description) for the model."""
    lines = ["Task:", task.strip(), "", "Candidates, in the order a keyword search ranked them:"]
    for r in candidates:
        desc = " ".join(r.doc.description.split())
        if len(desc) > DESCRIPTION_CHARS:
            desc = desc[: DESCRIPTION_CHARS - 1].rstrip() + "…"
        params = f" (arguments: {', '.join(r.doc.params)})" if r.doc.params else ""
        lines.append(f"- {_key(r)}{params}: {desc}")
    return "\n".join(lines)


def parse_rerank(text: str, candidates: Sequence[Ranked]) -> tuple[list[Ranked], str]:
    """The candidates in the model's order (those it left out follow in keyword order) and its sentence.

    Names that are not candidates are ignored, so the model can only reorder tools that exist. An answer
    that is not the JSON asked for, or names no candidate, is an UPSTREAM_ERROR.
    """
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.DOTALL)
    raw = fenced.group(1) if fenced else text[text.find("{") : text.rfind("}") + 1]
    try:
        data: Any = json.loads(raw)
    except ValueError:
        data = None
    obj = cast(dict[str, Any], data) if isinstance(data, dict) else {}
    tools = obj.get("tools")
    if not isinstance(tools, list):
        raise RelayError(
            ErrorCode.UPSTREAM_ERROR,
            f"the reranking model's answer was not the JSON asked for: {text[:200]!r}",
            "try another rerank_model in [gateway.search]",
        )
    by_key = {_key(r): r for r in candidates}
    named = dict.fromkeys(str(t).strip() for t in cast(list[Any], tools))
    chosen = [by_key[t] for t in named if t in by_key]
    if not chosen:
        raise RelayError(
            ErrorCode.UPSTREAM_ERROR,
            "the reranking model named none of the candidates",
            "try another rerank_model in [gateway.search]",
        )
    rest = [r for r in candidates if r not in chosen]
    sentence = obj.get("recommendation")
    return chosen + rest, " ".join(sentence.split()) if isinstance(sentence, str) else ""


# --- asking, with a time bound and a cache -----------------------------------------------------


@dataclass(frozen=True)
class ModelAnswer:
    """What the model said, and the `ask` job that carried the question (its id, model and cost)."""

    text: str
    job_id: str | None = None
    model: str | None = None
    cost_usd: float | None = None


Asker = Callable[[str, str, str], Awaitable[ModelAnswer]]  # (prompt, system prompt, model) -> answer


@dataclass(frozen=True)
class Reranking:
    """The tools in their final order and how it was reached.

    `ranked_by` is "model" when the model's order was applied (fresh, or `cached`), else "keywords"
    with `note` saying why (the time bound, or the model's error).
    """

    tools: list[Ranked]
    ranked_by: Literal["model", "keywords"]
    recommendation: str = ""
    model: str | None = None
    job_id: str | None = None
    cost_usd: float | None = None
    cached: bool = False
    note: str | None = None

    def summary(self) -> dict[str, Any]:
        """How the order was reached, for a reply: by whom, the ask job and its cost, cache, fallback reason."""
        out: dict[str, Any] = {"ranked_by": self.ranked_by, "model": self.model, "job_id": self.job_id}
        out |= {"cost_usd": self.cost_usd, "cached": self.cached}
        if self.note:
            out["note"] = self.note
        return out


class Reranker:
    """Reorders candidates with a model, within a time bound, remembering answers per (model, task, catalog)."""

    def __init__(self, cache_size: int = CACHE_SIZE) -> None:
        self._cache: OrderedDict[tuple[str, str, str], Reranking] = OrderedDict()
        self._size = cache_size

    async def rerank(
        self, task: str, candidates: Sequence[Ranked], catalog_version: str, config: RerankConfig, ask: Asker
    ) -> Reranking:
        """The candidates in the model's order, or in keyword order when the model is slow or fails."""
        top = list(candidates[: config.candidates])
        if config.model is None or not top:
            return Reranking(top, "keywords")
        # The keyword candidates follow from the task and the catalog, so these three name one answer.
        key = (config.model, " ".join(task.lower().split()), f"{catalog_version}/{len(top)}")
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return replace(hit, cached=True, cost_usd=0.0)
        answer: ModelAnswer | None = None
        try:
            with anyio.move_on_after(config.timeout_s):
                answer = await ask(rerank_prompt(task, top), SYSTEM, config.model)
            if answer is None:
                return Reranking(top, "keywords", model=config.model, note=f"no answer within {config.timeout_s:g} s")
            order, sentence = parse_rerank(answer.text, top)
        except RelayError as err:
            job = answer.job_id if answer else None
            cost = answer.cost_usd if answer else None
            return Reranking(top, "keywords", model=config.model, job_id=job, cost_usd=cost, note=err.message)
        result = Reranking(order, "model", sentence, answer.model or config.model, answer.job_id, answer.cost_usd)
        self._cache[key] = result
        while len(self._cache) > self._size:
            self._cache.popitem(last=False)
        return result


def engine_asker(engine: Engine, timeout_s: float) -> Asker:
    """An Asker that puts each question to the model as an `ask` job (tool "recommend_tools") and waits for it.

    When the caller stops waiting (the reranker's time bound), the job is cancelled rather than left running.
    """

    async def ask(prompt: str, system: str, model: str) -> ModelAnswer:
        job_id = await submit_ask(
            engine, AskArgs(prompt=prompt, system_prompt=system, model=model, tool="recommend_tools")
        )
        try:
            rec = await engine.wait_one(job_id, timeout_s)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await engine.cancel(job_id)
            raise
        if not rec.is_final:
            await engine.cancel(job_id)
            raise RelayError(ErrorCode.TIMEOUT, f"the model did not answer within {timeout_s:g} s", "retry later")
        env = engine.envelope(job_id)
        cost = env.get("cost_usd")
        cost_usd = float(cost) if isinstance(cost, int | float) else None
        if env["status"] != "completed":
            error: Any = env.get("error")
            message = cast(dict[str, Any], error).get("message") if isinstance(error, dict) else None
            raise RelayError(ErrorCode.UPSTREAM_ERROR, str(message or f"the ask job ended {env['status']}"), "retry")
        return ModelAnswer(str(env.get("output") or ""), job_id, str(env.get("model") or model), cost_usd)

    return ask
