"""The Nexmark benchmark's generator and queries (``benches/nexmark``): the generator is
deterministic and follows Nexmark's mix, and each query gives the same rows as Spark
native Structured Streaming and as tidemark: the exact answer for every closed window."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "benches" / "nexmark"))

import generator as gen
import run as nexmark


def test_the_generator_is_deterministic_and_follows_nexmarks_mix() -> None:
    cfg = gen.Config(seed=7)
    bids = gen.bids(cfg, 0, 100_000)
    assert bids.num_rows == 100_000 * 46 // 50  # 46 bids in every 50 events
    assert bids.equals(gen.bids(cfg, 0, 100_000)), "the same seed gives the same bids"
    # Any range alone gives the rows it gives inside a larger one (Spark tasks generate
    # their own ranges).
    tail = gen.bids(cfg, 60_000, 40_000)
    assert tail.equals(bids.slice(bids.num_rows - tail.num_rows))
    assert not bids.equals(gen.bids(gen.Config(seed=8), 0, 100_000))
    times = bids.column("date_time").cast("int64").to_numpy()
    assert (np.diff(times) >= 0).all(), "in event-time order"
    assert times[-1] - times[0] < 10_000_000  # 100,000 events at 10,000 per second
    price = bids.column("price").to_numpy()
    assert price.min() >= 100 and price.max() <= 100_000_000  # 1 $ to 1 M$ in cents
    # Hot auctions: about half of the bids (hot_auction_ratio 2) go to the current hot one.
    auction = bids.column("auction").to_numpy()
    hot = (auction - gen.FIRST_AUCTION_ID) % gen.HOT_AUCTION_RATIO == 0
    assert 0.45 < hot.mean() < 0.6


def test_late_bidders_are_behind_by_the_given_delay() -> None:
    cfg = gen.Config(late_fraction=0.5, late_by_s=30)
    on_time = gen.bids(gen.Config(), 0, 50_000)
    late = gen.bids(cfg, 0, 50_000)
    shift = (
        on_time.column("date_time").cast("int64").to_numpy()
        - late.column("date_time").cast("int64").to_numpy()
    )
    assert set(np.unique(shift).tolist()) == {0, 30_000_000}
    bidders = late.column("bidder").to_numpy()
    late_bidders = set(bidders[shift > 0].tolist())
    assert not late_bidders & set(bidders[shift == 0].tolist()), "a bidder is late or not"
    assert 0.3 < len(late_bidders) / len(set(bidders.tolist())) < 0.7


@pytest.mark.spark
@pytest.mark.parametrize("query", ["q5", "q7", "q11", "q12"])
def test_spark_native_and_tidemark_give_the_same_nexmark_rows(
    spark: Any, tmp_path: Path, query: str
) -> None:
    cfg = gen.Config(seed=3, rate=1_000)
    rows = nexmark.check_query(spark, tmp_path, query, cfg, 10_000, 4, 2)
    if query != "q12":  # processing-time windows close when the clock says
        assert rows > 0, "windows closed"
