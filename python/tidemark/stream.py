"""Declarative stream definitions and event-time options.

A :class:`StreamDefinition` says which column carries event time and how to parse it;
pipeline options say whether event time is on and how much disorder to tolerate.
Both are plain dicts / JSON / YAML-friendly, with dotted option names:

.. code-block:: yaml

    stream:
      name: orders
      eventtime: {column: ts, type: unixtimestamp_ms}
    options:
      eventtime.enabled: true
      eventtime.lateTolerance: 2s

:func:`plan` validates both (against a schema when given) and builds the first stage:
a :class:`tidemark.Reorder` in event time, a :class:`tidemark.ProcessingTimeWatermark`
otherwise. :meth:`tidemark.Pipeline.from_stream` builds a windowed aggregation
from the same two documents.

**Several message kinds in one batch.** A tuple can hold several
messages; its event time comes from the *first message (in tuple order) whose stream
definition has an event-time section*. In tidemark a row is one Arrow record: when a
table carries several message kinds side by side (e.g. a ``header`` and an
``order`` part flattened into columns), list them in ``messages`` in tuple order; the
first one with an ``eventtime`` section names the row's event-time column, and the
others are ignored for event time. A message without ``eventtime`` is skipped even if
its columns come first.

>>> import pyarrow as pa, tidemark as tm
>>> sd = tm.StreamDefinition.from_dict({
...     "name": "orders",
...     "messages": [
...         {"name": "header"},
...         {"name": "order", "eventtime": {"column": "order_ts", "type": "unixtimestamp_ms"}},
...         {"name": "audit", "eventtime": {"column": "audit_ts", "type": "unixtimestamp_s"}},
...     ],
... })
>>> sd.event_time
EventTimeColumn(column='order_ts', type='unixtimestamp_ms')
>>> stage = tm.plan(sd, {"eventtime.enabled": True, "eventtime.lateTolerance": "1s"})
>>> type(stage).__name__, stage.event_time, stage.late_tolerance
('Reorder', 'order_ts', 1000000)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from tidemark._duration import Duration, to_micros
from tidemark.clock import Clock
from tidemark.errors import ConfigError, MissingColumnError
from tidemark.event_time import event_time_types, resolve_event_time_type
from tidemark.reorder import ProcessingTimeWatermark, Reorder

__all__ = ["EventTimeColumn", "EventTimeOptions", "StreamDefinition", "plan", "resolve_stream"]


@dataclass(frozen=True)
class EventTimeColumn:
    """A stream's ``eventtime`` section: the column and its parser name (``None`` for
    Arrow timestamp and date columns)."""

    column: str
    type: str | None = None

    @classmethod
    def from_value(cls, value: Any, where: str) -> EventTimeColumn:
        if isinstance(value, EventTimeColumn):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected {{'column': ..., 'type': ...}}, got {value!r}")
        unknown = sorted(set(value) - {"column", "type"})
        if unknown:
            raise ConfigError(f"{where}: unknown keys {unknown}; use 'column' and 'type'")
        col = value.get("column")
        if not isinstance(col, str) or not col:
            raise ConfigError(f"{where}.column must be a column name, got {col!r}")
        ty = value.get("type")
        if ty is not None and not isinstance(ty, str):
            raise ConfigError(f"{where}.type must be a type name, got {ty!r}")
        return cls(col, ty)

    def to_dict(self) -> dict[str, Any]:
        """The YAML/JSON form."""
        out: dict[str, Any] = {"column": self.column}
        if self.type is not None:
            out["type"] = self.type
        return out


@dataclass(frozen=True)
class _Message:
    name: str
    event_time: EventTimeColumn | None


class StreamDefinition:
    """What a stream looks like: its name, and where event time comes from.

    Parameters
    ----------
    event_time : dict or EventTimeColumn, optional
        ``{"column": "ts", "type": "unixtimestamp_ms"}`` (the options
        ``eventtime.column`` / ``eventtime.type``).
    name : str
        The stream's name (used in messages).
    messages : list of dict, optional
        Message kinds in tuple order, each ``{"name": ..., "eventtime": {...}}``
        (``eventtime`` optional); the first with an ``eventtime`` section gives the
        event time. Mutually exclusive with ``event_time``.
    schema : pyarrow.Schema, optional
        The stream's schema: validated now.
    """

    __slots__ = ("_messages", "name", "schema")

    def __init__(
        self,
        event_time: Mapping[str, Any] | EventTimeColumn | None = None,
        *,
        name: str = "stream",
        messages: list[Mapping[str, Any]] | None = None,
        schema: pa.Schema | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"stream name must be a non-empty string, got {name!r}")
        self.name = name
        if event_time is not None and messages is not None:
            raise ConfigError("give event_time or messages, not both")
        self._messages: list[_Message] = []
        if messages is not None:
            if not isinstance(messages, list) or not messages:
                raise ConfigError(
                    "messages must be a non-empty list of {'name': ..., 'eventtime': ...}"
                )
            for i, m in enumerate(messages):
                if not isinstance(m, Mapping) or not isinstance(m.get("name"), str):
                    raise ConfigError(f"messages[{i}] must be a dict with a 'name', got {m!r}")
                unknown = sorted(set(m) - {"name", "eventtime"})
                if unknown:
                    raise ConfigError(
                        f"messages[{i}]: unknown keys {unknown}; use 'name' and 'eventtime'"
                    )
                et = m.get("eventtime")
                self._messages.append(
                    _Message(
                        m["name"],
                        None
                        if et is None
                        else EventTimeColumn.from_value(et, f"messages[{i}].eventtime"),
                    )
                )
        elif event_time is not None:
            self._messages.append(
                _Message(name, EventTimeColumn.from_value(event_time, "eventtime"))
            )
        self.schema = schema
        if schema is not None:
            self.validate(schema)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StreamDefinition:
        """From ``{"name": ..., "eventtime": {...}}`` or ``{"name": ..., "messages": [...]}``."""
        if not isinstance(d, Mapping):
            raise ConfigError(f"a stream definition must be a dict, got {type(d).__name__}")
        unknown = sorted(set(d) - {"name", "eventtime", "messages"})
        if unknown:
            raise ConfigError(
                f"stream definition: unknown keys {unknown}; use name, eventtime, messages"
            )
        return cls(d.get("eventtime"), name=d.get("name", "stream"), messages=d.get("messages"))

    @classmethod
    def from_json(cls, text: str) -> StreamDefinition:
        """From a JSON document (see :meth:`from_dict`)."""
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as e:
            raise ConfigError(f"stream definition is not valid JSON: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        """The dict form (round-trips through :meth:`from_dict`)."""
        if len(self._messages) == 1 and self._messages[0].name == self.name:
            et = self._messages[0].event_time
            return {"name": self.name, **({"eventtime": et.to_dict()} if et else {})}
        if not self._messages:
            return {"name": self.name}
        return {
            "name": self.name,
            "messages": [
                {"name": m.name, **({"eventtime": m.event_time.to_dict()} if m.event_time else {})}
                for m in self._messages
            ],
        }

    @property
    def event_time(self) -> EventTimeColumn | None:
        """The event-time column: the first message (in order) with an ``eventtime``
        section, or ``None`` when the stream declares none."""
        return next((m.event_time for m in self._messages if m.event_time is not None), None)

    def validate(self, schema: pa.Schema | None = None) -> EventTimeColumn | None:
        """Checks the type name (registered?) and, with a schema, the column (present,
        parseable type). Returns the event-time column.

        Raises :class:`UnknownEventTimeTypeError` listing the registered types and
        :class:`MissingColumnError` listing the schema's columns.
        """
        et = self.event_time
        if et is None:
            return None
        parser = resolve_event_time_type(et.type)  # raises, listing registered types
        if schema is not None:
            if et.column not in schema.names:
                raise MissingColumnError(
                    f"stream {self.name!r}: event-time column {et.column!r} not found; "
                    f"available columns: {', '.join(schema.names)}"
                )
            if parser is None:
                from tidemark import _native

                _native.check_event_time_type(
                    et.column, pa.array([], schema.field(et.column).type), et.type
                )
        return et

    def __repr__(self) -> str:
        return f"StreamDefinition({self.to_dict()!r})"


@dataclass(frozen=True)
class EventTimeOptions:
    """The pipeline options ``eventtime.enabled`` (default ``False``) and
    ``eventtime.lateTolerance`` (default ``0``; a duration such as ``"2s"``, ints are
    microseconds)."""

    enabled: bool = False
    late_tolerance: Duration = 0

    @classmethod
    def from_dict(cls, options: Mapping[str, Any] | EventTimeOptions | None) -> EventTimeOptions:
        """From ``{"eventtime.enabled": ..., "eventtime.lateTolerance": ...}`` or the
        nested ``{"eventtime": {"enabled": ..., "lateTolerance": ...}}``. Options that
        do not start with ``eventtime`` are left to other stages."""
        if options is None:
            return cls()
        if isinstance(options, EventTimeOptions):
            return options
        if not isinstance(options, Mapping):
            raise ConfigError(f"pipeline options must be a dict, got {type(options).__name__}")
        flat: dict[str, Any] = {}
        for k, v in options.items():
            if k == "eventtime":
                if not isinstance(v, Mapping):
                    raise ConfigError(f"options 'eventtime' must be a dict, got {v!r}")
                flat.update({f"eventtime.{kk}": vv for kk, vv in v.items()})
            elif isinstance(k, str) and k.startswith("eventtime."):
                flat[k] = v
        known = {"eventtime.enabled", "eventtime.lateTolerance"}
        unknown = sorted(set(flat) - known)
        if unknown:
            raise ConfigError(
                f"unknown event-time options {unknown}; known: {', '.join(sorted(known))}"
            )
        enabled = flat.get("eventtime.enabled", False)
        if not isinstance(enabled, bool):
            raise ConfigError(f"eventtime.enabled must be true or false, got {enabled!r}")
        tolerance = flat.get("eventtime.lateTolerance", 0)
        to_micros(tolerance, "eventtime.lateTolerance")  # validates
        return cls(enabled, tolerance)


def plan(
    definition: StreamDefinition | Mapping[str, Any] | None,
    options: Mapping[str, Any] | EventTimeOptions | None = None,
    *,
    schema: pa.Schema | None = None,
    clock: Clock | None = None,
    late: str = "drop",
) -> Reorder | ProcessingTimeWatermark:
    """Validates a stream definition and options and builds the watermark stage.

    * ``eventtime.enabled=false``: a :class:`ProcessingTimeWatermark` (rows pass through,
      the watermark follows ``clock``);
    * ``eventtime.enabled=true``: a :class:`Reorder` on the definition's event-time
      column with ``eventtime.lateTolerance``.

    Raises :class:`ConfigError` when event time is enabled without an event-time
    definition, :class:`UnknownEventTimeTypeError` (listing the registered types) and,
    with ``schema``, :class:`MissingColumnError` (listing the columns).
    """
    opts, et = resolve_stream(definition, options, schema)
    if et is None or not opts.enabled:
        return ProcessingTimeWatermark(clock=clock)
    return Reorder(et.column, et.type, late_tolerance=opts.late_tolerance, late=late, schema=schema)


def resolve_stream(
    definition: StreamDefinition | Mapping[str, Any] | None,
    options: Mapping[str, Any] | EventTimeOptions | None,
    schema: pa.Schema | None = None,
) -> tuple[EventTimeOptions, EventTimeColumn | None]:
    """The options and the validated event-time column (see :func:`plan` for errors)."""
    opts = EventTimeOptions.from_dict(options)
    sd = definition
    if sd is not None and not isinstance(sd, StreamDefinition):
        sd = StreamDefinition.from_dict(sd)
    if sd is not None and schema is None:
        schema = sd.schema
    et = None if sd is None else sd.validate(schema)
    if opts.enabled and et is None:
        where = (
            "no stream definition" if sd is None else f"stream {sd.name!r} has no eventtime section"
        )
        raise ConfigError(
            f"eventtime.enabled is true but {where}: declare "
            "{'eventtime': {'column': ..., 'type': ...}} "
            f"(registered types: {', '.join(event_time_types())})"
        )
    return opts, et
