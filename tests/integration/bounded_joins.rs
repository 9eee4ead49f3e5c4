//! Joins under a memory limit: a hash join's build side cannot spill, so a session with a
//! limit plans joins whose build side may not fit as sort-merge joins, which spill and finish.

use crate::common::{rows, session_with_limit, sql};
use iceberg_exec::IcebergSession;

/// The sum of every `name=N` metric in an `EXPLAIN ANALYZE` text.
fn metric_sum(plan: &str, name: &str) -> u64 {
    plan.match_indices(&format!("{name}="))
        .map(|(at, m)| {
            plan[at + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect::<String>()
                .parse::<u64>()
                .unwrap_or(0)
        })
        .sum()
}

#[tokio::test]
async fn joins_that_do_not_fit_the_pool_spill_as_sort_merge_joins() {
    let dir = tempfile::tempdir().unwrap();
    let s = session_with_limit(dir.path(), 32 << 20).await;
    for q in [
        "CREATE SCHEMA ns",
        "CREATE EXTERNAL TABLE ns.a (k BIGINT, pad VARCHAR) STORED AS ICEBERG LOCATION ''",
        "CREATE EXTERNAL TABLE ns.b (k BIGINT, v BIGINT) STORED AS ICEBERG LOCATION ''",
        "INSERT INTO ns.a SELECT value * 7 % 800000, concat(repeat('p', 40), value) \
         FROM generate_series(0, 799999)",
        "INSERT INTO ns.b SELECT value * 3 % 2000000, value FROM generate_series(0, 1999999)",
    ] {
        sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    // One partition: the two sides' sorts are all that hold memory (DataFusion's sorts need
    // room for a few batches each beside the other operators).
    sql(&s, "SET datafusion.execution.target_partitions = 1")
        .await
        .unwrap();
    let query = "SELECT count(*), sum(b.v), min(a.pad), max(a.pad) FROM ns.a a JOIN ns.b b \
                 ON a.k = b.k";
    // The oracle: the same tables in a session without a limit (a hash join).
    let unbounded = IcebergSession::with_catalog(s.catalog().clone(), None).unwrap();
    let plan = rows(&unbounded, &format!("EXPLAIN {query}"))
        .await
        .join("\n");
    assert!(plan.contains("HashJoinExec"), "{plan}");
    let expected = rows(&unbounded, query).await;

    // Under the limit: a sort-merge join, shown by EXPLAIN; it spilled, answered the same, and
    // gave all its memory back.
    let plan = rows(&s, &format!("EXPLAIN {query}")).await.join("\n");
    assert!(plan.contains("SortMergeJoin"), "{plan}");
    assert!(!plan.contains("HashJoinExec"), "{plan}");
    // The side with strings has them copied out of shared buffers right before it is sorted
    // (what the sort reserves is what the rows take).
    let lines: Vec<&str> = plan.lines().collect();
    let compacted: Vec<usize> = (1..lines.len())
        .filter(|&i| lines[i].contains("CompactViewsExec"))
        .collect();
    assert!(!compacted.is_empty(), "{plan}");
    for i in compacted {
        assert!(lines[i - 1].contains("SortExec"), "{plan}");
    }
    let analyzed = rows(&s, &format!("EXPLAIN ANALYZE {query}"))
        .await
        .join("\n");
    assert!(metric_sum(&analyzed, "spill_count") > 0, "{analyzed}");
    assert_eq!(rows(&s, query).await, expected);
    assert_eq!(s.memory_pool().reserved(), 0);

    // The same join as a hash join under the same pool does not fit: the error DataFusion's
    // unspillable build side gives, which the rule avoids.
    sql(&s, "SET iceberg.join_memory_budget = 0").await.unwrap();
    let plan = rows(&s, &format!("EXPLAIN {query}")).await.join("\n");
    assert!(plan.contains("HashJoinExec"), "{plan}");
    let err = sql(&s, query).await.unwrap_err().to_string();
    assert!(err.contains("Resources exhausted"), "{err}");
    assert_eq!(s.memory_pool().reserved(), 0);

    // A small build side stays a hash join under the limit.
    sql(&s, "SET iceberg.join_memory_budget = 33554432")
        .await
        .unwrap();
    let small = "SELECT count(*) FROM ns.a a JOIN (SELECT * FROM ns.b WHERE k < 10) b ON a.k = b.k";
    let plan = rows(&s, &format!("EXPLAIN {small}")).await.join("\n");
    assert!(plan.contains("HashJoinExec"), "{plan}");
    assert_eq!(rows(&s, small).await, rows(&unbounded, small).await);
}

/// The build sides of a chain of hash joins are held at the same time: two that each fit the
/// budget alone but not together leave the larger one a sort-merge join.
#[tokio::test]
async fn hash_joins_held_together_share_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let s = session_with_limit(dir.path(), 256 << 20).await;
    for q in [
        "CREATE SCHEMA ns",
        "CREATE EXTERNAL TABLE ns.facts (b BIGINT, c BIGINT, v BIGINT) STORED AS ICEBERG \
         LOCATION ''",
        "CREATE EXTERNAL TABLE ns.small (b BIGINT, x BIGINT) STORED AS ICEBERG LOCATION ''",
        "CREATE EXTERNAL TABLE ns.large (c BIGINT, y BIGINT) STORED AS ICEBERG LOCATION ''",
        "INSERT INTO ns.facts SELECT value % 100000, value % 200000, value \
         FROM generate_series(0, 799999)",
        "INSERT INTO ns.small SELECT value, value * 2 FROM generate_series(0, 99999)",
        "INSERT INTO ns.large SELECT value, value * 3 FROM generate_series(0, 199999)",
    ] {
        sql(&s, q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    let query = "SELECT count(*), sum(f.v + s.x + l.y) FROM ns.facts f \
                 JOIN ns.small s ON f.b = s.b JOIN ns.large l ON f.c = l.c";
    let unbounded = IcebergSession::with_catalog(s.catalog().clone(), None).unwrap();
    let expected = rows(&unbounded, query).await;
    let joins = |plan: &str| {
        (
            plan.matches("HashJoinExec").count(),
            plan.matches("SortMergeJoinExec").count(),
        )
    };
    // The build sides as the statistics give them: 100,000 and 200,000 rows of two BIGINTs
    // (1.6 and 3.2 MB), each held as twice that. A budget of 24 MB (half of it for hash
    // tables) holds both; 10 MB holds either alone but not both: the larger one is merged.
    sql(&s, "SET iceberg.join_memory_budget = 24000000")
        .await
        .unwrap();
    let plan = rows(&s, &format!("EXPLAIN {query}")).await.join("\n");
    assert_eq!(joins(&plan), (2, 0), "{plan}");
    sql(&s, "SET iceberg.join_memory_budget = 10000000")
        .await
        .unwrap();
    let plan = rows(&s, &format!("EXPLAIN {query}")).await.join("\n");
    assert_eq!(joins(&plan), (1, 1), "{plan}");
    let merge = plan
        .lines()
        .find(|l| l.contains("SortMergeJoinExec"))
        .unwrap();
    assert!(
        merge.contains("(c@"),
        "the larger build side is merged: {plan}"
    );
    assert_eq!(rows(&s, query).await, expected);
    // 6 MB holds neither.
    sql(&s, "SET iceberg.join_memory_budget = 6000000")
        .await
        .unwrap();
    let plan = rows(&s, &format!("EXPLAIN {query}")).await.join("\n");
    assert_eq!(joins(&plan), (0, 2), "{plan}");
    assert_eq!(rows(&s, query).await, expected);
    assert_eq!(s.memory_pool().reserved(), 0);
}
