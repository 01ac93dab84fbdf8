"""The wire fuzzer: generated JSON-RPC traffic (valid, mutated, hostile) against a real `relay serve`.

Over real stdio and real Streamable HTTP, after every case: relay is alive; every well-formed
request got exactly one answer with its id; a well-formed notification got none; anything else got
at most one (with its id or null); stdout carried only JSON-RPC; and at the end relay's memory is
within its base + 50 MB.

Budget: RELAY_FUZZ_CASES cases per transport (default 200: both together take about 45 s on a 2-core
machine); `RELAY_FUZZ_CASES=10000 pytest tests/reliability/test_wire_fuzz.py` is the long run.
Every input that ever failed is kept below as an @example, so every run tries it first; the figures
(cases, lines, seconds, RSS) are recorded and printed at the end of the run (docs/reliability.md).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pydantic_core
import pytest
from hypothesis import HealthCheck, example, given, settings

from relay.server.http_wire import MAX_CHECKED_BODY
from tests.reliability.conftest import record
from tests.reliability.wire import HttpRelay, StdioRelay, id_key, line
from tests.reliability.wire_cases import cases, deep, expectation, fresh_id, personalize

pytestmark = pytest.mark.slow  # two real relays; in the main tier of scripts/test

CASES = int(os.environ.get("RELAY_FUZZ_CASES", "200"))
RSS_GROWTH_LIMIT = 50 * 1024 * 1024

FUZZ = settings(
    max_examples=CASES,
    deadline=None,
    database=None,  # nothing written in the repository; failures that matter are kept as @example below
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

# Inputs that ended relay or went unanswered before (issue "No line on the wire ends relay").
REGRESSIONS: list[list[bytes]] = [
    [deep(100_000)],
    [b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', b'{"jsonrpc":"2.0","id":null,"method":"ping"}'],
    [b'{"jsonrpc":"2.0","id":"str-params","method":"tools/call","params":"status"}'],
    [b'{"jsonrpc":"2.0","id":"prompt","method":"prompts/get","params":{"name":"nope"}}'],
    [b'{"jsonrpc":"2.0","id":"s\\ud800","method":"ping"}', b'{"jsonrpc":"1.0","id":"t\\udc00","method":"ping"}'],
    [b'{"jsonrpc":"2.0","id":"bytes","method":"tools/call","params":{"name":"status","arguments":{"x":"a\xff\xfeb"}}}'],
    [b'{"jsonrpc":"2.0","id":"big","method":"ping","params":{"s":"' + b"x" * 10_000_000 + b'"}}'],
    # A notification with a lone surrogate: valid JSON to Python, a parse error to the SDK's parser (HTTP).
    [b'{"jsonrpc":"2.0","method":"ping","params":{"name":["\\ud800"]}}'],
    # An answer carrying U+0085 unescaped (the test's SSE reader split on it).
    [b'{"jsonrpc":"2.0","id":"nel","method":"prompts/get","params":{"name":"\\u0085"}}'],
]


class Tally:
    """What one transport's run saw: cases, lines, and relay's memory along the way."""

    def __init__(self) -> None:
        self.cases = 0
        self.lines = 0
        self.started = time.monotonic()
        self.base_rss = 0
        self.peak_rss = 0

    def after_case(self, rss: int) -> None:
        self.cases += 1
        if self.cases == 20:  # the base: after relay has loaded what serving needs
            self.base_rss = rss
        self.peak_rss = max(self.peak_rss, rss)

    def report(self, section: str, end_rss: int) -> None:
        mb = 1024 * 1024
        record(section, "cases", self.cases)
        record(section, "lines", self.lines)
        record(section, "seconds", round(time.monotonic() - self.started, 1))
        record(section, "rss_base_mb", round(self.base_rss / mb, 1))
        record(section, "rss_end_mb", round(end_rss / mb, 1))
        record(section, "rss_peak_mb", round(self.peak_rss / mb, 1))
        if self.base_rss:
            assert end_rss <= self.base_rss + RSS_GROWTH_LIMIT, (end_rss, self.base_rss)


@pytest.fixture(scope="module")
def stdio_relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StdioRelay, Tally]]:
    home = tmp_path_factory.mktemp("home")
    relay, tally = StdioRelay(home, home), Tally()
    yield relay, tally
    tally.report("wire fuzz, stdio", relay.rss())
    assert relay.close() == 0, relay.stderr.decode(errors="replace")[-3000:]
    assert relay.answers.garbage == []


@pytest.fixture(scope="module")
def http_relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HttpRelay, Tally]]:
    home = tmp_path_factory.mktemp("home")
    relay, tally = HttpRelay(home, home), Tally()
    yield relay, tally
    tally.report("wire fuzz, http", relay.rss())
    assert relay.alive()
    relay.close()


def _with_regressions(test: Any) -> Any:
    for case in REGRESSIONS:
        test = example(case=case)(test)
    return test


@FUZZ
@given(case=cases)
@_with_regressions
def test_no_traffic_over_stdio_ends_relay_or_goes_unanswered(
    stdio_relay: tuple[StdioRelay, Tally], case: list[bytes]
) -> None:
    relay, tally = stdio_relay
    answers = relay.answers
    lines = [personalize(data) for data in case]
    nulls_before = answers.count(None)
    owed: Counter[str] = Counter()  # answers this case owes, by id (a mutated id may repeat an earlier one)
    before: dict[str, int] = {}
    others = 0
    for data in lines:
        for piece in data.split(b"\n"):
            kind, request_id = expectation(piece)
            if kind == "request":
                owed[id_key(request_id)] += 1
                before.setdefault(id_key(request_id), answers.count(request_id))
            others += kind == "other"
        relay.send(data + b"\n")
    barrier = fresh_id("barrier")
    relay.send(line({"jsonrpc": "2.0", "id": barrier, "method": "ping"}))
    assert answers.wait(barrier)["result"] == {}, relay.stderr.decode(errors="replace")[-2000:]
    for key, count in owed.items():
        answers.wait_count(key, before[key] + count)
        assert answers.count_key(key) == before[key] + count, key
    assert answers.count(None) - nulls_before <= others
    assert relay.alive() and answers.garbage == []
    tally.lines += len(case)
    tally.after_case(relay.rss())


@FUZZ
@given(case=cases)
@_with_regressions
def test_no_traffic_over_streamable_http_ends_relay_or_goes_unanswered(
    http_relay: tuple[HttpRelay, Tally], case: list[bytes]
) -> None:
    relay, tally = http_relay
    for data in map(personalize, case):
        kind, request_id = expectation(data, pydantic_core.from_json)
        status, answers = relay.post(data)
        ids = [id_key(a.get("id")) for a in answers if "result" in a or "error" in a]
        if len(data) > MAX_CHECKED_BODY:  # the endpoint's size limit, answered by id when the id can be read
            assert status == 413 and len(ids) <= 1, (data[:300], status, answers)
        elif kind == "request":
            assert status == 200 and ids == [id_key(request_id)], (data[:300], status, answers)
        elif kind == "notification":
            assert (status, answers) == (202, []), (data[:300], status, answers)
        else:
            assert len(ids) <= 1 and status < 500, (data[:300], status, answers)
    assert relay.alive()
    tally.lines += len(case)
    tally.after_case(relay.rss())
