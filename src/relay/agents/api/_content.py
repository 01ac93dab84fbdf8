"""What the model sees besides the prompt: files inlined with line numbers, images as base64."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from relay.agents.api._call import ImageData
from relay.errors import ErrorCode, RelayError, invalid
from relay.osfiles import expand_home

# Token estimate used for every budget: UTF-8 bytes / 4.
BYTES_PER_TOKEN = 4
# Largest image relay sends (vendors refuse bigger ones: Anthropic 5 MB, OpenAI 20 MB).
MAX_IMAGE_BYTES = 5 * 1024 * 1024
# A directory in `files` contributes at most this many files (sorted, hidden ones skipped).
MAX_FILES_PER_DIR = 200
# A file larger than this is not inlined (it would not fit any budget; /dev/zero never ends).
MAX_FILE_BYTES = 4 * 1024 * 1024
IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
_DATA_URL = re.compile(r"^data:(image/(?:png|jpeg|gif|webp));base64,(.+)$", re.DOTALL)


def estimate_tokens(text: str) -> int:
    return (len(text.encode("utf-8")) + BYTES_PER_TOKEN - 1) // BYTES_PER_TOKEN


@dataclass(frozen=True)
class FileBlock:
    """The files that fit, as one text block, and those left out."""

    text: str
    included: tuple[str, ...]
    omitted: tuple[str, ...]
    tokens: int


def check_paths(paths: Iterable[str], what: str, roots: Sequence[Path] = ()) -> list[str]:
    """Absolute paths of existing regular files or directories inside `roots`, resolved; else an error."""
    out: list[str] = []
    for raw in paths:
        path = expand_home(raw)
        if not path.is_absolute():
            raise invalid(
                f"{what} must be absolute paths, got {raw[:200]!r}",
                f"pass the full path, e.g. /home/me/project/{raw[:200]}",
            )
        try:
            resolved = path.resolve(strict=True)
        except (OSError, RuntimeError, ValueError):  # missing, a symlink loop, a NUL byte
            raise invalid(f"{what}: {raw[:200]!r} does not exist", "pass existing files") from None
        if not (resolved.is_file() or resolved.is_dir()):
            raise invalid(f"{what}: {raw[:200]!r} is not a regular file or directory", "pass ordinary files")
        if roots and not any(resolved == r or resolved.is_relative_to(r) for r in roots):
            raise RelayError(
                ErrorCode.CWD_NOT_ALLOWED,
                f"{what}: {str(resolved)[:200]!r} is outside the allowed roots",
                "pass files under the allowed roots, or add the folder to security.allowed_roots in config.toml",
            )
        out.append(str(resolved))
    return out


def _expand(paths: Iterable[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            files += found[:MAX_FILES_PER_DIR]
        else:
            files.append(path)
    return files


def _numbered(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    lines = data.decode("utf-8", errors="replace").splitlines()
    width = max(4, len(str(len(lines))))
    body = "\n".join(f"{i:>{width}}│ {line}" for i, line in enumerate(lines, 1))
    return f"--- BEGIN FILE: {path} ---\n{body}\n--- END FILE: {path} ---"


def inline_files(paths: Iterable[str], budget_tokens: int) -> FileBlock:
    """Files with line numbers, in order, while they fit in the budget; binary or unreadable ones skipped."""
    parts: list[str] = []
    included: list[str] = []
    omitted: list[str] = []
    used = 0
    seen: set[str] = set()
    for path in _expand(paths):
        key = str(path)
        if key in seen:
            continue
        seen.add(key)
        text = _numbered(path)
        if text is None:
            omitted.append(key)
            continue
        cost = estimate_tokens(text)
        if used + cost > budget_tokens:
            omitted.append(key)
            continue
        parts.append(text)
        included.append(key)
        used += cost
    if omitted:
        note = "[not included (binary, unreadable or over the token budget): " + ", ".join(omitted) + "]"
        parts.append(note)
        used += estimate_tokens(note)
    return FileBlock("\n\n".join(parts), tuple(included), tuple(omitted), used)


def load_image(spec: str) -> ImageData:
    """An image from an absolute path or a `data:image/...;base64,` URL."""
    match = _DATA_URL.match(spec.strip())
    if match:
        try:
            raw = base64.b64decode(match.group(2), validate=True)
        except (binascii.Error, ValueError):
            raise invalid(
                "an image data URL is not valid base64", "pass an absolute path to the image instead"
            ) from None
        if len(raw) > MAX_IMAGE_BYTES:
            raise invalid("an image is larger than 5 MB", "resize it")
        return ImageData(match.group(1), base64.b64encode(raw).decode("ascii"))
    path = expand_home(spec)
    if "\0" in spec or not path.is_absolute():
        raise invalid(f"images must be absolute paths or data URLs, got {spec[:80]!r}", "pass the image's full path")
    media_type = IMAGE_TYPES.get(path.suffix.lower())
    if media_type is None:
        raise invalid(f"image {spec[:200]!r} is not png, jpeg, gif or webp", "convert it to one of those")
    try:
        if not path.is_file() or path.stat().st_size > MAX_IMAGE_BYTES:
            raise invalid(f"image {spec[:200]!r} is not a regular file under 5 MB", "pass an ordinary image file")
        raw = path.read_bytes()
    except OSError:
        raise invalid(f"image {spec[:200]!r} cannot be read", "pass an existing, readable file") from None
    if len(raw) > MAX_IMAGE_BYTES:
        raise invalid(f"image {spec[:200]!r} is larger than 5 MB", "resize it")
    return ImageData(media_type, base64.b64encode(raw).decode("ascii"))


def describe_image(spec: str) -> str:
    """How an image is recorded (paths as given, inline data never)."""
    return "<inline image>" if spec.strip().startswith("data:") else spec
