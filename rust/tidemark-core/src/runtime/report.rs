//! What a state partition reports of a micro-batch ([`Report`]): the progress the
//! driver combines into the next watermark ([`super::micro_batch::summarize`]; a
//! reorder's, [`super::micro_batch::summarize_reorder`]) and its row counts, sealed as
//! bytes for the state store.

use crate::error::Result;
use crate::pipeline::{Agreement, LatenessSummary, PipelineConfig, Progress};
use crate::state::{self, Reader, SnapshotKind, Writer};

/// What a state partition reports of a micro-batch: the progress the driver combines
/// into the next watermark, and its row counts. Serialised by [`Report::to_bytes`].
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Report {
    /// The state partition.
    pub partition: u32,
    /// The run that wrote it (see [`super::micro_batch::MicroBatch::run`]).
    pub run: String,
    /// What its operator's last call saw.
    pub progress: Progress,
    /// Its rows in and out.
    pub counts: Counts,
    /// A quiet batch: the calls made, and whether the last changed nothing.
    pub settled: Option<(u32, bool)>,
    /// With a lateness report (`PipelineConfig::lateness`): its keys' and source
    /// partitions' lateness so far.
    pub lateness: Option<LatenessSummary>,
    /// A reorder's buffer after the batch (`None`: a pipeline's partition).
    pub buffer: Option<Buffer>,
}

/// A reorder's buffer after a micro-batch: its watermark and what it still holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Buffer {
    /// The last watermark it emitted (`None`: none yet).
    pub watermark: Option<i64>,
    /// Rows buffered.
    pub rows: u64,
    /// Bytes those rows hold.
    pub bytes: u64,
}

/// A micro-batch's rows in and out (of a state partition, or summed over them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Counts {
    /// Input rows (folds count as the rows they stand for).
    pub input_rows: u64,
    /// Rows read (folds count once).
    pub read_rows: u64,
    /// Window rows emitted.
    pub window_rows: u64,
    /// Late rows (as input rows).
    pub late_rows: u64,
    /// Error rows (as input rows).
    pub error_rows: u64,
}

impl Counts {
    /// The counts in a fixed order (their serialised form).
    pub fn to_array(self) -> [u64; 5] {
        [
            self.input_rows,
            self.read_rows,
            self.window_rows,
            self.late_rows,
            self.error_rows,
        ]
    }

    /// Counts from [`Counts::to_array`].
    pub fn from_array(a: [u64; 5]) -> Self {
        let [input_rows, read_rows, window_rows, late_rows, error_rows] = a;
        Self {
            input_rows,
            read_rows,
            window_rows,
            late_rows,
            error_rows,
        }
    }
}

impl std::iter::Sum for Counts {
    fn sum<I: Iterator<Item = Counts>>(iter: I) -> Self {
        let mut total = [0u64; 5];
        for c in iter {
            for (t, v) in total.iter_mut().zip(c.to_array()) {
                *t += v;
            }
        }
        Self::from_array(total)
    }
}

impl Report {
    /// The report as bytes (versioned, checksummed, tied to the pipeline `cfg`).
    pub fn to_bytes(&self, cfg: &PipelineConfig) -> Vec<u8> {
        self.seal(cfg.fingerprint(), cfg.lateness.is_some())
    }

    /// A report read back from [`Report::to_bytes`] (of the same pipeline).
    pub fn from_bytes(cfg: &PipelineConfig, bytes: &[u8]) -> Result<Self> {
        Self::open(cfg.fingerprint(), cfg.lateness.is_some(), bytes)
    }

    /// The report as bytes tied to the operator whose configuration has `fingerprint`
    /// (`lateness`: it keeps a lateness report).
    pub fn seal(&self, fingerprint: u64, lateness: bool) -> Vec<u8> {
        let mut w = Writer::new();
        w.u32(self.partition);
        w.str(&self.run);
        let p = &self.progress;
        p.keys.write(&mut w);
        w.len(p.partition_max.len());
        for &(part, t) in &p.partition_max {
            w.u32(part);
            w.i64(t);
        }
        write_opt(&mut w, p.on_time_max);
        write_opt(&mut w, p.ahead_floor);
        write_opt(&mut w, p.key_global);
        write_opt(&mut w, p.key_parts.0);
        write_opt(&mut w, p.key_parts.1);
        for v in self.counts.to_array() {
            w.u64(v);
        }
        w.bool(self.settled.is_some());
        let (calls, last) = self.settled.unwrap_or_default();
        w.u32(calls);
        w.bool(last);
        if lateness {
            self.lateness.clone().unwrap_or_default().write(&mut w);
        }
        w.bool(self.buffer.is_some());
        let b = self.buffer.unwrap_or_default();
        write_opt(&mut w, b.watermark);
        w.u64(b.rows);
        w.u64(b.bytes);
        state::seal(SnapshotKind::Report, fingerprint, &w.finish())
    }

    /// A report read back from [`Report::seal`] (of the same operator).
    pub fn open(fingerprint: u64, lateness: bool, bytes: &[u8]) -> Result<Self> {
        let payload = state::open(bytes, SnapshotKind::Report, Some(fingerprint))?;
        let mut r = Reader::new(payload);
        let partition = r.u32()?;
        let run = r.str()?.to_string();
        let keys = Agreement::read(&mut r)?;
        let n = r.len(12)?;
        let partition_max = (0..n)
            .map(|_| Ok((r.u32()?, r.i64()?)))
            .collect::<Result<Vec<_>>>()?;
        let on_time_max = read_opt(&mut r)?;
        let ahead_floor = read_opt(&mut r)?;
        let key_global = read_opt(&mut r)?;
        let key_parts = (read_opt(&mut r)?, read_opt(&mut r)?);
        let mut counts = [0u64; 5];
        for c in &mut counts {
            *c = r.u64()?;
        }
        let has_settled = r.bool()?;
        let settled = (r.u32()?, r.bool()?);
        let lateness = if lateness {
            Some(LatenessSummary::read(&mut r)?)
        } else {
            None
        };
        let has_buffer = r.bool()?;
        let buffer = Buffer {
            watermark: read_opt(&mut r)?,
            rows: r.u64()?,
            bytes: r.u64()?,
        };
        r.finish()?;
        Ok(Self {
            partition,
            run,
            progress: Progress {
                keys,
                partition_max,
                key_global,
                on_time_max,
                key_parts,
                ahead_floor,
            },
            counts: Counts::from_array(counts),
            settled: has_settled.then_some(settled),
            lateness,
            buffer: has_buffer.then_some(buffer),
        })
    }
}

fn write_opt(w: &mut Writer, v: Option<i64>) {
    w.bool(v.is_some());
    w.i64(v.unwrap_or(0));
}

fn read_opt(r: &mut Reader<'_>) -> Result<Option<i64>> {
    let some = r.bool()?;
    let v = r.i64()?;
    Ok(some.then_some(v))
}
