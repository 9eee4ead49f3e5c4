//! Writing data files: [`DataFileWriterExec`] turns record batches into Iceberg data files,
//! partitioned by the table's spec, rolled at the target file size, sorted by the table's sort
//! order (DataFusion inserts a spilling sort below it to meet its ordering requirement).

pub(crate) mod column_metrics;
mod delete_files;
mod delete_writer;
mod deletion_vectors;
mod dictionary;
mod dictionary_chunk;
mod exec;
mod locations;
mod parquet_file;
pub(crate) mod position_delete_writer;
mod require;
mod sort_order;
mod splice;
mod writer;

/// Moved to the commit layer ([`crate::commit::WrittenFiles`]); kept here for existing paths.
pub use crate::commit::WrittenFiles;
pub use delete_files::{
    write_equality_delete_file, write_file_position_deletes, write_position_delete_file,
    DELETE_FILE_PATH_ID, DELETE_POS_ID,
};
pub(crate) use delete_writer::{fold, DeleteWriter, FileDeletes};
pub use deletion_vectors::{write_deletion_vectors, DeletionVector};
pub(crate) use dictionary::plain_columns_of;
#[cfg(test)]
pub(crate) use dictionary_chunk::chunks_closed;
pub use exec::DataFileWriterExec;
pub(crate) use exec::WriterTally;
pub(crate) use position_delete_writer::PositionDeleteWriterExec;
pub use require::iceberg_require;
pub use sort_order::sort_requirement;
pub(crate) use splice::{Computed, FileValues, NewValues, Spliced, Splicer};
pub(crate) use writer::{
    data_file_columns, data_files_schema, decode_data_files, decode_tally, new_file_json,
    new_file_of_json, run_writers,
};
#[cfg(feature = "distributed")]
pub(crate) use writer::{non_finite_fields, partition_type_of, with_non_finite, NonFinite};
