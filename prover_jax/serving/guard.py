"""Who may use prover-serve and how much one request may send.

    check_bind(host, api_key, allow_unauthenticated)   ValueError for a non-loopback bind without a key
    require_key(app, api_key)                          every route wants `Authorization: Bearer KEY`
    await read_body(request, max_bytes)                the body, or a 400 naming --max_body_bytes

A missing or wrong key gets 401 in OpenAI's error shape (code `invalid_api_key`); keys are compared in
constant time.
"""

from __future__ import annotations

import hmac
import ipaddress

from prover_jax.serving import protocol as P

DEFAULT_MAX_BODY_BYTES = 4 << 20  # 4 MiB of JSON holds far more text than any context the server fits


def is_loopback(host: str) -> bool:
    """Whether binding `host` serves this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def check_bind(host: str, api_key: str | None, allow_unauthenticated: bool = False) -> None:
    if api_key or allow_unauthenticated or is_loopback(host):
        return
    raise ValueError(f"--host={host} serves other machines, and there is no --api_key (or "
                     f"$PROVER_SERVE_API_KEY): anyone who reaches it could use the accelerators. Give a key, "
                     f"bind 127.0.0.1, or pass --allow_unauthenticated")


def unauthorized(message: str):
    from fastapi.responses import JSONResponse

    return JSONResponse(P.error_body(message, "invalid_request_error", code="invalid_api_key"), status_code=401,
                        headers={"WWW-Authenticate": "Bearer"})


def require_key(app, api_key: str) -> None:
    """Adds the check of `Authorization: Bearer <api_key>` in front of every route of `app`."""
    want = api_key.encode()

    @app.middleware("http")
    async def _auth(request, call_next):
        got = request.headers.get("authorization", "")
        scheme, _, token = got.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return unauthorized("You didn't provide an API key: send 'Authorization: Bearer KEY' "
                                "(the server's --api_key).")
        if not hmac.compare_digest(token.strip().encode(), want):
            return unauthorized("Incorrect API key provided.")
        return await call_next(request)


async def read_body(request, max_bytes: int) -> bytes:
    """The request body; ApiError 400 naming --max_body_bytes as soon as it is known to be larger (by
    its Content-Length, or while it streams in), so an oversized body is never held whole."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(int(declared), max_bytes)
    parts, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(size, max_bytes, at_least=True)
        parts.append(chunk)
    return b"".join(parts)


def _too_large(size: int, limit: int, at_least: bool = False) -> P.ApiError:
    has = f"more than {limit}" if at_least else str(size)
    return P.bad(f"the request body has {has} bytes; this server takes at most {limit} (--max_body_bytes)",
                 code="request_too_large")
