//! `ALTER TABLE <name> SET TBLPROPERTIES ('k' = 'v', ...)` and `ALTER TABLE <name> UNSET
//! TBLPROPERTIES [IF EXISTS] ('k', ...)`, the statements Spark users set table properties with.
//! DataFusion's SQL planner has no `ALTER TABLE`: [`crate::IcebergSession::sql`] runs these
//! and hands every other statement to DataFusion.
//!
//! `'format-version'` upgrades the table's format (1 → 2 → 3, never down): existing files stay
//! valid; on v3, new deletes become deletion vectors and rows get row ids. Values of the write
//! modes are checked before anything is committed; a refused statement changes nothing.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer, Word};
use iceberg::spec::FormatVersion;
use iceberg::{TableIdent, TableRequirement};

use crate::commit::{CommitResult, MetadataChange, MetadataStore};
use crate::error::IcebergResultExt;

/// What an `ALTER TABLE ... TBLPROPERTIES` statement changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PropertyChange {
    /// `SET TBLPROPERTIES`: keys and values, in order.
    Set(Vec<(String, String)>),
    /// `UNSET TBLPROPERTIES`: keys; `if_exists` tolerates missing ones.
    Unset { keys: Vec<String>, if_exists: bool },
}

/// An `ALTER TABLE ... TBLPROPERTIES` statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AlterProperties {
    /// The table name's parts as written (`[ns, t]` or `[t]`).
    pub name: Vec<String>,
    pub change: PropertyChange,
}

/// The table properties whose values are checked before they are set.
const MODE_PROPERTIES: [&str; 3] = ["write.delete.mode", "write.update.mode", "write.merge.mode"];

/// Parses `sql` when it is one `ALTER TABLE ... SET|UNSET TBLPROPERTIES` statement (`None`
/// otherwise: the statement is DataFusion's to plan). A malformed one is an error.
pub(crate) fn parse(sql: &str) -> Option<Result<AlterProperties>> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql).tokenize().ok()?;
    let mut tokens: Vec<Token> = tokens
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    while matches!(tokens.last(), Some(Token::SemiColon)) {
        tokens.pop();
    }
    let keyword =
        |t: Option<&Token>, k: Keyword| matches!(t, Some(Token::Word(w)) if w.keyword == k);
    if !(keyword(tokens.first(), Keyword::ALTER) && keyword(tokens.get(1), Keyword::TABLE)) {
        return None;
    }
    let set = tokens.iter().position(|t| {
        matches!(t, Token::Word(w) if w.keyword == Keyword::SET || w.value.eq_ignore_ascii_case("UNSET"))
    })?;
    if !keyword(tokens.get(set + 1), Keyword::TBLPROPERTIES) {
        return None;
    }
    Some(parse_tokens(&tokens, set))
}

fn parse_tokens(tokens: &[Token], set: usize) -> Result<AlterProperties> {
    let bad = |what: &str| {
        DataFusionError::Plan(format!(
            "ALTER TABLE: {what} (expected ALTER TABLE name SET TBLPROPERTIES ('key' = 'value', \
             ...) or UNSET TBLPROPERTIES [IF EXISTS] ('key', ...))"
        ))
    };
    // The name: words separated by periods.
    let mut name = vec![];
    let mut expect_part = true;
    for t in &tokens[2..set] {
        match (t, expect_part) {
            (
                Token::Word(Word {
                    value, quote_style, ..
                }),
                true,
            ) => {
                // Unquoted names are folded to lower case, as DataFusion's planner does.
                name.push(match quote_style {
                    Some(_) => value.clone(),
                    None => value.to_lowercase(),
                });
                expect_part = false;
            }
            (Token::Period, false) => expect_part = true,
            _ => return Err(bad(&format!("unexpected '{t}' in the table name"))),
        }
    }
    if name.is_empty() || expect_part {
        return Err(bad("no table name"));
    }
    let unset = matches!(&tokens[set], Token::Word(w) if w.value.eq_ignore_ascii_case("UNSET"));
    let mut at = set + 2;
    let mut if_exists = false;
    if unset
        && matches!(tokens.get(at), Some(Token::Word(w)) if w.keyword == Keyword::IF)
        && matches!(tokens.get(at + 1), Some(Token::Word(w)) if w.keyword == Keyword::EXISTS)
    {
        if_exists = true;
        at += 2;
    }
    if tokens.get(at) != Some(&Token::LParen) || tokens.last() != Some(&Token::RParen) {
        return Err(bad("the properties must be in parentheses"));
    }
    let inner = &tokens[at + 1..tokens.len() - 1];
    let text = |t: &Token| match t {
        Token::SingleQuotedString(s) => Some(s.clone()),
        Token::Word(w) if w.quote_style.is_some() => Some(w.value.clone()),
        Token::Number(n, _) => Some(n.clone()),
        _ => None,
    };
    let mut pairs = vec![];
    let mut keys = vec![];
    for item in inner.split(|t| *t == Token::Comma) {
        match (unset, item) {
            (true, [k]) => keys.push(text(k).ok_or_else(|| bad("a key must be quoted"))?),
            (false, [k, Token::Eq, v]) => pairs.push((
                text(k).ok_or_else(|| bad("a key must be quoted"))?,
                text(v).ok_or_else(|| bad("a value must be quoted"))?,
            )),
            _ => return Err(bad("malformed property list")),
        }
    }
    let change = match unset {
        true if !keys.is_empty() => PropertyChange::Unset { keys, if_exists },
        false if !pairs.is_empty() => PropertyChange::Set(pairs),
        _ => return Err(bad("no properties given")),
    };
    Ok(AlterProperties { name, change })
}

/// The format version `value` names.
fn format_version(value: &str) -> Result<FormatVersion> {
    match value.trim() {
        "1" => Ok(FormatVersion::V1),
        "2" => Ok(FormatVersion::V2),
        "3" => Ok(FormatVersion::V3),
        other => Err(DataFusionError::Plan(format!(
            "format-version must be 1, 2 or 3, got '{other}'"
        ))),
    }
}

/// Applies `change` to the table `ident` of `store` in one commit (retried when another commit
/// wins meanwhile). Checks everything before writing anything.
pub(crate) async fn apply(
    store: Arc<dyn MetadataStore>,
    ident: &TableIdent,
    change: &PropertyChange,
) -> Result<()> {
    const ATTEMPTS: usize = 4;
    for _ in 0..ATTEMPTS {
        let table = Arc::clone(&store).load(ident).await?;
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
        let built = builder.build().df()?;
        if built.changes.is_empty() {
            return Ok(());
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
        let proposed = MetadataChange {
            base: table.clone(),
            metadata: built.metadata,
            updates: built.changes,
            requirements,
        };
        match Arc::clone(&store).commit_metadata(ident, proposed).await? {
            CommitResult::Committed(_) => return Ok(()),
            CommitResult::Conflict => continue,
        }
    }
    Err(DataFusionError::Execution(format!(
        "ALTER TABLE on '{ident}' lost to concurrent commits {ATTEMPTS} times; nothing was \
         changed"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(sql: &str) -> AlterProperties {
        parse(sql).expect("an ALTER TABLE").expect("well formed")
    }

    #[test]
    fn statements_parse() {
        assert_eq!(
            parsed("ALTER TABLE ns.t SET TBLPROPERTIES ('format-version' = '3', 'a.b' = '1');"),
            AlterProperties {
                name: vec!["ns".into(), "t".into()],
                change: PropertyChange::Set(vec![
                    ("format-version".into(), "3".into()),
                    ("a.b".into(), "1".into())
                ]),
            }
        );
        assert_eq!(
            parsed("alter table t unset tblproperties if exists ('x', \"y\")"),
            AlterProperties {
                name: vec!["t".into()],
                change: PropertyChange::Unset {
                    keys: vec!["x".into(), "y".into()],
                    if_exists: true
                },
            }
        );
        // Other statements are DataFusion's.
        assert!(parse("SELECT 1").is_none());
        assert!(parse("ALTER TABLE t ADD COLUMN x INT").is_none());
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
            assert!(e.contains("expected ALTER TABLE name SET"), "{bad}: {e}");
        }
        assert!(format_version("4").is_err());
    }
}
