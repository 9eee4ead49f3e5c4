//! Writing data files: [`DataFileWriterExec`] turns record batches into Iceberg data files,
//! partitioned by the table's spec, rolled at the target file size, sorted by the table's sort
//! order (DataFusion inserts a spilling sort below it to meet its ordering requirement).

mod delete_files;
mod deletion_vectors;
mod dictionary;
mod dictionary_chunk;
mod exec;
mod locations;
mod parquet_file;
mod sort_order;
mod splice;
mod writer;

pub use delete_files::{
    write_equality_delete_file, write_file_position_deletes, write_position_delete_file,
    DELETE_FILE_PATH_ID, DELETE_POS_ID,
};
pub use deletion_vectors::{write_deletion_vectors, DeletionVector};
pub(crate) use dictionary::plain_columns_of;
#[cfg(test)]
pub(crate) use dictionary_chunk::chunks_closed;
pub(crate) use exec::WriterTally;
pub use exec::{DataFileWriterExec, WrittenFiles};
pub use sort_order::sort_requirement;
pub(crate) use splice::{Computed, FileValues, NewValues, Spliced, Splicer};
pub(crate) use writer::{
    data_file_columns, data_files_schema, decode_data_files, decode_tally, new_file_json,
    new_file_of_json, run_writers,
};
#[cfg(feature = "distributed")]
pub(crate) use writer::{non_finite_fields, partition_type_of, with_non_finite, NonFinite};
