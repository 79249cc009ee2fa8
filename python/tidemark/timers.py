"""Timers that survive operator re-creation: :class:`TimerService`."""

from __future__ import annotations

from typing import Any

from tidemark import _native

__all__ = ["TimerService"]


class TimerService:
    """Event-time and processing-time timers, unique per ``(timestamp, key, namespace)``.

    Timers fire exactly once, in ``(timestamp, key, namespace)`` order, when the
    watermark (or processing time) reaches them. Keys are any tidemark key (str,
    bytes, int, tuples); the namespace is an int (a window or session id).

    >>> import tidemark as tm
    >>> ts = tm.TimerService()
    >>> ts.register(2_000, "device-1", namespace=0)
    True
    >>> ts.register(1_000, "device-2")
    True
    >>> ts.advance_watermark(1_500)
    [(1000, 'device-2', 0)]
    >>> restored = tm.TimerService.restore(ts.snapshot())
    >>> restored.timers()
    [(2000, 'device-1', 0)]
    """

    __slots__ = ("_inner",)

    def __init__(self) -> None:
        self._inner = _native.TimerService()

    def register(self, timestamp: int, key: Any, namespace: int = 0, kind: str = "event") -> bool:
        """Registers a timer (``kind`` ``"event"`` or ``"processing"``); ``False`` if it
        existed already."""
        return self._inner.change(True, timestamp, key, namespace, kind)

    def delete(self, timestamp: int, key: Any, namespace: int = 0, kind: str = "event") -> bool:
        """Deletes a timer; ``False`` if there was none."""
        return self._inner.change(False, timestamp, key, namespace, kind)

    def timers(self, kind: str = "event") -> list[tuple[int, Any, int]]:
        """Registered timers of ``kind`` (``"event"`` or ``"processing"``) in firing
        order."""
        return self._inner.timers(kind)

    def advance_watermark(self, watermark: int) -> list[tuple[int, Any, int]]:
        """Fires (and removes) every event-time timer with ``timestamp <= watermark``."""
        return self._inner.advance_watermark(watermark)

    def advance_processing_time(self, now: int) -> list[tuple[int, Any, int]]:
        """Fires every processing-time timer with ``timestamp <= now``."""
        return self._inner.advance_processing_time(now)

    @property
    def watermark(self) -> int | None:
        """The highest watermark seen."""
        return self._inner.watermark

    def __len__(self) -> int:
        return len(self._inner)

    def snapshot(self) -> bytes:
        """Every timer and the current times, as bytes."""
        return bytes(self._inner.snapshot())

    @classmethod
    def restore(cls, data: bytes) -> TimerService:
        """A timer service from :meth:`snapshot` bytes (raises StateCorruptedError)."""
        obj = cls.__new__(cls)
        obj._inner = _native.TimerService.restore(data)
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles as its snapshot.
        return (TimerService.restore, (self.snapshot(),))

    def __repr__(self) -> str:
        return (
            f"TimerService(event={len(self.timers('event'))}, "
            f"processing={len(self.timers('processing'))}, watermark={self.watermark})"
        )
