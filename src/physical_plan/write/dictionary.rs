//! Columns a rewrite writes without dictionary encoding: those whose dictionaries overflowed in
//! the files it reads.
//!
//! A parquet writer dictionary-encodes a column until the column chunk's dictionary outgrows its
//! page limit, then falls back to another encoding for the rest of the chunk. A column of
//! (nearly) distinct values, such as a key, pays in every row group for a dictionary that is
//! thrown away: each value hashed into a table that grows to the limit, and dictionary-encoded
//! pages larger than plain ones. The files a compaction reads tell which columns did that: a
//! chunk with a dictionary page whose data pages also use another encoding. When most of the
//! rows read (counted by row group) overflowed, the rewrite writes the column plain from the
//! start: its row groups are as large as the files' or larger, so the dictionary would overflow
//! again, and it stays plain in later rewrites. A chunk without a dictionary counts only beside
//! chunks with one (alone, its writer may have had dictionaries off), and a chunk without page
//! encoding statistics not at all.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::error::Result;
use datafusion::execution::TaskContext;
use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectMeta, ObjectStore};
use parquet::basic::Encoding;
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};

use crate::file_planning::PlannedFile;
use crate::physical_plan::parquet_files::fetch_footer;
use crate::storage::location::{file_at, LocationMap};
use crate::storage::ObjectStores;

/// Footers read to decide: enough to see how a table's writer fared, few requests.
const SAMPLED_FILES: usize = 16;

/// Footers fetched at once.
const FOOTERS_IN_FLIGHT: usize = 8;

/// How the top-level columns of some parquet files fared with dictionary encoding, by field id:
/// rows of row groups where the column ended plain (its dictionary overflowed, or its writer
/// chose plain for it while dictionary-encoding other columns), and rows of row groups encoded
/// with their dictionary throughout.
#[derive(Debug, Default)]
struct DictionaryUse {
    plain: HashMap<i32, u64>,
    kept: HashMap<i32, u64>,
}

impl DictionaryUse {
    /// Counts the row groups of one file.
    fn add(&mut self, metadata: &ParquetMetaData) {
        let descr = metadata.file_metadata().schema_descr();
        for group in metadata.row_groups() {
            let rows = group.num_rows().max(0) as u64;
            // A chunk without a dictionary says something only beside chunks with one: its
            // writer had dictionaries on and left this column plain (as a rewrite here does).
            let dictionaries = group
                .columns()
                .iter()
                .any(|c| c.dictionary_page_offset().is_some());
            for (i, chunk) in group.columns().iter().enumerate() {
                let column = descr.column(i);
                let info = column.self_type().get_basic_info();
                if column.path().parts().len() != 1 || !info.has_id() {
                    continue;
                }
                let plain = match chunk.dictionary_page_offset() {
                    Some(_) => overflowed(chunk),
                    None => dictionaries.then_some(true),
                };
                let counts = match plain {
                    Some(true) => &mut self.plain,
                    Some(false) => &mut self.kept,
                    None => continue,
                };
                *counts.entry(info.id()).or_default() += rows;
            }
        }
    }

    /// The field ids of the columns whose dictionaries held in most of the rows counted.
    fn kept_field_ids(&self) -> Vec<i32> {
        let mut ids: Vec<i32> = self
            .kept
            .iter()
            .filter(|(id, rows)| **rows > self.plain.get(id).copied().unwrap_or(0))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// The field ids of the columns to write plain: plain in most of the rows counted.
    fn plain_field_ids(&self) -> Vec<i32> {
        let mut ids: Vec<i32> = self
            .plain
            .iter()
            .filter(|(id, rows)| **rows > self.kept.get(id).copied().unwrap_or(0))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }
}

/// How the top-level columns of the one file whose footer is `footer` fared with dictionary
/// encoding (for a splice, which encodes again some of its row groups).
pub(super) fn columns_of_file(footer: &ParquetMetaData) -> ColumnDictionaries {
    let mut uses = DictionaryUse::default();
    uses.add(footer);
    ColumnDictionaries {
        plain: uses.plain_field_ids(),
        kept: uses.kept_field_ids(),
    }
}

/// Whether the dictionary of a column chunk that has one overflowed (`Some(false)`: its data
/// pages are all dictionary-encoded; `None`: no page encoding statistics to tell).
fn overflowed(chunk: &ColumnChunkMetaData) -> Option<bool> {
    let data_pages = chunk.page_encoding_stats_mask()?;
    Some(
        data_pages
            .encodings()
            .any(|e| !matches!(e, Encoding::PLAIN_DICTIONARY | Encoding::RLE_DICTIONARY)),
    )
}

/// How the top-level columns of the files a rewrite reads fared with dictionary encoding, by
/// field id.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ColumnDictionaries {
    /// Columns to write plain: their dictionaries overflowed in most of the rows.
    pub plain: Vec<i32>,
    /// Columns whose dictionaries held in most of the rows: worth reading as dictionaries.
    pub kept: Vec<i32>,
}

/// How the top-level columns of the data files `files` of the table at `table_location` fared
/// with dictionary encoding (see [`plain_columns`]).
pub(crate) async fn plain_columns_of(
    context: &TaskContext,
    stores: &ObjectStores,
    locations: &LocationMap,
    table_location: &str,
    files: &[PlannedFile],
) -> Result<ColumnDictionaries> {
    let url = locations.store_url(table_location)?;
    let store = stores.store(&url)?;
    // Parquet footers only (other formats have none to sample).
    let inputs = files
        .iter()
        .filter(|f| f.format == iceberg::spec::DataFileFormat::Parquet)
        .map(|f| {
            let path = locations.object_path_in(&url, &f.path)?;
            Ok(file_at(path.as_ref(), f.size)?.object_meta)
        })
        .collect::<Result<Vec<_>>>()?;
    plain_columns(context, &store, inputs).await
}

/// The top-level columns (field ids) to write plain when rewriting `files` of `store`, from the
/// footers of up to [`SAMPLED_FILES`] of them (the largest), read through DataFusion's metadata
/// cache so that the scan of the rewrite reuses them.
async fn plain_columns(
    context: &TaskContext,
    store: &Arc<dyn ObjectStore>,
    mut files: Vec<ObjectMeta>,
) -> Result<ColumnDictionaries> {
    files.sort_by_key(|f| std::cmp::Reverse(f.size));
    files.truncate(SAMPLED_FILES);
    let cache = context
        .runtime_env()
        .cache_manager
        .get_file_metadata_cache();
    let hint = context
        .session_config()
        .options()
        .execution
        .parquet
        .metadata_size_hint;
    let footers: Vec<Arc<ParquetMetaData>> = futures::stream::iter(files)
        .map(|file| {
            let cache = Arc::clone(&cache);
            async move {
                let (metadata, _) =
                    fetch_footer(store.as_ref(), &file, Some(cache), hint, true).await?;
                Ok::<_, datafusion::error::DataFusionError>(metadata)
            }
        })
        .buffered(FOOTERS_IN_FLIGHT)
        .try_collect()
        .await?;
    let mut uses = DictionaryUse::default();
    for footer in &footers {
        uses.add(footer);
    }
    Ok(ColumnDictionaries {
        plain: uses.plain_field_ids(),
        kept: uses.kept_field_ids(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use bytes::Bytes;
    use parquet::arrow::ArrowWriter;
    use parquet::file::metadata::ParquetMetaDataReader;
    use parquet::file::properties::WriterProperties;
    use parquet::schema::types::ColumnPath;

    fn field(name: &str, id: i32) -> Field {
        Field::new(name, DataType::Int64, false).with_metadata(HashMap::from([(
            "PARQUET:field_id".to_string(),
            id.to_string(),
        )]))
    }

    /// A file of `rows` rows: `id` (field 1) distinct, `part` (field 2) of three values, in row
    /// groups of 10,000 rows, dictionaries of 512 bytes (the writer checks the dictionary's size
    /// every 1,024 values).
    fn footer(rows: i64, plain_id: bool, dictionaries: bool) -> ParquetMetaData {
        let schema = Arc::new(Schema::new(vec![field("id", 1), field("part", 2)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from_iter_values(0..rows)),
                Arc::new(Int64Array::from_iter_values((0..rows).map(|i| i % 3))),
            ],
        )
        .unwrap();
        let mut props = WriterProperties::builder()
            .set_dictionary_page_size_limit(512)
            .set_max_row_group_row_count(Some(10_000))
            .set_dictionary_enabled(dictionaries);
        if plain_id {
            props = props.set_column_dictionary_enabled(ColumnPath::from("id"), false);
        }
        let mut buffer = vec![];
        let mut writer = ArrowWriter::try_new(&mut buffer, schema, Some(props.build())).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        ParquetMetaDataReader::new()
            .parse_and_finish(&Bytes::from(buffer))
            .unwrap()
    }

    fn plain(files: &[ParquetMetaData]) -> Vec<i32> {
        let mut uses = DictionaryUse::default();
        for f in files {
            uses.add(f);
        }
        // A column is kept or plain, never both.
        let kept = uses.kept_field_ids();
        assert!(kept.iter().all(|id| !uses.plain_field_ids().contains(id)));
        uses.plain_field_ids()
    }

    #[test]
    fn held_dictionaries_are_kept() {
        let mut uses = DictionaryUse::default();
        uses.add(&footer(30_000, false, true));
        // The parts held their dictionary; the ids did not.
        assert_eq!(uses.kept_field_ids(), [2]);
        let mut uses = DictionaryUse::default();
        uses.add(&footer(40, false, true));
        assert_eq!(uses.kept_field_ids(), [1, 2]);
        let mut uses = DictionaryUse::default();
        uses.add(&footer(30_000, false, false));
        assert_eq!(uses.kept_field_ids(), Vec::<i32>::new());
    }

    #[test]
    fn overflowed_dictionaries_make_a_column_plain() {
        // The ids fill a 512-byte dictionary after 64 values; the three parts never do.
        assert_eq!(plain(&[footer(30_000, false, true)]), [1]);
        // A file this crate rewrote: the ids plain beside dictionary-encoded parts stay plain.
        assert_eq!(plain(&[footer(30_000, true, true)]), [1]);
        // A writer with dictionaries off says nothing about any column.
        assert_eq!(plain(&[footer(30_000, false, false)]), Vec::<i32>::new());
        // Too few distinct ids to overflow: the dictionary is kept.
        assert_eq!(plain(&[footer(40, false, true)]), Vec::<i32>::new());
        // Most rows decide.
        assert_eq!(
            plain(&[footer(30_000, false, true), footer(40, false, true)]),
            [1]
        );
        let mut many = vec![footer(40, false, true); 800];
        many.push(footer(30_000, false, true));
        assert_eq!(plain(&many), Vec::<i32>::new());
    }
}
