"""The official MCP conformance suite's 2026-07-28 requirements against `relay serve` as shipped, over HTTP and stdio.

One run of `conformance server --requirements 2026-07-28` per transport (every scenario the
revision requires, at its wire, plus the ones it runs unscored as pending): against
`relay serve --http`, and against `relay serve` on stdio behind tests/e2e/stdio_bridge.py (the
suite speaks HTTP only). Every check passes except those in CHOICES, each with its reason, and
docs/conformance.md lists the same ones: a choice that starts passing, or a new failure, fails
here. The suite's tasks scenarios (an extension, unscored) need its fixture tools and run against
tests/server/tasks_fixture.py in test_tasks_conformance.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.e2e.stdio_bridge import bridged
from tests.e2e.test_server_conformance import RELAY
from tests.e2e.test_tasks_conformance import NODE, SUITE, free_port, serving

pytestmark = pytest.mark.e2e

REVISION = "2026-07-28"
RUN_TIMEOUT_S = 600
DOC = REPO / "docs" / "conformance.md"
PASSING = ("SUCCESS", "INFO")
# `list --requirements 2026-07-28`: the server scenarios it scores, then those it runs as pending.
REQUIRED = (
    "server-stateless",
    "completion-complete",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-error",
    "tools-call-with-progress",
    "server-sse-multiple-streams",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "sep-2164-resource-not-found",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "dns-rebinding-protection",
    "caching",
    "input-required-result-basic-elicitation",
    "input-required-result-basic-sampling",
    "input-required-result-basic-list-roots",
    "input-required-result-request-state",
    "input-required-result-multiple-input-requests",
    "input-required-result-multi-round",
    "input-required-result-missing-input-response",
    "input-required-result-non-tool-request",
    "input-required-result-result-type",
    "input-required-result-unsupported-methods",
    "input-required-result-tampered-state",
    "input-required-result-capability-check",
    "input-required-result-ignore-extra-params",
    "input-required-result-validate-input",
)
PENDING = ("json-schema-2020-12", "http-header-validation", "http-custom-header-server-validation")
SCENARIOS = REQUIRED + PENDING
TRANSPORTS = ("http", "stdio")

# Why a check does not pass against relay: relay serves its own tools, not the suite's fixtures.
FIXTURE_TOOL = "needs the suite's fixture tool; relay serves only its own tools"
FIXTURE_PROMPT = "needs the suite's fixture prompt; relay's prompts are its own"
FIXTURE_RESOURCE = "needs the suite's fixture resource; relay serves only its own resources"
NO_COMPLETION = "relay offers no completions (no prompt or template argument to complete): -32601"
HOOK = "needs the suite's diagnostic hook tool that changes the server's lists; relay has none"
NO_RESOURCE = "a fresh relay has no resource to read, so the suite skips it"
NO_XMCP_TOOL = "needs a tool with x-mcp-header parameters; none of relay's tools maps a parameter to a header"
INPUT_TOOL = "needs the suite's test_input_required_result_* tool; relay's own tools do not ask for input"
NULL_INPUT = (
    "a SHOULD: the SDK reads `inputResponses: null` as absent, and the suite's tool it names is unknown to relay"
)

# (scenario, check id) -> why it does not pass, on both transports. Status WARNING for SHOULDs.
CHOICES: dict[tuple[str, str], str] = {
    ("server-stateless", "sep-2575-server-rejects-undeclared-capability"): FIXTURE_TOOL,
    ("server-stateless", "sep-2575-missing-capability-http-400"): FIXTURE_TOOL,
    ("server-stateless", "sep-2575-server-sends-prompts-list-changed-on-subscription"): HOOK,
    ("server-stateless", "sep-2575-server-sends-tools-list-changed-on-subscription"): HOOK,
    ("completion-complete", "completion-complete"): NO_COMPLETION,
    ("tools-call-image", "tools-call-image"): FIXTURE_TOOL,
    ("tools-call-audio", "tools-call-audio"): FIXTURE_TOOL,
    ("tools-call-embedded-resource", "tools-call-embedded-resource"): FIXTURE_TOOL,
    ("tools-call-mixed-content", "tools-call-mixed-content"): FIXTURE_TOOL,
    ("tools-call-with-progress", "tools-call-with-progress"): FIXTURE_TOOL,
    ("resources-read-text", "resources-read-text"): FIXTURE_RESOURCE,
    ("resources-read-binary", "resources-read-binary"): FIXTURE_RESOURCE,
    ("resources-templates-read", "resources-templates-read"): FIXTURE_RESOURCE,
    ("prompts-get-simple", "prompts-get-simple"): FIXTURE_PROMPT,
    ("prompts-get-with-args", "prompts-get-with-args"): FIXTURE_PROMPT,
    ("prompts-get-embedded-resource", "prompts-get-embedded-resource"): FIXTURE_PROMPT,
    ("prompts-get-with-image", "prompts-get-with-image"): FIXTURE_PROMPT,
    ("caching", "sep-2549-resources-read-caching-hints"): NO_RESOURCE,
    ("input-required-result-basic-elicitation", "sep-2322-elicitation-incomplete"): INPUT_TOOL,
    ("input-required-result-basic-sampling", "sep-2322-sampling-incomplete"): INPUT_TOOL,
    ("input-required-result-basic-list-roots", "sep-2322-list-roots-incomplete"): INPUT_TOOL,
    ("input-required-result-request-state", "sep-2322-request-state-incomplete"): INPUT_TOOL,
    ("input-required-result-multiple-input-requests", "sep-2322-multiple-inputs-incomplete"): INPUT_TOOL,
    ("input-required-result-multi-round", "sep-2322-multi-round-r1"): INPUT_TOOL,
    ("input-required-result-missing-input-response", "sep-2322-missing-response-rerequests"): INPUT_TOOL,
    ("input-required-result-non-tool-request", "sep-2322-non-tool-incomplete"): FIXTURE_PROMPT,
    ("input-required-result-result-type", "sep-2322-result-type-included"): INPUT_TOOL,
    ("input-required-result-tampered-state", "sep-2322-reject-tampered-state"): INPUT_TOOL,
    ("input-required-result-capability-check", "sep-2322-respect-client-capabilities"): INPUT_TOOL,
    ("input-required-result-validate-input", "sep-2322-error-on-protocol-error"): NULL_INPUT,
    ("json-schema-2020-12", "json-schema-2020-12-tool-found"): FIXTURE_TOOL,
    ("http-custom-header-server-validation", "sep-2243-server-no-xmcp-tool"): NO_XMCP_TOOL,
    ("http-custom-header-server-validation", "sep-2243-server-decode-base64"): NO_XMCP_TOOL,
    ("http-custom-header-server-validation", "sep-2243-server-validate-param-match"): NO_XMCP_TOOL,
    ("http-custom-header-server-validation", "sep-2243-server-reject-invalid-param-chars"): NO_XMCP_TOOL,
    ("http-custom-header-server-validation", "sep-2243-server-reject-param-mismatch"): NO_XMCP_TOOL,
}
# On stdio the bridge, not relay, answers what the suite checks of HTTP itself (statuses, headers,
# Origin, SSE streams): those scenarios and checks are not scored there.
HTTP_ONLY_SCENARIOS = frozenset(
    {"dns-rebinding-protection", "http-header-validation", "http-custom-header-server-validation"}
    | {"server-sse-multiple-streams"}
)


def http_only(scenario: str, check: str) -> bool:
    return scenario in HTTP_ONLY_SCENARIOS or "-http-" in check


def expected_failing(transport: str, scenario: str) -> set[str]:
    return {
        check for (s, check) in CHOICES if s == scenario and not (transport == "stdio" and http_only(scenario, check))
    }


Results = dict[str, dict[str, str]]  # scenario -> check id -> status (the worst, where an id repeats)
RANK = {"SUCCESS": 0, "INFO": 0, "SKIPPED": 1, "WARNING": 2, "FAILURE": 3}
RUN_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d\d-\d\dT[\d-]+Z$")


def run_requirements(url: str, out: Path) -> Results:
    """Run every scenario the revision names against `url`, once; read back each check's status."""
    env = {**os.environ, "PATH": f"{NODE.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    argv = [str(NODE), str(SUITE), "server", "--url", url, "--requirements", REVISION, "-o", str(out)]
    subprocess.run(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    results: Results = {}
    for path in sorted(out.glob("server-*/checks.json")):
        match = RUN_DIR.match(path.parent.name)
        assert match, path
        checks = results.setdefault(match["scenario"], {})
        for check in json.loads(path.read_text()):
            status, old = str(check["status"]), checks.get(str(check["id"]))
            checks[str(check["id"])] = status if old is None or RANK.get(status, 3) > RANK.get(old, 3) else old
    return results


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Results]]:
    if not (os.access(NODE, os.X_OK) and SUITE.is_file()):
        pytest.fail(f"the conformance suite is not installed in {SUITE.parents[3]} (./scripts/install-conformance)")
    found: dict[str, Results] = {}
    home = tmp_path_factory.mktemp("new-era-http-home")
    port = free_port()
    with serving([RELAY, "serve", "--http", "--port", str(port)], port, {**os.environ, "RELAY_HOME": str(home)}) as url:
        found["http"] = run_requirements(url, tmp_path_factory.mktemp("new-era-http"))
    home = tmp_path_factory.mktemp("new-era-stdio-home")
    with bridged([RELAY, "serve"], {**os.environ, "RELAY_HOME": str(home)}) as url:
        found["stdio"] = run_requirements(url, tmp_path_factory.mktemp("new-era-stdio"))
    yield found


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_suite_runs_every_scenario_the_revision_names_against_relay(
    results: dict[str, Results], transport: str
) -> None:
    ran = results[transport]
    assert set(SCENARIOS) <= set(ran), sorted(set(SCENARIOS) - set(ran))
    unexpected = {s for s in ran if s not in SCENARIOS and not s.startswith("tasks-")}
    assert not unexpected, f"the suite runs scenarios this test does not score: {sorted(unexpected)}"


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_relay_passes_the_new_era_scenario_but_for_its_documented_choices(
    results: dict[str, Results], transport: str, scenario: str
) -> None:
    checks = results[transport][scenario]
    scored = {c: s for c, s in checks.items() if not (transport == "stdio" and http_only(scenario, c))}
    failing = {c for c, s in scored.items() if s not in PASSING}
    assert failing == expected_failing(transport, scenario), checks
    if transport == "http" or scenario not in HTTP_ONLY_SCENARIOS:
        assert scored, f"{scenario} ran no check on {transport}"


def test_docs_list_every_documented_choice_with_its_reason() -> None:
    text = DOC.read_text(encoding="utf-8")
    rows = {
        (m["scenario"], m["check"]): m["reason"].strip()
        for m in re.finditer(r"^\| (?P<scenario>[\w-]+) \| `(?P<check>[\w-]+)` \| (?P<reason>[^|]+)\|$", text, re.M)
    }
    assert rows == CHOICES
    assert "Measured on " in text and f"--requirements {REVISION}" in text
