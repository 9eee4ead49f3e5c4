"""The exceptions iceberg-exec raises; each carries the engine's one-line message."""


class IcebergExecError(Exception):
    """An error of the engine: a statement failed, and changed nothing."""


class CommitConflict(IcebergExecError):
    """A concurrent commit changed the table in a way the statement's commit cannot follow
    (after its retries); nothing was committed."""


class TableNotFound(IcebergExecError, KeyError):
    """The catalog has no such table."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class InvalidInput(IcebergExecError, ValueError):
    """The statement, a name, a filter or a setting is not valid; nothing ran."""
