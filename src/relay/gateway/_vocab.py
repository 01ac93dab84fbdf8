"""The catalog's own vocabulary: what a misspelt query word was meant to be, and what a joined word is made of.

Built once per index from the words of the tools' names, descriptions and parameters. A query
word the index does not know is looked up here: a word one edit away (a letter missing, extra,
wrong, or two letters swapped: "comit", "scrennshot", "lsit") stands in for it, and a word made
of two catalog words ("flowchart" → flow + chart) is looked up as its parts. The edit lookup is a
symmetric-delete table (every word with one letter taken out), so a lookup costs a few
dictionary probes rather than a scan of the vocabulary.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable

# Words shorter than this are too short to correct or split: one edit turns "log" into "dog".
MIN_TYPO_LEN = 4
MIN_PART_LEN = 3
# Below this length a wrong letter is left alone: short words one letter apart are mostly both real
# ("port"/"sort", "slow"/"show", "shops"/"stops", "typo"/"type"); a missing, extra or swapped letter
# is still corrected. The first letter is never corrected: it is the one people rarely get wrong.
MIN_SUBSTITUTION_LEN = 6


def _deletes(word: str) -> set[str]:
    return {word[:i] + word[i + 1 :] for i in range(len(word))}


def within_one_edit(a: str, b: str, substitution: bool = True) -> bool:
    """True when b is a, or a with one letter inserted, removed, replaced (if `substitution`) or two
    adjacent letters swapped."""
    if a == b:
        return True
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        if len(diff) == 1:
            return substitution
        return len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


class Vocabulary:
    """Every word of a set of tools, with the number of tools that use it."""

    def __init__(self, tool_texts: Iterable[str], stop_words: frozenset[str] = frozenset()) -> None:
        self._stop = stop_words
        self.df: Counter[str] = Counter()
        for text in tool_texts:
            self.df.update(set(text.split()))
        self._splits: dict[str, tuple[str, str] | None] = {}

    @functools.cached_property
    def by_delete(self) -> dict[str, list[str]]:
        """Each catalog word under itself and under every one-letter-shorter form (built on the first typo)."""
        table: dict[str, list[str]] = {}
        for word in self.df:
            if len(word) >= MIN_TYPO_LEN - 1 and word.isalpha():
                for key in _deletes(word) | {word}:
                    table.setdefault(key, []).append(word)
        return table

    def split(self, word: str) -> tuple[str, str] | None:
        """`parts(word)` for a catalog word, worked out once per word."""
        if word not in self._splits:
            long_enough = len(word) >= 2 * MIN_PART_LEN and word.isalpha()
            self._splits[word] = self.parts(word) if long_enough else None
        return self._splits[word]

    def _part(self, word: str) -> int:
        """How many tools use `word` or its plural, as a part of a joined word (0 for a stop word)."""
        return 0 if word in self._stop else self.df.get(word, 0) + self.df.get(word + "s", 0)

    def __contains__(self, word: str) -> bool:
        return word in self.df

    def corrections(self, word: str, limit: int = 2) -> list[str]:
        """Catalog words one edit from `word`, the most used first (none for a short or known word)."""
        if len(word) < MIN_TYPO_LEN or word in self.df or not word.isalpha():
            return []
        found: set[str] = set()
        substitution = len(word) >= MIN_SUBSTITUTION_LEN
        for key in _deletes(word) | {word}:
            found.update(
                w
                for w in self.by_delete.get(key, ())
                if w[0] == word[0] and w not in self._stop and within_one_edit(word, w, substitution)
            )
        return sorted(found, key=lambda w: (-self.df[w], w))[:limit]

    def parts(self, word: str) -> tuple[str, str] | None:
        """Two catalog words `word` is made of ("worklog" → work, log), the split whose rarer part is most used."""
        best: tuple[int, tuple[str, str]] | None = None
        for i in range(MIN_PART_LEN, len(word) - MIN_PART_LEN + 1):
            left, right = word[:i], word[i:]
            if self._part(left) and self._part(right):
                score = min(self._part(left), self._part(right))
                if best is None or score > best[0]:
                    best = (score, (left, right))
        return best[1] if best else None
