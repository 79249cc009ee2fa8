"""The pipeline against a naive oracle on hypothesis-generated streams.

DESIGN.md's convention, checked literally for each late rule (see ``Oracle``): rows of
one ``process`` call are judged against a watermark the call began with (Spark's rule:
the one the previous call began with); the call's rows advance the watermark (global,
or per key) and windows close once. Output rows are sorted by (end, start, key).
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

import tidemark as tm

Row = tuple[str, int, int]  # key, ts (UNIT), value
# The model counts in milliseconds (Spark's rule keeps a global watermark in whole
# milliseconds); the pipeline gets microseconds.
UNIT = 1_000
Win = tuple[str, int, int, int, int]  # key, start, end, count, sum


def windows_of(spec: tuple[str, int, int], ts: int) -> list[tuple[int, int]]:
    kind, size, slide = spec
    if kind == "tumbling":
        s = ts // size * size
        return [(s, s + size)]
    last = ts // slide * slide
    out = []
    s = last - (size - 1) // slide * slide
    while s <= last:
        if s + size > ts:
            out.append((s, s + size))
        s += slide
    return out


class Oracle:
    """Plain-Python model of a pipeline (count + sum), global or per-key scope, under
    each late rule (``X``: every window with ``end <= X`` is closed):

    * ``row``: a row is late iff ``ts < W_start - L``; windows close at the watermark
      after the call;
    * ``flink``: ``X = W_start - L``; a row joins its windows with ``end > X`` and is late
      iff there are none (sessions: iff its own session ends by ``X`` and it reaches no
      open session); windows close at the watermark after the call;
    * ``spark``: ``X = W_prev - L`` (the watermark the previous call began with); a row
      joins its windows with ``end > X`` (sessions: late iff ``ts + gap <= X``); windows
      close at the watermark the call began with."""

    def __init__(
        self, window: tuple[str, int, int], scope: str, delay: int, lateness: int, rule: str
    ):
        self.window, self.scope, self.delay, self.lateness = window, scope, delay, lateness
        self.rule = rule
        self.max_global: int | None = None
        self.max_key: dict[str, int] = {}
        # The watermarks the previous call began with (by key; None: the global one).
        self.prev: dict[str | None, int | None] = {}
        # open windows: key -> list of [start, end, count, sum]
        self.open: dict[str, list[list[int]]] = {}

    def wm(self, key: str) -> int | None:
        m = self.max_key.get(key) if self.scope == "key" else self.max_global
        return None if m is None else m - self.delay

    def add_session(self, key: str, ts: int, v: int) -> None:
        gap = self.window[1]
        lo, hi, n, s = ts, ts + gap, 1, v
        keep = self.open.setdefault(key, [])
        # Sessions that overlap or touch merge; merging may reach others: repeat.
        changed = True
        while changed:
            changed = False
            rest = []
            for w in keep:
                if w[0] <= hi and w[1] >= lo:
                    lo, hi, n, s = min(lo, w[0]), max(hi, w[1]), n + w[2], s + w[3]
                    changed = True
                else:
                    rest.append(w)
            keep = rest
        self.open[key] = [*keep, [lo, hi, n, s]]

    def process(self, rows: list[Row]) -> tuple[list[Win], list[Row]]:
        keys = {r[0] for r in rows} | set(self.max_key) | set(self.open)
        scoped = (lambda k: k) if self.scope == "key" else (lambda k: None)
        start = {scoped(k): self.wm(k) for k in keys}
        judged = self.prev if self.rule == "spark" else start

        def closed(key: str) -> int | None:
            w = judged.get(scoped(key))
            return None if w is None else w - self.lateness

        session = self.window[0] == "session"
        late, candidates = [], []
        for key, ts, v in rows:
            x = closed(key)
            if self.rule == "row":
                if x is not None and ts < x:
                    late.append((key, ts, v))
                elif session:
                    self.add_session(key, ts, v)
                else:
                    self.add_windows(key, ts, v, None)
            elif session:
                if x is not None and ts + self.window[1] <= x:
                    (candidates if self.rule == "flink" else late).append((key, ts, v))
                else:
                    self.add_session(key, ts, v)
            elif not self.add_windows(key, ts, v, x):
                late.append((key, ts, v))
        # Flink's sessions: a row whose own session is closed joins an open session it
        # reaches (latest first, so that chains reach it), else it is late.
        for key, ts, v in sorted(candidates, key=lambda r: -r[1]):
            if any(w[0] <= ts + self.window[1] and w[1] >= ts for w in self.open.get(key, [])):
                self.add_session(key, ts, v)
            else:
                late.append((key, ts, v))
        for key, ts, _ in rows:
            self.max_global = ts if self.max_global is None else max(self.max_global, ts)
            self.max_key[key] = max(self.max_key.get(key, ts), ts)
        self.prev = start
        out = []
        for key, wins in self.open.items():
            w_close = start.get(scoped(key)) if self.rule == "spark" else self.wm(key)
            if w_close is None:
                continue
            for w in [w for w in wins if w[1] + self.lateness <= w_close]:
                out.append((key, w[0], w[1], w[2], w[3]))
                wins.remove(w)
        return sorted(out, key=lambda c: (c[2], c[1], c[0])), late

    def add_windows(self, key: str, ts: int, v: int, x: int | None) -> bool:
        """Adds a row to its windows that are open (``end > x``); whether there were any."""
        wins = self.open.setdefault(key, [])
        joined = False
        for a, b in windows_of(self.window, ts):
            if x is not None and b <= x:
                continue
            joined = True
            for w in wins:
                if w[0] == a:
                    w[2] += 1
                    w[3] += v
                    break
            else:
                wins.append([a, b, 1, v])
        return joined

    def flush(self) -> list[Win]:
        out = [(k, w[0], w[1], w[2], w[3]) for k, ws in self.open.items() for w in ws]
        self.open = {}
        return sorted(out, key=lambda c: (c[2], c[1], c[0]))


def make_pipeline(
    window: tuple[str, int, int], scope: str, delay: int, lateness: int, rule: str = "spark"
) -> tm.Pipeline:
    kind, size, slide = window
    w: Any = (
        tm.Tumbling(size * UNIT)
        if kind == "tumbling"
        else tm.Sliding(size * UNIT, every=slide * UNIT)
        if kind == "sliding"
        else tm.Session(gap=size * UNIT)
    )
    return tm.Pipeline(
        key="k",
        event_time="ts",
        watermark=tm.BoundedOutOfOrderness(delay * UNIT, per=scope),
        window=w,
        aggs={"n": tm.count(), "s": tm.sum("v")},
        allowed_lateness=lateness * UNIT,
        late_rule=rule,
    )


def table(rows: list[Row]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.string()),
            "ts": pa.array([r[1] * UNIT for r in rows], pa.timestamp("us", tz="UTC")),
            "v": pa.array([r[2] for r in rows], pa.int64()),
        }
    )


def wins(out: pa.Table) -> list[Win]:
    d = out.to_pydict()
    to_us = lambda t: int(t.timestamp() * 1_000_000) // UNIT  # noqa: E731
    return [
        (d["k"][i], to_us(d["window_start"][i]), to_us(d["window_end"][i]), d["n"][i], d["s"][i])
        for i in range(out.num_rows)
    ]


rows_st = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 120), st.integers(-5, 5)),
    max_size=12,
)
config_st = st.tuples(
    st.sampled_from(
        [("tumbling", 10, 10), ("sliding", 10, 5), ("sliding", 9, 3), ("session", 7, 0)]
    ),
    st.sampled_from(["global", "key"]),
    st.sampled_from([0, 5, 30]),
    st.sampled_from([0, 4]),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(rows_st, min_size=1, max_size=6),
    config_st,
    st.sampled_from(["spark", "flink", "row"]),
)
def test_matches_oracle_and_each_window_once(
    batches: list[list[Row]], config: Any, rule: str
) -> None:
    window, scope, delay, lateness = config
    op = make_pipeline(window, scope, delay, lateness, rule).operator()
    oracle = Oracle(window, scope, delay, lateness, rule)
    for rows in batches:
        out = op.process(table(rows))
        want, late = oracle.process(rows)
        assert wins(out.windows) == want
        got_late = sorted(zip(*[out.late.column(c).to_pylist() for c in ("k", "v")], strict=True))
        assert got_late == sorted((r[0], r[2]) for r in late)
        assert out.errors.num_rows == 0
    assert wins(op.flush().windows) == oracle.flush()
    assert op.metrics()["windows_open"] == 0


@settings(max_examples=150, deadline=None)
@given(st.lists(rows_st, min_size=1, max_size=5), config_st, st.randoms(use_true_random=False))
def test_row_order_and_snapshots_do_not_change_output(
    batches: list[list[Row]], config: Any, rnd: random.Random
) -> None:
    pipe = make_pipeline(*config)
    reference = pipe.operator()
    expected = [wins(reference.process(table(b)).windows) for b in batches]
    expected.append(wins(reference.flush().windows))

    shuffled = pipe.operator()
    got = []
    for b in batches:
        b2 = list(b)
        rnd.shuffle(b2)
        got.append(wins(shuffled.process(table(b2)).windows))
    got.append(wins(shuffled.flush().windows))
    assert got == expected, "shuffling rows inside each batch"

    cut = rnd.randrange(len(batches))
    op = pipe.operator()
    got = [wins(op.process(table(b)).windows) for b in batches[: cut + 1]]
    op = pipe.operator(state=op.snapshot())
    got += [wins(op.process(table(b)).windows) for b in batches[cut + 1 :]]
    got.append(wins(op.flush().windows))
    assert got == expected, f"snapshot after batch {cut}"


@settings(max_examples=150, deadline=None)
@given(rows_st.filter(bool), config_st, st.lists(st.integers(1, 5), min_size=1, max_size=10))
def test_without_late_rows_any_batching_gives_the_same_windows(
    rows: list[Row], config: Any, sizes: list[int]
) -> None:
    in_order = sorted(rows, key=lambda r: r[1])  # nothing can be late
    pipe = make_pipeline(*config)

    def run(split: list[int]) -> list[Win]:
        op = pipe.operator()
        out: list[Win] = []
        i = 0
        for n in split:
            if i >= len(in_order):
                break
            res = op.process(table(in_order[i : i + n]))
            assert res.late.num_rows == 0
            out += wins(res.windows)
            i += n
        if i < len(in_order):
            out += wins(op.process(table(in_order[i:])).windows)
        out += wins(op.flush().windows)
        return sorted(out)

    assert run(sizes) == run([len(in_order)])


@settings(max_examples=150, deadline=None)
@given(st.lists(rows_st, min_size=1, max_size=5), config_st, st.integers(0, 4))
def test_decimal_values_aggregate_as_their_integers(
    batches: list[list[Row]], config: Any, cut: int
) -> None:
    """The same stream with ``v`` as decimal(10, 2) cents: every window (session
    merges and a snapshot restore included) sums to the integer sum / 100."""
    import decimal

    def as_cents(t: pa.Table) -> pa.Table:
        cents = [None if v is None else decimal.Decimal(v).scaleb(-2) for v in t["v"].to_pylist()]
        return t.set_column(2, "v", pa.array(cents, pa.decimal128(10, 2)))

    pipe = make_pipeline(*config)
    ints, cents = pipe.operator(), pipe.operator()
    for i, rows in enumerate([*batches, None]):
        if i == cut:
            cents = pipe.operator(state=cents.snapshot())
        a = ints.flush() if rows is None else ints.process(table(rows))
        b = cents.flush() if rows is None else cents.process(as_cents(table(rows)))
        assert b.windows.schema.field("s").type == pa.decimal128(20, 2)
        want = [(*w[:4], decimal.Decimal(w[4]).scaleb(-2)) for w in wins(a.windows)]
        assert wins(b.windows) == want
