"""LibreTranslate's other routes on `attn-mt serve`, answered as LibreTranslate answers them.

- `POST /detect` (`q`, as JSON, a form or the URL query): `[{"language": SOURCE, "confidence": C}]`.
  No language detector runs: the model reads one language, so the answer is always its source
  language, and C (0 to 100) is the share of the text's tokens the model's source vocabulary knows
  (0 for a text of emoji or punctuation alone, which LibreTranslate also answers with 0).
- `GET /frontend/settings`: what LibreTranslate's web page asks for when it loads (the character
  limit, whether keys are needed, the file formats, the language pair).
- `POST /translate_file` (multipart: `file`, `source`, `target`, `api_key`): a `.txt` file is
  translated line by line as a text, an `.html` file as HTML (serving/markup.py), within `q`'s
  limits (64,000 characters: a longer file is refused as such a `q` is); the answer is
  `{"translatedFileUrl": ...}`, a `GET /download_file/NAME` link that serves it for
  `FILE_KEEP_S` seconds (the last `FILE_KEEP` files are kept, in memory).
- `POST /suggest`: 403 `Suggestions are disabled on this server.` (attn-mt keeps no suggestions).
- `GET /spec`: the API description (attn-mt's OpenAPI document, where LibreTranslate's is Swagger 2).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import PurePath
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import UploadFile

from attn_mt.decoding.outputs import prepare_sentence
from attn_mt.run.opened import LoadedRun
from attn_mt.serving.libretranslate import (
    INVALID_JSON,
    LANGUAGE_NAMES,
    LibreTranslateCall,
    LibreTranslateError,
    check_pair,
    check_size,
    lower_code,
    missing,
    model_languages,
    refuse_lone_surrogate,
    translatable,
)
from attn_mt.serving.schemas import MAX_BODY_BYTES, MAX_TEXT_CHARS, LibreTranslateResponse
from attn_mt.web.http import ErrorBody, error_response

FILE_FORMATS = {".txt": "text", ".html": "html"}  # file extension -> the format it is translated as
FILE_KEEP = 32  # translated files kept for download
FILE_KEEP_S = 15 * 60  # seconds a translated file stays downloadable
FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's default: how long its page waits after typing
SUGGESTIONS_OFF = "Suggestions are disabled on this server."
REFUSALS = {  # what the routes may answer besides 200, for the OpenAPI document
    code: {"model": ErrorBody, "description": what}
    for code, what in (
        (400, "Invalid request (LibreTranslate's wording)"),
        (401, "No API key (the server was started with --api-keys)"),
        (403, "A wrong API key, or a page of an origin not allowed"),
        (413, "Body too large"),
        (415, "Neither JSON nor a form"),
        (429, "Over a per-client limit"),
    )
}
DETECT_BODY = {
    "requestBody": {
        "content": {
            kind: {
                "schema": {
                    "type": "object",
                    "properties": {"q": {"type": "string", "minLength": 1}, "api_key": {}},
                    "required": ["q"],
                }
            }
            for kind in ("application/json", "application/x-www-form-urlencoded")
        }
    }
}
Translate = Callable[[LibreTranslateCall, Request], Awaitable[LibreTranslateResponse | JSONResponse]]


async def json_fields(connection: Request) -> dict[str, Any]:
    """A LibreTranslate request's fields: its JSON object (forms and URL queries arrive as one, from
    serving/app.py's FormBodies); LibreTranslateError for JSON that is not an object."""
    try:
        found = json.loads(await connection.body() or b"{}")
    except (ValueError, RecursionError):
        raise LibreTranslateError(INVALID_JSON) from None
    if not isinstance(found, dict):
        raise LibreTranslateError(INVALID_JSON)
    return found


def confidence(run: LoadedRun, text: str) -> float:
    """How much of `text` the model's source vocabulary knows: its known tokens, in percent."""
    if not translatable(text):
        return 0.0
    tokens = prepare_sentence(run.config, run.src_vocab, text)
    known = sum(token in run.src_vocab for token in tokens)
    return round(100.0 * known / len(tokens), 1) if tokens else 0.0


class TranslatedFiles:
    """The last FILE_KEEP translated files, each kept FILE_KEEP_S seconds, by download name."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.files: OrderedDict[str, tuple[float, bytes]] = OrderedDict()

    def add(self, filename: str, content: bytes) -> str:
        """Keep a translated file; its download name (a random id, then the file's own name)."""
        name = f"{uuid.uuid4().hex}.{PurePath(filename).name}"
        self.files[name] = (self.clock(), content)
        while len(self.files) > FILE_KEEP:
            self.files.popitem(last=False)
        return name

    def get(self, name: str) -> bytes | None:
        """A kept file's content, or None when unknown or expired."""
        kept = self.files.get(name)
        if kept is None or self.clock() - kept[0] > FILE_KEEP_S:
            self.files.pop(name, None)
            return None
        return kept[1]


def add_libretranslate_routes(app: FastAPI, run: LoadedRun, translate: Translate, keys_needed: bool) -> None:
    """Add the routes of the module docstring; `translate` answers a LibreTranslate translate call
    (serving/app.py's, so files are decoded as /translate's texts are)."""
    source, target = model_languages(run.config)
    files = TranslatedFiles()

    def refused(exc: LibreTranslateError) -> JSONResponse:
        return error_response(400, str(exc), [str(exc)])

    @app.post("/detect", responses=REFUSALS, openapi_extra=DETECT_BODY)
    async def detect(connection: Request) -> Any:
        """LibreTranslate's language detection: the model's source language, and how much of the text
        its vocabulary knows (no detector runs: the model reads one language)."""
        try:
            q = (await json_fields(connection)).get("q")
            if not q:
                raise missing("q")
            texts = q if isinstance(q, list) else [q]
            if not all(isinstance(text, str) for text in texts):
                raise LibreTranslateError("Invalid request: q parameter must be a text or a list of texts")
            refuse_lone_surrogate("q", texts)
            check_size(sum(len(text) for text in texts))
        except LibreTranslateError as exc:
            return refused(exc)
        shares = [confidence(run, text) for text in texts]
        return [{"confidence": round(sum(shares) / len(shares), 1), "language": source}]

    @app.get("/frontend/settings")
    async def frontend_settings() -> dict[str, Any]:
        """What LibreTranslate's web page reads when it loads."""
        return {
            "charLimit": MAX_TEXT_CHARS,
            "frontendTimeout": FRONTEND_TIMEOUT_MS,
            "apiKeys": keys_needed,
            "keyRequired": keys_needed,
            "suggestions": False,
            "filesTranslation": True,
            "supportedFilesFormat": list(FILE_FORMATS),
            "language": {
                "source": {"code": source, "name": LANGUAGE_NAMES.get(source, source)},
                "target": {"code": target, "name": LANGUAGE_NAMES.get(target, target)},
            },
        }

    @app.post("/translate_file", responses=REFUSALS)
    async def translate_file(connection: Request) -> Any:
        """LibreTranslate's file translation, for .txt and .html files."""
        try:
            async with connection.form(max_files=1, max_fields=16, max_part_size=MAX_BODY_BYTES) as form:
                upload = form.get("file")
                fields = {name: form.get(name) for name in ("source", "target")}
                if not isinstance(upload, UploadFile):
                    raise missing("file")
                content = await upload.read()
                filename = upload.filename or ""
        except LibreTranslateError as exc:
            return refused(exc)
        call_source, call_target = lower_code(fields["source"]), lower_code(fields["target"])
        try:
            if not call_source:
                raise missing("source")
            if not call_target:
                raise missing("target")
            if not filename:
                raise LibreTranslateError("Invalid request: empty file")
            kind = FILE_FORMATS.get(PurePath(filename).suffix.lower())
            if kind is None:
                raise LibreTranslateError("Invalid request: file format not supported")
            try:
                text = content.decode("utf-8-sig")
            except UnicodeDecodeError:
                raise LibreTranslateError("Invalid request: the file is not UTF-8 text") from None
            if not text.strip():
                raise LibreTranslateError("Invalid request: empty file")
            check_size(len(text))  # a file's text is held to q's limit
            call = LibreTranslateCall(text, call_source, call_target, kind, 0)
            check_pair(call, run.config)
        except LibreTranslateError as exc:
            return refused(exc)
        answered = await translate(call, connection)
        if not isinstance(answered, LibreTranslateResponse):  # an error answer
            return answered
        name = files.add(filename, str(answered.translatedText).encode("utf-8"))
        return {"translatedFileUrl": f"{str(connection.base_url).rstrip('/')}/download_file/{quote(name)}"}

    @app.get("/download_file/{name}", responses={404: {"model": ErrorBody, "description": "No such file"}})
    async def download_file(name: str) -> Response:
        """A file /translate_file translated, while it is kept."""
        content = files.get(name)
        if content is None:
            return error_response(404, "no such translated file (they are kept for 15 minutes)")
        shown = name.split(".", 1)[1]
        disposition = f"attachment; filename*=UTF-8''{quote(shown)}"
        return Response(
            content, media_type="application/octet-stream", headers={"Content-Disposition": disposition}
        )

    @app.post("/suggest", responses={403: REFUSALS[403], 415: REFUSALS[415], 413: REFUSALS[413]})
    async def suggest() -> JSONResponse:
        """LibreTranslate's suggestions, which attn-mt does not keep."""
        return error_response(403, SUGGESTIONS_OFF, [SUGGESTIONS_OFF])

    @app.get("/spec")
    async def spec() -> dict[str, Any]:
        """The API description (LibreTranslate serves its own here): attn-mt's OpenAPI document."""
        return app.openapi()
