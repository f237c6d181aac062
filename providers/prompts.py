"""Prompts after the seed paper's Appendix A.1, and the JSON schema of the expected answer.

The paper's prompt has a system role ("You are an educational assessment expert…") and
a user message with the question, the student's response, the knowledge concepts, and
"Return ONLY a JSON object…". We show every answered item that way, and we list only
the concepts the Q-matrix marks for those items (``PromptContext.concepts``).
"""

from __future__ import annotations

from typing import Any

from providers.types import PromptContext

__all__ = ["SYSTEM_PROMPT", "TAG_SYSTEM_PROMPT", "build_messages", "mastery_schema", "system_prompt", "user_prompt"]

SYSTEM_PROMPT = (
    "You are an educational assessment expert. Analyze the student's responses and "
    "evaluate the student's mastery of each knowledge concept on a scale from 0 to 1."
)


def _response_text(score: float, answer: str | None) -> str:
    verdict = "correct" if score >= 1.0 else "incorrect" if score <= 0.0 else f"partially correct (score {score:.2f})"
    return f"{verdict}; answer given: {answer}" if answer else verdict


TAG_SYSTEM_PROMPT = (
    "You are an educational assessment expert. Decide which knowledge concepts a problem requires."
)


def _tag_prompt(context: PromptContext) -> str:
    concept_list = ", ".join(f'"{c}"' for c in context.concepts)
    problem = context.items[0].text or ""
    return (
        f"Problem: {problem}\n\nKnowledge concepts: {concept_list}\n"
        "Return ONLY a JSON object whose keys are exactly these concept names and whose values are between 0 and 1: "
        "1 if solving the problem requires the concept, 0 if it does not. No other text."
    )


def user_prompt(context: PromptContext) -> str:
    if context.task == "tag":
        return _tag_prompt(context)
    lines: list[str] = []
    for n, item in enumerate(context.items, start=1):
        question = item.text or f"item {item.item_id} (no text available)"
        lines.append(f"Question {n}: {question}")
        lines.append(f"Student response: {_response_text(item.score, item.answer)}")
        lines.append(f"Knowledge concepts: {', '.join(item.concepts)}")
        lines.append("")
    concept_list = ", ".join(f'"{c}"' for c in context.concepts)
    lines.append(f"Knowledge concepts to evaluate: {concept_list}")
    lines.append(
        "Return ONLY a JSON object whose keys are exactly these concept names and whose values "
        "are mastery levels between 0 and 1 (e.g. 0.35). No other text."
    )
    return "\n".join(lines)


def system_prompt(context: PromptContext) -> str:
    return TAG_SYSTEM_PROMPT if context.task == "tag" else SYSTEM_PROMPT


def build_messages(context: PromptContext) -> list[dict[str, str]]:
    return [{"role": "system", "content": system_prompt(context)}, {"role": "user", "content": user_prompt(context)}]


def mastery_schema(concepts: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """JSON schema of the answer: one number in [0, 1] per concept, all required, nothing else.

    Backends that ignore ``minimum``/``maximum`` (llama.cpp's grammar) may still answer out of
    range; ``providers.parsing`` repairs or rejects such values and counts it.
    """
    return {
        "type": "object",
        "properties": {c: {"type": "number", "minimum": 0, "maximum": 1} for c in concepts},
        "required": list(concepts),
        "additionalProperties": False,
    }
