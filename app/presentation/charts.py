"""Charts as inline SVG, drawn on the server from the gateway's own numbers: no chart library, no script.

Each chart is an ``<svg role="img">`` with a ``<title>`` naming it; every page also shows the same numbers in a
table beside the chart (the accessible form). Shapes are styled by class from ``console.css`` (the console's
Content-Security-Policy allows no inline styles).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from itertools import count

from markupsafe import Markup, escape

__all__ = ["bar_chart", "hbar_chart", "reliability_chart", "timeline_chart"]

_ids = count(1)


def _num(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _nice(top: float) -> float:
    """A round number at or above ``top`` for the axis (1, 2, 5 × 10^n)."""
    if top <= 0:
        return 1.0
    base = 10 ** math.floor(math.log10(top))
    return next(m * base for m in (1, 2, 5, 10) if m * base >= top)


def _svg(width: int, height: int, title: str, body: list[str], css: str) -> Markup:
    ident = f"chart-{next(_ids)}"
    return Markup(
        f'<svg class="chart {css}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-labelledby="{ident}" preserveAspectRatio="xMinYMin meet"><title id="{ident}">{escape(title)}</title>'
        + "".join(body) + "</svg>"
    )


def bar_chart(points: Sequence[tuple[str, float]], *, title: str, label_every: int = 1, width: int = 720,
              height: int = 220) -> Markup:
    """Vertical bars, one per (label, value), with a value axis from 0."""
    left, right, top, bottom = 44, 8, 10, 26
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = _nice(max((v for _, v in points), default=0.0))
    body = []
    for frac in (0.0, 0.5, 1.0):
        y = top + plot_h * (1 - frac)
        body.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>'
                    f'<text class="axis" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_num(peak * frac)}</text>')
    step = plot_w / max(1, len(points))
    for i, (label, value) in enumerate(points):
        h = plot_h * value / peak
        x = left + i * step + step * 0.1
        body.append(f'<rect class="bar" x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{step * 0.8:.1f}" '
                    f'height="{h:.1f}"><title>{escape(label)}: {_num(value)}</title></rect>')
        if (len(points) - 1 - i) % label_every == 0:  # the newest bar always labelled
            body.append(f'<text class="axis" x="{x + step * 0.4:.1f}" y="{height - 8}" text-anchor="middle">'
                        f"{escape(label)}</text>")
    return _svg(width, height, title, body, "bars")


def hbar_chart(points: Sequence[tuple[str, float]], *, title: str, width: int = 720, tone: str = "") -> Markup:
    """Horizontal bars, one row per (label, value), the value printed at the end of its bar; ``tone="bad"`` draws
    them in the error colour."""
    row, left, right, top = 26, 150, 60, 6
    height = top * 2 + row * max(1, len(points))
    peak = max((v for _, v in points), default=0.0) or 1.0
    plot_w = width - left - right
    body = []
    for i, (label, value) in enumerate(points):
        y = top + i * row
        w = plot_w * value / peak
        body.append(f'<text class="axis" x="{left - 8}" y="{y + row * 0.65:.1f}" text-anchor="end">{escape(label)}</text>'
                    f'<rect class="bar" x="{left}" y="{y + 4}" width="{w:.1f}" height="{row - 8}">'
                    f"<title>{escape(label)}: {_num(value)}</title></rect>"
                    f'<text class="value" x="{left + w + 6:.1f}" y="{y + row * 0.65:.1f}">{_num(value)}</text>')
    return _svg(width, height, title, body, f"hbars {tone}".strip())


def timeline_chart(points: Sequence[tuple[float, float]], *, title: str, cap: float | None = None, width: int = 720,
                   height: int = 220) -> Markup:
    """A running total over time: (epoch seconds, total) as a step line with a marker per point; ``cap``: a
    dashed line at that level."""
    left, right, top, bottom = 56, 12, 12, 26
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = _nice(max([v for _, v in points] + ([cap] if cap else []), default=0.0))
    start = min((t for t, _ in points), default=0.0)
    end = max((t for t, _ in points), default=1.0)
    if end - start < 60:  # charges within a minute: a two-minute window, so the points and the two dates stay apart
        start, end = (start + end) / 2 - 60, (start + end) / 2 + 60
    span = end - start

    def xy(t: float, v: float) -> tuple[float, float]:
        return left + plot_w * (t - start) / span, top + plot_h * (1 - v / peak)

    body = []
    for frac in (0.0, 0.5, 1.0):
        _, y = xy(start, peak * frac)
        body.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>'
                    f'<text class="axis" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_num(peak * frac)}</text>')
    if cap:
        _, y = xy(start, cap)
        body.append(f'<line class="cap" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>'
                    f'<text class="axis" x="{width - right}" y="{y - 4:.1f}" text-anchor="end">cap {_num(cap)}</text>')
    path, previous = [], 0.0
    for t, v in points:
        (x, y0), (_, y1) = xy(t, previous), xy(t, v)
        path.append(f"{'M' if not path else 'L'}{x:.1f},{y0:.1f} L{x:.1f},{y1:.1f}")
        previous = v
    if path:
        x_end, y_end = xy(end, previous)
        body.append(f'<path class="line" d="{" ".join(path)} L{x_end:.1f},{y_end:.1f}"/>')
    for t, v in points:
        x, y = xy(t, v)
        body.append(f'<circle class="dot" cx="{x:.1f}" cy="{y:.1f}" r="3.5"><title>{_when(t)}: {_num(v)}</title></circle>')
    for t, anchor in ((start, "start"), (end, "end")):
        if points:
            body.append(f'<text class="axis" x="{xy(t, 0)[0]:.1f}" y="{height - 8}" text-anchor="{anchor}">{_when(t)}</text>')
    return _svg(width, height, title, body, "timeline")


def reliability_chart(bins: Sequence[tuple[float, float, int]], *, title: str, size: int = 320) -> Markup:
    """Predicted (x) against observed (y) per bin, the diagonal being perfect calibration; a dot's area ∝ its count."""
    pad = 40
    plot = size - pad - 12
    most = max((n for _, _, n in bins), default=1) or 1

    def xy(p: float, o: float) -> tuple[float, float]:
        return pad + plot * p, 12 + plot * (1 - o)

    body = [f'<rect class="frame" x="{pad}" y="12" width="{plot}" height="{plot}"/>',
            f'<line class="diagonal" x1="{xy(0, 0)[0]}" y1="{xy(0, 0)[1]}" x2="{xy(1, 1)[0]}" y2="{xy(1, 1)[1]}"/>']
    for tick in (0.0, 0.5, 1.0):
        x, y = xy(tick, tick)
        body.append(f'<text class="axis" x="{x:.1f}" y="{size - 14}" text-anchor="middle">{tick:g}</text>'
                    f'<text class="axis" x="{pad - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:g}</text>')
    body.append(f'<text class="axis" x="{pad + plot / 2:.1f}" y="{size - 1}" text-anchor="middle">predicted</text>')
    points = [xy(p, o) for p, o, _ in bins]
    if points:
        body.append('<polyline class="line" points="' + " ".join(f"{x:.1f},{y:.1f}" for x, y in points) + '"/>')
    for (p, o, n), (x, y) in zip(bins, points, strict=True):
        body.append(f'<circle class="dot" cx="{x:.1f}" cy="{y:.1f}" r="{3 + 6 * math.sqrt(n / most):.1f}">'
                    f"<title>predicted {p:.2f}, observed {o:.2f}, {n} estimates</title></circle>")
    return _svg(size, size, title, body, "reliability")


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")
