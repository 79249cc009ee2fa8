//! Snapshot decoding never panics: arbitrary bytes, and arbitrary payloads sealed in a
//! valid envelope (so the decoders behind the checksum are reached), go to every
//! restore entry point. Errors are fine; a panic or an abort is a bug.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use tidemark_core::agg::{AggKind, AggSpec};
use tidemark_core::clock::ManualClock;
use tidemark_core::pipeline::{reshard, rows::RowsOperator, Operator, PipelineConfig, Scope};
use tidemark_core::reorder::{ReorderConfig, ReorderOperator};
use tidemark_core::runtime::restore_operator;
use tidemark_core::state::{seal, SnapshotKind};
use tidemark_core::time::{CompactKeyedWatermarkTracker, KeyedWatermarkTracker};
use tidemark_core::window::WindowSpec;

fn config(window: WindowSpec, scope: Scope) -> PipelineConfig {
    let aggs = vec![
        AggSpec::new("n", AggKind::Count, None),
        AggSpec::new("s", AggKind::Sum, Some("v")),
        AggSpec::new("m", AggKind::Mean, Some("v")),
    ];
    PipelineConfig {
        delay: 1_000,
        scope,
        idle_timeout: Some(10),
        max_keys: Some(100),
        ..PipelineConfig::new(&["k"], "ts", window, aggs)
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let clock = || Arc::new(ManualClock::new(0));
    let window = match mode % 4 {
        0 => WindowSpec::Tumbling {
            size: 10_000,
            offset: 0,
        },
        1 => WindowSpec::Sliding {
            size: 10_000,
            slide: 5_000,
            offset: 0,
        },
        2 => WindowSpec::Session { gap: 5_000 },
        _ => WindowSpec::Rows { n: 3 },
    };
    let scope = match (mode / 4) % 3 {
        0 => Scope::Global,
        1 => Scope::Key,
        _ => Scope::Partition { column: "p".into() },
    };
    let cfg = config(window, scope);
    let reorder = ReorderConfig::new("ts", 1_000);
    // Raw bytes: the envelope checks.
    let _ = Operator::restore(cfg.clone(), clock(), rest);
    let _ = ReorderOperator::restore(reorder.clone(), rest);
    // A payload sealed in a valid envelope: the decoders themselves.
    let fp = cfg.fingerprint();
    let _ = Operator::restore(
        cfg.clone(),
        clock(),
        &seal(SnapshotKind::Pipeline, fp, rest),
    );
    let _ = restore_operator(cfg.clone(), clock(), &seal(SnapshotKind::Sharded, fp, rest));
    let _ = reshard::parse(&cfg, &seal(SnapshotKind::Pipeline, fp, rest));
    let _ = RowsOperator::restore(cfg.clone(), &seal(SnapshotKind::Pipeline, fp, rest));
    let _ = ReorderOperator::restore(
        reorder.clone(),
        &seal(SnapshotKind::Reorder, reorder.fingerprint(), rest),
    );
    // The standalone trackers, whose snapshots carry their own configuration.
    let _ = KeyedWatermarkTracker::restore(rest, clock());
    let _ = KeyedWatermarkTracker::restore(&seal(SnapshotKind::Keyed, 0, rest), clock());
    let _ = CompactKeyedWatermarkTracker::restore(&seal(SnapshotKind::CompactKeyed, 0, rest), clock());
});
