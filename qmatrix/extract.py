"""Automatic Q-matrix extraction by keyword tagging (the LLM tagger is in ``diagnosis.extraction``).

GSM8K has no Q-matrix. We tag each problem with the concepts below from its question
text. The keyword rules are deliberately simple and inspectable: a concept applies when
any of its patterns matches (case-insensitive). For concepts outside this list the
words of the concept's own name are its keywords.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from qmatrix.datasets import dataset_folder

__all__ = ["GSM8K_CONCEPTS", "KEYWORDS", "keyword_tags", "load_gsm8k_problems"]

GSM8K_CONCEPTS = (
    "Addition and subtraction",
    "Multiplication and division",
    "Fractions and ratios",
    "Percentages",
    "Money",
    "Time, rates and units",
)

KEYWORDS: dict[str, tuple[str, ...]] = {
    "Addition and subtraction": (r"\btotal\b", r"\bmore than\b", r"\bless than\b", r"\bleft\b", r"\bremain", r"\baltogether\b",
                                 r"\bin all\b", r"\bsum\b", r"\bdifference\b", r"\bfewer\b", r"\bcombined\b", r"\bplus\b", r"\bminus\b"),
    "Multiplication and division": (r"\beach\b", r"\bper\b", r"\btimes\b", r"\btwice\b", r"\bdouble", r"\btriple", r"\bevery\b",
                                    r"\bsplit\b", r"\bdivid", r"\bequally\b", r"\bgroups? of\b"),
    "Fractions and ratios": (r"\bhalf\b", r"\bhalves\b", r"\bthird", r"\bquarter", r"\bfraction", r"\bratio\b", r"\b\d+/\d+\b",
                             r"\bproportion"),
    "Percentages": (r"%", r"\bpercent"),
    "Money": (r"\$", r"\bdollars?\b", r"\bcents?\b", r"\bcosts?\b", r"\bprice", r"\bpays?\b", r"\bpaid\b", r"\bearns?\b",
              r"\bspend", r"\bspent\b", r"\bbuy", r"\bbought\b", r"\bsells?\b", r"\bsold\b", r"\bprofit\b"),
    "Time, rates and units": (r"\bhours?\b", r"\bminutes?\b", r"\bdays?\b", r"\bweeks?\b", r"\bmonths?\b", r"\byears?\b",
                              r"\bmiles?\b", r"\bkilomet", r"\bmeters?\b", r"\bfeet\b", r"\bfoot\b", r"\binch", r"\bpounds?\b",
                              r"\bgallons?\b", r"\blit(?:er|re)s?\b", r"\bmph\b", r"\bspeed\b"),
}


def _patterns(concept: str) -> tuple[str, ...]:
    if concept in KEYWORDS:
        return KEYWORDS[concept]
    words = [w for w in re.findall(r"[A-Za-z]{4,}", concept)]
    return tuple(rf"\b{re.escape(w.lower())}" for w in words)


def keyword_tags(text: str, concepts: Sequence[str] = GSM8K_CONCEPTS) -> list[str]:
    """The concepts whose keywords occur in ``text``, in the given concept order."""
    lowered = text.lower()
    return [c for c in concepts if any(re.search(p, lowered) for p in _patterns(c))]


def load_gsm8k_problems(data_dir: str | Path | None = None, *, limit: int | None = None) -> list[Mapping[str, str]]:
    """``[{"id", "question", "answer"}]`` from the GSM8K test split (1,319 problems)."""
    folder = dataset_folder(data_dir, "gsm8k")
    out: list[Mapping[str, str]] = []
    with (folder / "test.jsonl").open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if limit is not None and len(out) >= limit:
                break
            row = json.loads(line)
            out.append({"id": f"gsm8k-{n:04d}", "question": row["question"], "answer": row["answer"]})
    return out
