"""One Spark job computes a batch's three outputs: the main output (a pipeline's
windows, a reorder's released rows), late rows and error rows.

``mapInArrow`` has one output schema, so the task emits one of two forms:

* *combined* batches (streaming with late or error sinks): a kind code, the window
  columns, the input columns (for late and error rows) and the error reason; the
  driver persists them once and splits them into three DataFrames with projections;
* *packed* batches (batch ``aggregate``): a kind code and an Arrow IPC stream of that
  output's batches, in its own exact schema. Persisting a few large binary values
  costs Spark far less than caching every output row column by column; each output
  is then unpacked from the persisted blobs by a ``mapInArrow`` that only reads them.

Spark does not cast ``mapInArrow`` output, so the task casts every batch to the
exact Arrow schema Spark expects (string vs large_string, session time zone).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from tidemark.operator import Output
from tidemark.pipeline import Pipeline
from tidemark.reorder import ReorderOutput
from tidemark.spark._args import collated_columns

KIND_WINDOW, KIND_LATE, KIND_ERROR = 0, 1, 2


_KIND = "__tm_kind"


_REASON = "__tm_reason"


_BLOB = "__tm_blob"


#: Output rows per packed blob, and bytes (wide rows: fewer rows), far below the
#: 2 GB Spark allows one binary value.
PACK_ROWS = 65_536


PACK_BYTES = 64 << 20


def combined_block(
    schema: pa.Schema, kind_name: str, n: int, kind: int, columns: dict[str, Any]
) -> pa.RecordBatch:
    """``n`` rows of a combined output: the kind code, the given columns cast to the
    exact types Spark expects, nulls elsewhere."""
    arrays = []
    for f in schema:
        if f.name == kind_name:
            arrays.append(pa.array([kind] * n, f.type))
        elif f.name in columns:
            arrays.append(columns[f.name].cast(f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def session_arrow_settings(spark: Any) -> tuple[str, bool]:
    """The session time zone and whether strings travel as large_string. The zone is
    read without a default: unset, it is the JVM's zone (``get(key, "UTC")`` would
    answer "UTC" where Spark's Arrow batches say, e.g., "Etc/UTC")."""
    try:
        tz = spark.conf.get("spark.sql.session.timeZone") or "UTC"
    except Exception:  # a session that cannot say: Spark's own fallback
        tz = "UTC"
    large = str(spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower()
    return tz, large == "true"


def to_arrow_schema(task_schema: pa.Schema) -> pa.Schema:
    """The schema ``toArrow()`` gives a DataFrame whose tasks' schema is
    ``task_schema`` (:func:`arrow_schema_of`): session-zone timestamps in UTC, every
    column nullable. Arrow sinks get their tables in it."""

    def utc(t: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(t) and t.tz is not None:
            return pa.timestamp(t.unit, tz="UTC")
        return t

    return pa.schema([f.with_type(utc(f.type)).with_nullable(True) for f in task_schema])


def check_columns(pipe: Any, fields: Any, spark: Any) -> None:
    """``pipe``'s columns and their types checked against a micro-batch's Spark schema
    ``fields`` in the driver, before any task reads a row: a :class:`ConfigError`
    (:class:`MissingColumnError` for a missing column) naming it."""
    tz, large = session_arrow_settings(spark)
    pipe.output_schema(arrow_schema_of(fields, tz, large))


def arrow_schema_of(spark_schema: Any, tz: str, large: bool) -> pa.Schema:
    """The Arrow schema Spark uses for ``spark_schema`` in ``mapInArrow``: timestamps
    in the session's zone ``tz``."""
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(spark_schema, timezone=tz, prefers_large_types=large)
    # PySpark 4.0 names every zoned timestamp UTC; the batches carry the session's zone.
    schema = to_arrow_schema(spark_schema, prefers_large_types=large)
    return pa.schema([f.with_type(_zoned(f.type, tz)) for f in schema], schema.metadata)


def _zoned(t: pa.DataType, tz: str) -> pa.DataType:
    """``t`` with each zoned timestamp in it (nested ones too) in zone ``tz``."""
    if pa.types.is_timestamp(t):
        return pa.timestamp(t.unit, tz=tz) if t.tz is not None else t
    if pa.types.is_struct(t):
        return pa.struct(
            [t.field(i).with_type(_zoned(t.field(i).type, tz)) for i in range(t.num_fields)]
        )
    if pa.types.is_map(t):
        return pa.map_(
            t.key_field.with_type(_zoned(t.key_type, tz)),
            t.item_field.with_type(_zoned(t.item_type, tz)),
        )
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_zoned(t.value_type, tz)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_zoned(t.value_type, tz)))
    return t


def spark_schema_of(arrow_schema: pa.Schema) -> Any:
    """The Spark schema of Arrow data (timestamps without a time zone are NTZ)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema, prefer_timestamp_ntz=True)


@dataclass(frozen=True)
class OutputCodec:
    """Schemas of an operator's three outputs over one input schema: its main output
    (``KIND_WINDOW``: a pipeline's windows, or a reorder's released rows, which are
    input rows), late rows (input rows) and error rows (input rows and a reason), in
    the combined form, alone, split by the driver and as Arrow sinks get them."""

    input_arrow: pa.Schema
    combined_arrow: pa.Schema
    combined_spark: Any
    window_names: list[str]
    input_names: list[str]
    reason_name: str
    #: Per output (KIND_WINDOW, KIND_LATE, KIND_ERROR): its Spark schema and the exact
    #: Arrow schema Spark expects of it, for jobs that compute one output alone.
    single_spark: dict[int, Any]
    single_arrow: dict[int, pa.Schema]
    #: The main output is input rows (a reorder's): it travels in the input columns.
    main_is_input: bool = False

    @staticmethod
    def build(pipe: Pipeline, df_schema: Any, tz: str, large: bool) -> OutputCodec:
        """The codec of pipeline ``pipe`` over input rows of ``df_schema``."""
        missing = [k for k in pipe.key if k not in df_schema.fieldNames()]
        if missing:
            from tidemark.errors import ConfigError

            why = (
                " (Spark routes rows by the pipeline's keys before the lookup join, so keys "
                "must be input columns; aggregates may use lookup columns)"
                if pipe.lookup is not None
                else ""
            )
            raise ConfigError(
                f"key column(s) {missing} are not columns of the DataFrame; it has "
                f"{', '.join(df_schema.fieldNames())}{why}"
            )
        collated = collated_columns(df_schema, pipe.key)
        if collated:
            from tidemark.errors import ConfigError

            name, collation = collated[0]
            raise ConfigError(
                f"key column {name!r} is a string with collation {collation}: Spark "
                "groups and hashes it by its collation key ('A' and 'a' are one key "
                "under UTF8_LCASE), while tidemark compares keys byte for byte and would "
                "keep them apart. Pass F.collate(F.lower(...), 'UTF8_BINARY') of the "
                f"column for case-insensitive keys, or F.collate({name!r}, 'UTF8_BINARY') "
                "to compare bytes"
            )
        windows_arrow = pipe.output_schema(arrow_schema_of(df_schema, tz, large))
        return OutputCodec._of(df_schema, spark_schema_of(windows_arrow), tz, large, False)

    @staticmethod
    def rows(df_schema: Any, tz: str, large: bool) -> OutputCodec:
        """The codec of an operator whose main output is input rows of ``df_schema``
        (a reorder's released rows)."""
        return OutputCodec._of(df_schema, df_schema, tz, large, True)

    @staticmethod
    def _of(
        df_schema: Any, main_spark: Any, tz: str, large: bool, main_is_input: bool
    ) -> OutputCodec:
        from pyspark.sql.types import IntegerType, StringType, StructField, StructType

        fields = [StructField(_KIND, IntegerType(), False)]
        if not main_is_input:
            fields += [
                StructField(f"__tm_w{i}", f.dataType, True) for i, f in enumerate(main_spark.fields)
            ]
        fields += [
            StructField(f"__tm_i{i}", f.dataType, True) for i, f in enumerate(df_schema.fields)
        ]
        fields.append(StructField(_REASON, StringType(), True))
        combined_spark = StructType(fields)
        reason = "reason" if "reason" not in df_schema.fieldNames() else "_tidemark_reason"
        single_spark = {
            # Nullable as in the combined result, so both ways give one schema.
            KIND_WINDOW: StructType(
                [StructField(f.name, f.dataType, True) for f in main_spark.fields]
            ),
            KIND_LATE: df_schema,
            KIND_ERROR: StructType([*df_schema.fields, StructField(reason, StringType(), True)]),
        }
        single_arrow = {k: arrow_schema_of(v, tz, large) for k, v in single_spark.items()}
        return OutputCodec(
            single_spark=single_spark,
            single_arrow=single_arrow,
            input_arrow=arrow_schema_of(df_schema, tz, large),
            combined_arrow=arrow_schema_of(combined_spark, tz, large),
            combined_spark=combined_spark,
            window_names=list(main_spark.fieldNames()),
            input_names=list(df_schema.fieldNames()),
            reason_name=reason,
            main_is_input=main_is_input,
        )

    # --- task side ---------------------------------------------------------------

    def _block(self, n: int, kind: int, columns: dict[str, pa.Array]) -> pa.RecordBatch:
        return combined_block(self.combined_arrow, _KIND, n, kind, columns)

    def _columns(self, table: pa.Table, kind: int) -> list[pa.Array | None]:
        """The columns of an output in output order: the window columns, or the input
        columns (``None`` where the table lacks one) and, for errors, the reason."""
        if kind == KIND_WINDOW and not self.main_is_input:
            return [table.column(i).combine_chunks() for i in range(table.num_columns)]
        cols: list[pa.Array | None] = [
            table.column(n).combine_chunks() if n in table.column_names else None
            for n in self.input_names
        ]
        if kind == KIND_ERROR:
            cols.append(table.column(table.num_columns - 1).combine_chunks())
        return cols

    def _combined_names(self, kind: int) -> list[str]:
        """The combined-result columns that hold :meth:`_columns` of an output."""
        if kind == KIND_WINDOW and not self.main_is_input:
            return [f"__tm_w{i}" for i in range(len(self.window_names))]
        names = [f"__tm_i{i}" for i in range(len(self.input_names))]
        return [*names, _REASON] if kind == KIND_ERROR else names

    @staticmethod
    def _tables(out: Output | ReorderOutput) -> dict[int, pa.Table]:
        main = out.rows if isinstance(out, ReorderOutput) else out.windows
        return {KIND_WINDOW: main, KIND_LATE: out.late, KIND_ERROR: out.errors}

    def encode(self, out: Output | ReorderOutput) -> Iterator[pa.RecordBatch]:
        """The combined batches of one operator output."""
        for kind, table in self._tables(out).items():
            if table.num_rows == 0:
                continue
            cols = zip(self._combined_names(kind), self._columns(table, kind), strict=True)
            yield self._block(table.num_rows, kind, {n: c for n, c in cols if c is not None})

    def encode_one(self, out: Output | ReorderOutput, kind: int) -> Iterator[pa.RecordBatch]:
        """The batches of output ``kind`` alone, in the exact schema of
        :attr:`single_arrow` (a job that computes that output only)."""
        table = self._tables(out)[kind]
        if table.num_rows == 0:
            return
        schema = self.single_arrow[kind]
        arrays = [
            pa.nulls(table.num_rows, f.type) if c is None else c.cast(f.type)
            for c, f in zip(self._columns(table, kind), schema, strict=True)
        ]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    def encode_packed(
        self, out: Output, rows: int = PACK_ROWS, max_bytes: int = PACK_BYTES
    ) -> Iterator[pa.RecordBatch]:
        """One operator output as packed batches (:func:`packed_spark`): per output
        kind, its :meth:`encode_one` batches as Arrow IPC streams of up to ``rows``
        rows and about ``max_bytes`` bytes each (at least one row)."""
        for kind in (KIND_WINDOW, KIND_LATE, KIND_ERROR):
            for batch in self.encode_one(out, kind):
                per_row = max(1, batch.nbytes // max(1, batch.num_rows))
                step = max(1, min(rows, max_bytes // per_row))
                for start in range(0, batch.num_rows, step):
                    sink = pa.BufferOutputStream()
                    with pa.ipc.new_stream(sink, batch.schema) as writer:
                        writer.write_batch(batch.slice(start, step))
                    yield _packed_row(kind, sink.getvalue())

    # --- driver side ---------------------------------------------------------------

    def split_arrow(self, combined: pa.Table, kinds: list[int]) -> dict[int, pa.Table]:
        """Outputs ``kinds`` of a combined Arrow result, each in the schema
        :meth:`split` gives its DataFrame (:meth:`split_spark`)."""
        import pyarrow.compute as pc

        out = {}
        for kind in kinds:
            rows = combined.filter(pc.equal(combined.column(_KIND), kind))
            arrow = self.split_arrow_schema(kind)
            cols = [rows.column(n) for n in self._combined_names(kind)]
            out[kind] = pa.Table.from_arrays(cols, names=arrow.names).cast(arrow)
        return out

    def split_arrow_schema(self, kind: int) -> pa.Schema:
        """The Arrow schema of output ``kind`` as :meth:`split_spark` gives it (every
        column nullable)."""
        return pa.schema([f.with_nullable(True) for f in self.single_arrow[kind]])

    def sink_arrow_schema(self, kind: int) -> pa.Schema:
        """The Arrow schema ``toArrow()`` gives output ``kind``'s DataFrame (see
        :func:`to_arrow_schema`)."""
        return to_arrow_schema(self.split_arrow_schema(kind))

    def split_spark(self, kind: int) -> Any:
        """The Spark schema of output ``kind`` as :meth:`split` gives it (every
        column nullable, as in the combined result)."""
        from pyspark.sql.types import StructField, StructType

        fields = self.single_spark[kind].fields
        return StructType([StructField(f.name, f.dataType, True) for f in fields])

    def split(self, combined: Any) -> tuple[Any, Any, Any]:
        """The windows, late and error DataFrames of a (persisted) combined result."""
        from pyspark.sql import functions as F

        kind = F.col(_KIND)
        inputs = [F.col(f"__tm_i{i}").alias(n) for i, n in enumerate(self.input_names)]
        main = [
            F.col(c).alias(n)
            for c, n in zip(self._combined_names(KIND_WINDOW), self.window_names, strict=True)
        ]
        windows = combined.filter(kind == KIND_WINDOW).select(*main)
        late = combined.filter(kind == KIND_LATE).select(*inputs)
        errors = combined.filter(kind == KIND_ERROR).select(
            *inputs, F.col(_REASON).alias(self.reason_name)
        )
        return windows, late, errors


def packed_spark() -> Any:
    """The Spark schema of packed batches (:meth:`OutputCodec.encode_packed`)."""
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    return StructType(
        [StructField(_KIND, IntegerType(), False), StructField(_BLOB, BinaryType(), False)]
    )


def _packed_row(kind: int, blob: pa.Buffer) -> pa.RecordBatch:
    """One packed row, the blob's bytes not copied."""
    offsets = pa.array([0, blob.size], pa.int32()).buffers()[1]
    blobs = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, blob])
    return pa.record_batch([pa.array([kind], pa.int32()), blobs], names=[_KIND, _BLOB])


def unpack(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The output batches inside packed batches (the ``mapInArrow`` of
    :func:`split_packed`; blobs arrive as binary or large_binary)."""
    for batch in batches:
        for blob in batch.column(_BLOB):
            yield from pa.ipc.open_stream(blob.as_buffer())


def split_packed(plan: OutputCodec, packed: Any) -> tuple[Any, Any, Any]:
    """The windows, late and error DataFrames of a (persisted) packed result."""
    from pyspark.sql import functions as F

    kind = F.col(_KIND)
    out = [
        packed.filter(kind == k).select(_BLOB).mapInArrow(unpack, plan.single_spark[k])
        for k in (KIND_WINDOW, KIND_LATE, KIND_ERROR)
    ]
    return out[0], out[1], out[2]


def concat_input(batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    """Every Arrow batch of a task's partition as one table: one arrival unit."""
    collected = list(batches)
    if not collected:
        return schema.empty_table()
    return pa.Table.from_batches(collected)
