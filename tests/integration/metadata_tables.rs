//! Metadata tables (`t$files`, `iceberg_metadata(..)`): time travel, several partition specs,
//! and many manifests streamed under a small pool.

use iceberg::TableIdent;
use iceberg_exec::IcebergSession;

use crate::common::{rows, session, session_with_limit};

async fn run(s: &IcebergSession, sql: &str) {
    s.sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

#[tokio::test]
async fn metadata_tables_of_a_snapshot_and_of_every_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    run(&s, "CREATE SCHEMA ns").await;
    run(
        &s,
        "CREATE TABLE ns.t (id bigint, k string) USING iceberg PARTITIONED BY (k) \
         TBLPROPERTIES ('write.delete.mode' = 'merge-on-read')",
    )
    .await;
    run(&s, "INSERT INTO ns.t VALUES (1, 'a'), (2, 'a'), (3, 'b')").await;
    let first = s
        .catalog()
        .load_table(&TableIdent::from_strs(["ns", "t"]).unwrap())
        .await
        .unwrap()
        .metadata()
        .current_snapshot_id()
        .unwrap();
    run(&s, "DELETE FROM ns.t WHERE id = 2").await;
    // A new spec: files of both specs, one partition struct over every field.
    run(&s, "ALTER TABLE ns.t ADD PARTITION FIELD bucket(2, id)").await;
    run(&s, "INSERT INTO ns.t VALUES (4, 'c')").await;
    let at = |kind: &str| {
        format!("SELECT count(*) FROM iceberg_metadata('ns.t', '{kind}', 'snapshot_id', {first})")
    };
    assert_eq!(rows(&s, &at("files")).await, ["2"]);
    assert_eq!(rows(&s, &at("delete_files")).await, ["0"]);
    assert_eq!(rows(&s, &at("manifests")).await, ["1"]);
    assert_eq!(
        rows(&s, "SELECT count(*) FROM ns.t$files").await,
        ["4"],
        "two data files of the first spec, a delete file, a data file of the second"
    );
    assert_eq!(
        rows(
            &s,
            "SELECT spec_id, partition['k'], partition['id_bucket_2'] IS NULL FROM ns.t$data_files \
             ORDER BY partition['k']"
        )
        .await,
        ["0|a|true", "0|b|true", "1|c|false"]
    );
    // Every snapshot's manifests, each manifest once for the file tables.
    assert_eq!(
        rows(
            &s,
            "SELECT count(*), count(DISTINCT file_path) FROM ns.t$all_files"
        )
        .await,
        ["4|4"]
    );
    assert_eq!(
        rows(
            &s,
            "SELECT count(DISTINCT reference_snapshot_id) FROM ns.t$all_manifests"
        )
        .await,
        ["3"]
    );
    // Entries of the current snapshot: the deleted entries of the DELETE's snapshot are gone
    // from its manifests, the live ones listed with their sequence numbers.
    assert_eq!(
        rows(
            &s,
            "SELECT data_file['content'], min(sequence_number), max(sequence_number) \
             FROM ns.t$entries GROUP BY 1 ORDER BY 1"
        )
        .await,
        ["0|1|3", "1|2|2"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_manifests_stream_under_a_small_pool() {
    let dir = tempfile::tempdir().unwrap();
    let s = session_with_limit(dir.path(), 8 << 20).await;
    run(&s, "CREATE SCHEMA ns").await;
    run(
        &s,
        "CREATE TABLE ns.t (id bigint, k int) USING iceberg PARTITIONED BY (k)",
    )
    .await;
    // 40 commits of 25 partitions: 1000 files in 40 manifests.
    for i in 0..40 {
        run(
            &s,
            &format!(
                "INSERT INTO ns.t SELECT value, value % 25 FROM generate_series({}, {})",
                i * 100,
                i * 100 + 99
            ),
        )
        .await;
    }
    assert_eq!(
        rows(
            &s,
            "SELECT count(*), sum(record_count), count(DISTINCT partition['k']) FROM ns.t$files"
        )
        .await,
        ["1000|4000|25"]
    );
    assert_eq!(
        rows(&s, "SELECT sum(added_data_files_count) FROM ns.t$manifests").await,
        ["1000"]
    );
    assert_eq!(s.memory_pool().reserved(), 0);
}

#[tokio::test]
async fn filters_on_content_and_partition_skip_manifests() {
    let dir = tempfile::tempdir().unwrap();
    let s = session(dir.path()).await;
    run(&s, "CREATE SCHEMA ns").await;
    run(
        &s,
        "CREATE TABLE ns.t (id bigint, k string) USING iceberg PARTITIONED BY (k) \
         TBLPROPERTIES ('write.delete.mode' = 'merge-on-read')",
    )
    .await;
    for (id, k) in [(1, "a"), (3, "b"), (5, "c")] {
        run(
            &s,
            &format!("INSERT INTO ns.t VALUES ({id}, '{k}'), ({}, '{k}')", id + 1),
        )
        .await;
    }
    run(&s, "DELETE FROM ns.t WHERE id = 3").await;
    // The same answers with and without the filters the scan uses.
    let filtered = [
        ("partition.k = 'b'", 2),
        ("partition.k > 'a'", 3),
        ("partition.k <= 'a'", 1),
        ("content = 1", 1),
        ("content IN (0)", 3),
        ("content = 0 AND partition.k = 'c'", 1),
        ("partition.k IS NULL", 0),
    ];
    for (condition, n) in filtered {
        assert_eq!(
            rows(
                &s,
                &format!("SELECT count(*) FROM ns.t$files WHERE {condition}")
            )
            .await,
            [n.to_string()],
            "{condition}"
        );
    }
    // Every manifest but the data manifest of partition a removed from disk: a filter that rules
    // them out reads none of them.
    let manifests = rows(
        &s,
        "SELECT path FROM ns.t$manifests WHERE content = 1 OR get_field(partition_summaries[1], 'lower_bound') <> 'a'",
    )
    .await;
    assert_eq!(manifests.len(), 3, "{manifests:?}");
    for m in &manifests {
        std::fs::remove_file(m.trim_start_matches("file://")).unwrap();
    }
    assert_eq!(
        rows(
            &s,
            "SELECT sum(record_count) FROM ns.t$files WHERE partition.k = 'a' AND content = 0"
        )
        .await,
        ["2"]
    );
    assert_eq!(
        rows(
            &s,
            "SELECT count(*) FROM ns.t$data_files WHERE partition.k < 'b'"
        )
        .await,
        ["1"]
    );
    let e = s
        .sql("SELECT count(*) FROM ns.t$files")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("avro") || e.contains("No such file"), "{e}");
}
