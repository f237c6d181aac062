"""Embedded in-process llama.cpp (``llama-cpp-python``): real local LLMs with no server and no key.

A ``Llama`` object is not safe to call from two threads at once, so each model has its own
one-thread executor: calls to it queue there, off the event loop and out of the shared thread pool
(where a queue of model calls once starved the job heartbeats). A call whose caller gave up — its
deadline passed, a user's call preempted a job's, the server is stopping — is aborted: a queued one
never starts, a running one stops within its current token, prompt evaluation included (llama.cpp's
abort callback, checked during every graph computation, reads the call's abort flag), so the model is
free again at once. ``aclose`` aborts what is in flight and waits for the executor to
finish *before* freeing the model: freeing it under a running call crashed the server on SIGTERM.
The model is loaded lazily on first use, or eagerly by ``load()`` at start-up.
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
from concurrent.futures import ThreadPoolExecutor
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

__all__ = ["CallAborted", "LlamaCppEntity", "bounded_mastery_grammar"]


class CallAborted(Exception):
    """Raised in the model's thread when the caller gave up before or during the call."""


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
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"llama-{spec.name}")
        self._in_flight: set[threading.Event] = set()  # abort flags of calls not yet finished
        self._running: threading.Event | None = None  # the abort flag of the call in the model's thread
        self._abort_callback: Any = None  # kept referenced: llama.cpp holds a pointer to it
        self.aborted = 0  # calls stopped because their caller gave up (tests, logs)

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
                llama = Llama(
                    model_path=str(path), n_ctx=self.spec.n_ctx, n_threads=self.spec.n_threads, verbose=False
                )
                self._install_abort_callback(llama)
                self._llama = llama
        return self._llama

    def _install_abort_callback(self, llama: Any) -> None:
        import llama_cpp

        def should_abort(_data: Any) -> bool:
            running = self._running
            return running is not None and running.is_set()

        self._abort_callback = llama_cpp.ggml_abort_callback(should_abort)
        llama_cpp.llama_set_abort_callback(llama.ctx, self._abort_callback, None)

    def _complete(self, context: PromptContext, abort: threading.Event) -> dict[str, Any]:
        """Runs in the model's own thread; raises ``CallAborted`` once ``abort`` is set."""
        if abort.is_set():
            raise CallAborted
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
        self._running = abort
        try:
            completion = llama.create_chat_completion(**kwargs)
        except RuntimeError:
            if abort.is_set():  # llama_decode returned "aborted"
                raise CallAborted from None
            raise
        finally:
            self._running = None
        if abort.is_set():
            raise CallAborted
        return completion

    async def respond(self, context: PromptContext) -> EntityPrediction:
        elapsed = timed()
        abort = threading.Event()
        self._in_flight.add(abort)
        try:
            completion = await asyncio.get_running_loop().run_in_executor(self._executor, self._complete, context, abort)
        except asyncio.CancelledError:
            abort.set()  # a queued call never starts; a running one stops at its next token
            self.aborted += 1
            raise
        except RuntimeError as exc:
            if "after shutdown" in str(exc):  # the executor is closed: the server is stopping
                raise EntityUnavailable("the server is shutting down", entity=self.name) from exc
            raise EntityUnavailable(f"llama.cpp failed: {exc}", entity=self.name) from exc
        except CallAborted:
            raise EntityUnavailable("the call was aborted: the server is shutting down", entity=self.name) from None
        except (EntityRejected, FileNotFoundError) as exc:
            raise EntityRejected(str(exc), entity=self.name) from exc
        except ValueError as exc:  # llama.cpp decode failures, context overflow
            raise EntityUnavailable(f"llama.cpp failed: {exc}", entity=self.name) from exc
        finally:
            self._in_flight.discard(abort)
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
        """Abort every call, wait until the model's thread is idle, then free the model."""
        for abort in list(self._in_flight):
            abort.set()
        await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)
        llama, self._llama = self._llama, None
        if llama is not None and hasattr(llama, "close"):
            llama.close()

