"""The main job, small: per-key watermarks count every event; a global one (Spark's, and
tidemark's with Spark's late rule, identical) does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tidemark_tools.cli import build_parser, main
from tidemark_tools.demo_streaming import (
    _bar_pairs,
    demo_stream,
    lateness_by_group,
    micro_batches,
    run_demo,
    spark_rule_share,
    write_report,
)

pytestmark = pytest.mark.spark


def test_demo_runs_end_to_end(spark: Any, tmp_path: Path) -> None:
    result = run_demo(spark, events=10_000, tenants=20, batches=10, partitions=2)
    by_name = {s.name: s for s in result.systems}
    keyed = by_name["tidemark, per-key watermarks"]
    native = by_name["Spark withWatermark + window"]
    glob = by_name["tidemark, global watermark"]
    assert keyed.events_counted == 1.0 and keyed.windows_right == 1.0 and keyed.late_rows == 0
    assert native.events_counted < 0.97  # Spark loses rows of the late tenants
    # Spark's share is its late-row rule replayed (docs/guide/late-data.md): a row
    # counts while its window ends after the previous micro-batch's watermark.
    replay = micro_batches(demo_stream(10_000, 20), 10)
    assert native.events_counted == pytest.approx(spark_rule_share(replay), abs=1e-12)
    assert native.events_counted > spark_rule_share(replay, lag=1)
    # A global watermark under the default rule (Spark's): Spark's output exactly.
    assert glob.differs_from_spark == 0
    assert glob.events_counted == native.events_counted
    assert keyed.differs_from_spark and keyed.differs_from_spark > 0
    # Its late rows, counted by each batch's own job (StreamProcessor.last_progress),
    # are the events it did not count.
    assert glob.late_rows == round(result.events * (1 - glob.events_counted))
    # The per-key run's LatenessReport judged every row by Spark's rule too: what it
    # says Spark would drop is what Spark itself left uncounted in this run, all of it
    # the late tenants' rows.
    groups = {g.group: g for g in lateness_by_group(result)}
    late, prompt = groups["late tenants"], groups["tenants on time"]
    assert late.spark_would_drop + prompt.spark_would_drop == native.late_rows > 0
    assert prompt.spark_would_drop == 0 and late.tidemark_dropped == 0
    assert late.events + prompt.events == result.events
    page = write_report(result, tmp_path / "report")
    assert "per-key" in page.read_text() and "late-data.md" in page.read_text()
    assert "What Spark would have dropped" in page.read_text()
    for png in ("accuracy.png", "lateness.png"):
        assert (tmp_path / "report" / png).stat().st_size > 1_000


def test_a_group_whose_values_are_all_zero_reads_zero_not_an_empty_place(
    tmp_path: Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = _bar_pairs(
        plt,
        tmp_path / "lateness.png",
        ["late tenants (10)", "tenants on time (10)"],
        [("Spark would drop", [41.5, 0.0]), ("tidemark dropped", [0.0, 0.0])],
        "per group",
        ("%", "upper left", 3.5),
    )
    assert drawn == ["41.5%", "0%", "0%", "0%"]
    assert (tmp_path / "lateness.png").stat().st_size > 1_000


def test_cli_documents_every_command() -> None:
    parser = build_parser()
    help_text = parser.format_help()
    for cmd in ["demo", "partitions-demo", "accuracy"]:
        assert cmd in help_text
    args = parser.parse_args(["demo", "--events", "10", "--out", "x"])
    assert args.events == 10 and args.out == "x"


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from tidemark import __version__

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"tidemark {__version__}"


@pytest.mark.parametrize("command, flag", [("demo", "--out"), ("crash-test", "--workdir")])
def test_an_output_directory_that_cannot_be_made_is_refused_before_the_run(
    command: str, flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A file where the directory should go: refused at once (exit 2, the flag named),
    # not after the whole run with a traceback.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as e:
        main([command, flag, str(blocker / "report")])
    assert e.value.code == 2
    assert f"{flag} {blocker / 'report'}: cannot create the directory" in capsys.readouterr().err


def test_every_count_flag_refuses_zero_before_anything_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Events, keys, batches, partitions, rows, kills: 0 is a usage error naming the
    # flag (exit 2), not a traceback from deep inside a run (a division by zero, a
    # Spark error about an empty Parquet directory).
    from tidemark_tools.cli import _count

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    checked = []
    for command, sub in subparsers.items():
        for action in sub._actions:
            if action.type is _count:
                flag = action.option_strings[0]
                with pytest.raises(SystemExit) as e:
                    main([command, flag, "0"])
                assert e.value.code == 2
                err = capsys.readouterr().err
                assert f"argument {flag}: must be an integer >= 1, got 0" in err
                checked.append(f"{command} {flag}")
    assert {
        "demo --events",
        "demo --batches",
        "partitions-demo --rows",
        "crash-test --kills",
    } <= set(checked)
