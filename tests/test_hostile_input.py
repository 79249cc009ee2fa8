"""Hostile input: every case has an expected outcome, and nothing is ever lost.

Conservation on every case: input rows = rows counted in windows (the ``n`` count of
every window emitted, early or at the end) + late rows + error rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import tidemark as tm

I64_MAX = 2**63 - 1
I64_MIN = -(2**63)


def pipe(**kw: Any) -> tm.Pipeline:
    args: dict[str, Any] = dict(
        key="k",
        event_time="ts",
        event_time_type="unixtimestamp_ms",
        watermark=tm.BoundedOutOfOrderness("1s", per="key"),
        window=tm.Tumbling("10s"),
        aggs={"n": tm.count()},
    )
    args.update(kw)
    return tm.Pipeline(**args)


def run(p: tm.Pipeline, batches: list[Any]) -> tuple[int, int, int, list[tm.Output]]:
    """(rows counted in windows, late rows, error rows, outputs) over all batches + flush."""
    op = p.operator()
    outs = [op.process(b) for b in batches] + [op.flush()]
    counted = sum(sum(o.windows.column("n").to_pylist()) for o in outs if o.windows.num_rows)
    late = sum(o.late.num_rows for o in outs)
    errors = sum(o.errors.num_rows for o in outs)
    return counted, late, errors, outs


def reasons(outs: list[tm.Output]) -> list[str]:
    return [r for o in outs if o.errors.num_rows for r in o.errors.column("reason").to_pylist()]


def conserved(batches: list[Any], counted: int, late: int, errors: int) -> None:
    total = sum(b.num_rows if hasattr(b, "num_rows") else b.height for b in batches)
    assert counted + late + errors == total, (counted, late, errors, total)


# (name, pipeline kwargs, batches, expected (counted, late, errors), reason fragment)
ROW_CASES: list[tuple[str, dict[str, Any], Callable[[], list[Any]], tuple[int, int, int], str]] = [
    (
        "null event times",
        {},
        lambda: [pa.table({"k": ["a", "a", "b"], "ts": pa.array([1, None, None], pa.int64())})],
        (1, 0, 2),
        "null",
    ),
    (
        "NaN and infinite event times",
        {"event_time_type": "unixtimestamp_s"},
        lambda: [pa.table({"k": ["a"] * 4, "ts": [1.5, float("nan"), float("inf"), 2.0]})],
        (2, 0, 2),
        "",
    ),
    (
        "negative event times (before 1970) are ordinary times",
        {},
        lambda: [pa.table({"k": ["a", "a"], "ts": pa.array([-5_000, -15_000], pa.int64())})],
        (2, 0, 0),
        "",
    ),
    (
        "event times overflowing microseconds",
        {},
        lambda: [pa.table({"k": ["a", "a"], "ts": pa.array([I64_MAX, 1_000], pa.int64())})],
        (1, 0, 1),
        "range",
    ),
    (
        "timestamps at the i64 extremes",
        {"event_time_type": None},
        lambda: [
            pa.table(
                {
                    "k": ["a", "a", "a"],
                    "ts": pa.array([I64_MIN, I64_MAX, 5], pa.timestamp("us", tz="UTC")),
                }
            )
        ],
        (1, 0, 2),
        "range",
    ),
    (
        "strings that do not parse",
        {},
        lambda: [pa.table({"k": ["a", "a", "a"], "ts": ["1000", "yesterday", ""]})],
        (1, 0, 2),
        "",
    ),
    (
        "empty batches",
        {},
        lambda: [
            pa.table({"k": pa.array([], pa.string()), "ts": pa.array([], pa.int64())}),
            pa.table({"k": ["a"], "ts": pa.array([5], pa.int64())}),
            pa.table({"k": pa.array([], pa.string()), "ts": pa.array([], pa.int64())}),
        ],
        (1, 0, 0),
        "",
    ),
    (
        "null keys are error rows naming the key column",
        {},
        lambda: [pa.table({"k": ["a", None, None], "ts": pa.array([1, 2, 3], pa.int64())})],
        (1, 0, 2),
        'key column "k" is null',
    ),
    (
        "null keys group together where asked, as in a SQL GROUP BY",
        {"null_keys": "group"},
        lambda: [pa.table({"k": ["a", None, None], "ts": pa.array([1, 2, 3], pa.int64())})],
        (3, 0, 0),
        "",
    ),
    (
        "duplicated events are each counted (no silent dedup)",
        {},
        lambda: [pa.table({"k": ["a"] * 3, "ts": pa.array([7, 7, 7], pa.int64())})] * 2,
        (6, 0, 0),
        "",
    ),
    (
        "late rows behind the key's watermark",
        {},
        lambda: [
            pa.table({"k": ["a"], "ts": pa.array([60_000], pa.int64())}),
            # Spark's rule closes a's early windows in the next call: rows after it are
            # late.
            pa.table({"k": pa.array([], pa.string()), "ts": pa.array([], pa.int64())}),
            pa.table({"k": ["a", "b"], "ts": pa.array([1_000, 1_000], pa.int64())}),
        ],
        (2, 1, 0),
        "",
    ),
    (
        "1 MB keys",
        {},
        lambda: [pa.table({"k": ["x" * 2**20, "x" * 2**20, "y" * 2**20], "ts": [1, 2, 3]})],
        (3, 0, 0),
        "",
    ),
    (
        "null partitions and negative partitions",
        {"watermark": tm.BoundedOutOfOrderness("1s", per="partition")},
        lambda: [
            pa.table(
                {
                    "k": ["a", "a", "a"],
                    "ts": pa.array([1, 2, 3], pa.int64()),
                    "partition": pa.array([0, None, -1], pa.int32()),
                }
            )
        ],
        (1, 0, 2),
        "partition",
    ),
]


@pytest.mark.parametrize("case", ROW_CASES, ids=[c[0] for c in ROW_CASES])
def test_row_level_cases(case: Any) -> None:
    _, kwargs, make, expected, fragment = case
    batches = make()
    counted, late, errors, outs = run(pipe(**kwargs), batches)
    assert (counted, late, errors) == expected
    conserved(batches, counted, late, errors)
    if fragment:
        assert all(fragment in r for r in reasons(outs)), reasons(outs)


@pytest.mark.parametrize(
    "keys",
    [
        pa.array(["a", "b", "a"], pa.large_string()),
        pa.array(["a", "b", "a"]).dictionary_encode(),
        pa.array(["a", "b", "a"], pa.string_view()),
        pa.array([b"a", b"b", b"a"], pa.binary()),
    ],
    ids=["large_string", "dictionary", "string_view", "binary"],
)
def test_key_encodings_give_the_same_windows(keys: pa.Array) -> None:
    t = pa.table({"k": keys, "ts": pa.array([1, 2, 3], pa.int64())})
    counted, late, errors, outs = run(pipe(), [t])
    assert (counted, late, errors) == (3, 0, 0)
    got = sorted(outs[-1].windows.column("n").to_pylist())
    assert got == [1, 2]


def test_configuration_errors_happen_before_any_row() -> None:
    bad_type = pa.table({"k": ["a"], "ts": [True]})
    with pytest.raises(tm.ConfigError, match="ts"):
        pipe().operator().process(bad_type)
    with pytest.raises(tm.ConfigError, match="ts"):
        pipe(schema=bad_type.schema)
    with pytest.raises(tm.MissingColumnError, match="k, when"):
        pipe().operator().process(pa.table({"k": ["a"], "when": [1]}))
    with pytest.raises(tm.ConfigError, match="cannot be a key"):
        pipe().operator().process(pa.table({"k": [[1]], "ts": [1]}))


def test_schema_change_mid_stream_is_refused_and_state_is_kept() -> None:
    op = pipe().operator()
    op.process(pa.table({"k": ["a"], "ts": pa.array([1], pa.int64())}))
    with pytest.raises(tm.ConfigError):
        op.process(pa.table({"k": [1], "ts": pa.array([2], pa.int64())}))
    out = op.process(pa.table({"k": ["a"], "ts": pa.array([3], pa.int64())}))
    assert out.errors.num_rows == 0
    assert op.flush().windows.column("n").to_pylist() == [2], "nothing lost, nothing doubled"


def test_ten_million_distinct_keys_against_max_keys() -> None:
    p = pipe(
        max_keys=10_000,
        event_time_type="unixtimestamp_us",
        watermark=tm.BoundedOutOfOrderness("1s", per="key"),
    )
    op = p.operator()
    counted = late = errors = 0
    rows = 10_000_000
    chunk = 1_000_000
    for start in range(0, rows, chunk):
        keys = np.arange(start, start + chunk, dtype=np.int64)
        t = pa.table({"k": keys, "ts": keys})  # every row a new key
        o = op.process(t)
        counted += sum(o.windows.column("n").to_pylist())
        late += o.late.num_rows
        errors += o.errors.num_rows
        assert op.metrics()["keys"] <= 10_000
    o = op.flush()
    counted += sum(o.windows.column("n").to_pylist())
    assert counted + late + errors == rows
    m = op.metrics()
    assert m["keys_evicted"] >= rows - 10_000
