//! The file column of a statement's rows, read by its dictionary keys.

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, UInt16Type};
use datafusion::error::{DataFusionError, Result};

/// The file column of a batch: its distinct names and, per row, the index of its name. A
/// dictionary column (what the scan gives, one value per file) is read by its keys, so no string
/// is copied or hashed per row.
pub(crate) struct FileKeys {
    pub names: StringArray,
    pub keys: Vec<usize>,
}

impl FileKeys {
    pub(crate) fn of(column: &ArrayRef) -> Result<Self> {
        if column.null_count() > 0 {
            return Err(DataFusionError::Internal(
                "a MERGE file column holds NULL for a target row".into(),
            ));
        }
        if let Some(dict) = column.as_dictionary_opt::<UInt16Type>() {
            let names = cast(dict.values(), &DataType::Utf8)?
                .as_string::<i32>()
                .clone();
            let keys = dict.keys().values().iter().map(|&k| k as usize).collect();
            return Ok(Self { names, keys });
        }
        let names = cast(column, &DataType::Utf8)?.as_string::<i32>().clone();
        let keys = (0..names.len()).collect();
        Ok(Self { names, keys })
    }
}
