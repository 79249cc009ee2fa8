//! Broadcast lookup (a table replicated to every shard): each input row is joined with a
//! small table on key columns before it is aggregated. One copy of the table serves
//! every core (it is shared behind an `Arc` and only read).

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use arrow_schema::{Field, Schema, SchemaRef};

use crate::error::{column_index, Result, TidemarkError};
use crate::key::{KeyColumns, KeyRows};

/// How input rows without a match are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinHow {
    /// Keep them; the lookup columns are null.
    Left,
    /// Drop them (counted by the caller).
    Inner,
}

crate::names::named!(JoinHow, "how", { "left" => JoinHow::Left, "inner" => JoinHow::Inner });

/// A replicated lookup table, indexed by its key columns.
#[derive(Debug)]
pub struct Lookup {
    on: Vec<String>,
    how: JoinHow,
    /// The table's non-key columns, as they are appended (renamed with the prefix).
    values: Vec<ArrayRef>,
    fields: Vec<Field>,
    index: hashbrown::HashMap<Vec<u8>, u32>,
}

impl Lookup {
    /// Indexes `table` on the `on` columns. Keys must be unique.
    pub fn new(
        table: &RecordBatch,
        on: &[String],
        how: JoinHow,
        prefix: Option<&str>,
    ) -> Result<Arc<Self>> {
        if on.is_empty() {
            return Err(TidemarkError::config("on", "name at least one key column"));
        }
        let schema = table.schema();
        let mut key_cols = Vec::with_capacity(on.len());
        for k in on {
            let i = column_index(&schema, k)?;
            key_cols.push(table.column(i).clone());
        }
        let keys = KeyColumns::new(&key_cols)?;
        let mut index = hashbrown::HashMap::with_capacity(table.num_rows());
        for row in 0..table.num_rows() {
            if index.insert(keys.key(row), row as u32).is_some() {
                return Err(TidemarkError::config(
                    "enrich",
                    format!("the lookup table has more than one row for the key of row {row}; keys must be unique"),
                ));
            }
        }
        let prefix = prefix.unwrap_or("");
        let (mut values, mut fields) = (Vec::new(), Vec::new());
        for (i, f) in schema.fields().iter().enumerate() {
            if on.contains(f.name()) {
                continue;
            }
            values.push(table.column(i).clone());
            fields.push(Field::new(
                format!("{prefix}{}", f.name()),
                f.data_type().clone(),
                true,
            ));
        }
        Ok(Arc::new(Self {
            on: on.to_vec(),
            how,
            values,
            fields,
            index,
        }))
    }

    /// The schema of enriched batches for an `input` schema.
    pub fn schema(&self, input: &Schema) -> Result<SchemaRef> {
        for k in &self.on {
            column_index(input, k)?;
        }
        let mut fields: Vec<Field> = input.fields().iter().map(|f| f.as_ref().clone()).collect();
        for f in &self.fields {
            if input.index_of(f.name()).is_ok() {
                return Err(TidemarkError::config(
                    "enrich",
                    format!(
                        "lookup column {:?} is also an input column: pass a prefix",
                        f.name()
                    ),
                ));
            }
            fields.push(f.clone());
        }
        Ok(Arc::new(Schema::new(fields)))
    }

    /// Joins `batch` with the table. Returns the enriched batch and the number of
    /// input rows dropped for lack of a match (`inner`).
    pub fn enrich(&self, batch: &RecordBatch) -> Result<(RecordBatch, usize)> {
        let (b, _, dropped) = self.enrich_with_mask(batch)?;
        Ok((b, dropped))
    }

    /// Joins one arrival unit and its externally parsed event times (filtered alike
    /// for `inner`). Returns the enriched batch, the parsed times, and the number of
    /// rows dropped.
    pub fn enrich_input(
        &self,
        batch: &RecordBatch,
        parsed: Option<&arrow_array::Int64Array>,
    ) -> Result<(RecordBatch, Option<arrow_array::Int64Array>, usize)> {
        use arrow_array::cast::AsArray;
        let (enriched, keep, dropped) = self.enrich_with_mask(batch)?;
        let parsed = match (parsed, &keep) {
            (Some(p), Some(k)) => Some(
                arrow_select::filter::filter(p, k)?
                    .as_primitive::<arrow_array::types::Int64Type>()
                    .clone(),
            ),
            (p, _) => p.cloned(),
        };
        Ok((enriched, parsed, dropped))
    }

    /// As [`Self::enrich`], also returning which input rows were kept (`inner`).
    pub fn enrich_with_mask(
        &self,
        batch: &RecordBatch,
    ) -> Result<(RecordBatch, Option<BooleanArray>, usize)> {
        let schema = self.schema(batch.schema_ref())?;
        let cols: Vec<ArrayRef> = self
            .on
            .iter()
            .map(|k| batch.column_by_name(k).expect("checked").clone())
            .collect();
        let keys = KeyColumns::new(&cols)?;
        let mut found = Vec::with_capacity(batch.num_rows());
        keys.for_each_key(|_, key| found.push(self.index.get(key).copied()));
        let rows = UInt32Array::from(found);
        let (input, rows, keep, dropped) = match self.how {
            JoinHow::Left => (batch.clone(), rows, None, 0),
            JoinHow::Inner => {
                let keep = BooleanArray::from_iter((0..rows.len()).map(|i| Some(rows.is_valid(i))));
                let dropped = rows.null_count();
                (
                    arrow_select::filter::filter_record_batch(batch, &keep)?,
                    arrow_select::filter::filter(&rows, &keep)?
                        .as_any()
                        .downcast_ref::<UInt32Array>()
                        .expect("u32")
                        .clone(),
                    Some(keep),
                    dropped,
                )
            }
        };
        let mut columns = input.columns().to_vec();
        for v in &self.values {
            columns.push(arrow_select::take::take(v.as_ref(), &rows, None)?);
        }
        Ok((RecordBatch::try_new(schema, columns)?, keep, dropped))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Int32Array, Int64Array, StringArray};

    fn table() -> RecordBatch {
        RecordBatch::try_from_iter(vec![
            ("device", Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef),
            (
                "site",
                Arc::new(StringArray::from(vec!["north", "south"])) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    fn input() -> RecordBatch {
        RecordBatch::try_from_iter(vec![
            (
                "device",
                Arc::new(Int32Array::from(vec![2, 3, 1])) as ArrayRef,
            ),
            (
                "v",
                Arc::new(Int64Array::from(vec![10, 20, 30])) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    #[test]
    fn left_join_keeps_rows_and_matches_by_value_across_integer_widths() {
        let l = Lookup::new(&table(), &["device".into()], JoinHow::Left, Some("d_")).unwrap();
        let (out, dropped) = l.enrich(&input()).unwrap();
        assert_eq!(dropped, 0);
        assert_eq!(out.schema().field(2).name(), "d_site");
        let site = out.column(2).as_string::<i32>();
        assert_eq!(
            (0..3)
                .map(|i| site.is_valid(i).then(|| site.value(i)))
                .collect::<Vec<_>>(),
            vec![Some("south"), None, Some("north")]
        );
    }

    #[test]
    fn inner_join_drops_unmatched_rows() {
        let l = Lookup::new(&table(), &["device".into()], JoinHow::Inner, None).unwrap();
        let (out, dropped) = l.enrich(&input()).unwrap();
        assert_eq!(dropped, 1);
        assert_eq!(
            out.column(1).as_primitive::<Int64Type>().values().to_vec(),
            vec![10, 30]
        );
    }

    #[test]
    fn bad_tables_and_inputs_are_clear_errors() {
        let dup = RecordBatch::try_from_iter(vec![(
            "device",
            Arc::new(Int64Array::from(vec![1, 1])) as ArrayRef,
        )])
        .unwrap();
        let e = Lookup::new(&dup, &["device".into()], JoinHow::Left, None).unwrap_err();
        assert!(e.to_string().contains("unique"), "{e}");
        assert!(Lookup::new(&table(), &["nope".into()], JoinHow::Left, None).is_err());
        assert!("outer".parse::<JoinHow>().is_err());
        let clash = RecordBatch::try_from_iter(vec![
            ("device", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            ("v", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ])
        .unwrap();
        let l = Lookup::new(&clash, &["device".into()], JoinHow::Left, None).unwrap();
        let e = l.enrich(&input()).unwrap_err();
        assert!(e.to_string().contains("prefix"), "{e}");
    }
}
