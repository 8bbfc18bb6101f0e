# SPDX-License-Identifier: Apache-2.0
"""Exception classes of redist.

Every class carries ``status``, the ``redist_status_t`` code the C ABI returns for it, so one
table (here) maps Python failures to C status codes. Each class also derives from the builtin
exception a Python user would expect (``ValueError`` for bad input, ``RuntimeError`` for bad
state), so code written against nvmath-python's ``Redistribute`` keeps catching what it caught.
"""

from __future__ import annotations

__all__ = [
    "RedistError",
    "InvalidValueError",
    "InvalidTypeError",
    "InvalidStateError",
    "NotInitializedError",
    "NotSupportedError",
    "CudaError",
    "CommunicationError",
    "InternalError",
    "BindDistributionError",
    "ConvertDistributionError",
    "STATUS",
    "error_class",
    "redist_class_of",
    "status_of",
]

# redist_status_t (cabi/redist.h): keep in sync.
STATUS: dict[str, int] = {
    "SUCCESS": 0,
    "INVALID_VALUE": 1,
    "INVALID_STATE": 2,
    "NOT_INITIALIZED": 3,
    "NOT_SUPPORTED": 4,
    "CUDA": 5,
    "COMMUNICATION": 6,
    "INTERNAL": 7,
    "PYTHON_INIT": 8,
}


class RedistError(Exception):
    """Base class of every error redist raises on purpose."""

    status: int = STATUS["INTERNAL"]


class InvalidValueError(RedistError, ValueError):
    """An argument has the right type but a wrong value (boxes, shapes, options...)."""

    status: int = STATUS["INVALID_VALUE"]


class InvalidTypeError(RedistError, TypeError):
    """An argument has the wrong type (unsupported package, stream object, ...)."""

    status: int = STATUS["INVALID_VALUE"]


class InvalidStateError(RedistError, RuntimeError):
    """A method was called in a state that does not allow it (execute before plan, after free...)."""

    status: int = STATUS["INVALID_STATE"]


class NotInitializedError(RedistError, RuntimeError):
    """A runtime (MPI, CUDA, NVSHMEM) that the call needs is not up."""

    status: int = STATUS["NOT_INITIALIZED"]


class NotSupportedError(RedistError, NotImplementedError):
    """A valid request that this build or this machine cannot serve."""

    status: int = STATUS["NOT_SUPPORTED"]


class CudaError(RedistError, RuntimeError):
    """A CUDA driver, NVRTC or NVSHMEM call failed."""

    status: int = STATUS["CUDA"]


class CommunicationError(RedistError, RuntimeError):
    """An MPI or NVSHMEM communication step failed."""

    status: int = STATUS["COMMUNICATION"]


class InternalError(RedistError, RuntimeError):
    """A bug in redist: please report it with the message."""

    status: int = STATUS["INTERNAL"]


class BindDistributionError(InvalidValueError):
    """A distribution cannot be bound to the given global/local shapes (nvmath-compatible name)."""


class ConvertDistributionError(InvalidValueError):
    """A distribution cannot be converted to the requested kind (nvmath-compatible name)."""


# One table: which redist class a failure becomes, whatever layer meets it. Builtins a library
# call may raise are translated here (never ad hoc), so one failure gives one class, one C status.
_BUILTIN_CLASS = (
    (NotImplementedError, NotSupportedError),
    (OverflowError, InvalidValueError),  # e.g. a coordinate >= 2**63
    (TypeError, InvalidTypeError),
    (ValueError, InvalidValueError),
    (IndexError, InvalidValueError),
    (KeyError, InvalidValueError),
)

_BY_NAME: dict[str, type[RedistError]] = {}


def _register_classes() -> None:
    todo = [RedistError]
    while todo:
        cls = todo.pop()
        _BY_NAME[cls.__name__] = cls
        todo.extend(cls.__subclasses__())


def redist_class_of(exc: BaseException) -> type[RedistError]:
    """The redist class ``exc`` is reported as (itself for redist errors)."""
    if isinstance(exc, RedistError):
        return type(exc)
    if type(exc).__module__.startswith("mpi4py"):  # MPI.Exception: an MPI call failed
        return CommunicationError
    for builtin, cls in _BUILTIN_CLASS:
        if isinstance(exc, builtin):
            return cls
    return InternalError


def error_class(name: str) -> type[RedistError]:
    """The redist class called ``name`` (InternalError for names redist does not know)."""
    if not _BY_NAME:
        _register_classes()
    return _BY_NAME.get(name, InternalError)


def status_of(exc: BaseException) -> int:
    """Return the ``redist_status_t`` code for any exception (builtins included)."""
    return redist_class_of(exc).status
