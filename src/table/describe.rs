//! `DESCRIBE [TABLE] [EXTENDED] t`, `SHOW TBLPROPERTIES t [('key')]` and `SHOW CREATE TABLE t`
//! on Iceberg tables, in Spark's layout (`SHOW CREATE TABLE` gives Spark's `CREATE TABLE`, which
//! runs here as written): `col_name | data_type | comment` rows for the columns, then `# Partitioning`,
//! and with `EXTENDED` the table's details (location, format version, current snapshot, sort
//! order, properties); `key | value` rows for the properties. Types are Iceberg's names
//! (`long`, `string`, `timestamptz`, `struct<x: double>`).

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::error::Result;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Token;
use iceberg::spec::{NullOrder, PrimitiveType, SortDirection, TableMetadata, Transform, Type};
use iceberg::table::Table;

use super::alter::{normalised, word, DdlDialect};

/// A statement of this module, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Describe {
    /// `DESCRIBE [TABLE] [EXTENDED] name`.
    Table { name: Vec<String>, extended: bool },
    /// `SHOW TBLPROPERTIES name [('key')]`.
    Properties {
        name: Vec<String>,
        key: Option<String>,
    },
    /// `SHOW CREATE TABLE name`.
    CreateStatement { name: Vec<String> },
}

impl Describe {
    /// The table name's parts as written.
    pub(crate) fn name(&self) -> &[String] {
        match self {
            Describe::Table { name, .. }
            | Describe::Properties { name, .. }
            | Describe::CreateStatement { name } => name,
        }
    }
}

/// Parses `sql` when it is one of this module's statements (`None` otherwise, and for forms
/// that are not: those stay DataFusion's).
pub(crate) fn parse(sql: &str) -> Option<Describe> {
    let dialect = DdlDialect;
    let mut p = Parser::new(&dialect).try_with_sql(sql).ok()?;
    let statement = if word(&mut p, "describe") || word(&mut p, "desc") {
        let _ = word(&mut p, "table");
        let extended = word(&mut p, "extended") || word(&mut p, "formatted");
        Describe::Table {
            name: name(&mut p)?,
            extended,
        }
    } else if word(&mut p, "show") {
        if word(&mut p, "create") {
            if !word(&mut p, "table") {
                return None;
            }
            Describe::CreateStatement {
                name: name(&mut p)?,
            }
        } else if word(&mut p, "tblproperties") {
            let name = name(&mut p)?;
            let key = match p.consume_token(&Token::LParen) {
                true => {
                    let key = match p.next_token().token {
                        Token::SingleQuotedString(s) => s,
                        Token::Word(w) => w.value,
                        _ => return None,
                    };
                    Some(p.consume_token(&Token::RParen).then_some(key)?)
                }
                false => None,
            };
            Describe::Properties { name, key }
        } else {
            return None;
        }
    } else {
        return None;
    };
    while p.consume_token(&Token::SemiColon) {}
    (p.peek_token().token == Token::EOF).then_some(statement)
}

fn name(p: &mut Parser) -> Option<Vec<String>> {
    let mut parts = vec![normalised(&p.parse_identifier().ok()?)];
    while p.consume_token(&Token::Period) {
        parts.push(normalised(&p.parse_identifier().ok()?));
    }
    Some(parts)
}

/// A transform of a column as Spark writes it: `days(ts)`, `bucket(16, id)`, `region`.
fn term(metadata: &TableMetadata, source_id: i32, transform: Transform) -> String {
    let column = metadata
        .current_schema()
        .name_by_field_id(source_id)
        .map(str::to_string)
        .unwrap_or_else(|| format!("<field {source_id}>"));
    transformed(&column, transform)
}

/// `transform` of `column` (text as it is written).
fn transformed(column: &str, transform: Transform) -> String {
    match transform {
        Transform::Identity => column.to_string(),
        Transform::Bucket(n) => format!("bucket({n}, {column})"),
        Transform::Truncate(w) => format!("truncate({w}, {column})"),
        Transform::Year => format!("years({column})"),
        Transform::Month => format!("months({column})"),
        Transform::Day => format!("days({column})"),
        Transform::Hour => format!("hours({column})"),
        Transform::Void => format!("void({column})"),
        Transform::Unknown => format!("unknown({column})"),
    }
}

/// The table's sort order as `WRITE ORDERED BY` takes it (empty when unsorted).
fn sort_order(metadata: &TableMetadata) -> String {
    metadata
        .default_sort_order()
        .fields
        .iter()
        .map(|f| {
            let direction = match f.direction {
                SortDirection::Ascending => "ASC",
                SortDirection::Descending => "DESC",
            };
            let nulls = match f.null_order {
                NullOrder::First => "NULLS FIRST",
                NullOrder::Last => "NULLS LAST",
            };
            format!(
                "{} {direction} {nulls}",
                term(metadata, f.source_id, f.transform)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The properties `SHOW TBLPROPERTIES` lists: the table's, then the format version and the
/// current snapshot (as Iceberg's Spark tables add them), sorted by key.
fn properties(table: &Table) -> Vec<(String, String)> {
    let metadata = table.metadata();
    let mut out: Vec<(String, String)> = metadata
        .properties()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    out.push((
        "format-version".into(),
        (metadata.format_version() as u8).to_string(),
    ));
    out.push((
        "current-snapshot-id".into(),
        metadata
            .current_snapshot_id()
            .map_or_else(|| "none".to_string(), |id| id.to_string()),
    ));
    out.push(("format".into(), "iceberg/parquet".into()));
    out.sort();
    out
}

/// `name` as an identifier of Spark's SQL (backquoted unless plain lower case).
fn quoted(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    match plain {
        true => name.to_string(),
        false => format!("`{}`", name.replace('`', "``")),
    }
}

/// `text` as a SQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The SQL type `CREATE TABLE` takes for `t` (Spark's names).
fn sql_type(t: &Type) -> String {
    match t {
        Type::Primitive(p) => match p {
            PrimitiveType::Boolean => "boolean".into(),
            PrimitiveType::Int => "int".into(),
            PrimitiveType::Long => "bigint".into(),
            PrimitiveType::Float => "float".into(),
            PrimitiveType::Double => "double".into(),
            PrimitiveType::Decimal { precision, scale } => format!("decimal({precision}, {scale})"),
            PrimitiveType::Date => "date".into(),
            PrimitiveType::Time => "time".into(),
            PrimitiveType::Timestamp => "timestamp".into(),
            PrimitiveType::Timestamptz => "timestamp with time zone".into(),
            PrimitiveType::TimestampNs => "timestamp(9)".into(),
            PrimitiveType::TimestamptzNs => "timestamp(9) with time zone".into(),
            PrimitiveType::String => "string".into(),
            PrimitiveType::Uuid => "uuid".into(),
            PrimitiveType::Fixed(n) => format!("fixed({n})"),
            PrimitiveType::Binary => "binary".into(),
        },
        Type::Struct(s) => format!(
            "struct<{}>",
            s.fields()
                .iter()
                .map(|f| format!("{}: {}", quoted(&f.name), sql_type(&f.field_type)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Type::List(l) => format!("array<{}>", sql_type(&l.element_field.field_type)),
        Type::Map(m) => format!(
            "map<{}, {}>",
            sql_type(&m.key_field.field_type),
            sql_type(&m.value_field.field_type)
        ),
    }
}

/// Spark's `CREATE TABLE` statement that makes a table like `table`: its columns (types,
/// `NOT NULL`, comments), partitioning, location and properties (the format version among
/// them). Nested fields are written optional, custom partition field names and the sort order
/// are left out (`CREATE TABLE` has no words for them).
fn create_statement(table: &Table) -> String {
    let metadata = table.metadata();
    let ident = table.identifier();
    let mut name: Vec<String> = ident.namespace().iter().map(|p| quoted(p)).collect();
    name.push(quoted(ident.name()));
    let columns: Vec<String> = metadata
        .current_schema()
        .as_struct()
        .fields()
        .iter()
        .map(|f| {
            let mut c = format!("  {} {}", quoted(&f.name), sql_type(&f.field_type));
            if f.required {
                c.push_str(" NOT NULL");
            }
            if let Some(doc) = &f.doc {
                c.push_str(&format!(" COMMENT {}", literal(doc)));
            }
            c
        })
        .collect();
    let mut out = format!(
        "CREATE TABLE {} (\n{})\nUSING iceberg",
        name.join("."),
        columns.join(",\n")
    );
    let terms: Vec<String> = metadata
        .default_partition_spec()
        .fields()
        .iter()
        .filter(|f| f.transform != Transform::Void)
        .map(|f| {
            let column = metadata
                .current_schema()
                .name_by_field_id(f.source_id)
                .unwrap_or_default()
                .split('.')
                .map(quoted)
                .collect::<Vec<_>>()
                .join(".");
            transformed(&column, f.transform)
        })
        .collect();
    if !terms.is_empty() {
        out.push_str(&format!("\nPARTITIONED BY ({})", terms.join(", ")));
    }
    out.push_str(&format!("\nLOCATION {}", literal(metadata.location())));
    let mut props: Vec<(String, String)> = metadata
        .properties()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    props.push((
        "format-version".into(),
        (metadata.format_version() as u8).to_string(),
    ));
    props.sort();
    let props: Vec<String> = props
        .iter()
        .map(|(k, v)| format!("  {} = {}", literal(k), literal(v)))
        .collect();
    out.push_str(&format!("\nTBLPROPERTIES (\n{})", props.join(",\n")));
    out
}

fn batch(columns: &[&str], rows: Vec<Vec<String>>) -> Result<RecordBatch> {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| Field::new(*c, DataType::Utf8, false))
            .collect::<Vec<_>>(),
    ));
    let arrays: Vec<ArrayRef> = (0..columns.len())
        .map(|i| {
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r[i].as_str()),
            )) as ArrayRef
        })
        .collect();
    Ok(RecordBatch::try_new(schema, arrays)?)
}

/// The answer to `statement` about `table` (`catalog` names it in `Name`).
pub(crate) fn answer(statement: &Describe, table: &Table, catalog: &str) -> Result<RecordBatch> {
    let metadata = table.metadata();
    match statement {
        Describe::CreateStatement { .. } => {
            batch(&["createtab_stmt"], vec![vec![create_statement(table)]])
        }
        Describe::Properties { key, .. } => {
            let rows = properties(table)
                .into_iter()
                .filter(|(k, _)| key.as_ref().is_none_or(|want| want == k))
                .map(|(k, v)| vec![k, v])
                .collect();
            batch(&["key", "value"], rows)
        }
        Describe::Table { extended, .. } => {
            let row = |a: &str, b: &str, c: &str| vec![a.to_string(), b.to_string(), c.to_string()];
            let mut rows: Vec<Vec<String>> = metadata
                .current_schema()
                .as_struct()
                .fields()
                .iter()
                .map(|f| {
                    let t = match f.required {
                        true => format!("{} not null", f.field_type),
                        false => f.field_type.to_string(),
                    };
                    row(&f.name, &t, f.doc.as_deref().unwrap_or(""))
                })
                .collect();
            rows.push(row("", "", ""));
            rows.push(row("# Partitioning", "", ""));
            let spec = metadata.default_partition_spec();
            if spec.fields().is_empty() {
                rows.push(row("Not partitioned", "", ""));
            }
            for (i, f) in spec.fields().iter().enumerate() {
                rows.push(row(
                    &format!("Part {i}"),
                    &term(metadata, f.source_id, f.transform),
                    &f.name,
                ));
            }
            if *extended {
                rows.push(row("", "", ""));
                rows.push(row("# Detailed Table Information", "", ""));
                let ident = table.identifier();
                let name = format!("{catalog}.{}.{}", ident.namespace().join("."), ident.name());
                rows.push(row("Name", &name, ""));
                rows.push(row("Location", metadata.location(), ""));
                rows.push(row("Provider", "iceberg", ""));
                let version = (metadata.format_version() as u8).to_string();
                rows.push(row("Format Version", &version, ""));
                let snapshot = metadata
                    .current_snapshot_id()
                    .map_or_else(|| "none".to_string(), |id| id.to_string());
                rows.push(row("Current Snapshot", &snapshot, ""));
                rows.push(row("Sort Order", &sort_order(metadata), ""));
                let ids: Vec<String> = metadata
                    .current_schema()
                    .identifier_field_ids()
                    .filter_map(|id| metadata.current_schema().name_by_field_id(id))
                    .map(str::to_string)
                    .collect();
                rows.push(row("Identifier Fields", &ids.join(", "), ""));
                let props: Vec<String> = properties(table)
                    .into_iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                rows.push(row(
                    "Table Properties",
                    &format!("[{}]", props.join(",")),
                    "",
                ));
            }
            batch(&["col_name", "data_type", "comment"], rows)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_parse() {
        assert_eq!(
            parse("DESCRIBE TABLE EXTENDED ns.t;"),
            Some(Describe::Table {
                name: vec!["ns".into(), "t".into()],
                extended: true
            })
        );
        assert_eq!(
            parse("desc t"),
            Some(Describe::Table {
                name: vec!["t".into()],
                extended: false
            })
        );
        assert_eq!(
            parse("SHOW TBLPROPERTIES ns.t ('format-version')"),
            Some(Describe::Properties {
                name: vec!["ns".into(), "t".into()],
                key: Some("format-version".into())
            })
        );
        assert_eq!(parse("SHOW TABLES"), None);
        assert_eq!(
            parse("show create table ns.t"),
            Some(Describe::CreateStatement {
                name: vec!["ns".into(), "t".into()]
            })
        );
        assert_eq!(parse("DESCRIBE SELECT 1"), None);
    }
}
