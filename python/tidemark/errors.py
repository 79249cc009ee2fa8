"""The tidemark exception hierarchy.

Every error tidemark raises on purpose is a :class:`TidemarkError`. Where the meaning
matches a built-in exception the class also derives from it, so ``except KeyError``
and ``except ValueError`` keep working::

    TidemarkError
    ├── ConfigError (ValueError)            bad setting, caught when the pipeline is built
    │   ├── UnknownEventTimeTypeError       event_time_type not registered
    │   └── MissingColumnError (KeyError)   a named column is not in the data
    ├── WatermarkError
    │   ├── UnknownPartitionError (KeyError)    partition not registered
    │   ├── SourceNotFoundError (KeyError)      source not registered
    │   ├── InvalidPartitionError (ValueError)  partition number out of range / duplicate
    │   └── MaxKeysReachedError                 keyed tracker full, policy reject_new
    ├── StateCorruptedError                 a snapshot cannot be restored
    ├── ArrowDataError (ValueError)         Arrow data that cannot be processed
    └── InternalError                       a bug in tidemark (please report it)

The native module raises these classes directly (``rust/tidemark-py/src/error.rs``).
"""

from __future__ import annotations

__all__ = [
    "ArrowDataError",
    "ConfigError",
    "InternalError",
    "InvalidPartitionError",
    "MaxKeysReachedError",
    "MissingColumnError",
    "SourceNotFoundError",
    "StateCorruptedError",
    "TidemarkError",
    "TidemarkWarning",
    "UnknownEventTimeTypeError",
    "UnknownPartitionError",
    "WatermarkError",
]


class TidemarkError(Exception):
    """Base class of every error tidemark raises on purpose."""

    def __str__(self) -> str:
        # KeyError's own __str__ shows repr(message); keep messages readable.
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class ConfigError(TidemarkError, ValueError):
    """A configuration value that cannot work; raised when the pipeline is built."""


class UnknownEventTimeTypeError(ConfigError):
    """``event_time_type`` names no registered parser; the message lists them."""


class MissingColumnError(ConfigError, KeyError):
    """A column named in the configuration is not in the data; the message lists them."""


class WatermarkError(TidemarkError):
    """An error from a watermark tracker."""


class UnknownPartitionError(WatermarkError, KeyError):
    """The partition is not registered (or was removed): call ``add_partition`` first."""


class SourceNotFoundError(WatermarkError, KeyError):
    """The source was never registered: call ``register_source`` first."""


class InvalidPartitionError(WatermarkError, ValueError):
    """A partition number out of range, or a partition registered twice."""


class MaxKeysReachedError(WatermarkError):
    """A keyed tracker with ``eviction="reject_new"`` is at ``max_keys``."""


class StateCorruptedError(TidemarkError):
    """A snapshot is truncated, corrupted, of another version or another pipeline."""


class ArrowDataError(TidemarkError, ValueError):
    """Arrow data that cannot be processed (an Arrow library error)."""


class InternalError(TidemarkError):
    """A bug in tidemark: a Rust panic caught at the boundary. Please report it."""


class TidemarkWarning(UserWarning):
    """Something tidemark did that the user may not expect (rows dropped without a
    late sink, a Spark watermark that does not apply); said once per processor."""
