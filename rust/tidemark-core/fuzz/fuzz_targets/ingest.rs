//! Batch ingest never panics: arbitrary Arrow columns (types, names, values, nulls)
//! go through the pipeline operator (every window kind and watermark scope) and the
//! reorder operator, batch after batch, then flush and snapshot.
#![no_main]

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, LargeStringBuilder,
    StringBuilder, StringDictionaryBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, RecordBatch};
use libfuzzer_sys::fuzz_target;
use tidemark_core::agg::{AggKind, AggSpec};
use tidemark_core::clock::ManualClock;
use tidemark_core::pipeline::{
    EmitMode, LatePolicy, LateRule, Operator, PipelineConfig, Scope, TimeMode,
};
use tidemark_core::reorder::{ReorderConfig, ReorderOperator};
use tidemark_core::time::KeyEvictionPolicy;
use tidemark_core::window::WindowSpec;

/// Reads the fuzz input as a stream of small decisions.
struct Bytes<'a>(&'a [u8]);
impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        b
    }
    fn i64(&mut self) -> i64 {
        let mut v = [0u8; 8];
        for b in v.iter_mut() {
            *b = self.u8();
        }
        // Mostly small values, sometimes extremes.
        let raw = i64::from_le_bytes(v);
        if v[7] & 0x80 != 0 {
            raw
        } else {
            raw % 100_000
        }
    }
    fn empty(&self) -> bool {
        self.0.is_empty()
    }
}

const NAMES: [&str; 5] = ["k", "ts", "v", "p", "reason"];

fn column(b: &mut Bytes, rows: usize) -> ArrayRef {
    let null = |b: &mut Bytes| b.u8() % 7 == 0;
    // `rows` values from `$value` (which reads `b`), about one in seven null.
    macro_rules! nullable {
        ($builder:expr, $value:expr) => {{
            let mut x = $builder;
            for _ in 0..rows {
                let v = $value;
                if null(b) {
                    x.append_null()
                } else {
                    x.append_value(v)
                }
            }
            Arc::new(x.finish()) as ArrayRef
        }};
    }
    match b.u8() % 9 {
        0 => nullable!(Int64Builder::new(), b.i64()),
        1 => nullable!(Int32Builder::new(), b.i64() as i32),
        2 => nullable!(
            Float64Builder::new(),
            match b.u8() % 5 {
                0 => f64::NAN,
                1 => f64::INFINITY,
                _ => b.i64() as f64 / 3.0,
            }
        ),
        3 => nullable!(StringBuilder::new(), b.i64().to_string()),
        4 => nullable!(LargeStringBuilder::new(), format!("k{}", b.u8() % 4)),
        5 => nullable!(
            StringDictionaryBuilder::<Int32Type>::new(),
            format!("d{}", b.u8() % 3)
        ),
        6 => nullable!(
            TimestampMicrosecondBuilder::new().with_timezone("UTC"),
            b.i64()
        ),
        7 => nullable!(BinaryBuilder::new(), [b.u8()]),
        _ => nullable!(BooleanBuilder::new(), b.u8() % 2 == 0),
    }
}

fn batch(b: &mut Bytes) -> Option<RecordBatch> {
    let rows = (b.u8() % 40) as usize;
    let ncols = 1 + (b.u8() % 4) as usize;
    let mut cols: Vec<(&str, ArrayRef)> = Vec::new();
    for _ in 0..ncols {
        let name = NAMES[(b.u8() % 5) as usize];
        if cols.iter().any(|c| c.0 == name) {
            continue;
        }
        cols.push((name, column(b, rows)));
    }
    RecordBatch::try_from_iter(cols).ok()
}

fn config(b: &mut Bytes) -> PipelineConfig {
    let window = match b.u8() % 4 {
        0 => WindowSpec::Tumbling {
            size: 10_000,
            offset: 0,
        },
        1 => WindowSpec::Sliding {
            size: 10_000,
            slide: 3_000,
            offset: 0,
        },
        2 => WindowSpec::Session { gap: 5_000 },
        _ => WindowSpec::Rows { n: 3 },
    };
    let scope = match b.u8() % 3 {
        0 => Scope::Global,
        1 => Scope::Key,
        _ => Scope::Partition { column: "p".into() },
    };
    let rows = matches!(window, WindowSpec::Rows { .. });
    PipelineConfig {
        keys: if b.u8() % 4 == 0 {
            vec![]
        } else {
            vec!["k".into()]
        },
        event_time: "ts".into(),
        event_time_type: match b.u8() % 3 {
            0 => None,
            1 => Some("unixtimestamp_ms".into()),
            _ => Some("iso8601".into()),
        },
        parsed_externally: false,
        delay: (b.u8() as i64) * 100,
        scope: if rows { Scope::Global } else { scope },
        idle_timeout: Some(5),
        source_partitions: None,
        window,
        aggs: vec![
            AggSpec::new("n", AggKind::Count, None),
            AggSpec::new("s", AggKind::Sum, Some("v")),
            AggSpec::new("l", AggKind::Last, Some("v")),
        ],
        emit: if rows || b.u8() % 2 == 0 {
            EmitMode::OnUpdate
        } else {
            EmitMode::OnWindowClose
        },
        allowed_lateness: (b.u8() as i64) * 10,
        late: LatePolicy::SideOutput,
        late_rule: match b.u8() % 3 {
            0 => LateRule::Spark,
            1 => LateRule::Flink,
            _ => LateRule::Row,
        },
        max_keys: Some(1 + (b.u8() % 8) as usize),
        eviction: match b.u8() % 3 {
            0 => KeyEvictionPolicy::LeastRecentlyActive,
            1 => KeyEvictionPolicy::LowestWatermark,
            _ => KeyEvictionPolicy::RejectNew,
        },
        time: TimeMode::Event,
        state_ttl: if b.u8() % 3 == 0 { Some(7) } else { None },
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let cfg = config(&mut b);
    let clock = Arc::new(ManualClock::new(0));
    let mut reorder = ReorderOperator::new(ReorderConfig {
        event_time: "ts".into(),
        event_time_type: cfg.event_time_type.clone(),
        parsed_externally: false,
        late_tolerance: 500,
        late: LatePolicy::SideOutput,
    })
    .expect("valid reorder configuration");
    let Ok(mut op) = Operator::new(cfg, clock.clone()) else {
        return;
    };
    while !b.empty() {
        let Some(batch) = batch(&mut b) else { continue };
        clock.advance(b.u8() as i64);
        if let Ok(out) = op.process(&batch, None) {
            // Nothing lost: every row is in a window, late or an error.
            assert!(out.late.num_rows() + out.errors.num_rows() <= batch.num_rows());
        }
        let _ = reorder.process(&batch, None);
    }
    let _ = op.flush();
    let _ = op.snapshot();
    let _ = reorder.flush();
    let _ = reorder.snapshot();
});
