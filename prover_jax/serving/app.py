"""FastAPI routes of prover-serve: GET /v1/models, POST /v1/chat/completions, GET /health.

Every error is a JSON body in OpenAI's shape (`protocol.error_body`): 401 for a missing or wrong API
key (when the server has one), 400 for a bad request (bad JSON, unknown role, bad schema, context too
long, body / messages / tools over their limits, each naming the limit), 404 for an unknown model or
route, 503 with Retry-After when the engine's queue is full, 500 for a failure of the server itself
(type server_error; code engine_stopped for every request held or sent after the engine thread ended).
A request whose client disconnects is cancelled on the engine (its slots go to the next request).
A bad request never touches the engine thread, so the next request is served as usual.
"""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from prover_jax.serving import protocol as P
from prover_jax.serving.chat import ChatService, ClientGone
from prover_jax.serving.guard import DEFAULT_MAX_BODY_BYTES, read_body, require_key

log = logging.getLogger(__name__)


def error_response(e: P.ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


def create_app(service: ChatService, api_key: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> FastAPI:
    """The routes over `service`; with `api_key` every route wants `Authorization: Bearer api_key`
    (serving.guard); a chat request body over `max_body_bytes` gets 400."""
    app = FastAPI(title="prover-serve", docs_url=None, redoc_url=None)
    app.state.service = service
    if api_key:
        require_key(app, api_key)

    @app.exception_handler(P.ApiError)
    async def _api_error(request: Request, e: P.ApiError):
        return error_response(e)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException):
        kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        return JSONResponse(P.error_body(str(e.detail), kind), status_code=e.status_code)

    @app.exception_handler(Exception)
    async def _internal(request: Request, e: Exception):
        log.exception("request failed")
        return JSONResponse(P.error_body(f"internal error: {e!r}", "server_error"), status_code=500)

    @app.get("/health")
    async def health():
        worker = service.worker
        if worker.error is not None:
            return JSONResponse(P.error_body(f"engine thread died: {worker.error!r}", "server_error"), 500)
        return {"status": "ok", "pending": worker.pending}

    @app.get("/v1/models")
    async def models():
        return P.models_list(service.model_name, service.created)

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        if model_id != service.model_name:
            raise P.ApiError(404, f"The model {model_id!r} does not exist", type="not_found_error",
                             param="model", code="model_not_found")
        return P.models_list(service.model_name, service.created)["data"][0]

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        try:
            body = json.loads(await read_body(request, max_body_bytes) or b"null")
        except ValueError as e:
            raise P.bad(f"the request body is not valid JSON: {e}") from None
        except RecursionError:
            raise P.bad("the request body is not valid JSON: it is nested too deeply") from None
        req = service.parse(body)
        try:
            if req.stream:
                return StreamingResponse(await service.start_stream(req, request.is_disconnected),
                                         media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
            return await service.complete(req, request.is_disconnected)
        except ClientGone:  # nobody reads this; 499 as nginx logs a closed connection
            return JSONResponse(P.error_body("client closed the request", "client_closed"), status_code=499)

    return app
