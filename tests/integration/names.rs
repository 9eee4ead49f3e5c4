//! Names and paths from users never place files outside where they belong: namespace and table
//! names that are not one path segment are refused (one line, nothing changed), explicit
//! locations must be absolute without `..`, partition values are encoded into one directory
//! name, and recorded relative locations of tables read by path stay under their base. Each test
//! walks the filesystem to prove no file landed outside the places allowed.

use std::path::{Path, PathBuf};

use crate::common::{files_under, rows, session, sql};
use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use iceberg::{NamespaceIdent, TableCreation, TableIdent};

/// Every file under `root` that is not under one of `allowed`.
fn files_outside(root: &Path, allowed: &[PathBuf]) -> Vec<String> {
    files_under(root)
        .into_iter()
        .filter(|f| !allowed.iter().any(|a| root.join(f).starts_with(a)))
        .collect()
}

async fn table_names(s: &iceberg_exec::IcebergSession, ns: &str) -> Vec<String> {
    let ns = NamespaceIdent::from_strs(ns.split('.')).unwrap();
    let mut names: Vec<String> = s
        .catalog()
        .list_tables(&ns)
        .await
        .unwrap()
        .iter()
        .map(|t| t.name().to_string())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn traversal_names_and_locations_are_refused_through_sql() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    let wh = root.join("a/b/wh");
    let s = session(&wh).await;
    sql(&s, "CREATE SCHEMA b").await.unwrap();

    let bad_names = [
        "../../escape2",
        "../escape",
        "..",
        ".",
        "a/b",
        "a\\b",
        "x\ny",
        "x\u{1}y",
        "x\u{7f}",
    ];
    for name in bad_names {
        let quoted = format!("b.\"{name}\"");
        for q in [
            format!("CREATE TABLE {quoted} (id INT)"),
            format!("CREATE TABLE {quoted} AS SELECT 1 AS id"),
            format!("CREATE EXTERNAL TABLE {quoted} (id INT) STORED AS ICEBERG LOCATION ''"),
        ] {
            let e = sql(&s, &q).await.unwrap_err().to_string();
            assert!(e.contains("invalid table name"), "{q:?}: {e}");
            assert!(!e.contains('\n'), "one line: {e:?}");
        }
        let e = sql(&s, &format!("INSERT INTO {quoted} VALUES (1)"))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("not found") || e.contains("invalid"), "{e}");
        // DataFusion itself refuses schema names with '.' (it reads them as catalog.schema).
        let e = sql(&s, &format!("CREATE SCHEMA \"{name}\""))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("invalid namespace")
                || (name.contains('.') && (e.contains("parse") || e.contains("Missing catalog"))),
            "{name:?}: {e}"
        );
    }
    // A namespace that does not exist cannot be used to climb either.
    assert!(sql(&s, "CREATE TABLE \"..\".t (id INT)").await.is_err());

    // Explicit locations: absolute, without `..`, not another table's.
    let outside = root.join("outside");
    for (q, why) in [
        (
            "CREATE EXTERNAL TABLE b.l1 (id INT) STORED AS ICEBERG LOCATION '../../outside'"
                .to_string(),
            "absolute",
        ),
        (
            format!(
                "CREATE EXTERNAL TABLE b.l2 (id INT) STORED AS ICEBERG LOCATION '{}/../../outside'",
                wh.display()
            ),
            "'..'",
        ),
        (
            format!(
                "CREATE EXTERNAL TABLE b.l3 (id INT) STORED AS ICEBERG LOCATION '' \
                 OPTIONS ('write.data.path' '{}/../../outside')",
                wh.display()
            ),
            "write.data.path",
        ),
    ] {
        let e = sql(&s, &q).await.unwrap_err().to_string();
        assert!(e.contains(why), "{q}: {e}");
        assert!(!e.contains('\n'), "one line: {e:?}");
    }

    // Partition values become one encoded directory name each.
    sql(
        &s,
        "CREATE EXTERNAL TABLE b.p (id INT, part VARCHAR) STORED AS ICEBERG LOCATION '' \
         PARTITIONED BY (part)",
    )
    .await
    .unwrap();
    sql(
        &s,
        "INSERT INTO b.p VALUES (1, '../../../escape3'), (2, 'a/b'), (3, '..'), (4, 'x\\y'), (5, 'a b')",
    )
    .await
    .unwrap();
    assert_eq!(
        rows(&s, "SELECT id, part FROM b.p ORDER BY id").await,
        ["1|../../../escape3", "2|a/b", "3|..", "4|x\\y", "5|a b"]
    );
    let mut dirs: Vec<String> = std::fs::read_dir(wh.join("b/p/data"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    dirs.sort();
    assert_eq!(
        dirs,
        [
            "part=..",
            "part=..%2F..%2F..%2Fescape3",
            "part=a%2Fb",
            "part=a+b",
            "part=x%5Cy"
        ]
    );
    assert_eq!(
        rows(&s, "SELECT id FROM b.p WHERE part = '../../../escape3'").await,
        ["1"]
    );

    // An explicit absolute location outside the warehouse is allowed (and documented); a
    // location that already holds a table is not.
    let elsewhere = root.join("elsewhere/t");
    sql(
        &s,
        &format!(
            "CREATE EXTERNAL TABLE b.e (id INT) STORED AS ICEBERG LOCATION '{}'",
            elsewhere.display()
        ),
    )
    .await
    .unwrap();
    sql(&s, "INSERT INTO b.e VALUES (7)").await.unwrap();
    assert_eq!(rows(&s, "SELECT id FROM b.e").await, ["7"]);
    let e = sql(
        &s,
        &format!(
            "CREATE EXTERNAL TABLE b.e2 (id INT) STORED AS ICEBERG LOCATION '{}'",
            elsewhere.display()
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("already holds an Iceberg table"), "{e}");

    // Nothing else was created, and no file is outside the warehouse and that location.
    assert_eq!(table_names(&s, "b").await, ["e", "p"]);
    let namespaces: Vec<String> = s
        .catalog()
        .list_namespaces()
        .await
        .unwrap()
        .iter()
        .map(|n| n.as_ref().join("."))
        .collect();
    assert_eq!(namespaces, ["b"]);
    assert!(!outside.exists());
    assert_eq!(
        files_outside(&root, &[wh.clone(), elsewhere.clone()]),
        Vec::<String>::new()
    );
    assert!(!files_under(&elsewhere).is_empty());
}

fn creation(name: &str) -> TableCreation {
    let schema = Schema::builder()
        .with_fields(vec![NestedField::optional(
            1,
            "id",
            Type::Primitive(PrimitiveType::Int),
        )
        .into()])
        .build()
        .unwrap();
    TableCreation::builder()
        .name(name.to_string())
        .schema(schema)
        .build()
}

#[tokio::test]
async fn traversal_names_are_refused_through_the_rust_api() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    let wh = root.join("wh");
    let s = session(&wh).await;
    let catalog = s.catalog();
    let ok = NamespaceIdent::new("ok".to_string());
    catalog
        .create_namespace(&ok, Default::default())
        .await
        .unwrap();
    for levels in [
        vec![".."],
        vec!["ok", ".."],
        vec!["a/b"],
        vec!["a.b"],
        vec!["\0"],
    ] {
        let ns = NamespaceIdent::from_strs(levels.clone()).unwrap();
        let e = catalog
            .create_namespace(&ns, Default::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid namespace"), "{levels:?}: {e}");
    }
    for name in ["../t", "..", "t/u", "t\\u", "t\0"] {
        let e = catalog
            .create_table(&ok, creation(name))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid table name"), "{name:?}: {e}");
    }
    let mut located = creation("loc");
    located.location = Some(format!("{}/../escape", wh.display()));
    let e = catalog
        .create_table(&ok, located)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("'..'"), "{e}");

    // Registering an existing table under a bad name is refused too.
    let t = catalog.create_table(&ok, creation("good")).await.unwrap();
    let metadata = t.metadata_location().unwrap().to_string();
    let e = catalog
        .register_table(&TableIdent::from_strs(["ok", "../r"]).unwrap(), &metadata)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("invalid table name"), "{e}");

    assert_eq!(table_names(&s, "ok").await, ["good"]);
    assert_eq!(
        files_outside(&root, std::slice::from_ref(&wh)),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn tables_read_by_path_stay_under_their_base_directory() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    // A copy of the Spark-written lineitem table, whose locations are relative.
    let fixture = crate::common::venv::repo()
        .join("tests/data/duckdb-iceberg/data/persistent/iceberg/lineitem_iceberg");
    let base = root.join("base");
    let table = base.join("lineitem_iceberg");
    for f in files_under(&fixture) {
        let to = table.join(&f);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(fixture.join(&f), to).unwrap();
    }
    let s = session(&root.join("wh")).await;
    let scan = |path: &Path| {
        format!(
            "SELECT count(*) FROM iceberg_scan('{}', 'base_dir', '{}')",
            path.display(),
            base.display()
        )
    };
    assert_eq!(rows(&s, &scan(&table)).await, ["51793"]);

    // The same manifest list, placed outside the base and named by climbing out of it.
    let md = table.join("metadata/v2.metadata.json");
    let text = std::fs::read_to_string(&md).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let list = json["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["snapshot-id"] == json["current-snapshot-id"])
        .unwrap()["manifest-list"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::copy(base.join(&list), root.join("escaped.avro")).unwrap();
    let climbing = root.join("climbing.metadata.json");
    std::fs::write(
        &climbing,
        text.replace(&list, "lineitem_iceberg/../../escaped.avro"),
    )
    .unwrap();
    let e = sql(&s, &scan(&climbing)).await.unwrap_err().to_string();
    assert!(e.contains("climbs out of"), "{e}");
}
