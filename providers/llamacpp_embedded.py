"""Embedded in-process llama.cpp (``llama-cpp-python``): real local LLMs with no server and no key.

A ``Llama`` object is not safe to call from two threads at once, so calls to one model
are serialised by a lock and run in a worker thread (``asyncio.to_thread``), off the event
loop. The model is loaded lazily on first use, or eagerly by ``load()`` at start-up.
Structured output, by ``EntitySpec.structured_output``:

* ``grammar`` (default for the packaged models): an explicit GBNF grammar that allows
  exactly the requested concept keys, in order, each with a number from 0 to 1 written
  with at most two decimals. Tiny models otherwise answer 8, 25 or 10^15: under the JSON-schema
  grammar, which ignores minimum/maximum, Gemma's answers were often unusable (switch
  ``structured_output`` to ``json_object`` to see it; the repairs are counted per response).
* ``json_object``: llama.cpp's ``{"type": "json_object", "schema": …}``; out-of-range
  numbers then reach ``parse_mastery`` and are repaired or rejected there, and counted.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

from providers.config import EntitySpec
from providers.errors import EntityParseError, EntityRejected, EntityUnavailable
from providers.local_models import packaged_model_path
from providers.parsing import parse_billed
from providers.prompts import build_messages
from providers.openai_chat import response_format_for
from providers.types import EntityPrediction, PromptContext, TokenUsage
from providers.wrappers import tag_entity, timed

__all__ = ["LlamaCppEntity", "bounded_mastery_grammar"]


def _gbnf_literal(text: str) -> str:
    """A GBNF string literal that matches ``text`` JSON-encoded (quotes included)."""
    return '"' + json.dumps(text, ensure_ascii=False).replace("\\", "\\\\").replace('"', '\\"') + '"'


def bounded_mastery_grammar(concepts: tuple[str, ...] | list[str]) -> str:
    """GBNF for ``{"<c1>": v1, "<c2>": v2, ...}`` with every v in [0, 1] (at most two decimals)."""
    pairs = ' "," ws '.join(f'{_gbnf_literal(c)} ws ":" ws value' for c in concepts)
    return (
        f'root ::= "{{" ws {pairs} ws "}}"\n'
        'value ::= ("0" ("." [0-9] [0-9]?)?) | ("1" (".0" "0"?)?)\n'
        "ws ::= [ \\n]?\n"
    )


class LlamaCppEntity:
    def __init__(self, spec: EntitySpec) -> None:
        self.spec = spec
        self.name = spec.name
        self._llama: Any = None
        self._load_lock = threading.Lock()
        self._call_lock = threading.Lock()

    @property
    def model_path(self) -> Path:
        if self.spec.model_path:
            return Path(self.spec.model_path)
        assert self.spec.packaged_model is not None  # guaranteed by EntitySpec validation
        return packaged_model_path(self.spec.packaged_model)

    @property
    def loaded(self) -> bool:
        return self._llama is not None

    def load(self) -> Any:
        with self._load_lock:
            if self._llama is None:
                from llama_cpp import Llama  # heavy import, only when a local model is used

                path = self.model_path
                if not path.is_file():
                    raise EntityRejected(f"model file {path} not found", entity=self.name)
                self._llama = Llama(
                    model_path=str(path), n_ctx=self.spec.n_ctx, n_threads=self.spec.n_threads, verbose=False
                )
        return self._llama

    def _complete(self, context: PromptContext) -> dict[str, Any]:
        llama = self.load()
        kwargs: dict[str, Any] = {"messages": build_messages(context), "max_tokens": self.spec.max_tokens}
        if self.spec.temperature is not None:
            kwargs["temperature"] = self.spec.temperature
        mode = self.spec.structured_output
        if mode == "grammar":
            from llama_cpp import LlamaGrammar

            kwargs["grammar"] = LlamaGrammar.from_string(bounded_mastery_grammar(context.concepts), verbose=False)
        elif mode != "none":
            kwargs["response_format"] = response_format_for("json_object", context.concepts)
        with self._call_lock:
            return llama.create_chat_completion(**kwargs)

    async def respond(self, context: PromptContext) -> EntityPrediction:
        elapsed = timed()
        try:
            completion = await asyncio.to_thread(self._complete, context)
        except (EntityRejected, FileNotFoundError) as exc:
            raise EntityRejected(str(exc), entity=self.name) from exc
        except (RuntimeError, ValueError) as exc:  # llama.cpp decode failures, context overflow
            raise EntityUnavailable(f"llama.cpp failed: {exc}", entity=self.name) from exc
        content = completion["choices"][0]["message"].get("content") or ""
        reported = completion.get("usage") or {}
        usage = TokenUsage(
            prompt_tokens=reported.get("prompt_tokens", 0), completion_tokens=reported.get("completion_tokens", 0)
        )
        try:
            parsed = parse_billed(content, context.concepts, usage)
        except EntityParseError as exc:
            raise tag_entity(exc, self.name)
        return EntityPrediction(
            entity=self.name,
            model=self.spec.model or self.model_path.name,
            status="partial" if parsed.missing else "ok",
            mastery=parsed.mastery,
            missing=parsed.missing,
            latency_ms=elapsed(),
            usage=usage,
            repairs=parsed.repairs,
        )

    async def aclose(self) -> None:
        llama, self._llama = self._llama, None
        if llama is not None and hasattr(llama, "close"):
            llama.close()
