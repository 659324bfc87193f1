"""The user's own memory over HTTP: MEMORY.md itself, its kept versions, where each of its
lines came from, and the two switches (memory on or off, approval of each write).

Every write here is the user's own edit, made only against the version `If-Match` names, and
answered with the file it left (its new ETag); a file the agent cannot use is a 409 on every
read. The memory errors a write raises are answered by the API's one table
(`memory_app.api.errors`), not here.
"""

import re
from collections.abc import Callable
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext, gettext_noop
from ninja import Header, Router, Status
from ninja.errors import HttpError

from memory_app import selectors, services
from memory_app.api.schemas import (
    COMMON,
    IF_MATCH,
    UNSAFE,
    Error,
    MemoryIn,
    MemoryLinesOut,
    MemoryOut,
    MemoryProblem,
    MemoryVersionsOut,
    MemoryVersionTextOut,
    MemoryWrittenOut,
    SettingsBody,
    SettingsOut,
)
from memory_app.line_origins import Origin
from memory_app.versions import version_sha256

router = Router()


# What a file the agent cannot use is told, by `MemoryFile.problem` (`%(limit)s`: the cap).
_MEMORY_PROBLEMS = {
    "too_large": gettext_noop(
        "MEMORY.md is over %(limit)s bytes: replace it (PUT) or clear it (DELETE)"
    ),
    "invalid_encoding": gettext_noop(
        "MEMORY.md is not UTF-8 text: replace it (PUT) or clear it (DELETE)"
    ),
}


# The shape of every etag `GET /api/memory/` sends (`selectors.memory_etag`).
_ETAG = re.compile(r"sha256:[0-9a-f]{64}")


def _quoted(etag: str) -> str:
    return f'"{etag}"'


def _problem_text(problem: str) -> str:
    """The `error` of a file the agent cannot use, in the request's language."""
    if problem not in _MEMORY_PROBLEMS:
        return problem
    return gettext(_MEMORY_PROBLEMS[problem]) % {"limit": services.MEMORY_FILE_MAX_BYTES}


def _memory_state(request: HttpRequest, response: HttpResponse, memory: Any) -> Any:
    response["ETag"] = _quoted(memory.etag)
    if memory.problem is not None:
        return Status(
            409,
            {
                "error": _problem_text(memory.problem),
                "etag": memory.etag,
                "size_bytes": memory.size_bytes,
            },
        )
    return Status(
        200,
        {
            "enable_memory": selectors.memory_enabled(request.auth.pk),
            "text": memory.text,
            "size_bytes": memory.size_bytes,
            "etag": memory.etag,
            "warnings": [{"line": w.line, "kind": w.kind} for w in memory.warnings],
        },
    )


@router.get("/memory/", response={200: MemoryOut, 409: MemoryProblem, **COMMON}, tags=["memory"])
def get_memory(request: HttpRequest, response: HttpResponse) -> Any:
    """The whole MEMORY.md; a file the agent cannot use (too large, not UTF-8) is a 409."""
    return _memory_state(request, response, selectors.read_memory_file(user=request.auth))


def _expected_etag(if_match: str | None) -> str:
    """The etag an `If-Match` header names (quotes optional); a weak or `*` tag never matches,
    and a value that is no etag of this API at all is said to be malformed, not stale."""
    if if_match is None or not if_match.strip():
        raise HttpError(
            428, gettext_noop("If-Match is required: send the etag of the memory you edited")
        )
    value = if_match.strip()
    if value == "*" or value.startswith("W/"):
        raise HttpError(
            412, gettext_noop("If-Match must be the memory's exact etag (not * or a weak tag)")
        )
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    if not _ETAG.fullmatch(value):
        raise HttpError(
            412, 'If-Match is malformed: send the etag GET returned ("sha256:" + 64 hex digits)'
        )
    return value


def _write_if_match(
    request: HttpRequest,
    response: HttpResponse,
    if_match: str | None,
    write: Callable[..., Any],
    **fields: Any,
) -> Any:
    """Make one of the user's own memory writes against the version `If-Match` names, and
    answer with the file it left (its new ETag)."""
    memory = write(
        user=request.auth, if_match=_expected_etag(if_match), actor=request.auth, **fields
    )
    return _memory_state(request, response, memory)


@router.put(
    "/memory/",
    response={200: MemoryWrittenOut, **IF_MATCH},
    tags=["memory"],
)
def put_memory(
    request: HttpRequest,
    response: HttpResponse,
    body: MemoryIn,
    if_match: str | None = Header(None, alias="If-Match"),
) -> Any:
    """Replace the whole file, only if it is still the version `If-Match` names. A credential
    in the text is kept as written, and listed in `warnings`."""
    return _write_if_match(request, response, if_match, services.write_memory_file, text=body.text)


@router.delete("/memory/", response={204: None, **UNSAFE}, tags=["memory"])
def delete_memory(request: HttpRequest) -> Any:
    """Empty the memory: the agent then sees none, and its next fact starts a new file."""
    services.clear_memory(user=request.auth, actor=request.auth)
    return Status(204, None)


@router.get("/memory/versions/", response={200: MemoryVersionsOut, **COMMON}, tags=["memory"])
def get_memory_versions(request: HttpRequest) -> Any:
    """Earlier versions of your MEMORY.md, newest replacement first (never the empty file);
    empty again after you forget them."""
    return {"versions": selectors.list_memory_versions(user=request.auth)}


@router.delete("/memory/versions/", response={204: None, **UNSAFE}, tags=["memory"])
def delete_memory_versions(request: HttpRequest) -> Any:
    """Forget every kept version for good (MEMORY.md itself stays as it is)."""
    services.forget_memory_versions(user=request.auth, actor=request.auth)
    return Status(204, None)


@router.get(
    "/memory/versions/{sha256}/",
    response={200: MemoryVersionTextOut, 404: Error, **COMMON},
    tags=["memory"],
)
def get_memory_version(request: HttpRequest, sha256: str) -> Any:
    """One kept version's text, checked against its hash; `sha256` is the bare hex or the
    ETag form `sha256:<hex>`."""
    sha256 = version_sha256(sha256)
    data = selectors.read_memory_version(user=request.auth, sha256=sha256)
    return {"sha256": sha256, "text": data.decode("utf-8"), "size_bytes": len(data)}


@router.post(
    "/memory/versions/{sha256}/restore/",
    response={200: MemoryWrittenOut, 404: Error, **IF_MATCH},
    tags=["memory"],
)
def post_memory_version_restore(
    request: HttpRequest,
    response: HttpResponse,
    sha256: str,
    if_match: str | None = Header(None, alias="If-Match"),
) -> Any:
    """Put a kept version back as MEMORY.md, only if the file is still the version `If-Match`
    names; the file it replaces is kept in turn. No body. `sha256` as for reading one.
    Credentials in the restored text are listed in `warnings`."""
    return _write_if_match(
        request, response, if_match, services.restore_memory_version, sha256=sha256
    )


@router.get(
    "/memory/lines/", response={200: MemoryLinesOut, 409: MemoryProblem, **COMMON}, tags=["memory"]
)
def get_memory_lines(request: HttpRequest, response: HttpResponse) -> Any:
    """Each line of your MEMORY.md and where it came from: the change that brought it (who, when,
    and for the agent's writes the run and thread), or `earlier`. A file the agent cannot use
    (too large, not UTF-8) is a 409, as for GET /api/memory/."""
    found = selectors.memory_lines(user=request.auth)
    if found.memory.problem is not None:
        return _memory_state(request, response, found.memory)
    # Written as JSON directly: a 128 KiB file has thousands of lines, and validating each
    # against the schema would cost more than finding their origins. The lines share a few
    # origins, each serialized once by the same encoder the API uses.
    origins: dict[int, dict[str, Any]] = {}
    lines = []
    for line in found.lines:
        origin = origins.get(id(line.origin))
        if origin is None:
            origin = origins[id(line.origin)] = _origin_json(line.origin)
        lines.append({"number": line.number, "text": line.text, "origin": origin})
    shaped = JsonResponse({"etag": found.memory.etag, "lines": lines})
    shaped["ETag"] = _quoted(found.memory.etag)
    return shaped


def _origin_json(origin: Origin) -> dict[str, Any]:
    """An origin as `LineChangeOut` or `EarlierOut` shows it (`at` as the API writes times)."""
    if "at" not in origin:
        return {"kind": origin["kind"]}
    return {**origin, "at": DjangoJSONEncoder().default(origin["at"])}


@router.delete(
    "/memory/lines/{number}/",
    response={200: MemoryOut, 404: Error, **IF_MATCH},
    tags=["memory"],
)
def delete_memory_line(
    request: HttpRequest,
    response: HttpResponse,
    number: int,
    if_match: str | None = Header(None, alias="If-Match"),
) -> Any:
    """Forget one line: remove line `number` of the file `If-Match` names (the etag the lines
    came with), as your own edit; the file it replaces is kept as a version. No body."""
    return _write_if_match(request, response, if_match, services.delete_memory_line, number=number)


@router.patch(
    "/memory/lines/{number}/",
    response={200: MemoryWrittenOut, 404: Error, **IF_MATCH},
    tags=["memory"],
)
def patch_memory_line(
    request: HttpRequest,
    response: HttpResponse,
    number: int,
    body: MemoryIn,
    if_match: str | None = Header(None, alias="If-Match"),
) -> Any:
    """Edit one line in place: line `number` of the file `If-Match` names becomes `text` (one
    line, not empty), as your own edit; the file it replaces is kept as a version. A
    credential in the text is kept as written and listed in `warnings`."""
    return _write_if_match(
        request, response, if_match, services.edit_memory_line, number=number, text=body.text
    )


@router.get("/settings/", response={200: SettingsOut, **COMMON}, tags=["settings"])
def get_settings(request: HttpRequest) -> Any:
    """The memory switch, and whether each memory write waits for your approval."""
    return selectors.memory_settings(user_id=request.auth.pk)


@router.patch("/settings/", response={200: SettingsOut, **UNSAFE}, tags=["settings"])
def patch_settings(request: HttpRequest, body: SettingsBody) -> Any:
    """Turn memory, or approval of each memory write, on or off (either or both); the next
    run and the next tool call read the new values."""
    if body.enable_memory is None and body.memory_write_approval is None:
        return Status(400, {"error": "send enable_memory, memory_write_approval or both"})
    if body.enable_memory is not None:
        services.set_memory_enabled(
            user=request.auth, enabled=body.enable_memory, actor=request.auth
        )
    if body.memory_write_approval is not None:
        services.set_memory_write_approval(
            user=request.auth, enabled=body.memory_write_approval, actor=request.auth
        )
    return selectors.memory_settings(user_id=request.auth.pk)
