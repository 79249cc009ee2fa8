"""The guides' examples without Spark run and do what their comments say."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_partition_tracker_example() -> None:
    guide = README.parent / "docs" / "guide" / "watermark-scopes.md"
    blocks = re.findall(r"```python\n(.*?)```", guide.read_text(), flags=re.S)
    (block,) = [b for b in blocks if "PartitionedWatermarkTracker" in b]
    namespace: dict[str, object] = {}
    exec(block, namespace)
    t = namespace["t"]
    assert t.partition_watermark(0, 0) == 8_000_000  # type: ignore[attr-defined]
    assert t.is_partition_idle(0, 2)  # type: ignore[attr-defined]
    assert t.current_watermark() == 2_000_000  # type: ignore[attr-defined]


def test_reordering_guide_examples_run() -> None:
    guide = README.parent / "docs" / "guide" / "reordering.md"
    blocks = re.findall(r"```python\n(.*?)```", guide.read_text(), flags=re.S)
    local = [b for b in blocks if "tidemark.spark" not in b]
    assert len(local) == 4
    for block in local:
        exec(block, {})  # each block asserts what it shows
