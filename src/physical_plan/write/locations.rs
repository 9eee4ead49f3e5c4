//! Where new data and delete files go: `<data location>/<partition path>/<file name>`, with
//! every partition field name and value form-encoded into one path segment.
//!
//! The data location is `<table location>/data`, or the table's `write.data.path`
//! (`write.folder-storage.path`) when set, which must be an absolute location without `..`
//! segments. Partition values come from the rows written, so a value such as `../../x` or
//! `a/b` must not become directories: like Java's `PartitionSpec.partitionToPath`, names and
//! values are encoded as `application/x-www-form-urlencoded` (`/` → `%2F`, space → `+`).

use datafusion::error::Result;
use iceberg::spec::{PartitionKey, TableMetadata};
use iceberg::writer::file_writer::location_generator::LocationGenerator;

use crate::storage::location::check_location;

/// The properties that move a table's data files, in the order they are honoured.
const DATA_PATH_PROPERTIES: [&str; 2] = ["write.data.path", "write.folder-storage.path"];

/// Locations of a table's new files.
#[derive(Clone, Debug)]
pub(crate) struct FileLocations {
    data: String,
}

impl FileLocations {
    /// The locations for `metadata`'s table; refuses a data path that is not absolute or
    /// climbs with `..`.
    pub(crate) fn new(metadata: &TableMetadata) -> Result<Self> {
        let props = metadata.properties();
        let configured = DATA_PATH_PROPERTIES
            .iter()
            .find_map(|key| props.get(*key).map(|v| (*key, v)));
        let data = match configured {
            Some((key, path)) => {
                check_location(&format!("table property {key}"), path)?;
                path.trim_end_matches('/').to_string()
            }
            None => format!("{}/data", metadata.location().trim_end_matches('/')),
        };
        Ok(Self { data })
    }
}

/// One form-encoded path segment.
fn encode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// `name=value/...` for a partition key, each name and value encoded.
fn partition_path(key: &PartitionKey) -> Option<String> {
    let partition_type = match key.spec().partition_type(key.schema()) {
        Ok(t) => t,
        Err(e) => {
            log::warn!("partition path of spec {}: {e}", key.spec().spec_id());
            return None;
        }
    };
    let types = partition_type.fields();
    let segments: Vec<String> = key
        .spec()
        .fields()
        .iter()
        .zip(types)
        .zip(key.data().iter())
        .map(|((field, ty), value)| {
            let human = field.transform.to_human_string(&ty.field_type, value);
            format!("{}={}", encode(&field.name), encode(&human))
        })
        .collect();
    Some(segments.join("/"))
}

impl LocationGenerator for FileLocations {
    fn generate_location(&self, key: Option<&PartitionKey>, file_name: &str) -> String {
        let partition = key
            .filter(|k| !PartitionKey::is_effectively_none(Some(k)))
            .and_then(partition_path);
        match partition {
            Some(path) => format!("{}/{path}/{file_name}", self.data),
            None => format!("{}/{file_name}", self.data),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_are_one_segment_each() {
        assert_eq!(encode("../../x"), "..%2F..%2Fx");
        assert_eq!(encode("a b/c\\d"), "a+b%2Fc%5Cd");
        assert_eq!(encode("2024-01-01"), "2024-01-01");
        assert_eq!(encode("\0"), "%00");
        assert_eq!(encode("ü"), "%C3%BC");
    }
}
