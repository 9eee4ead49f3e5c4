//! The `iceberg-exec` command-line contract.

use std::path::Path;
use std::process::{Command, Output};

fn cli(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iceberg-exec"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run iceberg-exec")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[test]
fn sql_statements_and_output_formats() {
    let dir = tempfile::tempdir().unwrap();
    let o = cli(
        dir.path(),
        &["sql", "CREATE SCHEMA ns; CREATE TABLE ns.t (id BIGINT, name VARCHAR); INSERT INTO ns.t VALUES (1, 'a;b'), (2, NULL)"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // The default warehouse and catalog live under ./warehouse.
    assert!(dir.path().join("warehouse/catalog.db").exists());
    assert!(dir.path().join("warehouse/ns/t/metadata").is_dir());

    let o = cli(
        dir.path(),
        &[
            "--format",
            "csv",
            "sql",
            "SELECT id, name FROM ns.t ORDER BY id",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "id,name\n1,a;b\n2,\n");

    let o = cli(
        dir.path(),
        &[
            "--format",
            "json",
            "sql",
            "SELECT id, name FROM ns.t ORDER BY id",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "{\"id\":1,\"name\":\"a;b\"}\n{\"id\":2}\n");

    let o = cli(dir.path(), &["sql", "SELECT count(*) AS n FROM ns.t"]);
    assert!(o.status.success());
    let text = stdout(&o);
    assert!(text.contains("| n |") && text.contains("| 2 |"), "{text}");
}

#[test]
fn catalog_uri_forms_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let abs = dir.path().join("cat/my.db");
    let uri = format!("sqlite:///{}", abs.display()); // SQLAlchemy absolute form: 4 slashes
    let wh = dir.path().join("wh");
    let args = |sql: &'static str| -> Vec<String> {
        vec![
            "--warehouse".into(),
            wh.display().to_string(),
            "--catalog-uri".into(),
            uri.clone(),
            "--catalog-name".into(),
            "prod".into(),
            "--memory-limit".into(),
            "64MiB".into(),
            "--format".into(),
            "csv".into(),
            "sql".into(),
            sql.into(),
        ]
    };
    let run = |a: Vec<String>| {
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        cli(dir.path(), &refs)
    };
    let o = run(args("CREATE SCHEMA x; CREATE TABLE x.t AS SELECT 7 AS v"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(abs.exists(), "catalog at the SQLAlchemy path");
    let o = run(args("SELECT v FROM prod.x.t"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "v\n7\n");

    // Relative SQLAlchemy form resolves against the working directory.
    let o = cli(
        dir.path(),
        &[
            "--catalog-uri",
            "sqlite:///rel.db",
            "sql",
            "CREATE SCHEMA r",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dir.path().join("rel.db").exists());
}

#[test]
fn errors_are_one_line_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ok = cli(
        dir.path(),
        &["sql", "CREATE SCHEMA ns; CREATE TABLE ns.t (id INT)"],
    );
    assert!(ok.status.success(), "{}", stderr(&ok));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["sql", "SELECT * FROM ns.nope"], "nope"),
        (vec!["sql", "SELECT * FROM nons.t"], "nons"),
        (vec!["sql", "SELEKT 1"], "SELEKT"),
        (vec!["--bogus-flag", "sql", "SELECT 1"], "--bogus-flag"),
        (
            vec!["--memory-limit", "lots", "sql", "SELECT 1"],
            "invalid size 'lots'",
        ),
        (vec!["--format", "xml", "sql", "SELECT 1"], "xml"),
        (
            vec!["--catalog-uri", "mysql://h/db", "sql", "SELECT 1"],
            "unsupported scheme 'mysql'",
        ),
        (
            vec![
                "--catalog-uri",
                "sqlite:////dev/null/x/catalog.db",
                "sql",
                "SELECT 1",
            ],
            "catalog directory",
        ),
        (
            vec!["sql", "INSERT INTO ns.t VALUES (1); SELECT * FROM ns.nope"],
            "nope",
        ),
    ];
    for (args, needle) in cases {
        let o = cli(dir.path(), &args);
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?} should fail");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: not one line: {err}"
        );
        assert!(
            !err.contains("panicked") && !err.contains("backtrace"),
            "{err}"
        );
    }
    // The failing multi-statement run committed its first statement (statements run in order),
    // the failed ones changed nothing else.
    let o = cli(
        dir.path(),
        &["--format", "csv", "sql", "SELECT count(*) AS n FROM ns.t"],
    );
    assert_eq!(stdout(&o), "n\n1\n");
}

#[test]
fn metadata_file_that_is_not_json_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let ok = cli(
        dir.path(),
        &["sql", "CREATE SCHEMA ns; CREATE TABLE ns.t (id INT)"],
    );
    assert!(ok.status.success());
    let meta_dir = dir.path().join("warehouse/ns/t/metadata");
    let meta = std::fs::read_dir(&meta_dir)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let original = std::fs::read(&meta).unwrap();
    std::fs::write(&meta, b"this is not json").unwrap();
    let o = cli(dir.path(), &["sql", "SELECT * FROM ns.t"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("metadata")
            && err.contains(&meta.file_name().unwrap().to_string_lossy().to_string()),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let o = cli(dir.path(), &["sql", "INSERT INTO ns.t VALUES (1)"]);
    assert!(!o.status.success());
    assert_eq!(
        std::fs::read(&meta).unwrap(),
        b"this is not json",
        "nothing rewritten"
    );
    std::fs::write(&meta, original).unwrap();
    let o = cli(
        dir.path(),
        &["--format", "csv", "sql", "SELECT count(*) AS n FROM ns.t"],
    );
    assert_eq!(stdout(&o), "n\n0\n", "{}", stderr(&o));
}

#[test]
fn shell_reads_statements_from_stdin() {
    use std::io::Write;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_iceberg-exec"))
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .args(["--format", "csv", "sql"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"CREATE SCHEMA ns;\nCREATE TABLE ns.t\n  AS SELECT 41 + 1 AS answer;\nSELECT * FROM ns.nope;\nSELECT answer FROM ns.t;\n\\q\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("answer\n42\n"), "{out}");
    assert!(
        stderr(&o).contains("ns.nope"),
        "errors are reported and the shell goes on"
    );
}

#[test]
fn nested_values_in_every_output_format() {
    let dir = tempfile::tempdir().unwrap();
    let query = "SELECT named_struct('a', 1, 'b', 'x') AS s, make_array(1, 2, NULL) AS l, \
                 map(['k'], [1]) AS m, CAST(NULL AS INT[]) AS n";
    let run = |format: &str| {
        let o = cli(dir.path(), &["--format", format, "sql", query]);
        assert!(o.status.success(), "{format}: {}", stderr(&o));
        stdout(&o)
    };
    let table = run("table");
    for cell in ["{a: 1, b: x}", "[1, 2, NULL]", "{k: 1}"] {
        assert!(table.contains(cell), "{table}");
    }
    assert_eq!(
        run("csv"),
        "s,l,m,n\n\"{a: 1, b: x}\",\"[1, 2, NULL]\",{k: 1},\n"
    );
    assert_eq!(
        run("json"),
        "{\"s\":{\"a\":1,\"b\":\"x\"},\"l\":[1,2,null],\"m\":{\"k\":1}}\n"
    );
}

#[test]
fn the_demo_tours_deletes_dml_merge_time_travel_and_spilling_plans() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli(dir.path(), &["demo", "--rows", "60000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for n in 1..=8 {
        assert!(
            text.contains(&format!("\n== {n}. ")),
            "step {n} missing:\n{text}"
        );
    }
    // 60000 / 997 ids are equality-deleted: 60 rows.
    assert!(text.contains("commits them: 60 ids"), "{text}");
    assert!(text.contains("| 59940      |"), "{text}");
    // Time travel reads the table as built.
    let then = text
        .lines()
        .skip_while(|l| !l.starts_with("| trips_then"))
        .nth(2)
        .unwrap_or_default()
        .to_string();
    assert!(then.starts_with("| 60000 "), "{then}\n{text}");
    // The scan's plan shows both kinds of deletes at work.
    assert!(text.contains("equality_deleted_rows=60"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("PositionalDeleteExec output_rows=")
                && l.contains("position_deleted_rows=")),
        "{text}"
    );
    assert!(text.contains("SortExec output_rows="), "{text}");
    // A second run goes on from the table's state.
    let again = cli(dir.path(), &["demo", "--rows", "60000"]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert!(String::from_utf8_lossy(&again.stdout).contains("demo.trips exists"));
}

/// CSV and JSON rows are printed as they stream: a result of several batches comes out with
/// one header and every row, in order, empty results with the header alone.
#[test]
fn streamed_output_prints_every_batch_once() {
    let dir = tempfile::tempdir().unwrap();
    let o = cli(
        dir.path(),
        &[
            "--format",
            "csv",
            "sql",
            "SELECT value AS n FROM generate_series(1, 20000) ORDER BY value",
        ],
    );
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 20_001);
    assert_eq!(lines[0], "n");
    let want: Vec<String> = (1..=20_000).map(|i| i.to_string()).collect();
    assert_eq!(
        lines[1..],
        want.iter().map(String::as_str).collect::<Vec<_>>()[..]
    );

    let o = cli(
        dir.path(),
        &["--format", "csv", "sql", "SELECT 1 AS a WHERE false"],
    );
    assert_eq!(stdout(&o), "a\n");

    let o = cli(
        dir.path(),
        &[
            "--format",
            "json",
            "sql",
            "SELECT value AS n FROM generate_series(1, 20000) ORDER BY value",
        ],
    );
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 20_000);
    assert_eq!(lines[0], r#"{"n":1}"#);
    assert_eq!(lines[19_999], r#"{"n":20000}"#);
}

/// Statements the session runs itself reach it from the command line too: DELETE and UPDATE
/// with subqueries, UPDATE ... FROM, and DROP TABLE.
#[test]
fn subquery_dml_and_drop_run_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let o = cli(
        dir.path(),
        &[
            "--format",
            "csv",
            "sql",
            "CREATE SCHEMA ns; CREATE TABLE ns.a (k BIGINT, v INT); \
             INSERT INTO ns.a VALUES (1, 10), (2, 20), (3, 30); \
             CREATE TABLE ns.b (k BIGINT, w INT); INSERT INTO ns.b VALUES (1, 100), (3, 300); \
             DELETE FROM ns.a WHERE k IN (SELECT k FROM ns.b WHERE w < 200); \
             UPDATE ns.a SET v = ns.b.w FROM ns.b WHERE ns.a.k = ns.b.k; \
             DROP TABLE ns.b; \
             SELECT k, v FROM ns.a ORDER BY k",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.trim_end().ends_with("k,v\n2,20\n3,300"), "{out}");
}

#[test]
fn metadata_columns_and_uuid_text_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let o = cli(
        dir.path(),
        &[
            "sql",
            "CREATE SCHEMA ns; CREATE TABLE ns.t (id BIGINT, u UUID); \
             INSERT INTO ns.t VALUES (1, '00000000-0000-0000-0000-00000000000a'), (2, NULL); \
             DELETE FROM ns.t WHERE _pos = 1",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = cli(
        dir.path(),
        &[
            "--format",
            "csv",
            "sql",
            "SELECT *, _pos, _spec_id FROM ns.t WHERE u = '00000000-0000-0000-0000-00000000000A'",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "id,u,_pos,_spec_id\n1,00000000-0000-0000-0000-00000000000a,0,0\n"
    );
}
