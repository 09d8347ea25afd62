"""``metav1.Status`` errors with the codes, reasons and wording kube-apiserver uses."""

from __future__ import annotations

from typing import Any

from tests.apiserver.resources import ResourceType


class ApiError(Exception):
    """An error the server answers with a ``Status`` body (or plain text, like the APF filter does)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
        plain_text: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}
        self.plain_text = plain_text

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            body["reason"] = self.reason
        if self.details:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(res: ResourceType, name: str, **extra: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if res.group:
        details["group"] = res.group
    details["kind"] = res.plural
    details.update(extra)
    return details


def not_found(res: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def already_exists(res: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{res.qualified} "{name}" already exists', _details(res, name))


def conflict(res: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {res.qualified} "{name}": {why}',
        _details(res, name),
    )


def modified_conflict(res: ResourceType, name: str) -> ApiError:
    return conflict(
        res,
        name,
        "the object has been modified; please apply your changes to the latest version and try again",
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def invalid(res: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 with one cause per (field, bad value, why)."""
    parts = [
        f'{field}: Invalid value: "{value}": {why}' if value else f"{field}: {why}"
        for field, value, why in causes
    ]
    qualified_kind = f"{res.kind}.{res.group}" if res.group else res.kind
    message = f'{qualified_kind} "{name}" is invalid: '
    if len(parts) == 1:
        message += parts[0]
    else:
        message += "[" + ", ".join(parts) + "]"
    return ApiError(
        422,
        "Invalid",
        message,
        _details(
            res,
            name,
            kind=res.kind,
            causes=[
                {
                    "reason": "FieldValueInvalid" if value else "FieldValueRequired",
                    "message": why,
                    "field": field,
                }
                for field, value, why in causes
            ],
        ),
    )


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def method_not_supported(res: ResourceType, verb: str) -> ApiError:
    return ApiError(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        {"group": res.group, "kind": res.plural} if res.group else {"kind": res.plural},
    )


def resource_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def internal(message: str) -> ApiError:
    return ApiError(
        500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]}
    )


def too_many_requests_apf(retry_after: int | None) -> ApiError:
    """What the API Priority and Fairness filter writes: plain text, with ``Retry-After``."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return ApiError(
        429, "TooManyRequests", "Too many requests, please try again later.", headers=headers, plain_text=True
    )


def service_unavailable(message: str = "the server is currently unable to handle the request") -> ApiError:
    return ApiError(503, "ServiceUnavailable", message)


def for_status_code(code: int, message: str, retry_after: int | None = None) -> ApiError:
    """A generic error for an injected fault of this status code."""
    if code == 429:
        return too_many_requests_apf(retry_after)
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    if code == 500:
        err = internal(message or "injected fault")
    elif code == 503:
        err = service_unavailable(message or "the server is currently unable to handle the request")
    elif code == 504:
        err = ApiError(
            504, "Timeout", message or "Timeout: request did not complete within requested timeout"
        )
    elif code == 410:
        err = expired(
            message or "The provided continue parameter is too old to display a consistent list result."
        )
    elif code == 403:
        err = ApiError(403, "Forbidden", message or "forbidden")
    elif code == 404:
        err = ApiError(404, "NotFound", message or "not found")
    else:
        err = ApiError(code, "", message or f"injected fault {code}")
    err.headers.update(headers)
    return err
