//! Versions of a table named in SQL as Spark names them:
//!
//! - the identifiers `t.branch_<b>`, `t.tag_<t>`, `t.snapshot_id_<id>` and
//!   `t.at_timestamp_<ms>` (Spark's `SparkCatalog` selectors), a branch readable and writable;
//! - the clauses `[FOR] VERSION AS OF <snapshot id | 'branch or tag'>` and `[FOR] TIMESTAMP AS
//!   OF <time>` (with `SYSTEM_VERSION` / `SYSTEM_TIME`), after a table name in `FROM`.
//!
//! DataFusion reads a name of three parts as `catalog.schema.table` and refuses four, and its
//! parser takes no `AS OF` clause. So the schema provider resolves one identifier holding the
//! selector, `ns."t.branch_b"` (the form for embedders), and [`rewrite`] turns what users type
//! into it before DataFusion parses the statement: `t.branch_b` and `ns.t.branch_b` where the
//! name as written is not a table and `t` is, and `t VERSION AS OF 'b'` into `"t.branch_b" AS t`.
//! Spark's metadata table names, `ns.t.files`, become `ns."t$files"` the same way.

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Location, Token, TokenWithSpan, Tokenizer};
use iceberg::TableIdent;

use crate::catalog::IcebergCatalog;
use crate::IcebergTableProvider;

/// A version of a table, as a name selects it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Version {
    /// A branch: read at its head, written on top of it.
    Branch(String),
    /// A tag: read at its snapshot, with that snapshot's schema.
    Tag(String),
    /// A snapshot by id.
    Snapshot(i64),
    /// The snapshot current at a time (milliseconds since the epoch).
    AtTimestampMs(i64),
}

impl Version {
    /// The version a name part selects (`branch_b`, `tag_t`, `snapshot_id_1`,
    /// `at_timestamp_1700000000000`), if it is a selector.
    pub(crate) fn parse(selector: &str) -> Option<Self> {
        let number = |s: &str| s.parse::<i64>().ok().filter(|n| *n >= 0);
        if let Some(b) = selector.strip_prefix("branch_").filter(|b| !b.is_empty()) {
            return Some(Self::Branch(b.to_string()));
        }
        if let Some(t) = selector.strip_prefix("tag_").filter(|t| !t.is_empty()) {
            return Some(Self::Tag(t.to_string()));
        }
        if let Some(id) = selector.strip_prefix("snapshot_id_").and_then(number) {
            return Some(Self::Snapshot(id));
        }
        selector
            .strip_prefix("at_timestamp_")
            .and_then(number)
            .map(Self::AtTimestampMs)
    }

    /// The selector that names this version.
    pub(crate) fn selector(&self) -> String {
        match self {
            Self::Branch(b) => format!("branch_{b}"),
            Self::Tag(t) => format!("tag_{t}"),
            Self::Snapshot(id) => format!("snapshot_id_{id}"),
            Self::AtTimestampMs(ms) => format!("at_timestamp_{ms}"),
        }
    }

    /// `provider` (of the table, as loaded) reading this version.
    pub(crate) fn apply(&self, provider: IcebergTableProvider) -> Result<IcebergTableProvider> {
        match self {
            Self::Branch(b) => provider.with_branch(b),
            Self::Tag(t) => {
                let found = crate::commit::refs::table_ref(provider.table().metadata(), t)?;
                match found {
                    Some(r) if !r.branch => provider.with_ref(t),
                    _ => Err(DataFusionError::Plan(format!(
                        "table '{}' has no tag '{t}'",
                        provider.table().identifier()
                    ))),
                }
            }
            Self::Snapshot(id) => provider.with_snapshot_id(*id),
            Self::AtTimestampMs(ms) => provider.with_timestamp_ms(*ms),
        }
    }
}

/// The readings of one identifier as `<table>.<selector>`, the longest table name first.
pub(crate) fn split_name(name: &str) -> Vec<(&str, Version)> {
    let mut out = vec![];
    for (i, _) in name
        .match_indices('.')
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        let (table, selector) = (&name[..i], &name[i + 1..]);
        if table.is_empty() {
            continue;
        }
        if let Some(v) = Version::parse(selector) {
            out.push((table, v));
        }
    }
    out
}

/// What [`rewrite`] needs of the session.
pub(crate) struct Names<'a> {
    /// The session's catalog.
    pub catalog: &'a Arc<dyn IcebergCatalog>,
    /// The identifier of a name's parts (case folded) in that catalog, if it is one of its.
    pub ident_of: &'a (dyn Fn(Vec<String>) -> Option<TableIdent> + Sync),
    /// Whether unquoted identifiers fold to lower case.
    pub normalize: bool,
    /// The session, to evaluate a `TIMESTAMP AS OF` expression.
    pub ctx: &'a datafusion::prelude::SessionContext,
}

/// Whether `sql` may name a table version (a cheap check, for callers that route statements).
pub(crate) fn mentions(sql: &str) -> bool {
    let Some((tokens, _)) = significant_tokens(sql) else {
        return false;
    };
    (0..tokens.len()).any(|i| {
        as_of_at(&tokens, i).is_some()
            || (matches!(tokens[i].token, Token::Period)
                && matches!(&tokens.get(i + 1).map(|t| &t.token), Some(Token::Word(w))
                    if Version::parse(&w.value).is_some()
                        || super::MetadataKind::parse(&w.value).is_some()))
    })
}

/// `sql` with Spark's version names turned into the one-identifier form, or `None` when it
/// names none.
pub(crate) async fn rewrite(names: &Names<'_>, sql: &str) -> Result<Option<String>> {
    let Some((tokens, offsets)) = significant_tokens(sql) else {
        return Ok(None);
    };
    let statement = tokens
        .iter()
        .find_map(|t| match &t.token {
            Token::Word(w) => Some(w.value.to_ascii_uppercase()),
            Token::LParen => Some("(".to_string()),
            _ => None,
        })
        .unwrap_or_default();
    if !matches!(
        statement.as_str(),
        "SELECT" | "WITH" | "INSERT" | "UPDATE" | "DELETE" | "MERGE" | "EXPLAIN" | "TRUNCATE" | "("
    ) {
        return Ok(None);
    }
    let mut edits: Vec<(usize, usize, String)> = vec![];
    // Per parenthesis level: its clause, and whether it is a query (the statement itself, or a
    // subquery): a `FROM` inside a function's parentheses (`EXTRACT(YEAR FROM t.x)`) names no
    // table.
    let mut levels = vec![(String::new(), true)];
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i].token {
            Token::LParen => levels.push((String::new(), false)),
            Token::RParen if levels.len() > 1 => {
                levels.pop();
            }
            Token::Word(w) if w.quote_style.is_none() => {
                let word = upper(w);
                if let Some(level) = levels.last_mut() {
                    if matches!(word.as_str(), "SELECT" | "WITH") {
                        level.1 = true;
                    }
                    if CLAUSES.contains(&word.as_str()) {
                        level.0 = word;
                    }
                }
            }
            _ => {}
        }
        let (clause, query) = levels.last().cloned().unwrap_or_default();
        // `IS [NOT] DISTINCT FROM x` compares; it names no table.
        let distinct =
            i > 0 && matches!(&tokens[i - 1].token, Token::Word(w) if upper(w) == "DISTINCT");
        if !query || distinct || !starts_relation(&tokens, i, clause == "FROM") {
            i += 1;
            continue;
        }
        let (parts, end) = name_at(&tokens, i + 1);
        if parts.is_empty() {
            i += 1;
            continue;
        }
        let start = offsets.start(&tokens[i + 1]);
        let name_end = offsets.end(&tokens[end - 1]);
        if let Some(clause) = as_of_at(&tokens, end) {
            let name_tokens = &tokens[i + 1..end];
            let replacement =
                as_of(names, sql, &offsets, &tokens, name_tokens, &parts, &clause).await?;
            let stop = offsets.end(&tokens[clause.last]);
            let mut text = replacement.0;
            if !has_alias(&tokens, clause.last + 1) {
                text.push_str(&format!(" AS {}", quoted(&replacement.1)));
            }
            edits.push((start, stop, text));
            i = clause.last + 1;
            continue;
        }
        if let Some(text) = selected(names, sql, &offsets, &tokens[i + 1..end], &parts).await? {
            edits.push((start, name_end, text));
        }
        i = end;
    }
    if edits.is_empty() {
        return Ok(None);
    }
    let mut out = sql.to_string();
    for (start, end, text) in edits.into_iter().rev() {
        out.replace_range(start..end, &text);
    }
    Ok(Some(out))
}

/// Keywords that open a clause: a `,` continues a `FROM` list only inside `FROM`.
const CLAUSES: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "ORDER",
    "HAVING",
    "ON",
    "SET",
    "VALUES",
    "LIMIT",
    "WHEN",
    "THEN",
    "WINDOW",
    "QUALIFY",
    "RETURNING",
];

/// Keywords a table name follows.
const BEFORE_TABLE: &[&str] = &[
    "FROM",
    "JOIN",
    "INTO",
    "UPDATE",
    "TABLE",
    "USING",
    "OVERWRITE",
];

fn upper(w: &datafusion::sql::sqlparser::tokenizer::Word) -> String {
    w.value.to_ascii_uppercase()
}

/// Whether a table name follows token `i`.
fn starts_relation(tokens: &[TokenWithSpan], i: usize, in_from: bool) -> bool {
    match &tokens[i].token {
        Token::Word(w) if w.quote_style.is_none() => BEFORE_TABLE.contains(&upper(w).as_str()),
        Token::Comma => in_from,
        _ => false,
    }
}

/// The parts of the object name starting at token `i` (each with the token it came from) and
/// the index after it.
fn name_at(tokens: &[TokenWithSpan], mut i: usize) -> (Vec<Part>, usize) {
    let mut parts = vec![];
    while let Some(Token::Word(w)) = tokens.get(i).map(|t| &t.token) {
        parts.push(Part {
            value: w.value.clone(),
            quoted: w.quote_style.is_some(),
        });
        i += 1;
        if !matches!(tokens.get(i).map(|t| &t.token), Some(Token::Period)) {
            break;
        }
        i += 1;
    }
    match parts.is_empty() {
        // A trailing `.` is not part of a name.
        false if matches!(tokens.get(i - 1).map(|t| &t.token), Some(Token::Period)) => {
            (parts, i - 1)
        }
        _ => (parts, i),
    }
}

/// One part of a name as written.
#[derive(Debug, Clone)]
struct Part {
    value: String,
    quoted: bool,
}

impl Part {
    /// The part as DataFusion reads it (unquoted parts folded when the session folds).
    fn resolved(&self, normalize: bool) -> String {
        match self.quoted || !normalize {
            true => self.value.clone(),
            false => self.value.to_lowercase(),
        }
    }
}

/// `"value"`, quotes inside doubled.
fn quoted(value: &str) -> String {
    format!("\"{}\"", value.replace('"', "\"\""))
}

/// The one-identifier form of `parts` (the last is the table) with `suffix` (`.branch_b`,
/// `$files`): the parts before the table as written, then `"<table><suffix>"`; and the table's
/// name (for an alias).
fn one_identifier(
    sql: &str,
    offsets: &Offsets,
    name_tokens: &[TokenWithSpan],
    parts: &[Part],
    suffix: &str,
    normalize: bool,
) -> (String, String) {
    let table = parts[parts.len() - 1].resolved(normalize);
    // The name's tokens alternate part, `.`: the table is token 2 * (parts - 1).
    let table_token = &name_tokens[2 * (parts.len() - 1)];
    let prefix = &sql[offsets.start(&name_tokens[0])..offsets.start(table_token)];
    let text = format!("{prefix}{}", quoted(&format!("{table}{suffix}")));
    (text, table)
}

/// The rewrite of `t.branch_b` (a name whose last part is a selector), when the name as
/// written is no table of the catalog and the name without the selector is.
async fn selected(
    names: &Names<'_>,
    sql: &str,
    offsets: &Offsets,
    name_tokens: &[TokenWithSpan],
    parts: &[Part],
) -> Result<Option<String>> {
    let Some((last, table_parts)) = parts.split_last() else {
        return Ok(None);
    };
    // A version (`t.branch_b`), or a metadata table in Spark's form (`t.files`).
    let suffix = match Version::parse(&last.value) {
        Some(v) => format!(".{}", v.selector()),
        None => match super::MetadataKind::parse(&last.value) {
            Some(kind) if !last.quoted || last.value == kind.name() => format!("${}", kind.name()),
            _ => return Ok(None),
        },
    };
    if table_parts.is_empty() {
        return Ok(None);
    }
    let resolved =
        |ps: &[Part]| -> Vec<String> { ps.iter().map(|p| p.resolved(names.normalize)).collect() };
    if let Some(ident) = (names.ident_of)(resolved(parts)) {
        if names.catalog.table_exists(&ident).await? {
            return Ok(None);
        }
    }
    let Some(ident) = (names.ident_of)(resolved(table_parts)) else {
        return Ok(None);
    };
    if !names.catalog.table_exists(&ident).await? {
        return Ok(None);
    }
    let table_tokens = &name_tokens[..name_tokens.len() - 2];
    let (text, _) = one_identifier(
        sql,
        offsets,
        table_tokens,
        table_parts,
        &suffix,
        names.normalize,
    );
    Ok(Some(text))
}

/// A `[FOR] VERSION | TIMESTAMP AS OF <value>` clause: its kind, the tokens of its value and
/// its last token.
struct AsOf {
    timestamp: bool,
    value: std::ops::Range<usize>,
    last: usize,
}

/// The `AS OF` clause starting at token `i`, if one does.
fn as_of_at(tokens: &[TokenWithSpan], mut i: usize) -> Option<AsOf> {
    let word = |i: usize| match tokens.get(i).map(|t| &t.token) {
        Some(Token::Word(w)) if w.quote_style.is_none() => Some(upper(w)),
        _ => None,
    };
    if word(i).as_deref() == Some("FOR") {
        i += 1;
    }
    let timestamp = match word(i)?.as_str() {
        "VERSION" | "SYSTEM_VERSION" => false,
        "TIMESTAMP" | "SYSTEM_TIME" => true,
        _ => return None,
    };
    if word(i + 1).as_deref() != Some("AS") || word(i + 2).as_deref() != Some("OF") {
        return None;
    }
    let first = i + 3;
    // The value: tokens up to the end of the table's place in the FROM clause, or up to an
    // alias (an identifier right after an operand).
    let mut end = first;
    let mut depth = 0usize;
    let mut after_operand = false;
    while let Some(t) = tokens.get(end) {
        match &t.token {
            Token::LParen => {
                depth += 1;
                after_operand = false;
            }
            Token::RParen if depth == 0 => break,
            Token::RParen => {
                depth -= 1;
                after_operand = true;
            }
            Token::Comma | Token::SemiColon if depth == 0 => break,
            Token::Word(w) if depth == 0 => {
                let plain = w.quote_style.is_some()
                    || w.keyword == datafusion::sql::sqlparser::keywords::Keyword::NoKeyword;
                if (w.quote_style.is_none() && ENDS_VALUE.contains(&upper(w).as_str()))
                    || (after_operand && plain)
                {
                    break;
                }
                after_operand = true;
            }
            Token::Word(_) | Token::Number(..) | Token::SingleQuotedString(_) => {
                after_operand = true
            }
            _ => after_operand = false,
        }
        end += 1;
    }
    if end == first {
        return None;
    }
    Some(AsOf {
        timestamp,
        value: first..end,
        last: end - 1,
    })
}

/// Keywords that end an `AS OF` expression.
const ENDS_VALUE: &[&str] = &[
    "AS",
    "WHERE",
    "GROUP",
    "ORDER",
    "HAVING",
    "LIMIT",
    "OFFSET",
    "JOIN",
    "INNER",
    "LEFT",
    "RIGHT",
    "FULL",
    "CROSS",
    "NATURAL",
    "ON",
    "USING",
    "UNION",
    "EXCEPT",
    "INTERSECT",
    "WINDOW",
    "QUALIFY",
];

/// Whether an alias follows at token `i` (`AS x`, or a plain identifier).
fn has_alias(tokens: &[TokenWithSpan], i: usize) -> bool {
    match tokens.get(i).map(|t| &t.token) {
        Some(Token::Word(w)) => {
            w.quote_style.is_some()
                || upper(w) == "AS"
                || w.keyword == datafusion::sql::sqlparser::keywords::Keyword::NoKeyword
        }
        _ => false,
    }
}

/// The rewrite of `t <clause>`: the one-identifier form and the table's name.
async fn as_of(
    names: &Names<'_>,
    sql: &str,
    offsets: &Offsets,
    tokens: &[TokenWithSpan],
    name_tokens: &[TokenWithSpan],
    parts: &[Part],
    clause: &AsOf,
) -> Result<(String, String)> {
    let written: Vec<&str> = parts.iter().map(|p| p.value.as_str()).collect();
    let resolved: Vec<String> = parts.iter().map(|p| p.resolved(names.normalize)).collect();
    let ident = (names.ident_of)(resolved).ok_or_else(|| {
        DataFusionError::Plan(format!(
            "AS OF: '{}' is not a table of catalog '{}'",
            written.join("."),
            names.catalog.name()
        ))
    })?;
    let value_text =
        &sql[offsets.start(&tokens[clause.value.start])..offsets.end(&tokens[clause.last])];
    let first = &tokens[clause.value.start].token;
    let version = if clause.timestamp {
        let ms = match first {
            // Spark: a number is seconds since the epoch.
            Token::Number(n, _) if clause.value.len() == 1 => n
                .parse::<i64>()
                .ok()
                .and_then(|s| s.checked_mul(1000))
                .ok_or_else(|| {
                    DataFusionError::Plan(format!("TIMESTAMP AS OF: bad number of seconds {n}"))
                })?,
            _ => evaluate_time(names.ctx, value_text).await?,
        };
        Version::AtTimestampMs(ms)
    } else {
        let text = match first {
            Token::Number(n, _) if clause.value.len() == 1 => n.clone(),
            Token::SingleQuotedString(s) if clause.value.len() == 1 => s.clone(),
            _ => {
                return Err(DataFusionError::Plan(format!(
                    "VERSION AS OF takes a snapshot id or a branch or tag name, got {value_text}"
                )))
            }
        };
        match text.parse::<i64>() {
            Ok(id) => Version::Snapshot(id),
            Err(_) => {
                let table = names.catalog.load_table(&ident).await?;
                match crate::commit::refs::table_ref(table.metadata(), &text)? {
                    Some(r) if r.branch => Version::Branch(text),
                    Some(_) => Version::Tag(text),
                    None => {
                        return Err(DataFusionError::Plan(format!(
                            "table '{ident}' has no snapshot, branch or tag '{text}'"
                        )))
                    }
                }
            }
        }
    };
    Ok(one_identifier(
        sql,
        offsets,
        name_tokens,
        parts,
        &format!(".{}", version.selector()),
        names.normalize,
    ))
}

/// Milliseconds since the epoch of a time expression (`'2026-01-01 10:00:00'`,
/// `TIMESTAMP '..'`, `current_timestamp() - INTERVAL 1 DAY`), evaluated in the session.
async fn evaluate_time(ctx: &datafusion::prelude::SessionContext, text: &str) -> Result<i64> {
    let query = format!("SELECT CAST(CAST(({text}) AS TIMESTAMP) AS BIGINT)");
    let batches = ctx
        .sql(&query)
        .await
        .map_err(|e| DataFusionError::Plan(format!("TIMESTAMP AS OF {text}: {e}")))?
        .collect()
        .await?;
    let value = batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .and_then(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .filter(|a| arrow::array::Array::is_valid(*a, 0))
                .map(|a| a.value(0))
        })
        .ok_or_else(|| DataFusionError::Plan(format!("TIMESTAMP AS OF {text}: not a time")))?;
    Ok(value.div_euclid(1_000_000))
}

/// The tokens of `sql` without whitespace and comments, and where each starts and ends in it
/// (`None` when it does not tokenize: DataFusion reports that).
fn significant_tokens(sql: &str) -> Option<(Vec<TokenWithSpan>, Offsets)> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize_with_location()
        .ok()?;
    let tokens = tokens
        .into_iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_) | Token::EOF))
        .collect();
    Some((tokens, Offsets::new(sql)))
}

/// Byte offsets of the tokenizer's line and column locations.
struct Offsets {
    /// Per line: the byte offset of each char, and of the line's end.
    lines: Vec<Vec<usize>>,
}

impl Offsets {
    fn new(sql: &str) -> Self {
        let mut lines = vec![];
        let mut current = vec![];
        for (i, c) in sql.char_indices() {
            current.push(i);
            if c == '\n' {
                lines.push(std::mem::take(&mut current));
            }
        }
        current.push(sql.len());
        lines.push(current);
        Self { lines }
    }

    fn at(&self, l: Location) -> usize {
        let line = &self.lines[(l.line.max(1) - 1) as usize];
        line[((l.column.max(1) - 1) as usize).min(line.len() - 1)]
    }

    fn start(&self, t: &TokenWithSpan) -> usize {
        self.at(t.span.start)
    }

    fn end(&self, t: &TokenWithSpan) -> usize {
        self.at(t.span.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_parse_as_spark_names_them() {
        assert_eq!(
            Version::parse("branch_b"),
            Some(Version::Branch("b".into()))
        );
        assert_eq!(
            Version::parse("tag_v1.0"),
            Some(Version::Tag("v1.0".into()))
        );
        assert_eq!(
            Version::parse("snapshot_id_42"),
            Some(Version::Snapshot(42))
        );
        assert_eq!(
            Version::parse("at_timestamp_1700000000000"),
            Some(Version::AtTimestampMs(1_700_000_000_000))
        );
        assert_eq!(Version::parse("branch_"), None);
        assert_eq!(Version::parse("snapshot_id_x"), None);
        assert_eq!(Version::parse("files"), None);
        let split = split_name("t.x.branch_b");
        assert_eq!(split, vec![("t.x", Version::Branch("b".into()))]);
        assert!(split_name(".branch_b").is_empty());
    }

    #[test]
    fn mentions_finds_clauses_and_selectors() {
        assert!(mentions("SELECT * FROM t VERSION AS OF 1"));
        assert!(mentions(
            "SELECT * FROM t FOR SYSTEM_TIME AS OF '2026-01-01'"
        ));
        assert!(mentions("INSERT INTO ns.t.branch_audit VALUES (1)"));
        assert!(mentions("INSERT OVERWRITE t.branch_audit SELECT 1"));
        assert!(!mentions("SELECT branch_b FROM t"));
        assert!(!mentions("SELECT * FROM t WHERE v = 'VERSION AS OF 1'"));
        assert!(mentions("SELECT EXTRACT(YEAR FROM t.tag_date) FROM t"));
    }

    /// The text of the `AS OF` value after the name `t` in `sql`.
    fn value_of(sql: &str) -> String {
        let (tokens, offsets) = significant_tokens(sql).unwrap();
        let at = tokens
            .iter()
            .position(|t| matches!(&t.token, Token::Word(w) if w.value == "t"))
            .unwrap();
        let clause = as_of_at(&tokens, at + 1).unwrap();
        sql[offsets.start(&tokens[clause.value.start])..offsets.end(&tokens[clause.last])]
            .to_string()
    }

    #[test]
    fn as_of_values_end_at_an_alias_or_a_clause() {
        assert_eq!(value_of("SELECT * FROM t VERSION AS OF 1 x"), "1");
        assert_eq!(value_of("SELECT * FROM t VERSION AS OF 'b' AS x"), "'b'");
        assert_eq!(value_of("SELECT * FROM t VERSION AS OF 1 + 1"), "1 + 1");
        assert_eq!(
            value_of(
                "SELECT * FROM t FOR TIMESTAMP AS OF current_timestamp() - INTERVAL 1 DAY WHERE a"
            ),
            "current_timestamp() - INTERVAL 1 DAY"
        );
        assert_eq!(
            value_of("SELECT * FROM (SELECT * FROM t TIMESTAMP AS OF TIMESTAMP '2026-01-01') s"),
            "TIMESTAMP '2026-01-01'"
        );
        assert_eq!(value_of("SELECT * FROM t SYSTEM_TIME AS OF 5, u"), "5");
    }

    #[test]
    fn offsets_cover_multibyte_text() {
        let sql = "SELECT 'é'\nFROM t";
        let (tokens, offsets) = significant_tokens(sql).unwrap();
        let last = tokens.last().unwrap();
        assert_eq!(&sql[offsets.start(last)..offsets.end(last)], "t");
        assert_eq!(
            &sql[offsets.start(&tokens[1])..offsets.end(&tokens[1])],
            "'é'"
        );
    }
}
