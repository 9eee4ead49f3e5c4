//! Spark's `CREATE TABLE`, the form Iceberg's documentation writes:
//!
//! ```text
//! CREATE TABLE [IF NOT EXISTS] t [(c type [NOT NULL] [COMMENT '..'], ..)] [USING iceberg]
//!     [PARTITIONED BY (term, ..)] [LOCATION '..'] [COMMENT '..'] [TBLPROPERTIES ('k' = 'v', ..)]
//!     [AS query]
//! ```
//!
//! A `CREATE TABLE` with none of Spark's clauses (`USING`, `PARTITIONED BY`, `LOCATION`,
//! `COMMENT`, `TBLPROPERTIES`) stays DataFusion's. Columns are numbered as Java numbers a new
//! table's (the top-level columns first, then the fields inside each); partition fields are
//! named as Java's spec builder names them (`id_bucket`, `ts_day`). `TBLPROPERTIES
//! ('format-version' = '3')` sets the format version; `COMMENT` is the `comment` property. With
//! `AS query`, the columns are the query's and its rows are inserted in a second commit; when
//! that fails, the new table is dropped again.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::sql::sqlparser::ast::DataType as SqlType;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Location, Token};
use iceberg::spec::{FormatVersion, NestedField, Schema, SortOrder, Type, UnboundPartitionSpec};
use iceberg::TableCreation;

use super::alter::{
    format_version, iceberg_type, key_values, listed, normalised, path, sql_err, term, word, words,
    DdlDialect, FieldIds, Term,
};
use super::spec::{partition_field_name, PartitionTerm};

/// A column as the statement defines it.
#[derive(Debug, Clone)]
pub(crate) struct ColumnSpec {
    pub name: String,
    pub data_type: SqlType,
    pub not_null: bool,
    pub comment: Option<String>,
}

/// One Spark `CREATE TABLE` statement.
#[derive(Debug, Clone)]
pub(crate) struct CreateTable {
    pub name: Vec<String>,
    pub or_replace: bool,
    pub if_not_exists: bool,
    pub columns: Vec<ColumnSpec>,
    pub partitioned_by: Vec<Term>,
    pub location: Option<String>,
    pub comment: Option<String>,
    pub properties: Vec<(String, String)>,
    /// The text of `AS query`.
    pub query: Option<String>,
}

/// Parses `sql` when it is a `CREATE TABLE` with one of Spark's clauses (`None` otherwise).
pub(crate) fn parse(sql: &str) -> Option<Result<CreateTable>> {
    let dialect = DdlDialect;
    let mut p = Parser::new(&dialect).try_with_sql(sql).ok()?;
    if !word(&mut p, "create") {
        return None;
    }
    let or_replace = words(&mut p, &["or", "replace"]);
    if !word(&mut p, "table") {
        return None;
    }
    let parsed = statement(&mut p, sql, or_replace);
    match parsed {
        Ok(Some(c)) => Some(Ok(c)),
        Ok(None) => None,
        Err(e) => Some(Err(DataFusionError::Plan(format!("CREATE TABLE: {e}")))),
    }
}

/// The byte offset of `at` in `sql`.
fn offset(sql: &str, at: Location) -> usize {
    let mut line = 1;
    let mut column = 1;
    for (i, ch) in sql.char_indices() {
        if line == at.line && column == at.column {
            return i;
        }
        if ch == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    sql.len()
}

fn statement(
    p: &mut Parser,
    sql: &str,
    or_replace: bool,
) -> std::result::Result<Option<CreateTable>, String> {
    let if_not_exists = words(p, &["if", "not", "exists"]);
    let name = path(p)?;
    let mut create = CreateTable {
        name,
        or_replace,
        if_not_exists,
        columns: vec![],
        partitioned_by: vec![],
        location: None,
        comment: None,
        properties: vec![],
        query: None,
    };
    if p.peek_token().token == Token::LParen {
        create.columns = listed(p, column)?;
    }
    let mut spark = false;
    loop {
        if word(p, "using") {
            let format = normalised(&p.parse_identifier().map_err(sql_err)?);
            if format != "iceberg" {
                return Err(format!(
                    "USING {format}: tables of this catalog are Iceberg tables (USING iceberg)"
                ));
            }
        } else if words(p, &["partitioned", "by"]) {
            if !p.consume_token(&Token::LParen) {
                return Err("PARTITIONED BY takes a list in parentheses".into());
            }
            let mut terms = vec![term(p)?];
            while p.consume_token(&Token::Comma) {
                terms.push(term(p)?);
            }
            if !p.consume_token(&Token::RParen) {
                return Err(format!("expected ')' at '{}'", p.peek_token().token));
            }
            create.partitioned_by = terms;
        } else if word(p, "location") {
            create.location = Some(p.parse_literal_string().map_err(sql_err)?);
        } else if word(p, "comment") {
            create.comment = Some(p.parse_literal_string().map_err(sql_err)?);
        } else if word(p, "tblproperties") {
            create.properties = key_values(p, false)
                .map_err(|what| format!("TBLPROPERTIES: {what} (expected ('key' = 'value', ...))"))?
                .1;
        } else {
            break;
        }
        spark = true;
    }
    if !spark {
        return Ok(None);
    }
    if word(p, "as") {
        let start = offset(sql, p.peek_token().span.start);
        let query = sql[start..].trim().trim_end_matches(';').trim().to_string();
        if query.is_empty() {
            return Err("AS needs a query".into());
        }
        create.query = Some(query);
        return Ok(Some(create));
    }
    while p.consume_token(&Token::SemiColon) {}
    match p.peek_token().token {
        Token::EOF => Ok(Some(create)),
        t => Err(format!("unexpected '{t}'")),
    }
}

fn column(p: &mut Parser) -> std::result::Result<ColumnSpec, String> {
    let name = normalised(&p.parse_identifier().map_err(sql_err)?);
    let data_type = p.parse_data_type().map_err(sql_err)?;
    let mut spec = ColumnSpec {
        name,
        data_type,
        not_null: false,
        comment: None,
    };
    loop {
        if words(p, &["not", "null"]) {
            spec.not_null = true;
        } else if word(p, "comment") {
            spec.comment = Some(p.parse_literal_string().map_err(sql_err)?);
        } else {
            return Ok(spec);
        }
    }
}

impl CreateTable {
    /// This statement replacing a table of format version `current`: its format version is
    /// `current` unless the statement names one.
    pub(crate) fn replacing(&self, current: FormatVersion) -> CreateTable {
        let mut out = self.clone();
        if !out.properties.iter().any(|(k, _)| k == "format-version") {
            out.properties
                .push(("format-version".to_string(), (current as u8).to_string()));
        }
        out
    }

    /// Whether the statement sets the table property `key` (`TBLPROPERTIES`).
    pub(crate) fn sets(&self, key: &str) -> bool {
        self.properties.iter().any(|(k, _)| k == key)
    }

    /// The format version and the other properties (with the `comment` and this crate's
    /// default compression).
    fn version_and_properties(&self) -> Result<(FormatVersion, HashMap<String, String>)> {
        let mut version = FormatVersion::V2;
        let mut props = HashMap::new();
        for (k, v) in &self.properties {
            if k == "format-version" {
                version = format_version(v)?;
                continue;
            }
            props.insert(k.clone(), v.clone());
        }
        if let Some(comment) = &self.comment {
            props.insert("comment".to_string(), comment.clone());
        }
        props
            .entry("write.parquet.compression-codec".to_string())
            .or_insert_with(|| "zstd".to_string());
        Ok((version, props))
    }

    /// The columns as an Iceberg schema, numbered as Java numbers a new table's.
    fn schema(&self, version: FormatVersion) -> Result<Schema> {
        let mut ids = FieldIds { last: 0 };
        let top: Vec<i32> = self.columns.iter().map(|_| ids.next()).collect();
        let mut fields = vec![];
        for (c, id) in self.columns.iter().zip(top) {
            let t = iceberg_type(&c.data_type, version, &mut ids)?;
            let mut f = NestedField::new(id, c.name.clone(), t, c.not_null);
            f.doc = c.comment.clone();
            fields.push(Arc::new(f));
        }
        Schema::builder()
            .with_fields(fields)
            .build()
            .map_err(|e| DataFusionError::Plan(format!("CREATE TABLE: {e}")))
    }

    /// The creation request for `table` with `schema` (from the columns, or the query's).
    pub(crate) fn creation(&self, table: &str, schema: Option<Schema>) -> Result<TableCreation> {
        let (version, properties) = self.version_and_properties()?;
        let schema = match schema {
            Some(s) => s,
            None => self.schema(version)?,
        };
        let mut spec = UnboundPartitionSpec::builder();
        for t in &self.partitioned_by {
            let column = t.column.join(".");
            let field = schema.field_by_name(&column).ok_or_else(|| {
                DataFusionError::Plan(format!("PARTITIONED BY: no column '{column}'"))
            })?;
            if !matches!(field.field_type.as_ref(), Type::Primitive(_)) {
                return Err(DataFusionError::Plan(format!(
                    "PARTITIONED BY: '{column}' is not a primitive column"
                )));
            }
            let name = partition_field_name(&PartitionTerm {
                transform: t.transform,
                column: column.clone(),
            });
            spec = spec
                .add_partition_field(field.id, name, t.transform)
                .map_err(|e| DataFusionError::Plan(format!("PARTITIONED BY: {e}")))?;
        }
        Ok(TableCreation::builder()
            .name(table.to_string())
            .location_opt(self.location.clone())
            .schema(schema)
            .partition_spec(spec.build())
            .sort_order(SortOrder::unsorted_order())
            .properties(properties)
            .format_version(version)
            .build())
    }

    /// The format version the statement asks for.
    pub(crate) fn format_version(&self) -> Result<FormatVersion> {
        Ok(self.version_and_properties()?.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(sql: &str) -> CreateTable {
        parse(sql)
            .expect("Spark's CREATE TABLE")
            .expect("well formed")
    }

    #[test]
    fn spark_statements_parse_and_datafusion_s_stay_datafusion_s() {
        let c = parsed(
            "CREATE TABLE IF NOT EXISTS ns.t (id bigint NOT NULL COMMENT 'key', data string, \
             ts timestamp) USING iceberg PARTITIONED BY (bucket(16, id), days(ts), data) \
             LOCATION '/tmp/x' COMMENT 'a table' TBLPROPERTIES ('format-version' = '3', 'k' = 'v')",
        );
        assert_eq!(c.name, ["ns", "t"]);
        assert!(c.if_not_exists && !c.or_replace);
        assert_eq!(c.columns.len(), 3);
        assert!(c.columns[0].not_null);
        assert_eq!(c.columns[0].comment.as_deref(), Some("key"));
        assert_eq!(c.partitioned_by.len(), 3);
        assert_eq!(c.location.as_deref(), Some("/tmp/x"));
        assert_eq!(c.format_version().unwrap(), FormatVersion::V3);
        let creation = c.creation("t", None).unwrap();
        let names: Vec<String> = creation
            .partition_spec
            .unwrap()
            .fields()
            .iter()
            .map(|f| f.name.clone())
            .collect();
        assert_eq!(names, ["id_bucket", "ts_day", "data"]);
        assert_eq!(creation.properties["comment"], "a table");

        let ctas = parsed("CREATE TABLE t USING iceberg AS SELECT 1 AS a, 'x;y' AS b;");
        assert_eq!(ctas.query.as_deref(), Some("SELECT 1 AS a, 'x;y' AS b"));
        assert!(parse("CREATE TABLE t (a INT)").is_none());
        assert!(parse("CREATE TABLE t AS SELECT 1").is_none());
        assert!(parse("CREATE EXTERNAL TABLE t (a INT) STORED AS ICEBERG LOCATION ''").is_none());
        let e = parse("CREATE TABLE t (a INT) USING parquet")
            .unwrap()
            .unwrap_err();
        assert!(e.to_string().contains("USING parquet"), "{e}");
    }
}
