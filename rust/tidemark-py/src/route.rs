//! `tidemark._native.Router`: routes Arrow batches to partitions (see `tidemark.route`).

use std::sync::Arc;

use arrow_array::Int32Array;
use pyo3::prelude::*;
use pyo3::types::PyList;
use pyo3_arrow::input::AnyRecordBatch;
use pyo3_arrow::{PyRecordBatch, PySchema};
use tidemark_core::route::{self, HashAlgo, Router, Strategy};
use tidemark_core::TidemarkError;

use crate::convert::arrow::{array_to_py, one_batch, read_batches};
use crate::convert::keys::py_key;
use crate::error::{detach, Result};

/// Native router (see `tidemark.Router`).
#[pyclass(name = "Router", module = "tidemark._native")]
pub struct PyRouter {
    inner: Router,
}

#[pymethods]
impl PyRouter {
    #[new]
    #[pyo3(signature = (num_partitions, strategy, keys = None, hash = "xxh3", event_time = None))]
    fn new(
        num_partitions: usize,
        strategy: &str,
        keys: Option<Vec<String>>,
        hash: &str,
        event_time: Option<String>,
    ) -> Result<Self> {
        let strategy = match strategy {
            "hash" => Strategy::Hash {
                keys: keys.unwrap_or_default(),
                algo: hash.parse::<HashAlgo>()?,
            },
            "round_robin" => Strategy::RoundRobin,
            "single" => Strategy::Single,
            "broadcast" => Strategy::Broadcast,
            other => {
                return Err(TidemarkError::config(
                    "strategy",
                    format!(
                        "unknown strategy {other:?}; use hash, round_robin, single or broadcast"
                    ),
                )
                .into())
            }
        };
        let inner = Router::new(num_partitions, strategy, event_time.as_deref())?;
        Ok(Self { inner })
    }

    #[getter]
    fn num_partitions(&self) -> usize {
        self.inner.num_partitions()
    }

    #[getter]
    fn key_columns(&self) -> Vec<String> {
        self.inner.key_columns().to_vec()
    }

    /// Partition id per row, as a pyarrow Int32Array.
    fn partition_ids(&mut self, py: Python<'_>, data: AnyRecordBatch) -> Result<Py<PyAny>> {
        let (schema, batches) = read_batches(data)?;
        let r = &mut self.inner;
        let ids = detach(py, move || {
            let batch = one_batch(schema, batches)?;
            let ids = r.partition_ids(&batch)?;
            Ok(Int32Array::from_iter_values(
                ids.into_iter().map(|p| p as i32),
            ))
        })?;
        array_to_py(py, Arc::new(ids))
    }

    /// One pyarrow RecordBatch per partition.
    fn route<'py>(&mut self, py: Python<'py>, data: AnyRecordBatch) -> Result<Bound<'py, PyList>> {
        let (schema, batches) = read_batches(data)?;
        let r = &mut self.inner;
        let shards = detach(py, move || {
            let batch = one_batch(schema, batches)?;
            r.route(&batch)
        })?;
        let out = PyList::empty(py);
        for s in shards {
            out.append(PyRecordBatch::new(s).into_pyarrow(py)?)?;
        }
        Ok(out)
    }

    /// Partition of one key given as Python values (xxh3 hashing only).
    fn partition_of(&self, key: &Bound<'_, PyAny>) -> Result<u32> {
        match self.inner.strategy() {
            Strategy::Hash { algo: HashAlgo::Xxh3, .. } => Ok(route::xxh3_partition(
                &py_key(key)?,
                self.inner.num_partitions() as u32,
            )),
            _ => Err(TidemarkError::config(
                    "strategy",
                    "partition_of needs hash=\"xxh3\" routing (spark hashing depends on Spark column types; use partition_ids)",
                ).into()),
        }
    }
}

/// Whether tidemark's Spark hash reproduces Spark's `hash()` of each of the columns
/// `names` of `schema` (an Arrow schema): `False` for a missing column or another type.
#[pyfunction]
pub fn spark_hashable(schema: PySchema, names: Vec<String>) -> Vec<bool> {
    let schema = schema.as_ref();
    names
        .iter()
        .map(|n| {
            schema
                .field_with_name(n)
                .is_ok_and(|f| route::spark_hashable(f.data_type()))
        })
        .collect()
}
