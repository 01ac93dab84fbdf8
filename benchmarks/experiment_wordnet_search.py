"""Experiment (not part of relay): does WordNet, a general-language lexicon, help tool search generalize?

WordNet 3.0 is read from its database files (Debian's `wordnet-base`: /usr/share/wordnet, or
WORDNET_DIR). Three ways of using it, each added to relay's ranking as it is
(`relay.gateway.search.ToolIndex`), settings chosen on the project's query set only:

- `query`: a query word the tools never use also matches WordNet's synonyms and derived words of
  it (weight 0.5) and its broader terms (0.3), first sense of each part of speech;
- `tools`: the synonyms and derived words of the words of each tool's name, added to the column of
  the parts of its joined words (first two senses, column weight 1.5);
- `gloss`: a query word the tools never use and no computing glossary has also matches the words of
  its first sense's definition (weight 0.2) and its synonyms (0.4).

    .venv/bin/python benchmarks/experiment_wordnet_search.py             # the project set, each way
    .venv/bin/python benchmarks/experiment_wordnet_search.py --held-out  # and the held-out set, once each

Results are in docs/benchmarks.md (issue 27): none of the three is kept.
"""

from __future__ import annotations

import functools
import mmap
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench_tool_search import HELDOUT_QUERIES, evaluate, load_catalog, load_queries
from relay.gateway._glossary import glossary
from relay.gateway._words import STOP
from relay.gateway.search import Ranked, ToolDoc, ToolIndex

_POS = ("noun", "verb", "adj", "adv")
_POS_BY_TAG = {"n": "noun", "v": "verb", "a": "adj", "s": "adj", "r": "adv"}
# Inflections WordNet's morphy strips, by part of speech (wndb(5WN), "morphy").
_DETACH: dict[str, tuple[tuple[str, str], ...]] = {
    "noun": (("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"), ("men", "man")),
    "verb": (("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"), ("ing", "")),
    "adj": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
    "adv": (),
}
_GLOSS_WORD = re.compile(r"[a-z]{3,}")


class WordNet:
    """One WordNet database: look a word's senses up and read what they are related to."""

    def __init__(self, folder: Path) -> None:
        self._maps: dict[str, mmap.mmap] = {}
        for kind in ("index", "data"):
            for pos in _POS:
                with open(folder / f"{kind}.{pos}", "rb") as f:
                    self._maps[f"{kind}.{pos}"] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._exceptions: dict[str, dict[str, list[str]]] = {pos: {} for pos in _POS}
        for pos in _POS:
            path = folder / f"{pos}.exc"
            if path.is_file():
                for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                    inflected, *bases = line.split()
                    self._exceptions[pos][inflected] = bases

    def _index_line(self, pos: str, lemma: str) -> list[str] | None:
        """The index entry of `lemma` (binary search over the sorted lines), split into fields."""
        data = self._maps[f"index.{pos}"]
        key = lemma.encode() + b" "
        lo, hi = 0, len(data)
        while lo < hi:
            mid = (lo + hi) // 2
            start = data.rfind(b"\n", 0, mid) + 1
            end = data.find(b"\n", start)
            end = len(data) if end < 0 else end
            line = data[start:end]
            if line.startswith(key):
                return line.decode(errors="replace").split()
            if line.startswith(b"  ") or line < key:
                lo = end + 1
            else:
                hi = start
        return None

    def _synset(self, pos: str, offset: int) -> tuple[list[str], list[tuple[str, str, int, int, int]], str]:
        """A sense read at its offset: its words as written ("Google", "web_site"), its pointers (symbol,
        part of speech, offset, source word, target word; words numbered from 1, 0 for a pointer between
        whole senses) and its gloss (the definition and examples)."""
        data = self._maps[f"data.{pos}"]
        end = data.find(b"\n", offset)
        line = data[offset : end if end >= 0 else len(data)].decode(errors="replace")
        head, _, gloss = line.partition(" | ")
        fields = head.split()
        count = int(fields[3], 16)
        words = [fields[4 + 2 * i].split("(")[0] for i in range(count)]
        at = 4 + 2 * count
        pointers: list[tuple[str, str, int, int, int]] = []
        for _ in range(int(fields[at])):
            symbol, target, tag, ends = fields[at + 1], fields[at + 2], fields[at + 3], fields[at + 4]
            pointers.append((symbol, _POS_BY_TAG.get(tag, "noun"), int(target), int(ends[:2], 16), int(ends[2:], 16)))
            at += 4
        return words, pointers, gloss

    def base_forms(self, word: str) -> Iterator[tuple[str, str]]:
        """(part of speech, lemma) for each way `word` is a WordNet word: as it is, an exception, or inflected."""
        for pos in _POS:
            forms = [word, *self._exceptions[pos].get(word, [])]
            forms += [word[: -len(suffix)] + repl for suffix, repl in _DETACH[pos] if word.endswith(suffix)]
            for form in dict.fromkeys(forms):
                if form and self._index_line(pos, form) is not None:
                    yield pos, form

    def related(self, word: str, senses: int = 2) -> dict[str, int]:
        """Words related to `word` by its first `senses` senses of each part of speech, with how far they are.

        1: a synonym or a word derived from the same sense ("page" → paging, "downtime" → time out);
        2: a broader term ("screenshot" → image) or a word that sense entails or causes.
        Multi-word terms come with their words separated by spaces; `word` itself is left out.
        """
        return dict(self._related(word.lower(), senses))

    def first_sense(self, word: str) -> tuple[list[str], list[str]]:
        """The synonyms and the words of the definition of `word`'s first sense of each part of speech
        (a sense where the word is a name, "FAR", is left out)."""
        synonyms: list[str] = []
        gloss_words: list[str] = []
        for pos, lemma in self.base_forms(word):
            fields = self._index_line(pos, lemma) or []
            count = int(fields[2]) if len(fields) > 2 else 0
            for offset in [int(f) for f in fields[len(fields) - count :]][:1]:
                names, _, gloss = self._synset(pos, offset)
                lowered = [n.lower() for n in names]
                at = lowered.index(lemma) + 1 if lemma in lowered else 0
                if at and not names[at - 1].islower():
                    continue
                synonyms += [n.replace("_", " ") for n in lowered if n != word]
                gloss_words += [w for w in _GLOSS_WORD.findall(gloss.split(";")[0].lower()) if w != word]
        return synonyms, gloss_words

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one WordNet per process, lookups repeat across queries
    def _related(self, word: str, senses: int) -> tuple[tuple[str, int], ...]:
        found: dict[str, int] = {}

        def add(words: list[str], distance: int) -> None:
            for w in words:
                term = w.lower().replace("_", " ")
                if term != word and distance < found.get(term, 99):
                    found[term] = distance

        for pos, lemma in self.base_forms(word):
            fields = self._index_line(pos, lemma) or []
            synsets = int(fields[2]) if len(fields) > 2 else 0
            for offset in [int(f) for f in fields[len(fields) - synsets :]][:senses]:
                words, pointers, _ = self._synset(pos, offset)
                lowered = [w.lower() for w in words]
                at = lowered.index(lemma) + 1 if lemma in lowered else 0
                if at and not words[at - 1].islower():  # a name ("FAR", "Google"), not the word's sense
                    continue
                add(words, 1)
                for symbol, target_pos, target, source, goal in pointers:
                    if source and source != at:  # a pointer from another word of this sense
                        continue
                    targets = self._synset(target_pos, target)[0]
                    targets = [targets[goal - 1]] if 0 < goal <= len(targets) else targets
                    if symbol in ("+", "\\", "="):  # derivationally related form, pertainym, attribute
                        add(targets, 1)
                    elif symbol in ("@", "@i", "*", ">"):  # hypernym, instance of, entails, causes
                        add(targets, 2)
        return tuple(found.items())


def open_wordnet() -> WordNet:
    folder = Path(os.environ.get("WORDNET_DIR", "/usr/share/wordnet"))
    if not (folder / "index.noun").is_file():
        raise SystemExit(f"no WordNet database in {folder}: apt-get install wordnet-base, or set WORDNET_DIR")
    return WordNet(folder)


class QueryIndex(ToolIndex):
    """`query`: WordNet's related words for a query word the tools never use."""

    wordnet: WordNet

    def _known_words(self, groups: list[tuple[dict[str, float], bool]]) -> list[dict[str, float]]:
        for group, typed in groups:
            word, weight = next(iter(group.items()))
            if typed and not self._term_scores(word):
                for term, distance in self.wordnet.related(word, 1).items():
                    value = weight * {1: 0.5, 2: 0.3}.get(distance, 0.0)
                    if term not in STOP and value > group.get(term, 0.0):
                        group[term] = value
        return super()._known_words(groups)


class ToolsIndex(ToolIndex):
    """`tools`: WordNet's synonyms and derived words of each tool's name words, in the parts column."""

    wordnet: WordNet

    def _parts(self, text: str) -> str:
        extra = [
            term
            for word in dict.fromkeys(text.split()[:8])
            if word not in STOP and len(word) > 2
            for term, distance in self.wordnet.related(word, 2).items()
            if distance == 1 and term not in STOP
        ]
        return super()._parts(text) + " " + " ".join(extra)


class GlossIndex(ToolIndex):
    """`gloss`: WordNet's definition and synonyms for an unknown query word no computing glossary has."""

    wordnet: WordNet

    def _known_words(self, groups: list[tuple[dict[str, float], bool]]) -> list[dict[str, float]]:
        lookup = glossary()
        for group, typed in groups:
            word, weight = next(iter(group.items()))
            if not typed or self._term_scores(word) or (lookup and lookup.meaning(word)):
                continue
            synonyms, gloss_words = self.wordnet.first_sense(word)
            found = [(t, 0.2) for t in gloss_words] + [(t, 0.4) for t in synonyms]
            for term, w in found:
                if term not in STOP and weight * w > group.get(term, 0.0):
                    group[term] = weight * w
        return super()._known_words(groups)


def ranker(kind: type[ToolIndex], docs: Sequence[ToolDoc], lexicon: WordNet):
    kind.wordnet = lexicon  # type: ignore[attr-defined]
    index = kind(docs)

    def rank(query: str, _docs: Sequence[ToolDoc], limit: int) -> list[Ranked]:
        return index.search(query, limit)

    return rank


def main() -> None:
    lexicon = open_wordnet()
    docs = load_catalog()
    sets = [("project", load_queries())]
    if "--held-out" in sys.argv:
        sets.append(("held-out", load_queries(HELDOUT_QUERIES)))
    installed = os.environ.get("RELAY_GLOSSARY_DIR", "")
    # `query` and `tools` were measured before relay read computing glossaries: without them here too.
    for name, kind, glossaries in (
        ("relay as it is", ToolIndex, True),
        ("query", QueryIndex, False),
        ("tools", ToolsIndex, False),
        ("gloss", GlossIndex, True),
    ):
        os.environ["RELAY_GLOSSARY_DIR"] = installed if glossaries else tempfile.mkdtemp()
        glossary.cache_clear()
        rank = ranker(kind, docs, lexicon)
        for label, queries in sets:
            q = evaluate(rank, docs, queries)
            print(f"{name:15} {label:9} recall@5 {q.recall_at_k:.3f}  recall@1 {q.recall_at_1:.3f}  MRR {q.mrr:.3f}")


if __name__ == "__main__":
    main()
