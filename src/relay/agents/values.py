"""What a caller's value may be before it reaches an agent CLI's argv (or git's): one typed rule per CLI and slot.

A value a caller sends (a session id, a model, a reasoning effort, a system prompt, a git ref) must never
become a flag: `session_id="--dangerously-bypass-approvals-and-sandbox"` once reached `codex exec resume`
as an option, `session_id="-y"` turned on gemini's YOLO mode. Each slot has a rule: the shape that CLI
accepts there (a session id in the CLI's own id format, or one relay recorded), never a leading '-', no
control characters, a bounded length. A value outside it is refused with INVALID_ARGUMENT, naming the
argument and saying the accepted shape.

The rules are checked twice: once at admission, before a job exists (relay.jobs.request), and again by each
adapter's `build` (which also passes every value in a form the CLI cannot misread: `--opt=value`, `--`
before positionals). Pure: no I/O, nothing but the value and the CLI's name.

Slots per CLI (what a caller can fill; the adapters' argv forms in brackets):
  claude   prompt [positional; stdin when it starts with '-'], model [--model=], session_id [--resume=],
           system_prompt [--append-system-prompt=], reasoning_effort [--effort=]
  codex    prompt [after `--`; `-` and stdin when it starts with '-'], model [--model=],
           session_id [`resume -- ID`], reasoning_effort [--config=model_reasoning_effort="..."]
  gemini   prompt [-p; stdin when it starts with '-'], model [--model=], session_id [--resume=]
  copilot  prompt [-p, a leading space when it starts with '-'], model [--model=], session_id [--resume=],
           reasoning_effort [--reasoning-effort=]
  generic  (a CLI declared in config.toml) prompt, model, session_id in its argument templates
  git      base (a worktree's start), into (the branch a job lands in)
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from relay.errors import ErrorCode, RelayError

# The most characters a session id, a model name or a git ref may have (a UUID has 36; git refs 255 bytes).
MAX_SESSION_ID_CHARS = 128
MAX_MODEL_CHARS = 128
MAX_REF_CHARS = 255
# A system prompt travels as one argv string: Linux refuses longer ones (MAX_ARG_STRLEN is 128 KiB).
MAX_SYSTEM_PROMPT_BYTES = 100_000

BUILTIN_CLIS = ("claude", "codex", "gemini", "copilot")
# The reasoning-effort levels a caller may name; each adapter maps them to its CLI's nearest setting.
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# An id relay recorded from a CLI's own output, or a declared CLI's id: a plain token.
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=/-]*")
# Model ids and aliases: `claude-sonnet-4-5`, `gpt-5.5`, `sonnet[1m]`, `llama3:8b`, `openai/gpt-oss-120b`.
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+/\[\]-]*")
# A git revision a caller may name: a branch, tag, commit or `HEAD~2`; never an option, no spaces.
_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./@{}^~+-]*")
_EFFORT = re.compile("|".join(REASONING_EFFORTS))

# Characters no value may hold anywhere: controls (a newline, NUL, escapes), format characters (bidi
# overrides, zero-width marks), surrogates, private use, and the Unicode line and paragraph separators.
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
# What free text (a system prompt) may hold of those: its lines and tabs.
_TEXT_WHITESPACE = frozenset("\t\n\r")


@dataclass(frozen=True)
class Rule:
    """One slot of one CLI: the shape a value must have there, and how to say it to the caller."""

    slot: str
    pattern: re.Pattern[str]
    max_chars: int
    shape: str  # what the CLI accepts, as the hint says it

    def check(self, value: str, name: str | None = None) -> str:
        """`value` when it has this rule's shape; else RelayError(INVALID_ARGUMENT) naming `name` (or the slot)."""
        arg = name or self.slot
        check_plain(arg, value, self.max_chars, self.shape)
        if not self.pattern.fullmatch(value):
            raise _refused(arg, value, "is not", self.shape)
        return value


def _refused(name: str, value: str, what: str, shape: str) -> RelayError:
    shown = value if len(value) <= 60 else value[:57] + "..."
    return RelayError(ErrorCode.INVALID_ARGUMENT, f"{name} {shown!r} {what} {shape}", f"pass {name} as {shape}")


def forbidden_char(value: str, allowed: frozenset[str] = frozenset()) -> str | None:
    """The first control, format or separator character in `value` (other than `allowed`), or None."""
    for ch in value:
        if ch not in allowed and unicodedata.category(ch) in _FORBIDDEN_CATEGORIES:
            return ch
    return None


def check_plain(name: str, value: str, max_chars: int, shape: str) -> str:
    """The floor every argv value stands on: not empty, no leading '-', no control characters, bounded."""
    if not value.strip():
        raise RelayError(ErrorCode.INVALID_ARGUMENT, f"{name} is empty", f"pass {name} as {shape}, or omit it")
    if value.startswith("-"):
        raise _refused(name, value, "starts with '-' (a CLI would read it as an option): it is not", shape)
    bad = forbidden_char(value)
    if bad is not None:
        raise _refused(name, value, f"holds the control character U+{ord(bad):04X}: it is not", shape)
    if len(value) > max_chars:
        raise RelayError(
            ErrorCode.INVALID_ARGUMENT,
            f"{name} is {len(value)} characters long, more than the {max_chars} it may have",
            f"pass {name} as {shape}",
        )
    return value


SESSION_UUID = Rule("session_id", _UUID, 36, "a session id of that CLI (a UUID, e.g. from session_list)")
SESSION_RECORDED = Rule(
    "session_id", _TOKEN, MAX_SESSION_ID_CHARS, "a session id relay recorded (session_list lists them)"
)
SESSION_GENERIC = Rule(
    "session_id",
    _TOKEN,
    MAX_SESSION_ID_CHARS,
    f"a plain id (a letter or digit, then letters, digits and . _ : @ + = / -; at most {MAX_SESSION_ID_CHARS})",
)
MODEL = Rule(
    "model",
    _MODEL,
    MAX_MODEL_CHARS,
    f"a model name (a letter or digit, then letters, digits and . _ : @ + / [ ] -; at most {MAX_MODEL_CHARS})",
)
EFFORT = Rule("reasoning_effort", _EFFORT, 16, f"one of {', '.join(REASONING_EFFORTS)}")
GIT_REF = Rule(
    "base", _REF, MAX_REF_CHARS, "a ref: a branch, tag or commit (letters, digits and _ . / @ { } ^ ~ + -, no spaces)"
)

# The rules of each built-in CLI's slots; a CLI declared in config.toml gets GENERIC's.
RULES: dict[str, dict[str, Rule]] = {
    # claude --resume takes its session UUID; gemini --resume also takes `latest` or an index, and copilot
    # --resume a prefix or a name: those pick whatever the CLI has (maybe another principal's), so a caller
    # names a UUID; codex `exec resume` also takes a thread name, for the same reason refused.
    cli: {"session_id": SESSION_UUID, "model": MODEL, "reasoning_effort": EFFORT}
    for cli in BUILTIN_CLIS
}
GENERIC: dict[str, Rule] = {"session_id": SESSION_GENERIC, "model": MODEL, "reasoning_effort": EFFORT}


def rule(cli: str, slot: str) -> Rule:
    """The rule of `slot` (session_id, model, reasoning_effort) for the CLI named `cli`."""
    return RULES.get(cli, GENERIC)[slot]


def session_id(cli: str, value: str, *, recorded: bool = False) -> str:
    """A session id to resume with `cli`: the CLI's own id format, or (`recorded`) any plain id relay recorded."""
    own = rule(cli, "session_id")
    check_plain(own.slot, value, own.max_chars, own.shape)
    return SESSION_RECORDED.check(value) if recorded else own.check(value)


def session_id_floor(cli: str, value: str) -> str:
    """What any session id of `cli` must be before relay even looks it up: a plain id, never an option."""
    own = rule(cli, "session_id")
    check_plain(own.slot, value, MAX_SESSION_ID_CHARS, own.shape)
    return SESSION_RECORDED.check(value)


def resumable(value: str) -> str:
    """The floor an adapter's `build` holds a session id to: any plain id (relay checked its format at admission,
    or recorded it from the CLI's own output)."""
    return SESSION_RECORDED.check(value)


def model(cli: str, value: str) -> str:
    """A model name or alias for `cli`."""
    return rule(cli, "model").check(value)


def reasoning_effort(cli: str, value: str) -> str:
    """A reasoning-effort level (one of REASONING_EFFORTS) for `cli`."""
    return rule(cli, "reasoning_effort").check(value)


def git_ref(name: str, value: str) -> str:
    """A git revision (branch, tag, commit) a caller names as `name` (base, into)."""
    return GIT_REF.check(value, name)


def system_prompt(value: str) -> str:
    """A system prompt: free text (lines and tabs), no other control character, small enough for one argv string."""
    bad = forbidden_char(value, _TEXT_WHITESPACE)
    if bad is not None:
        raise RelayError(
            ErrorCode.INVALID_ARGUMENT,
            f"system_prompt holds the control character U+{ord(bad):04X}",
            "pass system_prompt as plain text (lines and tabs are fine)",
        )
    if len(value.encode("utf-8", "surrogatepass")) > MAX_SYSTEM_PROMPT_BYTES:
        raise RelayError(
            ErrorCode.INVALID_ARGUMENT,
            f"system_prompt is longer than {MAX_SYSTEM_PROMPT_BYTES} bytes",
            "put the long instructions at the head of the prompt instead",
        )
    return value


def option(flag: str, value: str) -> str:
    """`--flag=value`: one argv string the CLI's parser reads as that option's value, whatever the value holds."""
    return f"{flag}={value}"


__all__ = [
    "BUILTIN_CLIS",
    "EFFORT",
    "GENERIC",
    "GIT_REF",
    "MODEL",
    "REASONING_EFFORTS",
    "RULES",
    "SESSION_GENERIC",
    "SESSION_RECORDED",
    "SESSION_UUID",
    "Rule",
    "check_plain",
    "forbidden_char",
    "git_ref",
    "model",
    "option",
    "reasoning_effort",
    "resumable",
    "rule",
    "session_id",
    "session_id_floor",
    "system_prompt",
]
