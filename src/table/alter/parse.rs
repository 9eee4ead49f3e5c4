//! The `ALTER TABLE` statements, in Spark's Iceberg SQL (names quoted with `"` or `` ` ``):
//!
//! ```text
//! ALTER TABLE t ADD COLUMN[S] [(] c type [NOT NULL] [DEFAULT v] [COMMENT '..'] [FIRST | AFTER x], .. [)]
//! ALTER TABLE t DROP COLUMN[S] [IF EXISTS] [(] c, .. [)]
//! ALTER TABLE t RENAME COLUMN c TO d
//! ALTER TABLE t ALTER [COLUMN] c TYPE type | COMMENT '..' | FIRST | AFTER x
//!                              | DROP NOT NULL | SET NOT NULL | SET DEFAULT v | DROP DEFAULT
//! ALTER TABLE t SET IDENTIFIER FIELDS c, .. | DROP IDENTIFIER FIELDS c, ..
//! ALTER TABLE t SET TBLPROPERTIES ('k' = 'v', ..) | UNSET TBLPROPERTIES [IF EXISTS] ('k', ..)
//! ALTER TABLE t RENAME TO name
//! ALTER TABLE t ADD PARTITION FIELD term [AS name]
//! ALTER TABLE t DROP PARTITION FIELD name | term
//! ALTER TABLE t REPLACE PARTITION FIELD name | term WITH term [AS name]
//! ALTER TABLE t WRITE [LOCALLY] ORDERED BY term [ASC | DESC] [NULLS FIRST | LAST], ..
//!                   | WRITE UNORDERED | WRITE DISTRIBUTED BY PARTITION [LOCALLY ORDERED BY ..]
//! ```
//!
//! A term is a column or a transform of one: `bucket(16, id)`, `truncate(4, s)` (either
//! argument order), `years(ts)`, `months(ts)`, `days(ts)`, `hours(ts)` (and the singular
//! names), `identity(c)`, `void(c)`.
//!
//! Column names are paths (`point.z`, `m.value.f`, `xs.element.a`); unquoted names are folded
//! to lower case, as DataFusion's planner folds them.

use datafusion::error::{DataFusionError, Result};
use datafusion::sql::sqlparser::ast::DataType as SqlType;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Token;

use iceberg::spec::{NullOrder, SortDirection, Transform};

use super::partition::{FieldName, PartitionChange, SortKey, Term, WriteOrder};
use super::properties::PropertyChange;
use super::refs::{RefChange, RefKind, RefOp};
use super::schema::{ColumnChange, Position};
use super::types::{normalised, DdlDialect};

/// One `ALTER TABLE` statement.
#[derive(Debug, Clone)]
pub(crate) struct AlterTable {
    /// The table name's parts as written (`[ns, t]` or `[t]`), folded as DataFusion folds.
    pub name: Vec<String>,
    /// What it changes.
    pub action: Action,
}

/// What an `ALTER TABLE` statement changes.
#[derive(Debug, Clone)]
pub(crate) enum Action {
    /// `SET | UNSET TBLPROPERTIES`.
    Properties(PropertyChange),
    /// Column changes, applied in order to make one new schema.
    Columns(Vec<ColumnEdit>),
    /// Partition field changes, making one new default spec.
    Partition(Vec<PartitionChange>),
    /// `WRITE ...`: the sort order and distribution mode.
    Write(WriteOrder),
    /// `RENAME TO name`: the new name's parts as written.
    RenameTo(Vec<String>),
    /// `CREATE | REPLACE | DROP BRANCH | TAG`.
    Ref(super::refs::RefChange),
}

/// A column change as written: types and values still SQL (they need the table's format
/// version and the session to become Iceberg's).
#[derive(Debug, Clone)]
pub(crate) enum ColumnEdit {
    /// `ADD COLUMN`.
    Add(ColumnDef),
    /// `ALTER COLUMN c TYPE t`.
    Retype { path: Vec<String>, to: SqlType },
    /// `ALTER COLUMN c SET DEFAULT v` / `DROP DEFAULT`.
    WriteDefault {
        path: Vec<String>,
        value: Option<String>,
    },
    /// `DROP COLUMN IF EXISTS c`: dropped when it is there.
    DropIfExists(Vec<String>),
    /// Everything else, as it is applied.
    Change(ColumnChange),
}

/// A column of `ADD COLUMN`.
#[derive(Debug, Clone)]
pub(crate) struct ColumnDef {
    pub path: Vec<String>,
    pub data_type: SqlType,
    pub not_null: bool,
    /// The `DEFAULT` expression's text.
    pub default: Option<String>,
    pub comment: Option<String>,
    pub position: Option<Position>,
}

const FORMS: &str = "expected ALTER TABLE name ADD COLUMN(S) | DROP COLUMN(S) | RENAME COLUMN \
                     | ALTER COLUMN | SET/DROP IDENTIFIER FIELDS | RENAME TO | ADD/DROP/REPLACE PARTITION \
                     FIELD | WRITE [LOCALLY] ORDERED BY | WRITE UNORDERED | WRITE DISTRIBUTED BY \
                     PARTITION | SET TBLPROPERTIES ('key' = 'value', ...) | UNSET TBLPROPERTIES \
                     [IF EXISTS] ('key', ...) | CREATE [OR REPLACE] | REPLACE | DROP BRANCH | TAG";

/// Parses `sql` when it is an `ALTER TABLE` statement (`None` otherwise: the statement is
/// DataFusion's to plan). A malformed one is an error naming the forms there are.
pub(crate) fn parse(sql: &str) -> Option<Result<AlterTable>> {
    let dialect = DdlDialect;
    let mut p = Parser::new(&dialect).try_with_sql(sql).ok()?;
    if !(word(&mut p, "alter") && word(&mut p, "table")) {
        return None;
    }
    Some(statement(&mut p).map_err(|e| DataFusionError::Plan(format!("ALTER TABLE: {e}"))))
}

/// Consumes the unquoted word `w` (any case) when it is next.
pub(crate) fn word(p: &mut Parser, w: &str) -> bool {
    match &p.peek_token().token {
        Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w) => {
            p.next_token();
            true
        }
        _ => false,
    }
}

/// Consumes the words `ws` when all of them are next (nothing otherwise).
pub(crate) fn words(p: &mut Parser, ws: &[&str]) -> bool {
    let all = ws.iter().enumerate().all(|(i, w)| {
        matches!(&p.peek_nth_token(i).token,
            Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w))
    });
    if all {
        for _ in ws {
            p.next_token();
        }
    }
    all
}

fn expect(p: &mut Parser, w: &str) -> std::result::Result<(), String> {
    match word(p, w) {
        true => Ok(()),
        false => Err(format!(
            "expected {} at '{}' ({FORMS})",
            w.to_uppercase(),
            p.peek_token().token
        )),
    }
}

pub(crate) fn sql_err(e: impl std::fmt::Display) -> String {
    format!("{e} ({FORMS})")
}

fn statement(p: &mut Parser) -> std::result::Result<AlterTable, String> {
    let name = path(p).map_err(|_| format!("no table name ({FORMS})"))?;
    let name_of = name.clone();
    if let Some(change) = ref_statement(p) {
        return finish(p, name_of, Action::Ref(change?));
    }
    let action = if word(p, "add") {
        if words(p, &["partition", "field"]) {
            let term = term(p)?;
            let name = alias(p)?;
            return finish(
                p,
                name_of,
                Action::Partition(vec![PartitionChange::Add { term, name }]),
            );
        }
        if !(word(p, "columns") || word(p, "column")) {
            return Err(format!("expected COLUMN after ADD ({FORMS})"));
        }
        let defs = listed(p, column_def)?;
        Action::Columns(defs.into_iter().map(ColumnEdit::Add).collect())
    } else if word(p, "drop") {
        if words(p, &["partition", "field"]) {
            let field = field_name(p)?;
            return finish(
                p,
                name_of,
                Action::Partition(vec![PartitionChange::Drop(field)]),
            );
        }
        if words(p, &["identifier", "fields"]) {
            let paths = listed(p, path)?;
            Action::Columns(vec![ColumnEdit::Change(ColumnChange::DropIdentifier(
                paths,
            ))])
        } else {
            if !(word(p, "columns") || word(p, "column")) {
                return Err(format!("expected COLUMN after DROP ({FORMS})"));
            }
            let if_exists = words(p, &["if", "exists"]);
            let paths = listed(p, path)?;
            Action::Columns(
                paths
                    .into_iter()
                    .map(|path| match if_exists {
                        true => ColumnEdit::DropIfExists(path),
                        false => ColumnEdit::Change(ColumnChange::Drop(path)),
                    })
                    .collect(),
            )
        }
    } else if word(p, "rename") {
        if word(p, "to") {
            let to = path(p)?;
            return finish(p, name_of, Action::RenameTo(to));
        }
        expect(p, "column")?;
        let from = path(p)?;
        expect(p, "to")?;
        let to = p.parse_identifier().map_err(sql_err)?;
        Action::Columns(vec![ColumnEdit::Change(ColumnChange::Rename {
            path: from,
            to: normalised(&to),
        })])
    } else if word(p, "alter") || word(p, "change") {
        let _ = word(p, "column");
        Action::Columns(vec![alter_column(p)?])
    } else if words(p, &["set", "identifier", "fields"]) {
        let paths = listed(p, path)?;
        Action::Columns(vec![ColumnEdit::Change(ColumnChange::SetIdentifier(paths))])
    } else if words(p, &["set", "tblproperties"]) {
        Action::Properties(properties(p, false)?)
    } else if words(p, &["unset", "tblproperties"]) {
        Action::Properties(properties(p, true)?)
    } else if words(p, &["replace", "partition", "field"]) {
        let field = field_name(p)?;
        expect(p, "with")?;
        let with = term(p)?;
        let name = alias(p)?;
        Action::Partition(vec![PartitionChange::Replace { field, with, name }])
    } else if word(p, "write") {
        Action::Write(write_order(p)?)
    } else {
        return Err(format!("unexpected '{}' ({FORMS})", p.peek_token().token));
    };
    finish(p, name, action)
}

/// The statement, when nothing but semicolons follows.
fn finish(
    p: &mut Parser,
    name: Vec<String>,
    action: Action,
) -> std::result::Result<AlterTable, String> {
    while p.consume_token(&Token::SemiColon) {}
    match p.peek_token().token {
        Token::EOF => Ok(AlterTable { name, action }),
        t => Err(format!("unexpected '{t}' after the statement ({FORMS})")),
    }
}

/// `AS name` after a partition term.
fn alias(p: &mut Parser) -> std::result::Result<Option<String>, String> {
    match word(p, "as") {
        true => Ok(Some(normalised(&p.parse_identifier().map_err(sql_err)?))),
        false => Ok(None),
    }
}

/// A column or a transform of one (see the module's text).
pub(crate) fn term(p: &mut Parser) -> std::result::Result<Term, String> {
    let first = path(p)?;
    if !(first.len() == 1 && p.consume_token(&Token::LParen)) {
        return Ok(Term {
            transform: Transform::Identity,
            column: first,
        });
    }
    let function = first[0].clone();
    let (mut width, mut column) = (None, None);
    loop {
        match p.peek_token().token {
            Token::Number(n, _) => {
                p.next_token();
                width = Some(
                    n.parse::<u32>()
                        .ok()
                        .filter(|w| *w > 0)
                        .ok_or_else(|| format!("{function}: '{n}' is not a positive width"))?,
                );
            }
            _ => column = Some(path(p)?),
        }
        if p.consume_token(&Token::RParen) {
            break;
        }
        if !p.consume_token(&Token::Comma) {
            return Err(format!(
                "{function}(..): unexpected '{}'",
                p.peek_token().token
            ));
        }
    }
    let column = column.ok_or_else(|| format!("{function}(..) needs a column"))?;
    let needs_width = |w: Option<u32>| {
        w.ok_or_else(|| format!("{function}(..) needs a width: {function}(N, column)"))
    };
    let transform = match function.as_str() {
        "identity" => Transform::Identity,
        "bucket" => Transform::Bucket(needs_width(width)?),
        "truncate" => Transform::Truncate(needs_width(width)?),
        "year" | "years" => Transform::Year,
        "month" | "months" => Transform::Month,
        "day" | "days" | "date" => Transform::Day,
        "hour" | "hours" | "date_hour" => Transform::Hour,
        "void" => Transform::Void,
        other => {
            return Err(format!(
                "unknown transform '{other}' (identity, bucket, truncate, years, months, days, \
                 hours, void)"
            ))
        }
    };
    if width.is_some() && !matches!(transform, Transform::Bucket(_) | Transform::Truncate(_)) {
        return Err(format!("{function}(..) takes a column only"));
    }
    Ok(Term { transform, column })
}

/// A partition field: its name, or a transform of a column.
fn field_name(p: &mut Parser) -> std::result::Result<FieldName, String> {
    let is_call = matches!(p.peek_nth_token(1).token, Token::LParen);
    let term = term(p)?;
    Ok(match (is_call, term.column.len()) {
        (false, 1) => FieldName::Name(term.column[0].clone()),
        _ => FieldName::Term(term),
    })
}

/// What follows `WRITE`.
fn write_order(p: &mut Parser) -> std::result::Result<WriteOrder, String> {
    if word(p, "unordered") {
        return Ok(WriteOrder {
            order: Some(vec![]),
            distribution: "none",
        });
    }
    if words(p, &["distributed", "by", "partition"]) {
        let order = match words(p, &["locally", "ordered", "by"]) {
            true => Some(listed(p, sort_key)?),
            false => None,
        };
        return Ok(WriteOrder {
            order,
            distribution: "hash",
        });
    }
    let locally = word(p, "locally");
    if !words(p, &["ordered", "by"]) {
        return Err(format!(
            "expected ORDERED BY, LOCALLY ORDERED BY, UNORDERED or DISTRIBUTED BY PARTITION \
             after WRITE ({FORMS})"
        ));
    }
    Ok(WriteOrder {
        order: Some(listed(p, sort_key)?),
        distribution: if locally { "none" } else { "range" },
    })
}

/// `term [ASC | DESC] [NULLS FIRST | LAST]` (ascending with NULLs first by default; descending
/// puts them last).
fn sort_key(p: &mut Parser) -> std::result::Result<SortKey, String> {
    let term = term(p)?;
    let direction = match (word(p, "desc"), word(p, "asc")) {
        (true, _) => SortDirection::Descending,
        _ => SortDirection::Ascending,
    };
    let first = words(p, &["nulls", "first"]);
    let last = !first && words(p, &["nulls", "last"]);
    let null_order = match (first, last, direction) {
        (true, _, _) => NullOrder::First,
        (_, true, _) | (_, _, SortDirection::Descending) => NullOrder::Last,
        _ => NullOrder::First,
    };
    Ok(SortKey {
        term,
        direction,
        null_order,
    })
}

/// A dotted name: `ns.t`, `point.z`.
pub(crate) fn path(p: &mut Parser) -> std::result::Result<Vec<String>, String> {
    let mut parts = vec![normalised(&p.parse_identifier().map_err(sql_err)?)];
    while p.consume_token(&Token::Period) {
        parts.push(normalised(&p.parse_identifier().map_err(sql_err)?));
    }
    Ok(parts)
}

/// Items separated by commas, in parentheses or not.
pub(crate) fn listed<T>(
    p: &mut Parser,
    item: impl Fn(&mut Parser) -> std::result::Result<T, String>,
) -> std::result::Result<Vec<T>, String> {
    let parenthesised = p.consume_token(&Token::LParen);
    let mut out = vec![item(p)?];
    while p.consume_token(&Token::Comma) {
        out.push(item(p)?);
    }
    if parenthesised && !p.consume_token(&Token::RParen) {
        return Err(format!("expected ')' at '{}'", p.peek_token().token));
    }
    Ok(out)
}

fn column_def(p: &mut Parser) -> std::result::Result<ColumnDef, String> {
    let path = path(p)?;
    let data_type = p.parse_data_type().map_err(sql_err)?;
    let mut def = ColumnDef {
        path,
        data_type,
        not_null: false,
        default: None,
        comment: None,
        position: None,
    };
    loop {
        if words(p, &["not", "null"]) {
            def.not_null = true;
        } else if word(p, "null") {
            def.not_null = false;
        } else if word(p, "default") {
            def.default = Some(p.parse_expr().map_err(sql_err)?.to_string());
        } else if word(p, "comment") {
            def.comment = Some(p.parse_literal_string().map_err(sql_err)?);
        } else if let Some(position) = position(p)? {
            def.position = Some(position);
        } else {
            return Ok(def);
        }
    }
}

/// `FIRST` or `AFTER name`.
fn position(p: &mut Parser) -> std::result::Result<Option<Position>, String> {
    if word(p, "first") {
        return Ok(Some(Position::First));
    }
    if word(p, "after") {
        let name = p.parse_identifier().map_err(sql_err)?;
        return Ok(Some(Position::After(normalised(&name))));
    }
    Ok(None)
}

fn alter_column(p: &mut Parser) -> std::result::Result<ColumnEdit, String> {
    let path = path(p)?;
    let change = |c| Ok(ColumnEdit::Change(c));
    if word(p, "type") {
        let to = p.parse_data_type().map_err(sql_err)?;
        return Ok(ColumnEdit::Retype { path, to });
    }
    if word(p, "comment") {
        let doc = p.parse_literal_string().map_err(sql_err)?;
        return change(ColumnChange::Doc {
            path,
            doc: Some(doc),
        });
    }
    if let Some(to) = position(p)? {
        return change(ColumnChange::Move { path, to });
    }
    if words(p, &["drop", "not", "null"]) {
        return change(ColumnChange::Optional(path));
    }
    if words(p, &["set", "not", "null"]) {
        return change(ColumnChange::Required(path));
    }
    if words(p, &["set", "default"]) {
        let value = p.parse_expr().map_err(sql_err)?.to_string();
        return Ok(ColumnEdit::WriteDefault {
            path,
            value: Some(value),
        });
    }
    if words(p, &["drop", "default"]) {
        return Ok(ColumnEdit::WriteDefault { path, value: None });
    }
    Err(format!(
        "expected TYPE, COMMENT, FIRST, AFTER, DROP NOT NULL, SET NOT NULL, SET DEFAULT or DROP \
         DEFAULT after ALTER COLUMN {} ({FORMS})",
        path.join(".")
    ))
}

/// `('k' = 'v', ...)` (or `('k', ...)` when `unset`, after an optional `IF EXISTS`).
fn properties(p: &mut Parser, unset: bool) -> std::result::Result<PropertyChange, String> {
    let if_exists = unset && words(p, &["if", "exists"]);
    let (keys, pairs) = key_values(p, unset).map_err(|what| {
        format!(
            "{what} (expected ALTER TABLE name SET TBLPROPERTIES ('key' = 'value', ...) or \
             UNSET TBLPROPERTIES [IF EXISTS] ('key', ...))"
        )
    })?;
    Ok(match unset {
        true => PropertyChange::Unset { keys, if_exists },
        false => PropertyChange::Set(pairs),
    })
}

/// Keys and their values, in order.
pub(crate) type KeyValues = Vec<(String, String)>;

/// A parenthesised property list: `('k' = 'v', ...)`, or `('k', ...)` when `keys_only`. Keys
/// and values are quoted (or numbers). What is wrong, when something is.
pub(crate) fn key_values(
    p: &mut Parser,
    keys_only: bool,
) -> std::result::Result<(Vec<String>, KeyValues), &'static str> {
    if !p.consume_token(&Token::LParen) {
        return Err("the properties must be in parentheses");
    }
    let text = |p: &mut Parser| match p.next_token().token {
        Token::SingleQuotedString(s) => Some(s),
        Token::Word(w) if w.quote_style.is_some() => Some(w.value),
        Token::Number(n, _) => Some(n),
        _ => None,
    };
    let (mut keys, mut pairs) = (vec![], vec![]);
    loop {
        if p.peek_token().token == Token::RParen {
            return Err("no properties given");
        }
        let key = text(p).ok_or("a key must be quoted")?;
        if keys_only {
            keys.push(key);
        } else {
            if !p.consume_token(&Token::Eq) {
                return Err("malformed property list");
            }
            let value = text(p).ok_or("a value must be quoted")?;
            pairs.push((key, value));
        }
        if p.consume_token(&Token::RParen) {
            return Ok((keys, pairs));
        }
        if !p.consume_token(&Token::Comma) {
            return Err("malformed property list");
        }
    }
}

/// The ref statement after `ALTER TABLE name`, when it is one (the parser is left as it was
/// otherwise).
fn ref_statement(p: &mut Parser) -> Option<std::result::Result<RefChange, String>> {
    use RefKind::{Branch, Tag};
    let forms: [(&[&str], bool, bool, RefKind); 6] = [
        (&["create", "or", "replace", "branch"], true, true, Branch),
        (&["create", "or", "replace", "tag"], true, true, Tag),
        (&["create", "branch"], true, false, Branch),
        (&["create", "tag"], true, false, Tag),
        (&["replace", "branch"], false, true, Branch),
        (&["replace", "tag"], false, true, Tag),
    ];
    for (form, create, replace, kind) in forms {
        if words(p, form) {
            return Some(set(p, kind, create, replace));
        }
    }
    for (form, kind) in [(["drop", "branch"], Branch), (["drop", "tag"], Tag)] {
        if words(p, &form) {
            let if_exists = words(p, &["if", "exists"]);
            return Some(ref_name(p).map(|name| RefChange {
                kind,
                name,
                op: RefOp::Drop { if_exists },
            }));
        }
    }
    None
}

fn ref_name(p: &mut Parser) -> std::result::Result<String, String> {
    // Ref names keep their case, as Iceberg records them.
    Ok(p.parse_identifier().map_err(sql_err)?.value)
}

fn number(p: &mut Parser) -> std::result::Result<i64, String> {
    let n = p.parse_literal_uint().map_err(sql_err)?;
    i64::try_from(n).map_err(|_| format!("{n} is too large"))
}

/// A duration: `n DAYS | HOURS | MINUTES`, in milliseconds.
fn duration(p: &mut Parser, n: i64) -> std::result::Result<i64, String> {
    let unit = if word(p, "days") || word(p, "day") {
        86_400_000
    } else if word(p, "hours") || word(p, "hour") {
        3_600_000
    } else if word(p, "minutes") || word(p, "minute") {
        60_000
    } else {
        return Err(format!(
            "expected DAYS, HOURS or MINUTES at '{}'",
            p.peek_token().token
        ));
    };
    n.checked_mul(unit)
        .ok_or_else(|| format!("{n} is too long a duration"))
}

fn set(
    p: &mut Parser,
    kind: RefKind,
    create: bool,
    replace: bool,
) -> std::result::Result<RefChange, String> {
    let if_not_exists = create && words(p, &["if", "not", "exists"]);
    let name = ref_name(p)?;
    let mut version = None;
    let (mut max_ref_age_ms, mut min_snapshots_to_keep, mut max_snapshot_age_ms) =
        (None, None, None);
    if words(p, &["as", "of", "version"]) {
        version = Some(number(p)?);
    }
    if word(p, "retain") {
        let n = number(p)?;
        max_ref_age_ms = Some(duration(p, n)?);
    }
    if words(p, &["with", "snapshot", "retention"]) {
        if kind == RefKind::Tag {
            return Err("a tag has no snapshot retention".into());
        }
        let n = number(p)?;
        if word(p, "snapshots") {
            min_snapshots_to_keep =
                Some(i32::try_from(n).map_err(|_| format!("{n} snapshots is too many"))?);
            if let Ok(m) = number(p) {
                max_snapshot_age_ms = Some(duration(p, m)?);
            }
        } else {
            max_snapshot_age_ms = Some(duration(p, n)?);
        }
    }
    Ok(RefChange {
        kind,
        name,
        op: RefOp::Set {
            create,
            replace,
            if_not_exists,
            version,
            max_ref_age_ms,
            min_snapshots_to_keep,
            max_snapshot_age_ms,
        },
    })
}
