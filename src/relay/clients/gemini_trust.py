"""Does Gemini CLI trust a folder? It starts no MCP server (so none of relay's tools) in one it does not.

Gemini's own rules, in its order: GEMINI_CLI_TRUST_WORKSPACE=true trusts every folder (=false
none); `security.folderTrust.enabled: false` in its settings turns the check off; otherwise the
longest matching rule of `~/.gemini/trustedFolders.json` decides (`TRUST_FOLDER`: that folder and
everything under it, `TRUST_PARENT`: its parent's, `DO_NOT_TRUST`), and no rule means untrusted.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from relay.clients import jsonedit
from relay.errors import RelayError

TRUSTED = ("TRUST_FOLDER", "TRUST_PARENT")
HOW = (
    "trust it once in interactive `gemini`, add it to {file} "
    '({{"{folder}": "TRUST_FOLDER"}}), or set GEMINI_CLI_TRUST_WORKSPACE=true'
)


def _json(path: Path) -> Any:
    try:
        return jsonedit.load(path.read_text(encoding="utf-8"), str(path))
    except (OSError, RelayError):  # missing, or a file Gemini itself would refuse: no rules
        return None


def trusted_folders_file(environ: Mapping[str, str], gemini_home: Path) -> Path:
    override = environ.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH")
    return Path(override).expanduser() if override else gemini_home / ".gemini" / "trustedFolders.json"


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(Path(path).expanduser()))


def is_trusted(folder: Path, environ: Mapping[str, str], gemini_home: Path) -> bool:
    """Gemini's verdict for `folder` (user-level settings and rules; an IDE's trust is not seen here)."""
    env = environ.get("GEMINI_CLI_TRUST_WORKSPACE")
    if env in ("true", "false"):
        return env == "true"
    settings = _json(gemini_home / ".gemini" / "settings.json")
    if _member(_member(_member(settings, "security"), "folderTrust"), "enabled") is False:
        return True
    rules = _json(trusted_folders_file(environ, gemini_home))
    target = _real(folder)
    best: tuple[int, str] | None = None
    for rule, level in (cast(dict[str, Any], rules) if isinstance(rules, dict) else {}).items():
        if level not in (*TRUSTED, "DO_NOT_TRUST"):
            continue
        base = _real(Path(rule).parent if level == "TRUST_PARENT" else rule)
        if (target == base or target.is_relative_to(base)) and (best is None or len(rule) > best[0]):
            best = (len(rule), str(level))
    return best is not None and best[1] in TRUSTED


def _member(node: Any, key: str) -> Any:
    return cast(dict[str, Any], node).get(key) if isinstance(node, dict) else None


def untrusted_note(folder: Path, environ: Mapping[str, str], gemini_home: Path) -> str | None:
    """doctor's note when Gemini would not run relay's tools in `folder`; None when it would."""
    if is_trusted(folder, environ, gemini_home):
        return None
    file = trusted_folders_file(environ, gemini_home)
    return f"Gemini does not trust {folder}, so it starts no MCP server there: " + HOW.format(file=file, folder=folder)
