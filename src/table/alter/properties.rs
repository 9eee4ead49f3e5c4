//! `ALTER TABLE <name> SET TBLPROPERTIES ('k' = 'v', ...)` and `ALTER TABLE <name> UNSET
//! TBLPROPERTIES [IF EXISTS] ('k', ...)`, the statements Spark users set table properties with.
//!
//! `'format-version'` upgrades the table's format (1 → 2 → 3, never down): existing files stay
//! valid; on v3, new deletes become deletion vectors and rows get row ids. Values of the write
//! modes are checked before anything is committed; a refused statement changes nothing.

use std::collections::HashMap;

use datafusion::error::{DataFusionError, Result};
use iceberg::spec::FormatVersion;
use iceberg::table::Table;
use iceberg::TableRequirement;

use crate::commit::Proposal;
use crate::error::IcebergResultExt;

/// What an `ALTER TABLE ... TBLPROPERTIES` statement changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PropertyChange {
    /// `SET TBLPROPERTIES`: keys and values, in order.
    Set(Vec<(String, String)>),
    /// `UNSET TBLPROPERTIES`: keys; `if_exists` tolerates missing ones.
    Unset { keys: Vec<String>, if_exists: bool },
}

/// The table properties whose values are checked before they are set.
const MODE_PROPERTIES: [&str; 3] = ["write.delete.mode", "write.update.mode", "write.merge.mode"];

/// The format version `value` names.
pub(crate) fn format_version(value: &str) -> Result<FormatVersion> {
    match value.trim() {
        "1" => Ok(FormatVersion::V1),
        "2" => Ok(FormatVersion::V2),
        "3" => Ok(FormatVersion::V3),
        other => Err(DataFusionError::Plan(format!(
            "format-version must be 1, 2 or 3, got '{other}'"
        ))),
    }
}

/// The metadata `change` makes of `table` (`None` when it changes nothing). Checks everything
/// before anything is written.
pub(super) fn change(table: &Table, change: &PropertyChange) -> Result<Option<Proposal>> {
    let ident = table.identifier();
    let metadata = table.metadata();
    let mut builder = metadata
        .clone()
        .into_builder(table.metadata_location().map(str::to_string));
    match change {
        PropertyChange::Set(pairs) => {
            let mut props: HashMap<String, String> = HashMap::new();
            for (k, v) in pairs {
                if k == "format-version" {
                    let wanted = format_version(v)?;
                    let current = metadata.format_version();
                    if wanted < current {
                        return Err(DataFusionError::Plan(format!(
                            "table '{ident}' is format v{}: a table cannot go back to v{v}",
                            current as u8
                        )));
                    }
                    if wanted > current {
                        builder = builder.upgrade_format_version(wanted).df()?;
                    }
                    continue;
                }
                if MODE_PROPERTIES.contains(&k.as_str())
                    && !matches!(
                        v.to_ascii_lowercase().as_str(),
                        "copy-on-write" | "merge-on-read"
                    )
                {
                    return Err(DataFusionError::Plan(format!(
                        "{k} must be 'copy-on-write' or 'merge-on-read', got '{v}'"
                    )));
                }
                props.insert(k.clone(), v.clone());
            }
            if !props.is_empty() {
                builder = builder.set_properties(props).df()?;
            }
        }
        PropertyChange::Unset { keys, if_exists } => {
            if let Some(missing) = keys
                .iter()
                .find(|k| !*if_exists && !metadata.properties().contains_key(*k))
            {
                return Err(DataFusionError::Plan(format!(
                    "table '{ident}' has no property '{missing}' (UNSET TBLPROPERTIES IF \
                     EXISTS ignores missing ones)"
                )));
            }
            if keys.iter().any(|k| k == "format-version") {
                return Err(DataFusionError::Plan(
                    "format-version cannot be unset".into(),
                ));
            }
            builder = builder.remove_properties(keys).df()?;
        }
    }
    let requirements = vec![
        TableRequirement::UuidMatch {
            uuid: metadata.uuid(),
        },
        TableRequirement::RefSnapshotIdMatch {
            r#ref: crate::commit::MAIN_BRANCH.to_string(),
            snapshot_id: metadata.current_snapshot_id(),
        },
    ];
    Proposal::of(builder, requirements)
}

#[cfg(test)]
mod tests {
    use super::super::parse::{parse, Action};
    use super::*;

    fn parsed(sql: &str) -> (Vec<String>, PropertyChange) {
        let alter = parse(sql).expect("an ALTER TABLE").expect("well formed");
        match alter.action {
            Action::Properties(change) => (alter.name, change),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn statements_parse() {
        assert_eq!(
            parsed("ALTER TABLE ns.t SET TBLPROPERTIES ('format-version' = '3', 'a.b' = '1');"),
            (
                vec!["ns".into(), "t".into()],
                PropertyChange::Set(vec![
                    ("format-version".into(), "3".into()),
                    ("a.b".into(), "1".into())
                ]),
            )
        );
        assert_eq!(
            parsed("alter table t unset tblproperties if exists ('x', \"y\")"),
            (
                vec!["t".into()],
                PropertyChange::Unset {
                    keys: vec!["x".into(), "y".into()],
                    if_exists: true
                },
            )
        );
        // Other statements are DataFusion's.
        assert!(parse("SELECT 1").is_none());
        // Malformed ones are refused with the expected form.
        for bad in [
            "ALTER TABLE SET TBLPROPERTIES ('a' = 'b')",
            "ALTER TABLE t SET TBLPROPERTIES 'a' = 'b'",
            "ALTER TABLE t SET TBLPROPERTIES (a = 'b')",
            "ALTER TABLE t SET TBLPROPERTIES ('a')",
            "ALTER TABLE t SET TBLPROPERTIES ()",
            "ALTER TABLE ns..t SET TBLPROPERTIES ('a' = 'b')",
        ] {
            let e = parse(bad).expect(bad).unwrap_err().to_string();
            assert!(e.contains("expected ALTER TABLE name"), "{bad}: {e}");
        }
        assert!(format_version("4").is_err());
    }
}
