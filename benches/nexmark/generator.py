"""The Nexmark event stream, generated with numpy, deterministic from a seed.

Follows the generator of the Nexmark benchmark as Beam and Flink implement it
(``GeneratorConfig``, ``PersonGenerator``, ``AuctionGenerator``, ``BidGenerator``,
``PriceGenerator``):

* event ``n`` is a person, an auction or a bid by ``n % 50``: 1 person, 3 auctions,
  46 bids in every 50 events;
* a bid's auction is a hot one (the first of the last ``HOT_AUCTION_RATIO`` auctions)
  with probability ``1 - 1/hot_auction_ratio`` (default 2), else one of the auctions in
  flight (the last 100, plus a lead of 10 not created yet); its bidder is a hot one with
  probability ``1 - 1/hot_bidders_ratio`` (default 4), else one of the last 1,000
  people (plus a lead of 10); ids start at 1,000;
* a price is ``round(10 ** (u * 6) * 100)`` cents for a uniform ``u`` (1 $ to 1 M$,
  log-uniform);
* event ``n`` happens at ``base_time + n * 1e6 / rate`` microseconds (``rate`` events
  per second of event time, in the order of event ids).

Randomness is a function of (seed, event id, draw), not of a sequential random
generator: any range of events can be generated alone, in any process (the driver
writing Parquet files, or a Spark task turning a ``rate-micro-batch`` source's ids into
events), and gives the same rows. The draws are uniform 64-bit hashes (splitmix64),
not Java's ``Random``: the distributions are Nexmark's, the exact values are not.

The late-tenant scenario: ``late_fraction`` of the bidders (chosen by a hash of the
bidder id) report ``late_by_s`` seconds late: their bids arrive where the stream is,
with event times that far behind it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
FIRST_PERSON_ID = 1_000
FIRST_AUCTION_ID = 1_000
HOT_AUCTION_RATIO = 100
HOT_BIDDER_RATIO = 100
NUM_IN_FLIGHT_AUCTIONS = 100
AUCTION_ID_LEAD = 10
NUM_ACTIVE_PEOPLE = 1_000
PERSON_ID_LEAD = 10

#: 2026-01-01T00:00:00Z in epoch microseconds: the stream's first event time.
BASE_TIME_US = 1_767_225_600_000_000

BID_SCHEMA = pa.schema(
    [
        ("auction", pa.int64()),
        ("bidder", pa.int64()),
        ("price", pa.int64()),
        ("date_time", pa.timestamp("us", tz="UTC")),
    ]
)


@dataclass(frozen=True)
class Config:
    """A Nexmark stream: its seed, event rate and hot ratios, and the late bidders."""

    seed: int = 1
    #: Events per second of event time.
    rate: int = 10_000
    hot_auction_ratio: int = 2
    hot_bidders_ratio: int = 4
    #: Share of the bidders (0-1) whose bids arrive ``late_by_s`` seconds late.
    late_fraction: float = 0.0
    late_by_s: float = 30.0


_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer over uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _draw(cfg: Config, ids: np.ndarray, k: int) -> np.ndarray:
    """Draw ``k`` of each event: uniform uint64, a pure function of (seed, id, k)."""
    with np.errstate(over="ignore"):
        key = ids.astype(np.uint64) * np.uint64(8) + np.uint64(k)
        return _splitmix(key ^ _splitmix(np.full(1, cfg.seed, np.uint64)))


def _below(cfg: Config, ids: np.ndarray, k: int, n: np.ndarray | int) -> np.ndarray:
    """Uniform integers in ``[0, n)`` (``n`` up to 2**32; the modulo bias is below
    2**-32)."""
    return (_draw(cfg, ids, k) % np.asarray(n, dtype=np.uint64)).astype(np.int64)


def _unit(cfg: Config, ids: np.ndarray, k: int) -> np.ndarray:
    """Uniform doubles in ``[0, 1)``."""
    return (_draw(cfg, ids, k) >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def last_base0_person_id(ids: np.ndarray) -> np.ndarray:
    """The last person created at or before each event (0-based)."""
    epoch, offset = np.divmod(ids, TOTAL_PROPORTION)
    offset = np.minimum(offset, PERSON_PROPORTION - 1)
    return epoch * PERSON_PROPORTION + offset


def last_base0_auction_id(ids: np.ndarray) -> np.ndarray:
    """The last auction created at or before each event (0-based)."""
    epoch, offset = np.divmod(ids, TOTAL_PROPORTION)
    before = offset < PERSON_PROPORTION
    epoch = np.where(before, epoch - 1, epoch)
    offset = np.where(
        before,
        AUCTION_PROPORTION - 1,
        np.minimum(offset - PERSON_PROPORTION, AUCTION_PROPORTION - 1),
    )
    return epoch * AUCTION_PROPORTION + offset


def bid_ids(first_event: int, n_events: int) -> np.ndarray:
    """The event ids of the bids among events ``[first_event, first_event + n_events)``."""
    ids = np.arange(first_event, first_event + n_events, dtype=np.int64)
    return ids[ids % TOTAL_PROPORTION >= PERSON_PROPORTION + AUCTION_PROPORTION]


def bids_of(cfg: Config, ids: np.ndarray) -> pa.Table:
    """The bids of these (bid) event ids, in their order: :data:`BID_SCHEMA`."""
    ids = np.asarray(ids, dtype=np.int64)
    last_auction = last_base0_auction_id(ids)
    hot_auction = _below(cfg, ids, 0, cfg.hot_auction_ratio) > 0
    low = np.maximum(last_auction - NUM_IN_FLIGHT_AUCTIONS, 0)
    span = last_auction - low + 1 + AUCTION_ID_LEAD
    auction = np.where(
        hot_auction,
        (last_auction // HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO,
        low + _below(cfg, ids, 1, span),
    )
    last_person = last_base0_person_id(ids)
    hot_bidder = _below(cfg, ids, 2, cfg.hot_bidders_ratio) > 0
    people = last_person + 1
    active = np.minimum(people, NUM_ACTIVE_PEOPLE)
    bidder = np.where(
        hot_bidder,
        (last_person // HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1,
        people - active + _below(cfg, ids, 3, active + PERSON_ID_LEAD),
    )
    price = np.round(np.power(10.0, _unit(cfg, ids, 4) * 6.0) * 100.0).astype(np.int64)
    times = BASE_TIME_US + (ids * 1_000_000) // cfg.rate
    bidder = bidder + FIRST_PERSON_ID
    if cfg.late_fraction > 0:
        late = _late_bidders(cfg, bidder)
        times = np.where(late, times - int(cfg.late_by_s * 1_000_000), times)
    return pa.table(
        [
            pa.array(auction + FIRST_AUCTION_ID, pa.int64()),
            pa.array(bidder, pa.int64()),
            pa.array(price, pa.int64()),
            pa.array(times, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        ],
        schema=BID_SCHEMA,
    )


def _late_bidders(cfg: Config, bidder: np.ndarray) -> np.ndarray:
    """Whether each bidder is one of the late ones (a hash of its id, not of the event)."""
    h = _splitmix(bidder.astype(np.uint64) ^ np.uint64(cfg.seed + 0x5EED))
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53) < cfg.late_fraction


def bids(cfg: Config, first_event: int, n_events: int) -> pa.Table:
    """The bids among events ``[first_event, first_event + n_events)``, in arrival
    (event id) order."""
    return bids_of(cfg, bid_ids(first_event, n_events))


def micro_batches(cfg: Config, events_per_batch: int, batches: int) -> list[pa.Table]:
    """``batches`` micro-batches of ``events_per_batch`` events each (their bids)."""
    return [bids(cfg, b * events_per_batch, events_per_batch) for b in range(batches)]
