//! [`IcebergOptions`]: this crate's settings as a DataFusion config extension, so they are set
//! per session with `SET iceberg.<key> = <value>` (or in Rust through `SessionConfig`).

use datafusion::common::config::ConfigExtension;
use datafusion::common::extensions_options;
use datafusion::config::ConfigOptions;

extensions_options! {
    /// Settings of iceberg-exec's operators. Register with
    /// `SessionConfig::with_option_extension(IcebergOptions::default())` ([`crate::IcebergSession`]
    /// does); unregistered sessions use the defaults.
    pub struct IcebergOptions {
        /// Spill partitions per round of the equality-delete join when its keys do not fit in
        /// memory (Grace hash join fanout).
        pub equality_delete_fanout: usize, default = 16
        /// Position delete rows (from the delete files' manifest entries) per scan partition
        /// above which the partition applies them with a sorted, spilling anti-join instead of
        /// in-memory bitmaps (partitions whose bitmaps do not fit in the pool switch too).
        pub position_delete_join_threshold: u64, default = crate::physical_plan::positional_delete::DEFAULT_JOIN_THRESHOLD
        /// Live delete files in a snapshot (from its manifest list's counts) above which scan
        /// planning streams the delete manifests against the scan's data files, holding only
        /// the delete entries that apply, instead of indexing every delete entry in memory.
        pub planning_threshold: u64, default = crate::file_planning::DEFAULT_PLANNING_THRESHOLD
        /// How `DELETE` removes rows from files it cannot drop whole: `copy-on-write` or
        /// `merge-on-read`; empty means the table's `write.delete.mode` (copy-on-write when unset).
        pub delete_mode: String, default = String::new()
        /// How `UPDATE` changes rows: `copy-on-write` or `merge-on-read`; empty means the
        /// table's `write.update.mode` (copy-on-write when unset).
        pub update_mode: String, default = String::new()
        /// How `MERGE` changes rows: `copy-on-write` or `merge-on-read`; empty means the
        /// table's `write.merge.mode` (copy-on-write when unset).
        pub merge_mode: String, default = String::new()
        /// What `INSERT OVERWRITE` without a `PARTITION` clause replaces: `static` (every row
        /// of the table; with `PARTITION (c = v)`, the rows where `c = v`) or `dynamic` (the
        /// partitions the new rows fall into, as Spark's `partitionOverwriteMode=dynamic`).
        pub overwrite_mode: String, default = "static".to_string()
        /// The branch writes to tables with `write.wap.enabled=true` go to, and their reads
        /// come from once it exists (Spark's `spark.wap.branch`); made at `main`'s head by the
        /// first write. Empty: `main`.
        pub write_branch: String, default = String::new()
        /// The write-audit-publish id writes to tables with `write.wap.enabled=true` are staged
        /// under (Spark's `spark.wap.id`): their snapshots are added with `wap.id` in their
        /// summary and no branch moves, until `CALL system.publish_changes` or
        /// `cherrypick_snapshot`. Empty: writes commit.
        pub wap_id: String, default = String::new()
        /// Bytes the hash joins' build sides may take (the session's memory limit, when
        /// `IcebergSession` has one): where the build sides held at the same time may not
        /// fit (estimated from statistics), the largest, and any of unknown size, are planned
        /// as sort-merge joins, which spill. 0: no bound.
        pub join_memory_budget: u64, default = 0
        /// Whether copy-on-write rewrites by splice where it can: the row groups that keep
        /// every row, and the columns an `UPDATE` or `MERGE` does not change, copied as they
        /// are. `false` decodes and encodes every row of the files it rewrites.
        pub copy_on_write_splice: bool, default = true
    }
}

impl ConfigExtension for IcebergOptions {
    const PREFIX: &'static str = "iceberg";
}

impl IcebergOptions {
    /// The options of a session (defaults when the extension is not registered).
    pub fn from_config(options: &ConfigOptions) -> Self {
        options
            .extensions
            .get::<IcebergOptions>()
            .cloned()
            .unwrap_or_default()
    }
}

/// The option a `RESET iceberg.<key>` statement names (`None` for other statements):
/// DataFusion resets its own options only, so [`crate::IcebergSession::sql`] resets these.
pub(crate) fn reset_statement(sql: &str) -> Option<String> {
    let text = sql.trim().trim_end_matches(';').trim_end();
    let (verb, key) = text.split_once(char::is_whitespace)?;
    if !verb.eq_ignore_ascii_case("reset") {
        return None;
    }
    let key = key.trim();
    let (prefix, rest) = key.split_once('.')?;
    (prefix.eq_ignore_ascii_case(IcebergOptions::PREFIX)
        && !rest.is_empty()
        && !rest.contains(char::is_whitespace))
    .then(|| rest.to_ascii_lowercase())
}

/// Resets the option `key` (without the `iceberg.` prefix) of `options` to its default.
pub(crate) fn reset(options: &mut ConfigOptions, key: &str) -> datafusion::error::Result<()> {
    use datafusion::common::config::ExtensionOptions;
    let unknown = || {
        datafusion::error::DataFusionError::Configuration(format!(
            "iceberg.{key} is not an option (there are: {})",
            IcebergOptions::default()
                .entries()
                .iter()
                .map(|e| e.key.trim_start_matches("iceberg.").to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    };
    let default = IcebergOptions::default()
        .entries()
        .into_iter()
        .find(|e| e.key.trim_start_matches("iceberg.") == key)
        .ok_or_else(unknown)?
        .value
        .unwrap_or_default();
    match options.extensions.get_mut::<IcebergOptions>() {
        Some(o) => ExtensionOptions::set(o, key, &default),
        None => Err(datafusion::error::DataFusionError::Configuration(
            "this session has no iceberg options to reset".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reset_statements_name_an_option() {
        use super::reset_statement;
        assert_eq!(
            reset_statement("RESET iceberg.write_branch;").as_deref(),
            Some("write_branch")
        );
        assert_eq!(
            reset_statement("reset ICEBERG.wap_id").as_deref(),
            Some("wap_id")
        );
        assert_eq!(
            reset_statement("RESET datafusion.execution.batch_size"),
            None
        );
        assert_eq!(reset_statement("RESET iceberg."), None);
        assert_eq!(reset_statement("SELECT 1"), None);
    }

    #[test]
    fn reset_restores_the_default() {
        use super::{reset, IcebergOptions};
        let mut options = datafusion::config::ConfigOptions::default();
        options.extensions.insert(IcebergOptions::default());
        options.set("iceberg.wap_id", "w1").unwrap();
        options.set("iceberg.overwrite_mode", "dynamic").unwrap();
        assert_eq!(IcebergOptions::from_config(&options).wap_id, "w1");
        reset(&mut options, "wap_id").unwrap();
        reset(&mut options, "overwrite_mode").unwrap();
        let now = IcebergOptions::from_config(&options);
        assert_eq!(now.wap_id, "");
        assert_eq!(now.overwrite_mode, "static");
        let e = reset(&mut options, "nope").unwrap_err().to_string();
        assert!(e.contains("iceberg.nope is not an option"), "{e}");
    }
}
