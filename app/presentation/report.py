"""The student report drawn (``app.services.report`` builds its content): a printable HTML page from the one template
environment (``app.presentation.templates``), its chart as SVG — drawn here, no chart library, no script: it prints
and the console reuses it — or as a PNG (matplotlib Figure, no pyplot) for platforms that embed images. The page
carries the same numbers as a table, so a screen reader reads everything the picture shows."""

from __future__ import annotations

import io
from html import escape
from typing import TYPE_CHECKING

from app.presentation.templates import templates
from app.services.report import MAX_MORE, THIN, ConceptLine, StudentReport

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["REPORT_HEADERS", "report_html", "report_png", "report_svg"]

# Sent with every answer of the report route, each format and each error. The page and the SVG are static: no script
# may run (default-src 'none' names no script source), nothing is loaded (the chart is inline SVG, no image), only
# the page's own inline styles apply (its <style> block and style attributes); they may not be framed (clickjacking),
# and a browser may not sniff an image or a JSON error into HTML. Concept names are the tenant's text, escaped
# everywhere: this policy is the second line, should an escape ever be missed.
REPORT_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; "
                               "base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
}


# -- the chart ------------------------------------------------------------------------------------
_ROW, _TOP, _LEFT, _WIDTH, _TRACK = 34, 40, 230, 880, 380
_SUGGESTION_ROW = 18


def report_svg(report: StudentReport) -> str:
    """Bars (estimate) with lines across them (credible interval), one row per concept; text in the picture too."""
    legend = _legend(report)
    below = _TOP + _ROW * len(report.concepts) + 30 + _SUGGESTION_ROW * (len(legend) - 1)
    height = below + _SUGGESTION_ROW * len(report.next_items)
    x0 = _LEFT
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}" aria-labelledby="report-title report-desc" font-family="sans-serif">',
        f'<title id="report-title">Mastery of {len(report.concepts)} concepts, with {report.level_percent} '
        "credible intervals</title>",
        '<desc id="report-desc">' + escape("; ".join(
            f"{c.concept}: {c.mastery:.2f}" + (f" (between {c.low:.2f} and {c.high:.2f})" if c.low is not None else "")
            for c in report.concepts)) + "</desc>",
        '<rect width="100%" height="100%" fill="#ffffff"/>',
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = x0 + tick * _TRACK
        out.append(f'<line x1="{x:.1f}" y1="{_TOP - 8}" x2="{x:.1f}" y2="{_TOP + _ROW * len(report.concepts) + 2}" '
                   'stroke="#d0d4da"/>')
        out.append(f'<text x="{x:.1f}" y="{_TOP - 14}" font-size="11" text-anchor="middle" fill="#444">{tick:g}</text>')
    for i, c in enumerate(report.concepts):
        y = _TOP + i * _ROW
        label = c.concept if len(c.concept) <= 34 else c.concept[:33] + "…"
        out.append(f'<text x="{x0 - 10}" y="{y + 17}" font-size="13" text-anchor="end" fill="#111">'
                   f"{escape(label)}</text>")
        out.append(f'<rect x="{x0}" y="{y + 6}" width="{_TRACK}" height="16" fill="#eef1f5"/>')
        out.append(f'<rect x="{x0}" y="{y + 6}" width="{c.mastery * _TRACK:.1f}" height="16" fill="#3f6fb5"/>')
        if c.low is not None and c.high is not None:
            lo, hi = x0 + c.low * _TRACK, x0 + c.high * _TRACK
            out.append(f'<line x1="{lo:.1f}" y1="{y + 14}" x2="{hi:.1f}" y2="{y + 14}" stroke="#111" stroke-width="2"/>')
            for x in (lo, hi):
                out.append(f'<line x1="{x:.1f}" y1="{y + 8}" x2="{x:.1f}" y2="{y + 20}" stroke="#111" stroke-width="2"/>')
        evidence = f" · {c.evidence} answer{'s' if c.evidence != 1 else ''}" if c.evidence is not None else ""
        thin = _thin_note(c)
        out.append(f'<text x="{x0 + _TRACK + 10}" y="{y + 17}" font-size="12" fill="#111">{c.mastery:.2f}'
                   f"{escape(evidence)}{escape(thin)}</text>")
    for n, line in enumerate(legend):
        y = below - 8 - _SUGGESTION_ROW * (len(legend) - 1 - n)
        out.append(f'<text x="{x0}" y="{y}" font-size="11" fill="#444">{escape(line)}</text>')
    for n, item in enumerate(report.next_items):  # issue 34: what to ask next, under the legend
        y = below + _SUGGESTION_ROW * n + 12
        out.append(f'<text x="{x0}" y="{y}" font-size="12" fill="#111">ask next: {escape(item.item_id)} (informs '
                   f"{escape(', '.join(item.informs))})</text>")
    out.append("</svg>")
    return "\n".join(out)


def _thin_note(c: ConceptLine) -> str:
    """A chart row's thin-evidence note: how many more answers, or that more answers alone cannot."""
    if not c.thin:
        return ""
    if c.narrowest is not None:
        return f" · thin: stays ≥ {c.narrowest:.2f} wide"
    more = c.more_answers or MAX_MORE + 1
    return f" · thin: +{more if more <= MAX_MORE else f'{MAX_MORE}+'} answers"


def _legend(report: StudentReport) -> list[str]:
    """The chart's legend, a line each; the second only when more answers alone cannot narrow some concept."""
    lines = [f"bar: estimated mastery (0 to 1); line: {report.level_percent} credible interval; thin: wider than "
             f"{THIN:g}, +N: about how many more answers would narrow it"]
    if any(c.narrowest is not None for c in report.concepts):
        lines.append(f"stays ≥ W wide: more answers alone will not narrow it below ±{THIN / 2:g} (the calibration's "
                     "own error)")
    return lines


def _png_figure(report: StudentReport) -> Figure:
    """The PNG's figure: a :class:`~matplotlib.figure.Figure` of its own, never pyplot, whose global "current
    figure" state is not thread-safe (the PNG is drawn in worker threads, several at once). Every text is drawn with
    ``parse_math=False``: a concept name is the tenant's text, and mathtext would read ``$…$`` in it as a formula
    (an unknown command in one made the report answer 500)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = [c.concept for c in report.concepts][::-1]
    values = [c.mastery for c in report.concepts][::-1]
    fig = Figure(figsize=(8, 0.45 * len(names) + 1.2), dpi=120)
    FigureCanvasAgg(fig)  # attaches itself as fig.canvas
    ax = fig.add_subplot()
    # Numeric positions with fixed labels (not categorical names): the labels are set once, with parse_math off
    ax.barh(range(len(names)), values, color="#3f6fb5", height=0.5)
    ax.set_yticks(range(len(names)), names, parse_math=False)
    for y, c in enumerate(report.concepts[::-1]):
        if c.low is not None and c.high is not None:
            ax.plot([c.low, c.high], [y, y], color="#111", linewidth=2)
            ax.plot([c.low, c.low], [y - 0.18, y + 0.18], [c.high, c.high], [y - 0.18, y + 0.18], color="#111")
    ax.set_xlim(0, 1)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1], ["0", "0.25", "0.5", "0.75", "1"], parse_math=False)  # the SVG's ticks
    label = f"estimated mastery; line: {report.level_percent} credible interval"
    bound = [c.concept for c in report.concepts if c.narrowest is not None]
    if bound:  # the thin concepts more answers cannot narrow enough, said under the chart (the SVG says it per row)
        named = ", ".join(bound) if len(bound) <= 3 else f"{len(bound)} of the concepts"  # one line under the chart
        label += f"\nmore answers alone will not narrow {named} below ±{THIN / 2:g}: the calibration's own error"
    ax.set_xlabel(label, parse_math=False)
    fig.tight_layout()
    return fig


def report_png(report: StudentReport) -> bytes:
    """The same chart as a PNG (matplotlib, imported only when asked for)."""
    buffer = io.BytesIO()
    _png_figure(report).savefig(buffer, format="png")
    return buffer.getvalue()


def report_html(report: StudentReport) -> str:
    """The printable page: the chart, the same numbers as a table, what the diagnosis rests on, what it means."""
    return templates.env.get_template("student_report.html").render(report=report, chart=report_svg(report), thin=THIN)
