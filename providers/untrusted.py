"""Text from an upstream provider is untrusted: scrub and bound it before it reaches a message.

A provider's error body may echo what we sent it — a misconfigured proxy returned the request's
``Authorization`` header in its 401 message — and any text it returns may be huge or hold
control characters that forge log lines. :func:`scrub_untrusted_text` is the one place that makes
such text safe for logs and API responses; ``EntityError`` applies it to every message (and
``EntityParseError`` to its excerpt), so no adapter can forget it.

What it does, in order: keeps at most a bounded window of the input (so a megabyte body costs
microseconds; a token cut by the window's edge is dropped whole), replaces anything that looks
like a credential with ``[REDACTED]``, turns control characters (newlines included) into spaces
and unencodable characters into ``?``, and truncates to ``limit`` characters. Credentials recognised:

* the value after ``Authorization``/``X-Api-Key``/``api_key``/``token``/``secret``/``password``
  (``:`` or ``=``, quoted or not), and after ``Bearer``/``Basic``;
* provider key formats: OpenAI ``sk-…`` (``sk-proj-…``), Anthropic ``sk-ant-…``, Groq ``gsk_…``,
  fedcd's own ``fcd_…``, Hugging Face ``hf_…``, GitHub ``ghp_…``, Google ``AIza…``, AWS ``AKIA…``,
  xAI ``xai-…``, and JSON Web Tokens;
* any run of 32 or more hex digits, or of 32 or more base64/base64url characters mixing upper
  and lower case letters and digits (a secret of unknown format; words, URLs and paths rarely do).
"""

from __future__ import annotations

import re

__all__ = ["MAX_UNTRUSTED_CHARS", "REDACTED", "scrub_untrusted_text"]

MAX_UNTRUSTED_CHARS = 300
REDACTED = "[REDACTED]"

_NAMED_VALUE = re.compile(
    r"(?i)((?:proxy-)?authorization|x-api-key|api[_-]?key|access[_-]?token|refresh[_-]?token|client[_-]?secret"
    r"|secret|password|passwd|token)"
    r"(\\?[\"']?\s*[:=]\s*\\?[\"']?)"
    r"(?!\[REDACTED\])((?:bearer|basic)\s+)?[^\s\"',;&}\]\\]+"
)
_SCHEME_VALUE = re.compile(r"(?i)\b(bearer|basic)\s+(?!\[REDACTED\])[A-Za-z0-9._~+/=-]{6,}")
_KEY_FORMATS = re.compile(
    r"(?:sk-ant-|sk-|gsk_|fcd_|hf_|gh[pousr]_|xai-)[A-Za-z0-9_-]{8,}"
    r"|AIza[0-9A-Za-z_-]{20,}|AKIA[0-9A-Z]{12,}"
    r"|eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}"
)
_HEX = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{32,}(?![0-9A-Za-z])")
_OPAQUE = re.compile(
    r"(?<![A-Za-z0-9+/_=-])(?=[A-Za-z0-9+/_-]*\d)(?=[A-Za-z0-9+/_-]*[a-z])(?=[A-Za-z0-9+/_-]*[A-Z])"
    r"[A-Za-z0-9+/_-]{32,}=*"
)
_TRAILING_TOKEN = re.compile(r"\S+\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def scrub_untrusted_text(text: object, *, limit: int = MAX_UNTRUSTED_CHARS) -> str:
    """``text`` (``str()`` of anything) with credentials redacted and control characters removed, ≤ ``limit`` chars."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    raw = text if isinstance(text, str) else str(text)
    # Scrub only a window a few times the limit (bounded work for any input), and drop a token the
    # window edge cut in two: its first half may be too short to recognise as a secret.
    size = 4 * limit + 64
    window = raw if len(raw) <= size else _TRAILING_TOKEN.sub("", raw[:size])
    window = _NAMED_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3) or ''}{REDACTED}", window)
    window = _SCHEME_VALUE.sub(lambda m: f"{m.group(1)} {REDACTED}", window)
    for pattern in (_KEY_FORMATS, _HEX, _OPAQUE):
        window = pattern.sub(REDACTED, window)
    window = _CONTROL.sub(" ", window).encode("utf-8", "replace").decode("utf-8")
    if len(window) > limit or len(raw) > size:
        return window[: limit - 3] + "..." if limit > 3 else window[:limit]
    return window
