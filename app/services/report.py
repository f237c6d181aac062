"""A student report a teacher can read (``GET /v1/students/{student_id}/report``, README "Student report").

Built from the latest stored diagnosis of the student on one Q-matrix (the released answer the privacy ledger keeps
for its repeat rule: reading it again releases nothing new and costs no ε). It shows, per concept in the Q-matrix's
order and with its names: the mastery estimate as a bar, its credible interval as a line across the bar, how many of
the student's answers the estimate rests on, and a plain-words reading; then what the diagnosis rests on (which
entities answered, the calibration, local-fed's model version) and what the interval means.

The chart is an SVG drawn here (no chart library, no script: it prints and it is reused by the console) or a PNG
(matplotlib Figure, no pyplot) for platforms that embed images; the HTML page carries the same numbers as a table, so
a screen reader reads everything the picture shows.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from app.schemas.students import StoredDiagnosis
from diagnosis.posterior import beta_floor_width
from qmatrix import QMatrix

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["REPORT_HEADERS", "THIN", "ConceptLine", "StudentReport", "build_report", "report_html", "report_png", "report_svg"]

_TEMPLATES = Environment(loader=FileSystemLoader(Path(__file__).resolve().parents[1] / "templates"),
                         autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
WIDE = 0.5  # an interval wider than this says the answers so far cannot tell (the reading says so)
# An interval wider than this is marked as resting on thin evidence: about ±0.15 is the most a mastery estimate can
# be off and still be read in the right band ("partly" spans 0.4–0.7). The number of further answers that would
# narrow it that far is read from a Beta-Bernoulli interval at the estimate (docs/uncertainty.md): a guide, assuming
# the next answers are like those so far.
THIN = 0.3
_MAX_MORE = 200  # beyond this the report says "many"
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


@dataclass(frozen=True)
class ConceptLine:
    """One concept of the report."""

    concept: str
    mastery: float
    low: float | None
    high: float | None
    evidence: int | None  # the student's answers assessing it (None: not recorded with this diagnosis)
    level: float = 0.9  # the credible level of the interval

    @property
    def thin(self) -> bool:
        """The interval is wider than :data:`THIN` (or there is none and fewer than 5 answers)."""
        if self.low is not None and self.high is not None:
            return self.high - self.low > THIN
        return self.evidence is not None and self.evidence < 5

    @property
    def more_answers(self) -> int | None:
        """About how many more answers on the concept would narrow its interval below :data:`THIN` (None: not thin;
        ``_MAX_MORE + 1``: more than that)."""
        if not self.thin:
            return None
        have = self.evidence or 0
        for more in range(1, _MAX_MORE + 1):
            if beta_floor_width(have + more, self.level, self.mastery) <= THIN:
                return more
        return _MAX_MORE + 1

    @property
    def more_text(self) -> str:
        """The thin-evidence note in words ("" when the evidence is not thin)."""
        more = self.more_answers
        if more is None:
            return ""
        count = f"more than {_MAX_MORE}" if more > _MAX_MORE else f"about {more}"
        return f"thin evidence: {count} more answer{'s' if more != 1 else ''} on it would narrow it"

    @property
    def reading(self) -> str:
        """Plain words for the estimate: bands of the estimate, unless the interval is too wide to tell."""
        if self.low is not None and self.high is not None and self.high - self.low > WIDE:
            return "not enough evidence yet to tell"
        if self.mastery >= 0.7:
            return "likely mastered"
        if self.mastery >= 0.4:
            return "partly mastered"
        return "likely not yet mastered"


@dataclass(frozen=True)
class SuggestedItem:
    """An item to ask next for the report's thin-evidence concepts (``app.services.next_items``), with the concepts it
    informs."""

    item_id: str
    informs: tuple[str, ...]


@dataclass(frozen=True)
class StudentReport:
    student_id: str
    qmatrix_id: str
    diagnosed_at: str
    concepts: list[ConceptLine]
    level: float | None  # the credible level of the intervals (0.9: 90 %)
    basis: str  # one sentence: calibrated or not, trained model or not
    entities: list[str]  # the entities whose answers the diagnosis combined
    calibration: str | None
    model_version: str | None
    aggregation: str
    privacy: str
    not_answered: list[str] = field(default_factory=list)  # assessed concepts no entity answered
    next_items: list[SuggestedItem] = field(default_factory=list)  # to ask next for thin concepts (issue 34)

    @property
    def level_percent(self) -> str:
        return f"{round(100 * self.level)} %" if self.level is not None else ""


def build_report(stored: StoredDiagnosis, q: QMatrix | None) -> StudentReport:
    """The report of one stored diagnosis; ``q`` (the Q-matrix, when it still exists) orders and names the
    concepts."""
    d: dict[str, Any] = stored.diagnosis
    mastery: dict[str, float] = d.get("mastery") or {}
    intervals: dict[str, list[float]] = d.get("mastery_interval") or {}
    evidence: dict[str, int] = d.get("evidence") or {}
    order = [c for c in q.concepts if c in mastery] if q is not None else []
    order += sorted(c for c in mastery if c not in order)
    lines = [ConceptLine(concept=c, mastery=float(mastery[c]),
                         low=float(intervals[c][0]) if c in intervals else None,
                         high=float(intervals[c][1]) if c in intervals else None,
                         evidence=evidence.get(c) if evidence else None,
                         level=float(d.get("interval_level") or 0.9)) for c in order]
    basis = d.get("basis") or {}
    reports = d.get("entities") or []
    answered = [r["name"] for r in reports if r.get("mastery")] if reports else []
    if not answered:  # entities were not included in the response: who did not answer is still known
        left = set(d.get("failed_entities") or []) | {s["name"] for s in d.get("skipped_entities") or []}
        answered = [f"{len(left)} entit{'y' if len(left) == 1 else 'ies'} did not answer"] if left else []
    privacy = d.get("privacy") or {}
    epsilon = privacy.get("epsilon")
    return StudentReport(
        student_id=stored.diagnosis.get("student_id", ""), qmatrix_id=str(d.get("qmatrix_id") or ""),
        diagnosed_at=stored.created_at, concepts=lines, level=d.get("interval_level"),
        basis=str(basis.get("summary") or "not recorded"), entities=answered,
        calibration=(f"{basis.get('calibration_id')} ({basis.get('calibration_students')} students)"
                     if basis.get("calibration") == "calibrated" else "uncalibrated"),
        model_version=basis.get("local_model_version") or basis.get("local_model"),
        aggregation=str(d.get("aggregation") or ""),
        privacy=(f"each answer privatized ({privacy.get('mechanism')}, ε {epsilon:g})" if epsilon is not None
                 else "answers not privatized"),
        not_answered=list(d.get("missing_concepts") or []),
    )


# -- the chart ------------------------------------------------------------------------------------
_ROW, _TOP, _LEFT, _WIDTH, _TRACK = 34, 40, 230, 880, 380
_SUGGESTION_ROW = 18


def report_svg(report: StudentReport) -> str:
    """Bars (estimate) with lines across them (credible interval), one row per concept; text in the picture too."""
    height = _TOP + _ROW * len(report.concepts) + 30 + _SUGGESTION_ROW * len(report.next_items)
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
        out.append(f'<line x1="{x:.1f}" y1="{_TOP - 8}" x2="{x:.1f}" y2="{height - 28}" stroke="#d0d4da"/>')
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
        more = c.more_answers
        thin = "" if more is None else f" · thin: +{more if more <= _MAX_MORE else f'{_MAX_MORE}+'} answers"
        out.append(f'<text x="{x0 + _TRACK + 10}" y="{y + 17}" font-size="12" fill="#111">{c.mastery:.2f}'
                   f"{escape(evidence)}{escape(thin)}</text>")
    out.append(f'<text x="{x0}" y="{height - 8}" font-size="11" fill="#444">bar: estimated mastery (0 to 1); '
               f"line: {escape(report.level_percent)} credible interval; thin: wider than {THIN:g}, "
               "+N: about how many more answers would narrow it</text>")
    for n, item in enumerate(report.next_items):  # issue 34: what to ask next, under the legend
        y = _TOP + _ROW * len(report.concepts) + 30 + _SUGGESTION_ROW * n + 12
        out.append(f'<text x="{x0}" y="{y}" font-size="12" fill="#111">ask next: {escape(item.item_id)} (informs '
                   f"{escape(', '.join(item.informs))})</text>")
    out.append("</svg>")
    return "\n".join(out)


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
    ax.set_xlabel(f"estimated mastery; line: {report.level_percent} credible interval", parse_math=False)
    fig.tight_layout()
    return fig


def report_png(report: StudentReport) -> bytes:
    """The same chart as a PNG (matplotlib, imported only when asked for)."""
    buffer = io.BytesIO()
    _png_figure(report).savefig(buffer, format="png")
    return buffer.getvalue()


def report_html(report: StudentReport) -> str:
    """The printable page: the chart, the same numbers as a table, what the diagnosis rests on, what it means."""
    return _TEMPLATES.get_template("student_report.html").render(report=report, chart=report_svg(report), thin=THIN)
