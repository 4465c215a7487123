"""AWS Lambda's error shapes, so that boto3 raises its modelled exceptions.

An error travels as an HTTP status, the header `x-amzn-ErrorType: <Code>` and
a JSON body `{"Type": "User", "message": ...}`; botocore's rest-json parser
reads the code from the header and the message from the body, which is what
turns a 404 into `client.exceptions.ResourceNotFoundException`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

ACCOUNT_ID = "000000000000"  # the emulator's one account; ARNs need twelve digits


@dataclass
class LambdaError(Exception):
    """An API error answered in AWS's shape instead of crashing the request."""

    code: str  # e.g. ResourceNotFoundException
    status: int  # HTTP status
    message: str
    kind: str = "User"  # "User" (the caller's fault) or "Service"
    extra: dict[str, Any] = field(default_factory=dict)  # more body fields, e.g. Reason
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def body(self) -> bytes:
        return json.dumps({"Type": self.kind, "message": self.message, **self.extra}).encode()


def function_arn(name: str, region: str) -> str:
    return f"arn:aws:lambda:{region}:{ACCOUNT_ID}:function:{name}"


def not_found(name: str, region: str) -> LambdaError:
    return LambdaError(
        "ResourceNotFoundException", 404, f"Function not found: {function_arn(name, region)}"
    )


def invalid_parameter(message: str) -> LambdaError:
    return LambdaError("InvalidParameterValueException", 400, message)


def validation(message: str) -> LambdaError:
    """A value outside the service model's constraints (pattern, enum, length): AWS answers
    these with ValidationException, which Lambda's model does not list, so botocore raises a
    plain ClientError whose code is "ValidationException" (not InvalidParameterValueException)."""
    return LambdaError("ValidationException", 400, message)


def update_in_progress(name: str, region: str) -> LambdaError:
    """409 for a change made while the last one is still in progress (LastUpdateStatus
    InProgress): Lambda refuses it instead of queueing it; clients wait with function_updated_v2."""
    return LambdaError(
        "ResourceConflictException", 409,
        f"The operation cannot be performed at this time. An update is in progress for resource: {function_arn(name, region)}",
    )


def invalid_content(message: str) -> LambdaError:
    return LambdaError("InvalidRequestContentException", 400, message)


def conflict(message: str) -> LambdaError:
    return LambdaError("ResourceConflictException", 409, message)


def too_large(limit: int) -> LambdaError:
    return LambdaError(
        "RequestTooLargeException",
        413,
        f"Request must be smaller than {limit} bytes for the InvokeFunction operation",
    )


def throttled(reason: str, retry_after_s: int = 1, message: str = "Rate Exceeded.") -> LambdaError:
    """429 with AWS's Reason: ReservedFunctionConcurrentInvocationLimitExceeded or
    ConcurrentInvocationLimitExceeded; Retry-After tells a client when to come back."""
    return LambdaError(
        "TooManyRequestsException",
        429,
        message,
        extra={"Reason": reason},
        headers={"Retry-After": str(retry_after_s)},
    )


def service_error(message: str) -> LambdaError:
    return LambdaError("ServiceException", 500, message, kind="Service")


def access_denied(code: str, message: str) -> LambdaError:
    """403 for a request whose signature or access key does not check out."""
    return LambdaError(code, 403, message)
