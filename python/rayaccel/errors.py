"""rayaccel's errors: one exception class per absl status code, all subclasses of Error."""

from __future__ import annotations


class Error(Exception):
    """A rayaccel call failed; `code` is the absl status code's name, str(e) its message."""

    code = "UNKNOWN"


class InvalidArgumentError(Error, ValueError):
    code = "INVALID_ARGUMENT"


class NotFoundError(Error, LookupError):
    code = "NOT_FOUND"


class FailedPreconditionError(Error):
    code = "FAILED_PRECONDITION"


class UnavailableError(Error):
    code = "UNAVAILABLE"


class DeadlineExceededError(Error, TimeoutError):
    code = "DEADLINE_EXCEEDED"


class PermissionDeniedError(Error, PermissionError):
    code = "PERMISSION_DENIED"


class UnauthenticatedError(Error):
    code = "UNAUTHENTICATED"


class AbortedError(Error):
    code = "ABORTED"


class InternalError(Error):
    code = "INTERNAL"


class CancelledError(Error):
    code = "CANCELLED"


class AlreadyExistsError(Error):
    code = "ALREADY_EXISTS"


class ResourceExhaustedError(Error):
    code = "RESOURCE_EXHAUSTED"


class OutOfRangeError(Error):
    code = "OUT_OF_RANGE"


class UnimplementedError(Error, NotImplementedError):
    code = "UNIMPLEMENTED"


class DataLossError(Error):
    code = "DATA_LOSS"


# absl::StatusCode values (absl/status/status.h), pinned.
_BY_CODE = {
    1: CancelledError,
    2: Error,
    3: InvalidArgumentError,
    4: DeadlineExceededError,
    5: NotFoundError,
    6: AlreadyExistsError,
    7: PermissionDeniedError,
    8: ResourceExhaustedError,
    9: FailedPreconditionError,
    10: AbortedError,
    11: OutOfRangeError,
    12: UnimplementedError,
    13: InternalError,
    14: UnavailableError,
    15: DataLossError,
    16: UnauthenticatedError,
}


def _from_status(code: int, message: str) -> Error:
    """The exception for an absl status (called by the native module)."""
    return _BY_CODE.get(code, Error)(message)
