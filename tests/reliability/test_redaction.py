"""Redaction everywhere relay hands data back or keeps it: every job_result view, the prompt file, proxy credentials."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from relay.secrets import redact, secret_values
from relay.server.app import build_server
from tests.reliability.conftest import AdvSettings, grep_tree

pytestmark = pytest.mark.anyio

KEY = "sk-ant-api03-PLANTEDKEYvalue0123456789abcdef"
PROXY_PASSWORD = "Pr0xyPassw0rd-planted"
PROXY = f"http://alice:{PROXY_PASSWORD}@127.0.0.1:3128"


async def all_pages(client: Client, job_id: str, view: str) -> str:
    text, offset = "", 0
    while True:
        page = await client.call_tool("job_result", {"job_id": job_id, "view": view, "offset": offset, "limit": 500})
        data: Any = page.structured_content
        assert data is not None, page
        text += data["text"]
        if data["next_offset"] is None:
            return text
        offset = data["next_offset"]


async def test_keys_and_proxy_credentials_the_agent_printed_are_redacted_in_every_job_result_view(
    adv_settings: AdvSettings, workdir: Path
) -> None:
    settings = adv_settings(ANTHROPIC_API_KEY=KEY, HTTPS_PROXY=PROXY)
    async with Client(build_server(settings)) as client:
        found: dict[str, int] = {}
        for leak in ("ANTHROPIC_API_KEY", "HTTPS_PROXY"):
            result = await client.call_tool(
                "delegate", {"prompt": f"[[fake:leak={leak},pattern=4]]", "cwd": str(workdir), "mode": "sync"}
            )
            assert result.structured_content is not None
            job_id = result.structured_content["job_id"]
            raw = (settings.jobs_dir / job_id / "stderr").read_text()
            assert KEY in raw or PROXY_PASSWORD in raw  # the agent really printed it
            for view in ("final", "transcript", "events", "stderr"):
                text = await all_pages(client, job_id, view)
                found[f"{leak}:{view}"] = text.count(KEY) + text.count(PROXY_PASSWORD) + text.count("sk-ant-api03")
    assert found == {key: 0 for key in found} and len(found) == 8


async def test_proxy_credentials_are_never_stored(adv_settings: AdvSettings, relay_home: Path, workdir: Path) -> None:
    settings = adv_settings(HTTPS_PROXY=PROXY)
    async with Client(build_server(settings)) as client:
        prompt = f"use the proxy {PROXY} [[fake:leak=HTTPS_PROXY]]"
        result = await client.call_tool("delegate", {"prompt": prompt, "cwd": str(workdir), "mode": "sync"})
        assert result.structured_content is not None
    raw = {"stdout", "stderr"}  # the agent's own output, kept as printed
    hits = grep_tree(relay_home, [PROXY_PASSWORD.encode()], skip=lambda p: p.name in raw)
    assert hits == {}


async def test_the_prompt_file_is_gone_once_the_job_ends(adv_settings: AdvSettings, workdir: Path) -> None:
    settings = adv_settings(ANTHROPIC_API_KEY=KEY)
    async with Client(build_server(settings)) as client:
        # A prompt that starts with "-" travels on stdin, through a file in the job's folder.
        prompt = f"--my key is {KEY} [[fake:stdin]]"
        result = await client.call_tool("delegate", {"prompt": prompt, "cwd": str(workdir), "mode": "sync"})
        assert result.structured_content is not None
        job_dir = settings.jobs_dir / result.structured_content["job_id"]
    assert result.structured_content["status"] == "completed"
    assert not (job_dir / "stdin").exists()
    assert grep_tree(job_dir, [KEY.encode()], skip=lambda p: p.name in ("stdout", "stderr")) == {}


def test_a_proxy_url_with_credentials_is_redacted_anywhere_in_text() -> None:
    secrets = secret_values({"HTTPS_PROXY": PROXY, "http_proxy": "http://bob:hunter22@proxy:8080"})
    assert PROXY_PASSWORD in secrets
    text = f"connect {PROXY} failed; also http://bob:hunter22@proxy:8080 and ftp://u:p@h/x"
    assert redact(text, secrets) == (
        "connect http://[redacted]@127.0.0.1:3128 failed; also http://[redacted]@proxy:8080 and ftp://[redacted]@h/x"
    )


def test_a_text_too_large_to_hold_is_redacted_a_window_at_a_time_as_if_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import relay.secrets as secrets_module
    from relay.audit import bounded
    from relay.jobs import output

    monkeypatch.setattr(secrets_module, "REDACT_WINDOW", 200)
    monkeypatch.setattr(secrets_module, "REDACT_LOOKBACK", 100)
    monkeypatch.setattr(output, "KEEP_CHUNK", 13)  # keys and UTF-8 characters cut between reads
    secrets = tuple(secret_values({"ANTHROPIC_API_KEY": KEY, "HTTPS_PROXY": PROXY}, []))
    line = f"é€ {KEY} then {PROXY} and sk-unknownKEYshape0123456789 "
    text = "".join(f"{line}{'w' * (n % 37)} " for n in range(2000))
    src, dst = tmp_path / "whole.txt", tmp_path / "result.txt"
    src.write_text(text, encoding="utf-8")
    chars, audit_view = output.keep_text_file(src, dst, secrets)
    expected = redact(text, secrets)
    assert KEY not in expected and PROXY_PASSWORD not in expected
    assert (dst.read_text(encoding="utf-8"), chars, audit_view) == (expected, len(expected), bounded(expected))
    assert not src.exists()
