"""The console's sign-in session and CSRF tokens: signed, holding no API key, and ended for good by signing out.

The session cookie is ``<payload>.<signature>``: the payload (base64url) names the admin key's id, its tenant, the
expiry, the key's session generation and a random nonce; the signature is HMAC-SHA-256 under a key derived from the
console's own secret (``app.pseudonyms.console_secret``, never the secret behind the students' keyed ids: changing
it ends every session and re-keys no student), so no one without it can make or alter one. The API key itself is
used once, at sign-in, and is never stored — not in the cookie, the page, a URL or the browser's storage. Every
request checks the signature, the expiry, that the key id is still an active admin key of the tenant (revoking the
key ends its sessions at once), and that the key's session generation is still the one the cookie was signed with:
signing out raises it, so a copy of the cookie (another browser's, a stolen one) is refused from then on.

The secret and the generation (a counter in the database, so every worker and host sees a sign-out at once) are kept
by ``app.services.console_sessions``.

Every state-changing form carries a CSRF token, HMAC(secret, cookie + "csrf"), checked on POST; the cookie is also
``SameSite=Strict``, so a cross-site form never sends it. The sign-in form, which has no session yet, is bound the
same way to a short-lived random ``login`` cookie.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

__all__ = ["COOKIE", "LOGIN_COOKIE", "LOGIN_S", "SESSION_S", "Session", "csrf_token", "login_token", "new_nonce",
           "sign_session", "valid_token", "verify_session"]

COOKIE = "fedcd_console"
LOGIN_COOKIE = "fedcd_console_login"
SESSION_S = 8 * 3600  # a working day; sign in again after it
LOGIN_S = 3600  # how long a sign-in form stays usable
_CONTEXT = b"fedcd-console-session/v2"  # v2: the payload holds the key's session generation


@dataclass(frozen=True)
class Session:
    key_id: str
    tenant: str
    expires_at: float
    generation: int  # the key's session generation at sign-in
    value: str  # the cookie as sent


def _key(secret: bytes) -> bytes:
    """The console's own key: a session signature is never a value any other part of fedcd computes."""
    return hmac.new(secret, _CONTEXT, hashlib.sha256).digest()


def _mac(secret: bytes, message: str) -> str:
    return hmac.new(_key(secret), message.encode(), hashlib.sha256).hexdigest()


def sign_session(secret: bytes, *, key_id: str, tenant: str, generation: int = 0, now: float | None = None) -> Session:
    expires = int((time.time() if now is None else now) + SESSION_S)
    raw = f"{key_id}|{tenant}|{expires}|{generation}|{secrets.token_urlsafe(12)}"
    payload = base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")
    return Session(key_id=key_id, tenant=tenant, expires_at=expires, generation=generation,
                   value=f"{payload}.{_mac(secret, payload)}")


def verify_session(secret: bytes, value: str, *, now: float | None = None) -> Session | None:
    """The session the cookie names, or None when it is forged, altered, malformed or expired."""
    payload, _, signature = value.partition(".")
    if not payload or not hmac.compare_digest(signature.encode(), _mac(secret, payload).encode()):
        return None
    try:
        key_id, tenant, expires, generation, _nonce = (
            base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).decode().split("|"))
        expires_at, signed_generation = float(int(expires)), int(generation)
    except (ValueError, UnicodeDecodeError):
        return None
    if expires_at <= (time.time() if now is None else now):
        return None
    return Session(key_id=key_id, tenant=tenant, expires_at=expires_at, generation=signed_generation, value=value)


def csrf_token(secret: bytes, session_value: str) -> str:
    return _mac(secret, session_value + "csrf")


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def login_token(secret: bytes, nonce: str) -> str:
    return _mac(secret, "login:" + nonce)


def valid_token(expected: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())
