//! Binding a pipeline to its input schema: which columns are keys, event time,
//! partitions and aggregate inputs, and the output schema they give.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::snapshot::schema_changed;
use super::{EmitMode, Operator, PipelineConfig, Scope, TimeMode};
use crate::agg::{Acc, BoundAgg};
use crate::batch::error_batch;
use crate::error::{column_index, Result, TidemarkError};
use crate::key::{is_key_type, same_values, KeyColumns};
use crate::time::EventTimeType;

/// Schema-dependent parts, fixed at the first batch.
#[derive(Debug, Clone)]
pub(super) struct Binding {
    pub(super) key_idx: Vec<usize>,
    pub(super) key_types: Vec<DataType>,
    pub(super) time_idx: Option<usize>,
    pub(super) time_type: Option<(DataType, EventTimeType)>,
    pub(super) part_idx: Option<usize>,
    pub(super) aggs: Vec<BoundAgg>,
    /// Output type of window_start / window_end.
    pub(super) bound_type: DataType,
    pub(super) out_schema: SchemaRef,
    /// The input fields the pipeline reads (stored in snapshots to re-bind).
    pub(super) used_fields: Vec<Field>,
    /// The schema bound: the latest batch's (after a restore with no batch since,
    /// `used_fields`). Late and error rows carry its columns.
    pub(super) input: SchemaRef,
}

impl Binding {
    /// The late and error outputs of a call that reads no rows (a flush): empty, in
    /// the schemas a call with rows gives them (the input's columns; the errors with
    /// their `reason` column too).
    pub(super) fn no_rejects(&self) -> Result<(RecordBatch, RecordBatch)> {
        let late = RecordBatch::new_empty(self.input.clone());
        let errors = error_batch(&late, &[])?;
        Ok((late, errors))
    }

    /// Why the state kept under `self` cannot go on with batches bound as `next` (the
    /// same pipeline on a later batch's schema), or `None` when it can: the key
    /// columns hold the same values ([`same_values`]: another string layout, say),
    /// the event time is read the same way (a timestamp may change unit or zone: its
    /// instants are what the state keeps), and every aggregate can go on
    /// ([`BoundAgg::cannot_follow`]). The output then takes the later batch's types.
    pub(super) fn cannot_follow(&self, next: &Binding) -> Option<String> {
        let keys = self.out_schema.fields().iter().zip(&next.key_types);
        for (old, new) in keys.take(self.key_types.len()) {
            if !same_values(old.data_type(), new) {
                return Some(format!(
                    "key column {:?} changed type from {} to {}",
                    old.name(),
                    old.data_type(),
                    new
                ));
            }
        }
        if let (Some((old, how)), Some((new, next_how))) = (&self.time_type, &next.time_type) {
            let instants = matches!(
                (old, new),
                (DataType::Timestamp(_, a), DataType::Timestamp(_, b)) if a.is_some() == b.is_some()
            );
            if how != next_how || !(instants || same_values(old, new)) {
                return Some(format!(
                    "the event-time column changed type from {old} to {new}"
                ));
            }
        }
        self.aggs
            .iter()
            .zip(&next.aggs)
            .find_map(|(old, new)| old.cannot_follow(new))
    }

    /// The aggregates' inputs and the key columns of `batch` (no key columns: every
    /// row has the null key, one global group).
    pub(super) fn inputs_and_keys(
        &self,
        batch: &RecordBatch,
    ) -> Result<(Vec<crate::agg::Input>, KeyColumns)> {
        let inputs = self
            .aggs
            .iter()
            .map(|a| a.input(batch.columns()))
            .collect::<Result<Vec<_>>>()?;
        let key_cols: Vec<ArrayRef> = self
            .key_idx
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect();
        let keys = if key_cols.is_empty() {
            let nulls = arrow_array::NullArray::new(batch.num_rows());
            KeyColumns::new(&[Arc::new(nulls) as ArrayRef])?
        } else {
            KeyColumns::new(&key_cols)?
        };
        Ok((inputs, keys))
    }
}

impl Operator {
    /// The output schema for an input schema (validates the configuration against it).
    pub fn output_schema(cfg: &PipelineConfig, input: &Schema) -> Result<SchemaRef> {
        Ok(Self::bind(cfg, input)?.out_schema)
    }

    pub(super) fn bind(cfg: &PipelineConfig, schema: &Schema) -> Result<Binding> {
        // A name the pipeline reads must name one column (Spark: AMBIGUOUS_REFERENCE).
        for name in cfg.input_columns() {
            let n = schema.fields().iter().filter(|f| f.name() == name).count();
            if n > 1 {
                return Err(TidemarkError::config(
                    "input",
                    format!(
                        "the input has {n} columns named {name:?}: the reference is ambiguous; \
                         rename or drop all but one"
                    ),
                ));
            }
        }
        let mut key_idx = Vec::new();
        let mut key_fields = Vec::new();
        for k in &cfg.keys {
            let i = column_index(schema, k)?;
            let f = schema.field(i);
            if !is_key_type(f.data_type()) {
                return Err(TidemarkError::config(
                    "key",
                    format!("column {k:?} of type {} cannot be a key", f.data_type()),
                ));
            }
            key_idx.push(i);
            key_fields.push(f.as_ref().clone().with_nullable(true));
        }
        let (time_idx, time_type, bound_type) = match cfg.time {
            TimeMode::Processing => (
                None,
                None,
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            ),
            TimeMode::Event if cfg.parsed_externally => {
                let i = column_index(schema, &cfg.event_time)?;
                let dt = schema.field(i).data_type().clone();
                (
                    Some(i),
                    Some((dt, EventTimeType::Ticks)),
                    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                )
            }
            TimeMode::Event => {
                let i = column_index(schema, &cfg.event_time)?;
                let dt = schema.field(i).data_type().clone();
                let ty = EventTimeType::resolve(
                    cfg.event_time_type.as_deref(),
                    &cfg.event_time,
                    &dt,
                    false,
                )?;
                let bound = match &dt {
                    DataType::Timestamp(unit, tz) => DataType::Timestamp(*unit, tz.clone()),
                    _ => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                };
                (Some(i), Some((dt, ty)), bound)
            }
        };
        let part_idx = match &cfg.scope {
            Scope::Partition { column } => {
                let i = column_index(schema, column)?;
                if !schema.field(i).data_type().is_integer() {
                    return Err(TidemarkError::config(
                        "partition_column",
                        format!(
                            "{column:?} must be an integer column, got {}",
                            schema.field(i).data_type()
                        ),
                    ));
                }
                Some(i)
            }
            _ => None,
        };
        let aggs = cfg
            .aggs
            .iter()
            .map(|a| BoundAgg::bind(a, schema))
            .collect::<Result<Vec<_>>>()?;
        let used_fields: Vec<Field> = cfg
            .input_columns()
            .into_iter()
            .map(|c| schema.field(schema.index_of(c).expect("bound")).clone())
            .collect();
        let mut fields: Vec<Field> = key_fields.clone();
        fields.push(Field::new("window_start", bound_type.clone(), false));
        fields.push(Field::new("window_end", bound_type.clone(), false));
        fields.extend(aggs.iter().map(|a| a.output_field()));
        if cfg.emit == EmitMode::OnUpdate {
            fields.push(Field::new("retract", DataType::Boolean, false));
        }
        Ok(Binding {
            key_types: key_fields.iter().map(|f| f.data_type().clone()).collect(),
            key_idx,
            time_idx,
            time_type,
            part_idx,
            aggs,
            bound_type,
            out_schema: Arc::new(Schema::new(fields)),
            used_fields,
            input: Arc::new(schema.clone()),
        })
    }

    /// Checks that a batch's schema fits the one bound at the first batch.
    pub(super) fn ensure_bound(&mut self, schema: &Schema) -> Result<()> {
        let fresh = Self::bind(&self.cfg, schema)?;
        match &self.bound {
            None => self.bound = Some(fresh),
            Some(b) => {
                if let Some(why) = b.cannot_follow(&fresh) {
                    return Err(schema_changed(&why));
                }
                // Column positions may move, layouts change (see Binding::cannot_follow).
                self.bound = Some(fresh);
            }
        }
        Ok(())
    }

    pub(super) fn alloc_state(
        accs: &mut Vec<Acc>,
        flags: &mut Vec<u8>,
        free: &mut Vec<u32>,
        aggs: &[BoundAgg],
    ) -> u32 {
        let n = aggs.len();
        match free.pop() {
            Some(s) => {
                for (j, a) in aggs.iter().enumerate() {
                    accs[s as usize * n + j] = a.new_acc();
                }
                flags[s as usize] = 0;
                s
            }
            None => {
                let s = (accs.len() / n) as u32;
                accs.extend(aggs.iter().map(|a| a.new_acc()));
                flags.push(0);
                s
            }
        }
    }
}
