"""Every table of measured figures in docs/ says when and on which commit it was measured, and the summary at the
top of docs/benchmarks.md shows each benchmark's newest figure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BENCHMARKS = DOCS / "benchmarks.md"

# "Measured on 2026-11-27, commit 89af3cb" or, where only the commit that recorded the figures is known,
# "Measured before commit 5f91a88 (2026-11-27)".
MEASURED = re.compile(
    r"[Mm]easured (?:on (?P<on>\d{4}-\d{2}-\d{2}), commit (?P<commit>[0-9a-f]{7,40})"
    r"|before commit (?P<before>[0-9a-f]{7,40}) \((?P<date>\d{4}-\d{2}-\d{2})\))"
)
# A figure is a number with a unit of time, size, speed or ratio, or a share like 0.923.
FIGURE = re.compile(r"\d[\d,.]*\s?(?:ms|s|min|MB|KB|GB|x|×|bytes|tokens|MB/s|jobs/s)(?![\w/])|\b0\.\d{3}\b")
# A header that names measurements makes a table one of figures whatever its rows hold.
MEASURING_HEADER = re.compile(r"(?i)\b(seconds|measured|median|p9\d|growth|rss|wall)\b")
SEPARATOR = re.compile(r"^\|[\s|:-]+\|$")
HEADING = re.compile(r"^(#{1,6}) (.*)$")


@dataclass(frozen=True)
class Table:
    path: Path
    line: int  # 0-based index of the header row
    end: int  # index just past the last row
    header: str
    rows: tuple[str, ...]


def _tables(path: Path, lines: list[str]) -> list[Table]:
    found: list[Table] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and SEPARATOR.match(lines[i + 1]):
            start = i
            while i < len(lines) and lines[i].startswith("|"):
                i += 1
            found.append(Table(path, start, i, lines[start], tuple(lines[start + 2 : i])))
        else:
            i += 1
    return found


def _of_figures(table: Table) -> bool:
    """A table of measured figures (a table of defaults, settings or promises is not one)."""
    if "default" in table.header.lower() or not table.rows:
        return False
    if MEASURING_HEADER.search(table.header):
        return True
    return 2 * sum(bool(FIGURE.search(row)) for row in table.rows) >= len(table.rows)


def _text_above(lines: list[str], table: Table) -> str:
    """The lines between the heading or table before this table and the table itself."""
    i = table.line - 1
    while i >= 0 and not HEADING.match(lines[i]) and not lines[i].startswith("|"):
        i -= 1
    return " ".join(" ".join(lines[i + 1 : table.line]).split())  # a phrase may wrap


def _dates(text: str) -> list[str]:
    return [m.group("on") or m.group("date") for m in MEASURED.finditer(text)]


def test_every_table_of_figures_in_docs_says_when_and_on_which_commit_it_was_measured() -> None:
    undated: list[str] = []
    for path in sorted(DOCS.glob("*.md")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for table in _tables(path, lines):
            if table.header.startswith("| Benchmark | Latest figure |"):
                continue  # the summary: a date and commit in every row (checked below)
            if _of_figures(table) and not MEASURED.search(_text_above(lines, table)):
                undated.append(f"{path.name}:{table.line + 1}: {table.header[:60]}")
    assert undated == []


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@dataclass(frozen=True)
class Section:
    anchor: str
    text: str


def _sections(lines: list[str]) -> list[Section]:
    sections: list[Section] = []
    anchor, start = "", 0
    for i, line in enumerate([*lines, "# end"]):
        heading = HEADING.match(line)
        if heading:
            sections.append(Section(anchor, " ".join(" ".join(lines[start:i]).split())))  # a phrase may wrap
            anchor, start = _slug(heading.group(2)), i
    return sections


@dataclass(frozen=True)
class Row:
    benchmark: str  # bench_x, from `bench_x.py` in the first cell
    figure: str
    measured: str  # "on DATE, commit SHA" or "before commit SHA (DATE)"
    anchor: str


def _summary(lines: list[str]) -> list[Row]:
    tables = [t for t in _tables(BENCHMARKS, lines) if t.header.startswith("| Benchmark | Latest figure |")]
    assert len(tables) == 1, "docs/benchmarks.md has one summary table: | Benchmark | Latest figure | ..."
    rows: list[Row] = []
    for row in tables[0].rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        name = re.search(r"`(bench_\w+)\.py\b", cells[0])
        link = re.search(r"\]\(#([^)]+)\)", cells[-1])
        assert name and link, row
        rows.append(Row(name.group(1), cells[1], cells[-2], link.group(1)))
    return rows


def _bold_or_whole(figure: str) -> list[str]:
    bold = re.findall(r"\*\*(.+?)\*\*", figure)
    return bold or [figure]


def test_the_summary_of_benchmarks_md_names_every_benchmark() -> None:
    lines = BENCHMARKS.read_text(encoding="utf-8").splitlines()
    named = {row.benchmark for row in _summary(lines)}
    scripts = {p.stem for p in (ROOT / "benchmarks").glob("bench_*.py")}
    assert scripts - named == set()


def test_the_summary_shows_each_benchmarks_figure_from_its_newest_section() -> None:
    lines = BENCHMARKS.read_text(encoding="utf-8").splitlines()
    sections = _sections(lines)
    by_anchor = {s.anchor: s for s in sections}
    wrong: list[str] = []
    linked: dict[str, list[str]] = {}  # benchmark -> the newest date of each section its rows cite
    for row in _summary(lines):
        section = by_anchor.get(row.anchor)
        if section is None:
            wrong.append(f"{row.benchmark}: no section #{row.anchor}")
            continue
        if not re.search(rf"\b{row.benchmark}\b", section.text):
            wrong.append(f"{row.benchmark}: #{row.anchor} does not measure it (its script is not named there)")
        for figure in _bold_or_whole(row.figure):
            if figure not in section.text:
                wrong.append(f"{row.benchmark}: {figure!r} is not in #{row.anchor}")
        if f"easured {row.measured}" not in section.text:
            wrong.append(f"{row.benchmark}: #{row.anchor} has no line 'measured {row.measured}'")
        linked.setdefault(row.benchmark, []).append(max(_dates(section.text), default=""))
    for benchmark, cited in linked.items():
        naming = [s for s in sections if s.anchor and re.search(rf"\b{benchmark}\b", s.text)]
        newest = max((d for s in naming for d in _dates(s.text)), default="")
        if max(cited) < newest:  # a later section measured it again: the summary must show that figure
            later = [s.anchor for s in naming if newest in _dates(s.text)]
            wrong.append(f"{benchmark}: the summary cites sections of {max(cited)}, {later} measured it {newest}")
    assert wrong == []
