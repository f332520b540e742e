"""The exception hierarchy of the Lance engine.

Every error derives from `LanceError` and from the builtin that matches its meaning, so
callers can catch either. Messages name the dataset, version, file or column at fault.
"""

from __future__ import annotations


class LanceError(Exception):
    """Root of every error raised by `format`."""


class InvalidInputError(LanceError, ValueError):
    """An argument is malformed (bad mode, negative limit, unknown option...)."""


class FilterSyntaxError(InvalidInputError):
    """A SQL filter string does not parse."""


class FilterBindError(InvalidInputError):
    """A filter names a missing column or compares incompatible types."""


class TypeRuleError(InvalidInputError):
    """A typing rule of filters and expressions refused an operation; the binder adds the
    filter's context to the message."""


class ColumnNotFoundError(InvalidInputError, KeyError):
    """A projection or operation names a column the schema does not have."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


class SchemaMismatchError(LanceError, ValueError):
    """Data does not match the dataset's schema."""


class DatasetNotFoundError(LanceError, FileNotFoundError):
    """No Lance dataset exists at the given URI."""


class DatasetAlreadyExistsError(LanceError, FileExistsError):
    """A dataset already exists where a new one was to be created."""


class VersionNotFoundError(LanceError, LookupError):
    """The requested version (or timestamp) does not exist in the dataset."""


class TagNotFoundError(LanceError, LookupError):
    """The requested tag does not exist in the dataset."""


class BranchNotFoundError(LanceError, LookupError):
    """A branch name with no `_refs/branches` entry."""


class CorruptFileError(LanceError):
    """A manifest, data, deletion or transaction file is truncated or malformed."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"corrupt file {path}: {reason}")
        self.path = path
        self.reason = reason


class UnsupportedFeatureError(LanceError, NotImplementedError):
    """The dataset uses a feature flag, file version or encoding this engine cannot handle."""


class CommitConflictError(LanceError):
    """A concurrent commit made this one impossible; names the version it lost to."""

    def __init__(self, message: str, *, version: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.version = version
        self.retryable = retryable


class StorageUnavailableError(LanceError, OSError):
    """The object store kept failing (throttling, server errors, timeouts) past its retries;
    the operation may be retried later. A commit that raises it may or may not have landed:
    retry it with the same idempotency key."""


class CommitUnconfirmedError(StorageUnavailableError):
    """A commit wrote (or tried to write) its manifest but the store failed before it could
    tell whether the version landed; retrying with the same idempotency key settles it."""


class NotAppendOnlyError(LanceError):
    """A version in a range did more than append rows (overwrite, update, schema change...),
    so "the rows appended since version N" is not defined across it."""

    def __init__(self, message: str, *, version: int, operation: str) -> None:
        super().__init__(message)
        self.version = version
        self.operation = operation


class CleanupError(LanceError, OSError):
    """Cleanup refused to run (tagged versions would be removed); pylance raises OSError."""


class IndexNotFoundError(LanceError, KeyError):
    """No index of that name in the dataset version (pylance raises KeyError)."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""
