"""The costs chart: spend per day, stacked by agent and model, drawn as SVG on the server (no script)."""

from __future__ import annotations

import math
from html import escape

WIDTH = 720
HEIGHT = 240
PAD_LEFT = 56
PAD_BOTTOM = 28
PAD_TOP = 12
# Series colours, distinguishable in light and dark themes; series beyond these reuse them.
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7")


def color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def money(value: float, top: float) -> str:
    """An axis label with enough decimals to tell the gridlines apart (cents, or finer for tiny spends)."""
    decimals = 2 if top >= 1 else min(6, 2 - math.floor(math.log10(top)) + 1)
    return f"${value:.{decimals}f}"


def stacked_bars(days: list[str], by_day: dict[str, dict[str, float]], series: list[str]) -> str:
    """An accessible SVG: one bar per day, one segment per series, a y axis in dollars."""
    top = max((sum(by_day.get(d, {}).values()) for d in days), default=0.0) or 1.0
    plot_w = WIDTH - PAD_LEFT - 8
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    slot = plot_w / max(1, len(days))
    bar_w = max(2.0, slot * 0.7)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="Spend per day by agent and model"'
        ' xmlns="http://www.w3.org/2000/svg">'
    ]
    for i in range(5):
        value = top * i / 4
        y = PAD_TOP + plot_h - plot_h * i / 4
        parts.append(f'<line class="grid" x1="{PAD_LEFT}" x2="{WIDTH - 8}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(
            f'<text class="axis" x="{PAD_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{money(value, top)}</text>'
        )
    for i, day in enumerate(days):
        x = PAD_LEFT + i * slot + (slot - bar_w) / 2
        y = PAD_TOP + plot_h
        for s_index, name in enumerate(series):
            value = by_day.get(day, {}).get(name, 0.0)
            if value <= 0:
                continue
            h = plot_h * value / top
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" fill="{color(s_index)}">'
                f"<title>{escape(day)} {escape(name)}: ${value:.4f}</title></rect>"
            )
        if len(days) <= 16 or i % 2 == 0:
            parts.append(
                f'<text class="axis" x="{x + bar_w / 2:.1f}" y="{HEIGHT - 10}" text-anchor="middle">'
                f"{escape(day[5:])}</text>"
            )
    parts.append("</svg>")
    return "".join(parts)
