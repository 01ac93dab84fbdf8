"""Tool search behind recommend_tools: tokenization, BM25 ranking, the index cache, errors, the benchmark's metric."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

from relay.errors import ErrorCode, RelayError
from relay.gateway import search
from relay.gateway._vocab import Vocabulary
from relay.gateway._words import NAMED_WEIGHT, SYNONYM_WEIGHT, VERB_WEIGHT
from relay.gateway.search import Ranked, ToolDoc, query_terms, rank, split_identifier, template_recommendation

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]

DOCS = [
    ToolDoc("github", "create_issue", "Create a new issue in a GitHub repository", ["owner", "repo", "title", "body"]),
    ToolDoc("github", "list_pull_requests", "List pull requests in a GitHub repository", ["owner", "repo", "state"]),
    ToolDoc("github", "get_file_contents", "Get the contents of a file or directory", ["owner", "repo", "path"]),
    ToolDoc("filesystem", "read_text_file", "Read the complete contents of a file as text", ["path", "head", "tail"]),
    ToolDoc("filesystem", "move_file", "Move or rename files and directories", ["source", "destination"]),
    ToolDoc("filesystem", "list_directory", "Get a detailed listing of all files and directories", ["path"]),
    ToolDoc("playwright", "browser_take_screenshot", "Take a screenshot of the current page", ["filename"]),
    ToolDoc("playwright", "browser_navigate", "Navigate to a URL", ["url"]),
    ToolDoc("slack", "slack_post_message", "Post a new message to a Slack channel", ["channel_id", "text"]),
    ToolDoc("time", "convert_time", "Convert time between timezones", ["source_timezone", "time", "target_timezone"]),
]


def names(ranked: Sequence[Ranked]) -> list[str]:
    return [f"{r.doc.server}/{r.doc.name}" for r in ranked]


def test_identifiers_split_on_snake_case_camel_case_kebab_case_and_digits() -> None:
    assert split_identifier("browser_take_screenshot") == ["browser", "take", "screenshot"]
    assert split_identifier("getFileContents") == ["get", "file", "contents"]
    assert split_identifier("getHTTPResponse") == ["get", "http", "response"]
    assert split_identifier("list-issues") == ["list", "issues"]
    assert split_identifier("API_get_v2Items") == ["api", "get", "v", "2", "items"]


def test_a_query_drops_stop_words_and_adds_weaker_synonyms() -> None:
    groups = query_terms("Could you please delete the old branch?")
    assert [max(g, key=lambda t: g[t]) for g in groups] == ["delete", "old", "branch", "oldbranch"]
    delete = groups[0]
    assert delete["delete"] == 1.0
    assert 0 < delete["remove"] < 1.0


def test_named_things_count_as_their_kind_and_numbers_are_dropped() -> None:
    groups = query_terms("Move PROJ-42 and notes.txt to https://example.com/x, see #general, shot.png, port 3000")
    firsts = [max(g, key=lambda t: g[t]) for g in groups]
    assert firsts[:4] == ["move", "port", "see", "url"]
    assert {"file", "image", "issue", "channel"} <= set(firsts)
    assert not {"proj", "42", "3000", "com", "https"} & {t for g in groups for t in g}
    # A file's or a page's name keeps its words, below the user's own.
    heads = [next(iter(g.items())) for g in groups]
    assert ("notes", NAMED_WEIGHT) in heads and ("example", NAMED_WEIGHT) in heads


def test_adjacent_words_are_also_tried_joined() -> None:
    assert {"rollback": SYNONYM_WEIGHT} in query_terms("roll back the deploy")  # pyright: ignore[reportPrivateUsage]


def test_a_query_of_only_stop_words_still_searches_with_its_words() -> None:
    assert [next(iter(g)) for g in query_terms("what is this")][:3] == ["what", "is", "this"]


def test_the_tool_whose_name_and_description_match_ranks_first() -> None:
    assert names(rank("open a new issue on our GitHub repo", DOCS, 3))[0] == "github/create_issue"
    assert names(rank("take a screenshot of the page", DOCS, 3))[0] == "playwright/browser_take_screenshot"
    assert names(rank("post a message in the #general Slack channel", DOCS, 3))[0] == "slack/slack_post_message"


def test_inflections_match_through_the_stemmer() -> None:
    assert names(rank("renaming a directory", DOCS, 1)) == ["filesystem/move_file"]


def test_a_synonym_finds_a_tool_that_uses_another_word() -> None:
    # No tool says "ticket"; "issue" is its synonym.
    assert names(rank("file a ticket", DOCS, 1)) == ["github/create_issue"]


def test_a_tool_whose_name_the_query_covers_beats_one_that_only_mentions_the_words() -> None:
    extra = [
        ToolDoc(
            "x", "search", "Search documents, issues, merge requests and list anything in the workspace", ["query"]
        ),
        ToolDoc(
            "y", "list_merge_requests", "Returns the open ones for a project, newest first, with labels", ["project"]
        ),
    ]
    # By BM25 alone "search" wins (its description has every word); the name makes the difference.
    assert names(rank("list merge requests", [*DOCS, *extra], 2))[0] == "y/list_merge_requests"


def test_naming_a_server_prefers_its_tools() -> None:
    docs = [
        *DOCS,
        ToolDoc("gitlab", "create_issue", "Create a new issue", []),
        ToolDoc("github", "create_issue", "Create a new issue", []),
    ]
    assert names(rank("create an issue on github", docs, 2)) == ["github/create_issue", "github/create_issue"]
    assert names(rank("create an issue on gitlab", docs, 1)) == ["gitlab/create_issue"]


def test_parameter_names_are_searched() -> None:
    assert names(rank("timezone", DOCS, 1)) == ["time/convert_time"]


def test_scores_are_positive_and_sorted_best_first_and_limit_is_respected() -> None:
    ranked = rank("list files in a directory", DOCS, 3)
    assert len(ranked) == 3
    assert all(r.score > 0 for r in ranked)
    assert [r.score for r in ranked] == sorted((r.score for r in ranked), reverse=True)
    assert ranked[0].doc.name == "list_directory"


def test_a_query_matching_nothing_returns_no_tools() -> None:
    assert rank("xylophone quartet", DOCS) == []


def test_an_empty_query_is_an_invalid_argument_with_a_hint() -> None:
    with pytest.raises(RelayError) as caught:
        rank("   ", DOCS)
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT
    assert "task_description" in caught.value.hint


def test_a_limit_below_one_is_an_invalid_argument() -> None:
    with pytest.raises(RelayError) as caught:
        rank("read a file", DOCS, 0)
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT


def test_no_tools_ranks_to_an_empty_list() -> None:
    assert rank("read a file", []) == []


def test_punctuation_and_quotes_in_a_query_do_not_break_the_fts_query() -> None:
    assert names(rank('read "notes.txt" (NOT the other) AND * OR ^', DOCS, 1)) == ["filesystem/read_text_file"]


def test_the_index_is_reused_for_the_same_tools_and_rebuilt_when_they_change() -> None:
    rank("read a file", DOCS)
    first = search._index_for(DOCS)  # pyright: ignore[reportPrivateUsage]
    assert search._index_for(list(DOCS)) is first  # pyright: ignore[reportPrivateUsage]
    added = [*DOCS, ToolDoc("weather", "get_forecast", "Weather forecast for a city", ["city"])]
    assert names(rank("will it rain tomorrow in Paris, weather forecast", added, 1)) == ["weather/get_forecast"]
    assert search._index_for(added) is not first  # pyright: ignore[reportPrivateUsage]
    assert all(r.doc.server != "weather" for r in rank("weather forecast", DOCS))


def test_tool_docs_are_hashable_values_whatever_sequence_holds_the_params() -> None:
    assert ToolDoc("s", "t", "d", ["a", "b"]) == ToolDoc("s", "t", "d", ("a", "b"))
    assert hash(ToolDoc("s", "t", "d", ["a"])) == hash(ToolDoc("s", "t", "d", ("a",)))


def test_the_recommendation_without_a_model_names_the_best_tool_and_how_to_call_it() -> None:
    text = template_recommendation("read a file", rank("read a file", DOCS, 3))
    assert "call_tool(server_name='filesystem', tool_name='read_text_file')" in text
    assert "list_tools" in template_recommendation("xylophone quartet", [])


# --- the catalog benchmark's metric -------------------------------------------------------


def load_bench() -> ModuleType:
    bench_dir = REPO / "benchmarks"
    sys.path.insert(0, str(bench_dir))
    try:
        spec = importlib.util.spec_from_file_location("bench_tool_search", bench_dir / "bench_tool_search.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_tool_search"] = module  # dataclasses look their module up while the class is made
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(bench_dir))


def test_the_catalog_and_queries_are_large_enough_and_every_label_names_a_catalog_tool() -> None:
    bench = load_bench()
    docs = bench.load_catalog()
    queries = bench.load_queries()
    heldout = bench.load_queries(bench.HELDOUT_QUERIES)
    assert len(docs) >= 300
    assert len(queries) >= 100 and len(heldout) >= 100
    assert len({d.server for d in docs}) >= 20
    assert {q.kind for q in heldout} == {"plain", "paraphrase", "jargon", "identifier", "typo"}
    assert not {q.text for q in queries} & {q.text for q in heldout}
    bench.check_labels(docs, [*queries, *heldout])  # raises SystemExit on a label that names no tool


def test_unshared_counts_the_queries_none_of_whose_words_is_in_a_correct_tools_text() -> None:
    bench = load_bench()
    docs = [
        ToolDoc("dd", "schedule_downtime", "Schedule a downtime for monitors", ["scope"]),
        ToolDoc("fs", "read_file", "Read a file", ["path"]),
    ]
    queries = [
        bench.Query("a", "schedule downtimes tonight", frozenset({"dd/schedule_downtime"})),  # shares (stemmed)
        bench.Query("b", "so nobody gets paged", frozenset({"dd/schedule_downtime"})),  # shares nothing
        bench.Query("c", "open notes", frozenset({"fs/read_file"})),  # shares nothing
        bench.Query("d", "read the file", frozenset({"dd/schedule_downtime"})),  # words of the wrong tool only
    ]
    assert bench.unshared(docs, queries) == 0.75


def test_the_recall_computation_fails_when_ranking_is_broken() -> None:
    bench = load_bench()
    docs = bench.load_catalog()
    queries = bench.load_queries()

    def reversed_rank(query: str, docs: Sequence[ToolDoc], limit: int) -> list[Ranked]:
        return list(reversed(rank(query, docs, len(docs))))[:limit]

    def first_tools(query: str, docs: Sequence[ToolDoc], limit: int) -> list[Ranked]:
        return [Ranked(d, 1.0) for d in docs[:limit]]

    good = bench.evaluate(rank, docs, queries)
    assert good.recall_at_k >= 0.8  # a regression guard; the 0.90 goal is the benchmark's
    assert bench.evaluate(reversed_rank, docs, queries).recall_at_k < 0.2
    assert bench.evaluate(first_tools, docs, queries).recall_at_k < 0.2


def test_recall_and_mrr_count_the_first_correct_tool_on_a_hand_made_case() -> None:
    bench = load_bench()
    queries = [
        bench.Query("a", "q1", frozenset({"s/t3"})),  # third → hit, 1/3
        bench.Query("b", "q2", frozenset({"s/t6", "s/t1"})),  # first → hit, 1
        bench.Query("c", "q3", frozenset({"s/t7"})),  # seventh → miss, 1/7
        bench.Query("d", "q4", frozenset({"s/none"})),  # absent → miss, 0
    ]
    docs = [ToolDoc("s", f"t{i}", "", []) for i in range(1, 11)]

    def fixed(query: str, docs: Sequence[ToolDoc], limit: int) -> list[Ranked]:
        return [Ranked(d, 1.0) for d in docs[:limit]]

    quality = bench.evaluate(fixed, docs, queries)
    assert quality.recall_at_k == 0.5
    assert quality.mrr == pytest.approx((1 / 3 + 1 + 1 / 7) / 4)
    assert [m[0] for m in quality.misses] == ["c", "d"]


# --- words the catalog does not use --------------------------------------------------------


def test_a_misspelt_action_word_finds_what_the_right_spelling_finds() -> None:
    for typo, right in [("screnshot the page", "screenshot the page"), ("mvoe the file", "move the file")]:
        assert names(rank(typo, DOCS, 1)) == names(rank(right, DOCS, 1))
        assert names(rank(typo, DOCS, 1)) != []


def test_vocabulary_corrects_one_missing_extra_or_swapped_letter_but_not_the_first() -> None:
    vocab = Vocabulary(["commit schedule list screenshot sort"])
    assert vocab.corrections("comit") == ["commit"]
    assert vocab.corrections("shedule") == ["schedule"]
    assert vocab.corrections("lsit") == ["list"]
    assert vocab.corrections("scrennshot") == ["screenshot"]
    assert vocab.corrections("ommit") == []  # the first letter is the one people get right
    assert vocab.corrections("port") == []  # short words one wrong letter apart are both real words
    assert vocab.corrections("commit") == []  # a known word is left alone


def test_vocabulary_splits_a_joined_word_into_two_catalog_words_that_are_not_stop_words() -> None:
    vocab = Vocabulary(["flow chart work log get for"], frozenset({"get", "for"}))
    assert vocab.parts("flowchart") == ("flow", "chart")
    assert vocab.parts("worklog") == ("work", "log")
    assert vocab.parts("forget") is None


def test_a_joined_word_the_tools_never_use_is_looked_up_as_its_parts() -> None:
    docs = [*DOCS, ToolDoc("chart", "generate_flow_diagram", "Generate a flow diagram chart of a process", ["data"])]
    assert names(rank("draw a flowchart", docs, 1)) == ["chart/generate_flow_diagram"]


def test_the_parts_of_a_tools_joined_word_match_the_query_words() -> None:
    docs = [
        *DOCS,
        ToolDoc("jira", "add_worklog", "Add a worklog entry to an issue", ["issue_key", "time_spent"]),
        ToolDoc("datadog", "get_logs", "Search and retrieve logs", ["query"]),
        ToolDoc("tracker", "list_work_items", "List the work items of a project", ["project"]),
    ]
    # "worklog" is made of two words other tools use, so its parts are searched too.
    assert names(rank("log two hours of work on an issue", docs, 1)) == ["jira/add_worklog"]


def test_the_words_of_a_file_name_say_which_tool() -> None:
    docs = [
        *DOCS,
        ToolDoc(
            "gitlab", "validate_project_ci_lint", "Validate an existing .gitlab-ci.yml configuration", ["project_id"]
        ),
    ]
    assert names(rank("is my .gitlab-ci.yml valid", docs, 1)) == ["gitlab/validate_project_ci_lint"]


def test_a_verb_among_the_stop_words_stays_in_the_query_at_a_low_weight() -> None:
    heads = [next(iter(g.items())) for g in query_terms("give BUG-9 to maria")]
    assert ("maria", 1.0) in heads
    assert ("give", VERB_WEIGHT) in heads
    assert VERB_WEIGHT < 1.0
