"""A Parquet file stream's micro-batch, read from its files by the driver.

``foreachBatch`` hands ``StreamProcessor`` a micro-batch as a DataFrame. Fetching its
rows with ``toArrow()`` runs a Spark job in which one task decodes the Parquet file
into rows and converts the rows, one by one, to Arrow: about two thirds of a
400,000-row micro-batch that runs in the driver (see the streaming guide). When the
micro-batch is a bare scan of a Parquet file stream, the files Spark's source chose
for it are known, and pyarrow reads them in a fraction of that time (about 0.09 s
for 2,000,000 rows of two columns here).

Spark's rules decide what a bare scan reads, so this module reads a micro-batch
itself only where those rules and pyarrow's give the same table, and answers
``None`` (the caller then fetches the rows from Spark) anywhere else:

- the micro-batch is the query's own (``foreachBatch``'s DataFrame, or a selection of
  its plain columns), and the query's physical plan is a Parquet file scan with no
  filter, no partition columns, and at most a projection of plain columns above it;
- the scan has no options that change how Spark reads the files (only the file
  stream's options that choose files);
- every column read is in every file under its exact name, with no other column
  whose name differs only in case, and of a type that Spark reads unchanged: the
  same Arrow type as ``toArrow()`` gives, up to string and binary widths and the
  unit of a timestamp (milliseconds or microseconds), with a time zone exactly where
  Spark's column has one; INT96 timestamps, and files written by Spark 2 (legacy
  calendar), are left to Spark;
- pyarrow can open and read every file.

A replayed micro-batch is the same DataFrame over the same files, so both runs read
the same rows, whichever way each is read.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

# Options of the file stream source (lowercase, as Spark keeps them) that choose which
# files a micro-batch reads, not how a file is read: the micro-batch's file list has
# applied them already.
_FILE_CHOICE_OPTIONS = frozenset(
    {
        "path",
        "paths",
        "basepath",
        "__globpaths__",
        "maxfilespertrigger",
        "maxbytespertrigger",
        "maxfileage",
        "maxcachedfiles",
        "discardcachedinputratio",
        "latestfirst",
        "filenameonly",
        "cleansource",
        "sourcearchivedir",
        "pathglobfilter",
        "recursivefilelookup",
        "modifiedbefore",
        "modifiedafter",
    }
)

# Physical plan nodes between the query's root and its scan that pass rows through
# unchanged (a ``ProjectExec`` is checked apart: plain columns only).
_PASS_THROUGH = frozenset({"WholeStageCodegenExec", "ColumnarToRowExec", "InputAdapter"})

# Spark's Parquet writer marks files whose dates and timestamps need rebasing from the
# legacy hybrid calendar with these keys (Spark 2.x and 3.x in LEGACY mode).
_LEGACY_KEYS = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")


def _simple_name(obj: Any) -> str:
    return str(obj.getClass().getSimpleName())


def _plain_columns(exprs: Any) -> bool:
    """Whether a projection's expressions (a JVM ``Seq``) are all plain columns."""
    return all(_simple_name(exprs.apply(i)) == "AttributeReference" for i in range(exprs.size()))


def batch_files(df: Any) -> list[str] | None:
    """The files of ``df``'s micro-batch, if ``df`` is ``foreachBatch``'s DataFrame of
    a query whose plan is a bare Parquet file scan (see the module's text), as
    URIs; else ``None``. Reads Spark's plan through the JVM: under Spark Connect, or
    where anything is not as described, ``None``."""
    try:
        jdf = df._jdf
        analyzed = jdf.queryExecution().analyzed()
        # A selection of plain columns of the micro-batch (df.select("a", "b")).
        while _simple_name(analyzed) == "Project" and _plain_columns(analyzed.projectList()):
            analyzed = analyzed.child()
        if _simple_name(analyzed) != "LogicalRDD":
            return None
        spark = df.sparkSession
        # foreachBatch runs inside the micro-batch's SQL execution, on the JVM thread
        # that called Python (py4j's pinned threads): its id names the query's plan.
        eid = spark._jsparkSession.sparkContext().getLocalProperty("spark.sql.execution.id")
        if eid is None:
            return None
        qe = spark._jvm.org.apache.spark.sql.execution.SQLExecution.getQueryExecution(int(eid))
        # The DataFrame foreachBatch made of that plan holds its RDD: the same object.
        if qe is None or not qe.toRdd().equals(analyzed.rdd()):
            return None
        node = qe.executedPlan()
        while _simple_name(node) != "FileSourceScanExec":
            name = _simple_name(node)
            if name == "ProjectExec":
                if not _plain_columns(node.projectList()):
                    return None
            elif name not in _PASS_THROUGH:
                return None
            children = node.children()
            if children.size() != 1:
                return None
            node = children.apply(0)
        rel = node.relation()
        if _simple_name(rel.fileFormat()) != "ParquetFileFormat":
            return None
        if rel.partitionSchema().size() != 0 or node.dataFilters().size() != 0:
            return None
        keys = rel.options().keySet().iterator()
        while keys.hasNext():
            if str(keys.next()).lower() not in _FILE_CHOICE_OPTIONS:
                return None
        return [str(f) for f in rel.location().inputFiles()]
    except Exception:  # Spark internals it does not promise: read through Spark
        return None


def _readable_as(file_type: pa.DataType, want: pa.DataType) -> bool:
    """Whether Spark reads a Parquet column that pyarrow reads as ``file_type`` to
    the values ``want`` (the type ``toArrow()`` gives) holds, unchanged."""
    if file_type == want:
        return True
    t = pa.types
    if t.is_dictionary(file_type):  # a dictionary-encoded column: Spark sees its values
        return _readable_as(file_type.value_type, want)
    if t.is_timestamp(want):
        return (
            t.is_timestamp(file_type)
            and file_type.unit in ("ms", "us")
            and (file_type.tz is None) == (want.tz is None)
        )
    if t.is_string(want) or t.is_large_string(want):
        return bool(t.is_string(file_type) or t.is_large_string(file_type))
    if t.is_binary(want) or t.is_large_binary(want):
        return bool(t.is_binary(file_type) or t.is_large_binary(file_type))
    return False


def read_batch_files(files: list[str], schema: pa.Schema) -> pa.Table | None:
    """The rows of ``files`` (Parquet, as URIs), columns ``schema.names`` cast to
    ``schema``, or ``None`` where a file is not one Spark and pyarrow read alike (see
    the module's text) or cannot be read."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    try:
        tables = []
        for uri in files:
            fs, path = pafs.FileSystem.from_uri(uri)
            with fs.open_input_file(path) as f:
                pf = pq.ParquetFile(f)
                meta = pf.metadata.metadata or {}
                if any(k in meta for k in _LEGACY_KEYS):
                    return None
                arrow = pf.schema_arrow
                for field in schema:
                    if "." in field.name:
                        return None  # pyarrow would take it for a nested column's path
                    lower = field.name.lower()
                    same = [n for n in arrow.names if n.lower() == lower]
                    if same != [field.name]:
                        return None  # missing, in another case, or ambiguous to Spark
                    # INT96 timestamps come as nanoseconds, which Spark reads
                    # otherwise (with its rebase rules): refused here by their unit.
                    if not _readable_as(arrow.field(field.name).type, field.type):
                        return None
                tables.append(pf.read(columns=schema.names))
        if not tables:
            return schema.empty_table()
        return pa.concat_tables([t.cast(schema) for t in tables])
    except Exception:  # unreadable here (a file system pyarrow lacks, a bad file):
        return None  # Spark reads it, by its own rules (ignoreCorruptFiles, ...)
