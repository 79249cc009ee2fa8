"""Soak: with keys churning, bounded state keeps memory flat; unbounded state grows."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

import tidemark as tm
from tidemark_tools.cli import main
from tidemark_tools.soak import SoakReport, soak


def soak_alone(**kw: Any) -> SoakReport:
    """:func:`soak` in a process of its own: its RSS is the soak's alone, not that of
    whatever else a test process holds or frees meanwhile (a Spark test's buffers)."""
    code = (
        "import dataclasses, json, sys; from tidemark_tools.soak import soak; "
        "print(json.dumps(dataclasses.asdict(soak(**json.loads(sys.argv[1])))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(kw)], capture_output=True, text=True, check=True
    )
    d = json.loads(out.stdout)
    d["samples"] = [tuple(s) for s in d["samples"]]
    return SoakReport(**d)


@pytest.mark.parametrize(
    ("max_keys", "ttl"), [(10_000, None), (None, "20s"), (10_000, "20s")], ids=str
)
def test_bounded_state_levels_off(max_keys: int | None, ttl: str | None) -> None:
    r = soak_alone(seconds=60, rate=20_000, new_keys_per_s=2_000, max_keys=max_keys, state_ttl=ttl)
    keys = [k for _, _, k in r.samples]
    assert max(keys) <= (max_keys or 2_000 * 30), keys
    assert keys[-1] <= keys[len(keys) // 2] * 1.05, "keys in state stop growing"
    assert r.leveled_off, r.table()


def test_unbounded_state_grows_with_every_key() -> None:
    r = soak(seconds=30, rate=20_000, new_keys_per_s=2_000, max_keys=None, state_ttl=None)
    keys = [k for _, _, k in r.samples]
    assert keys[-1] > 50_000 and keys[-1] > 2 * keys[len(keys) // 3]


@pytest.mark.parametrize(
    ("flags", "param", "message"),
    [
        (["--seconds", "3"], {"seconds": 3}, "seconds must be at least 6"),
        (["--rate", "0"], {"rate": 0}, "rate must be at least 1, got 0"),
        (["--new-keys", "0"], {"new_keys_per_s": 0}, "new-keys must be at least 1, got 0"),
        (["--lifetime", "0"], {"key_lifetime_s": 0}, "lifetime must be at least 1, got 0"),
    ],
)
def test_a_churn_too_small_to_judge_is_refused(
    flags: list[str], param: dict[str, int], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A usage error naming the flag (exit 2), not a traceback from numpy or a verdict
    # ("did not level off", exit 1) drawn from too few samples; the API names the
    # parameter.
    with pytest.raises(SystemExit) as e:
        main(["soak", *flags])
    assert e.value.code == 2
    assert f"--{message}" in capsys.readouterr().err
    with pytest.raises(tm.ConfigError, match=f"^{next(iter(param))} must be at least"):
        soak(**param)
