//! The DataFusion face of one Iceberg table: [`IcebergTableProvider`] (scan, INSERT) and the
//! `CREATE EXTERNAL TABLE ... STORED AS ICEBERG` factory.

pub(crate) mod alter;
mod by_path;
pub(crate) mod create;
pub(crate) mod describe;
mod factory;
mod function;
pub(crate) mod metadata;
pub(crate) mod metadata_columns;
pub(crate) mod overwrite;
pub(crate) mod provider;
pub(crate) mod replace;
mod snapshots;
pub(crate) mod spec;
pub(crate) mod subquery;
pub(crate) mod version;

pub use by_path::{find_metadata_file, open_table_at};
pub use factory::IcebergTableFactory;
pub use function::IcebergScanFunction;
pub use metadata::{IcebergMetadataFunction, IcebergMetadataTable, MetadataKind};
pub use provider::{IcebergTableProvider, ProviderPin};
pub use snapshots::IcebergSnapshotsFunction;
pub use spec::{parse_partitioning, parse_sort_order, TableDefinition};

/// The statements of `sql`, split at the semicolons between them (not those in quotes or
/// comments), each as its text. Statements [`crate::IcebergSession::sql`] runs itself
/// (`ALTER TABLE ... ADD COLUMN p.z`, for one) are not all DataFusion's SQL, so a script is split
/// before anything parses it. Text that does not tokenize is one statement (its parser says
/// what is wrong).
pub fn split_statements(sql: &str) -> Vec<String> {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize() else {
        return match sql.trim() {
            "" => vec![],
            text => vec![text.to_string()],
        };
    };
    let mut out = vec![];
    let mut current = String::new();
    for token in tokens {
        match token {
            Token::SemiColon => out.push(std::mem::take(&mut current)),
            other => current.push_str(&other.to_string()),
        }
    }
    out.push(current);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && !is_only_comments(s))
        .collect()
}

/// Whether `text` holds nothing but comments.
fn is_only_comments(text: &str) -> bool {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    Tokenizer::new(&GenericDialect {}, text)
        .tokenize()
        .map(|tokens| tokens.iter().all(|t| matches!(t, Token::Whitespace(_))))
        .unwrap_or(false)
}

/// `plan` with its columns as `schema`'s, by position (cast to their types and named as they
/// are, as `INSERT` takes a query's columns); what writes the rows of `plan` into a table.
pub(crate) fn by_position(
    plan: datafusion::logical_expr::LogicalPlan,
    schema: &arrow::datatypes::Schema,
    what: &str,
) -> datafusion::error::Result<datafusion::logical_expr::LogicalPlan> {
    use datafusion::logical_expr::{col, ExprSchemable, LogicalPlanBuilder};
    let given = plan.schema().clone();
    if given.fields().len() != schema.fields().len() {
        return Err(datafusion::error::DataFusionError::Plan(format!(
            "{what}: the data has {} columns, the table {}",
            given.fields().len(),
            schema.fields().len()
        )));
    }
    let exprs = given
        .columns()
        .into_iter()
        .zip(schema.fields())
        .map(|(c, f)| Ok(col(c).cast_to(f.data_type(), &given)?.alias(f.name())))
        .collect::<datafusion::error::Result<Vec<_>>>()?;
    LogicalPlanBuilder::from(plan).project(exprs)?.build()
}

/// Whether `sql` is a statement [`crate::IcebergSession::sql`] runs itself rather than handing
/// to DataFusion as it is (`ALTER TABLE`, `DESCRIBE`, `SHOW TBLPROPERTIES`, `CALL system.<procedure>(..)`,
/// `DELETE`/`UPDATE` with subqueries, `UPDATE ... FROM`, `DROP TABLE`, `CREATE OR REPLACE`).
pub fn is_session_statement(sql: &str) -> bool {
    alter::parse(sql).is_some()
        || describe::parse(sql).is_some()
        || create::parse(sql).is_some()
        || overwrite::parse(sql).is_some()
        || crate::maintenance::is_call(sql)
        || version::mentions(sql)
        || crate::config::reset_statement(sql).is_some()
        || crate::table::subquery::one_statement(sql)
            .is_some_and(|s| crate::table::subquery::runs_in_session(&s))
}

#[cfg(test)]
mod tests {
    #[test]
    fn scripts_split_at_semicolons_outside_quotes_and_comments() {
        let script = "CREATE SCHEMA ns; -- a comment; still one\nINSERT INTO t VALUES ('a;b');\n\
                      ALTER TABLE t ADD COLUMN p.z DOUBLE /* ; */;; -- trailing\n";
        let got = super::split_statements(script);
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0], "CREATE SCHEMA ns");
        assert!(got[1].ends_with("VALUES ('a;b')"), "{}", got[1]);
        assert!(
            got[2].starts_with("ALTER TABLE t ADD COLUMN p.z DOUBLE"),
            "{}",
            got[2]
        );
        assert!(super::split_statements(" ; -- nothing\n").is_empty());
    }
}
