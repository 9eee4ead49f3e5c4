//! The user guide's SQL runs as written. Every ` ```sql ` block of `docs/*.md` runs in order
//! through `IcebergSession::sql`, after the example tables of `docs/README.md`, against a fresh
//! warehouse that stands for `/data/lake`; the README's tour runs on a warehouse of its own.
//! A statement whose line ends in `-- refused: <text>` must fail with a message containing
//! `<text>`; every other statement must succeed.

use std::path::{Path, PathBuf};

use crate::common::session;

/// The warehouse the guide's examples name.
const GUIDE_WAREHOUSE: &str = "/data/lake";

/// One statement of a page: its text, the line it starts on, and the refusal it expects.
#[derive(Debug)]
struct Statement {
    text: String,
    line: usize,
    refused: Option<String>,
}

/// The ` ```sql ` blocks of a markdown page, each with the line of its first statement line.
fn sql_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        match (&mut current, line.trim_start()) {
            (None, "```sql") => current = Some((i + 2, String::new())),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "a ```sql block is not closed");
    blocks
}

/// Splits a block into statements at `;` outside quotes and comments. A comment on the rest of
/// a statement's last line belongs to it (where `-- refused: ...` is read).
fn statements(block: &str, first_line: usize) -> Vec<Statement> {
    let mut out = Vec::new();
    let (mut text, mut line, mut start_line) = (String::new(), first_line, first_line);
    let mut chars = block.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        if text.trim().is_empty() {
            start_line = line;
        }
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            (None, '-') if chars.peek() == Some(&'-') => {
                // A comment inside a statement: kept, up to the end of its line.
                text.push(c);
                while let Some(&next) = chars.peek() {
                    if next == '\n' {
                        break;
                    }
                    text.push(next);
                    chars.next();
                }
                continue;
            }
            (None, ';') => {
                let rest: String = chars.by_ref().take_while(|&c| c != '\n').collect();
                let refused = rest
                    .trim()
                    .strip_prefix("-- refused:")
                    .map(|r| r.trim().to_string());
                out.push(Statement {
                    text: std::mem::take(&mut text).trim().to_string(),
                    line: start_line,
                    refused,
                });
                line += 1;
                continue;
            }
            _ => {}
        }
        if c == '\n' {
            line += 1;
        }
        text.push(c);
    }
    let rest = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with("--"))
        .count();
    assert_eq!(
        rest, 0,
        "a statement without `;` at the end of a block: {text}"
    );
    out
}

/// Runs the statements of `page` (a path for messages) on `session`; returns the failures.
async fn run_page(
    session: &iceberg_exec::IcebergSession,
    page: &str,
    markdown: &str,
    warehouse: &Path,
) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    let mut count = 0;
    for (first_line, block) in sql_blocks(markdown) {
        for statement in statements(&block, first_line) {
            count += 1;
            let text = statement
                .text
                .replace(GUIDE_WAREHOUSE, &warehouse.display().to_string());
            let result = match session.sql(&text).await {
                Ok(df) => df.collect().await.map(|_| ()),
                Err(e) => Err(e),
            };
            let at = format!("{page}:{}", statement.line);
            match (result, &statement.refused) {
                (Ok(()), None) => {}
                (Err(e), Some(expected)) if e.to_string().contains(expected.as_str()) => {}
                (Ok(()), Some(expected)) => failures.push(format!(
                    "{at}: should be refused with '{expected}' but ran: {}",
                    statement.text
                )),
                (Err(e), Some(expected)) => failures.push(format!(
                    "{at}: refused with '{e}', the page says '{expected}': {}",
                    statement.text
                )),
                (Err(e), None) => failures.push(format!("{at}: {e}\n  {}", statement.text)),
            }
        }
    }
    (count, failures)
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sql_example_of_the_guide_runs_as_written() {
    let docs = repo().join("docs");
    let setup = std::fs::read_to_string(docs.join("README.md")).unwrap();
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&docs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md") && !p.ends_with("README.md"))
        .collect();
    pages.sort();

    let mut failures = Vec::new();
    let (mut statements_run, mut refusals, mut pages_with_sql) = (0, 0, 0);
    for page in &pages {
        let markdown = std::fs::read_to_string(page).unwrap();
        let name = page.strip_prefix(repo()).unwrap().display().to_string();
        if sql_blocks(&markdown).is_empty() {
            continue;
        }
        pages_with_sql += 1;
        let dir = tempfile::tempdir().unwrap();
        let s = session(dir.path()).await;
        let (n, setup_failures) = run_page(&s, "docs/README.md", &setup, dir.path()).await;
        assert!(n >= 5, "the example tables' block was not found");
        assert!(setup_failures.is_empty(), "{setup_failures:#?}");
        let (n, page_failures) = run_page(&s, &name, &markdown, dir.path()).await;
        statements_run += n;
        refusals += statements_of(&markdown)
            .iter()
            .filter(|s| s.refused.is_some())
            .count();
        failures.extend(page_failures);
    }

    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    let (n, readme_failures) = run_page(&s, "README.md", &readme, dir.path()).await;
    assert!(n >= 5, "the README's tour was not found");
    failures.extend(readme_failures);

    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The pages that hold SQL, and enough of it, were found and read.
    assert!(pages_with_sql >= 6, "{pages_with_sql} pages with SQL");
    assert!(statements_run >= 80, "{statements_run} statements");
    assert!(refusals >= 10, "{refusals} refusals");
}

fn statements_of(markdown: &str) -> Vec<Statement> {
    sql_blocks(markdown)
        .into_iter()
        .flat_map(|(line, block)| statements(&block, line))
        .collect()
}

#[test]
fn statements_split_at_semicolons_outside_quotes_and_comments() {
    let block = "SELECT 'a;b' AS x; -- refused: no\nSELECT 1 -- c; d\n  , \"q;\" ;\n-- tail\n";
    let got = statements(block, 10);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].text, "SELECT 'a;b' AS x");
    assert_eq!(got[0].refused.as_deref(), Some("no"));
    assert_eq!(got[0].line, 10);
    assert_eq!(got[1].text, "SELECT 1 -- c; d\n  , \"q;\"");
    assert_eq!(got[1].refused, None);
    assert_eq!(got[1].line, 11);
}

/// The anchor GitHub gives a markdown heading: lower case, punctuation other than `-` and `_`
/// dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn links_between_the_guides_pages_lead_somewhere() {
    let mut pages = vec![repo().join("README.md")];
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut broken = vec![];
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for target in links(&text) {
            if target.starts_with("http") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((target.as_str(), ""));
            let file = match file {
                "" => page.clone(),
                f => page.parent().unwrap().join(f),
            };
            checked += 1;
            if !file.exists() {
                broken.push(format!("{}: {target} (no such file)", page.display()));
                continue;
            }
            if fragment.is_empty() || file.is_dir() {
                continue;
            }
            let headings: Vec<String> = std::fs::read_to_string(&file)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.strip_prefix('#'))
                .map(|l| anchor(l.trim_start_matches('#')))
                .collect();
            if !headings.iter().any(|h| h == fragment) {
                broken.push(format!("{}: {target} (no such heading)", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
    assert!(checked >= 30, "{checked} links");
}

/// The targets of a markdown page's inline links `[text](target)`, outside code blocks.
fn links(markdown: &str) -> Vec<String> {
    let mut out = vec![];
    let mut in_code = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}
