//! Naming and writing table metadata files (`<location>/metadata/<version>-<uuid>.metadata.json`).

use std::str::FromStr;

use datafusion::error::Result;
use iceberg::io::FileIO;
use iceberg::spec::TableMetadata;
use iceberg::MetadataLocation;

use crate::error::IcebergResultExt;

/// The location of the next metadata file of a table.
///
/// Follows the current file's version when its name has the standard form; otherwise (tables
/// written with other naming, such as `v3.metadata.json`) the version is the length of the
/// metadata log, so names stay increasing.
pub(crate) fn new_metadata_location(
    table_location: &str,
    current: Option<&str>,
    new_metadata: &TableMetadata,
) -> MetadataLocation {
    let table_location = table_location.trim_end_matches('/');
    match current.map(MetadataLocation::from_str) {
        Some(Ok(cur)) => cur.with_next_version().with_new_metadata(new_metadata),
        _ => {
            let base = MetadataLocation::new_with_metadata(table_location, new_metadata);
            let mut loc = base;
            for _ in 0..new_metadata.metadata_log().len() {
                loc = loc.with_next_version();
            }
            loc
        }
    }
}

/// Writes `metadata` to `location`, failing if a file is already there.
pub(crate) async fn write_metadata(
    file_io: &FileIO,
    metadata: &TableMetadata,
    location: &MetadataLocation,
) -> Result<String> {
    let path = location.to_string();
    if file_io.exists(&path).await.df()? {
        return Err(datafusion::error::DataFusionError::Execution(format!(
            "metadata file {path} already exists"
        )));
    }
    metadata.write_to(file_io, location).await.df()?;
    Ok(path)
}
