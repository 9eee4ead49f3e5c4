//! The options of `rewrite_data_files`, by Spark's names and with its defaults.

use std::collections::BTreeMap;

use datafusion::error::{DataFusionError, Result};
use iceberg::spec::TableMetadata;

use super::zorder::{ZOrderOptions, DEFAULT_MAX_OUTPUT_SIZE, DEFAULT_VAR_LENGTH_CONTRIBUTION};
use crate::error::IcebergResultExt;

/// Every option `rewrite_data_files` takes, with what it means.
const KNOWN: &[(&str, &str)] = &[
    (
        "target-file-size-bytes",
        "size of the files written (default: the table's write.target-file-size-bytes)",
    ),
    (
        "min-file-size-bytes",
        "files smaller than this are rewritten (default: 75% of the target)",
    ),
    (
        "max-file-size-bytes",
        "files larger than this are rewritten (default: 180% of the target)",
    ),
    (
        "min-input-files",
        "a partition's group of files is rewritten when it holds this many (default 5)",
    ),
    (
        "delete-file-threshold",
        "files with at least this many delete files are rewritten (default: never)",
    ),
    (
        "delete-ratio-threshold",
        "files whose known deleted rows are at least this share are rewritten (default 0.3)",
    ),
    (
        "rewrite-all",
        "rewrite every file the filter selects (default false)",
    ),
    (
        "max-file-group-size-bytes",
        "the most bytes one group rewrites (default 100 GiB)",
    ),
    (
        "partial-progress.enabled",
        "commit groups as they finish instead of all at once (default false)",
    ),
    (
        "partial-progress.max-commits",
        "the most commits partial progress makes (default 10)",
    ),
    (
        "max-concurrent-file-group-rewrites",
        "groups rewritten at the same time (default 5)",
    ),
    (
        "remove-dangling-deletes",
        "also remove delete files that apply to no data file (default false)",
    ),
    (
        "use-starting-sequence-number",
        "new files keep the data sequence number of the snapshot read, so equality deletes \
         committed meanwhile still apply (default true)",
    ),
    (
        "var-length-contribution",
        "bytes each string or binary value gives a z-order key (default 8)",
    ),
    (
        "max-output-size",
        "the most bytes of a z-order key (default 2147483647)",
    ),
];

/// How `rewrite_data_files` chooses and writes files.
#[derive(Debug, Clone, PartialEq)]
pub struct RewriteOptions {
    /// `target-file-size-bytes`.
    pub target_file_size: u64,
    /// `min-file-size-bytes`.
    pub min_file_size: u64,
    /// `max-file-size-bytes`.
    pub max_file_size: u64,
    /// `min-input-files`.
    pub min_input_files: usize,
    /// `delete-file-threshold`.
    pub delete_file_threshold: usize,
    /// `delete-ratio-threshold`.
    pub delete_ratio_threshold: f64,
    /// `rewrite-all`.
    pub rewrite_all: bool,
    /// `max-file-group-size-bytes`.
    pub max_file_group_size: u64,
    /// `partial-progress.enabled`.
    pub partial_progress: bool,
    /// `partial-progress.max-commits`.
    pub max_commits: usize,
    /// `max-concurrent-file-group-rewrites`.
    pub max_concurrent_groups: usize,
    /// `use-starting-sequence-number`.
    pub use_starting_sequence_number: bool,
    /// `remove-dangling-deletes`.
    pub remove_dangling_deletes: bool,
    /// `var-length-contribution` and `max-output-size` (z-order keys).
    pub zorder: ZOrderOptions,
}

fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T> {
    value.trim().parse().map_err(|_| {
        DataFusionError::Plan(format!(
            "rewrite_data_files option '{key}' must be a number, got '{value}'"
        ))
    })
}

fn positive<T: std::str::FromStr + PartialOrd + Default>(key: &str, value: &str) -> Result<T> {
    let n: T = number(key, value)?;
    if n <= T::default() {
        return Err(DataFusionError::Plan(format!(
            "rewrite_data_files option '{key}' must be greater than 0, got '{value}'"
        )));
    }
    Ok(n)
}

fn boolean(key: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(DataFusionError::Plan(format!(
            "rewrite_data_files option '{key}' must be 'true' or 'false', got '{value}'"
        ))),
    }
}

impl RewriteOptions {
    /// The options `given` for a table with `metadata`: unknown names, malformed values and
    /// sizes out of order are errors.
    pub fn parse(metadata: &TableMetadata, given: &BTreeMap<String, String>) -> Result<Self> {
        if let Some(unknown) = given.keys().find(|k| !KNOWN.iter().any(|(n, _)| n == k)) {
            let names: Vec<&str> = KNOWN.iter().map(|(n, _)| *n).collect();
            return Err(DataFusionError::Plan(format!(
                "rewrite_data_files has no option '{unknown}' (options: {})",
                names.join(", ")
            )));
        }
        let get = |key: &str| given.get(key).map(String::as_str);
        let target_file_size: u64 = match get("target-file-size-bytes") {
            Some(v) => positive("target-file-size-bytes", v)?,
            None => {
                metadata
                    .table_properties()
                    .df()?
                    .write_target_file_size_bytes as u64
            }
        };
        let min_file_size = match get("min-file-size-bytes") {
            Some(v) => number("min-file-size-bytes", v)?,
            None => (target_file_size as f64 * 0.75) as u64,
        };
        let max_file_size = match get("max-file-size-bytes") {
            Some(v) => positive("max-file-size-bytes", v)?,
            None => (target_file_size as f64 * 1.8) as u64,
        };
        if min_file_size > target_file_size || target_file_size > max_file_size {
            return Err(DataFusionError::Plan(format!(
                "rewrite_data_files needs min-file-size-bytes ({min_file_size}) <= \
                 target-file-size-bytes ({target_file_size}) <= max-file-size-bytes \
                 ({max_file_size})"
            )));
        }
        let delete_ratio_threshold: f64 = match get("delete-ratio-threshold") {
            Some(v) => number("delete-ratio-threshold", v)?,
            None => 0.3,
        };
        if !(delete_ratio_threshold > 0.0 && delete_ratio_threshold <= 1.0) {
            return Err(DataFusionError::Plan(format!(
                "rewrite_data_files option 'delete-ratio-threshold' must be in (0, 1], got \
                 {delete_ratio_threshold}"
            )));
        }
        Ok(Self {
            target_file_size,
            min_file_size,
            max_file_size,
            min_input_files: match get("min-input-files") {
                Some(v) => positive("min-input-files", v)?,
                None => 5,
            },
            delete_file_threshold: match get("delete-file-threshold") {
                Some(v) => positive("delete-file-threshold", v)?,
                None => usize::MAX,
            },
            delete_ratio_threshold,
            rewrite_all: get("rewrite-all")
                .map(|v| boolean("rewrite-all", v))
                .transpose()?
                .unwrap_or(false),
            max_file_group_size: match get("max-file-group-size-bytes") {
                Some(v) => positive("max-file-group-size-bytes", v)?,
                None => 100 << 30,
            },
            partial_progress: get("partial-progress.enabled")
                .map(|v| boolean("partial-progress.enabled", v))
                .transpose()?
                .unwrap_or(false),
            max_commits: match get("partial-progress.max-commits") {
                Some(v) => positive("partial-progress.max-commits", v)?,
                None => 10,
            },
            max_concurrent_groups: match get("max-concurrent-file-group-rewrites") {
                Some(v) => positive("max-concurrent-file-group-rewrites", v)?,
                None => 5,
            },
            use_starting_sequence_number: get("use-starting-sequence-number")
                .map(|v| boolean("use-starting-sequence-number", v))
                .transpose()?
                .unwrap_or(true),
            remove_dangling_deletes: get("remove-dangling-deletes")
                .map(|v| boolean("remove-dangling-deletes", v))
                .transpose()?
                .unwrap_or(false),
            zorder: ZOrderOptions {
                var_length_contribution: match get("var-length-contribution") {
                    Some(v) => positive("var-length-contribution", v)?,
                    None => DEFAULT_VAR_LENGTH_CONTRIBUTION,
                },
                max_output_size: match get("max-output-size") {
                    Some(v) => positive("max-output-size", v)?,
                    None => DEFAULT_MAX_OUTPUT_SIZE,
                },
            },
        })
    }
}

/// How the rows of a file group are laid out in the new files.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RewriteStrategy {
    /// Combine files as they are, rows in file order (Spark's bin-pack; `Sort` sorts).
    #[default]
    BinPack,
    /// Sort the rows of each group: by this order (`"c1 DESC NULLS LAST, c2"`), by a z-order
    /// of columns (`"zorder(c1, c2)"`), or by the table's sort order when `None`.
    Sort(Option<String>),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata() -> TableMetadata {
        use iceberg::spec::{
            NestedField, PartitionSpec, PrimitiveType, Schema, SortOrder, TableMetadataBuilder,
            Type,
        };
        let schema = Schema::builder()
            .with_fields(vec![NestedField::required(
                1,
                "id",
                Type::Primitive(PrimitiveType::Long),
            )
            .into()])
            .build()
            .unwrap();
        TableMetadataBuilder::new(
            schema,
            PartitionSpec::unpartition_spec(),
            SortOrder::unsorted_order(),
            "file:///t".to_string(),
            iceberg::spec::FormatVersion::V2,
            [(
                "write.target-file-size-bytes".to_string(),
                "1000".to_string(),
            )]
            .into(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata
    }

    fn parse(pairs: &[(&str, &str)]) -> Result<RewriteOptions> {
        let given = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RewriteOptions::parse(&metadata(), &given)
    }

    #[test]
    fn defaults_follow_the_table_target() {
        let o = parse(&[]).unwrap();
        assert_eq!(
            (o.target_file_size, o.min_file_size, o.max_file_size),
            (1000, 750, 1800)
        );
        assert_eq!(o.min_input_files, 5);
        assert_eq!(o.delete_file_threshold, usize::MAX);
        assert!(o.use_starting_sequence_number && !o.partial_progress && !o.rewrite_all);
        let o = parse(&[("target-file-size-bytes", "100"), ("min-input-files", "2")]).unwrap();
        assert_eq!(
            (o.min_file_size, o.max_file_size, o.min_input_files),
            (75, 180, 2)
        );
    }

    #[test]
    fn bad_options_are_refused_by_name() {
        let e = |pairs: &[(&str, &str)]| parse(pairs).unwrap_err().to_string();
        assert!(e(&[("min-input-file", "2")]).contains("no option 'min-input-file'"));
        assert!(e(&[("min-input-files", "two")]).contains("must be a number"));
        assert!(e(&[("min-input-files", "0")]).contains("greater than 0"));
        assert!(e(&[("rewrite-all", "yes")]).contains("'true' or 'false'"));
        assert!(e(&[("min-file-size-bytes", "5000")]).contains("<= target-file-size-bytes"));
        assert!(e(&[("delete-ratio-threshold", "1.5")]).contains("(0, 1]"));
    }
}
