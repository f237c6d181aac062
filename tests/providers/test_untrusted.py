"""providers.untrusted: provider text is scrubbed of credentials, bounded and made log-safe."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from providers.errors import EntityParseError, EntityRejected, EntityUnavailable
from providers.untrusted import MAX_UNTRUSTED_CHARS, REDACTED, scrub_untrusted_text

SECRETS = [
    "sk-proj-Ab12Cd34Ef56Gh78Ij90KlMnOpQrStUv",
    "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0F-aBcDeF",
    "gsk_Q1w2E3r4T5y6U7i8O9p0AsDfGhJkLzXcVbNm",
    "fcd_live_7Hk2Lm9Np4Qr6St8Uv1Wx3Yz5",
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",  # 64 hex digits
    "Zm9vYmFyQmF6UXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1ub3A=",  # base64, mixed case and digits
]


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize(
    "template",
    [
        "Incorrect API key provided: {s}. You can find your API key at https://example.invalid/keys.",
        "Error code: 401 - {{'error': {{'message': 'bad header Authorization: Bearer {s}'}}}}",
        '{{"headers": {{"authorization": "Bearer {s}", "x-api-key": "{s}"}}}}',
        "upstream said: {s}",
    ],
)
def test_known_key_formats_and_named_values_are_redacted(secret: str, template: str) -> None:
    out = scrub_untrusted_text(template.format(s=secret))
    assert secret not in out and REDACTED in out
    for cut in (secret[:12], secret[-12:]):  # not even a recognisable piece
        assert cut not in out


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Authorization: Basic dXNlcjpodW50ZXIy", f"Authorization: Basic {REDACTED}"),
        ('password="hunter2", token=abc123', f'password="{REDACTED}", token={REDACTED}'),
        ("x-api-key: short", f"x-api-key: {REDACTED}"),  # a named value is redacted whatever its shape
    ],
)
def test_named_credentials_keep_their_name(text: str, expected: str) -> None:
    assert scrub_untrusted_text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "HTTP 503: upstream overloaded, try again later",
        "connection failed: Connection error. (ConnectError: [Errno 111] Connection refused)",
        "POST http://127.0.0.1:40123/openai/v1/chat/completions model llama-3.3-70b-versatile max_tokens=512",
        "answer holds no parsable JSON object",
    ],
)
def test_ordinary_text_passes_unchanged(text: str) -> None:
    assert scrub_untrusted_text(text) == text


def test_length_control_characters_and_surrogates() -> None:
    assert len(scrub_untrusted_text("word " * 2_000_000)) == MAX_UNTRUSTED_CHARS  # cut at the limit, with "..."
    assert scrub_untrusted_text("x" * 10_000_000) == "..."  # one token cut by the window: dropped whole
    assert scrub_untrusted_text("a\nFAKE LOG LINE\r\x1b[31m") == "a FAKE LOG LINE [31m"
    assert scrub_untrusted_text("lone \ud800 surrogate") == "lone ? surrogate"
    assert scrub_untrusted_text("abcdef", limit=2) == "ab"  # too short for "...": a plain cut
    with pytest.raises(ValueError):
        scrub_untrusted_text("abc", limit=0)


@settings(max_examples=200, deadline=None)
@given(
    before=st.text(max_size=400),
    secret=st.sampled_from(SECRETS),
    after=st.text(max_size=400),
    limit=st.integers(1, 600),
)
def test_no_secret_survives_any_surrounding_text(before: str, secret: str, after: str, limit: int) -> None:
    # A secret glued to arbitrary text may be redacted together with it; it must never appear.
    out = scrub_untrusted_text(f"{before} {secret} {after}", limit=limit)
    assert secret not in out
    assert len(out) <= limit
    out.encode("utf-8")  # always encodable (JSON responses, log files)
    assert not any(ord(c) < 32 for c in out)


def test_every_entity_error_scrubs_its_message_and_excerpt() -> None:
    key = SECRETS[0]
    for error in (
        EntityRejected(f"HTTP 401: echo {key}", entity="gpt", status_code=401),
        EntityUnavailable(f"HTTP 503: echo {key}", entity="gpt", status_code=503),
        EntityParseError(f"cannot read {key}", entity="gpt", raw_excerpt=f'{{"note": "{key}"}}'),
    ):
        assert key not in str(error) and key not in error.reason
        assert key not in getattr(error, "raw_excerpt", "")
