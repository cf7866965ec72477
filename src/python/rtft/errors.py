"""rt-ft's errors as Python exceptions.

Every call of the package that fails raises a subclass of ``rtft.Error`` keyed by rt-ft's
status code (``include/rtft/status.h``): ``err.code`` is the ``rtft.StatusCode``, ``err.message``
the text.  The code says how far to roll back: retry (``UnavailableError``), rebuild
communicators (``AbortedError``), restore state (``DataLossError``).  Where a built-in exception
means the same, the class derives from it too (``InvalidArgumentError`` is a ``ValueError``,
``DeadlineExceededError`` a ``TimeoutError``, ...).
"""

from rtft._core import StatusCode


class Error(Exception):
    """An rt-ft call failed; ``code`` is its ``StatusCode``, ``message`` its text."""

    code = StatusCode.INTERNAL

    def __init__(self, message, code=None):
        super().__init__(message)
        if code is not None:
            self.code = StatusCode(int(code))
        self.message = message

    def __str__(self):
        return f"{self.code.name}: {self.message}"


class InvalidArgumentError(Error, ValueError):
    code = StatusCode.INVALID_ARGUMENT


class NotFoundError(Error, LookupError):
    code = StatusCode.NOT_FOUND


class AlreadyExistsError(Error):
    code = StatusCode.ALREADY_EXISTS


class FailedPreconditionError(Error):
    code = StatusCode.FAILED_PRECONDITION


class OutOfRangeError(Error, IndexError):
    code = StatusCode.OUT_OF_RANGE


class ResourceExhaustedError(Error, MemoryError):
    code = StatusCode.RESOURCE_EXHAUSTED


class PermissionDeniedError(Error, PermissionError):
    code = StatusCode.PERMISSION_DENIED


class DeadlineExceededError(Error, TimeoutError):
    code = StatusCode.DEADLINE_EXCEEDED


class UnavailableError(Error):
    code = StatusCode.UNAVAILABLE


class AbortedError(Error):
    code = StatusCode.ABORTED


class DataLossError(Error):
    code = StatusCode.DATA_LOSS


class IoError(Error, OSError):
    code = StatusCode.IO_ERROR


class UnimplementedError(Error, NotImplementedError):
    code = StatusCode.UNIMPLEMENTED


class InternalError(Error):
    code = StatusCode.INTERNAL


class DeviceLostError(Error):
    code = StatusCode.DEVICE_LOST


class ShutdownError(Error):
    code = StatusCode.SHUTDOWN


_BY_CODE = {cls.code: cls for cls in (
    InvalidArgumentError, NotFoundError, AlreadyExistsError, FailedPreconditionError,
    OutOfRangeError, ResourceExhaustedError, PermissionDeniedError, DeadlineExceededError,
    UnavailableError, AbortedError, DataLossError, IoError, UnimplementedError, InternalError,
    DeviceLostError, ShutdownError)}


def error_class(code):
    """The exception class of a status code (``Error`` for one this package does not know)."""
    try:
        return _BY_CODE.get(StatusCode(int(code)), Error)
    except ValueError:
        return Error


__all__ = ["Error", "error_class"] + [cls.__name__ for cls in _BY_CODE.values()]
