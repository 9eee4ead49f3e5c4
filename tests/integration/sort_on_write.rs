//! Sort-on-write: an INSERT into a sorted table under a 16 MiB pool spills in the sort below the
//! writer, every written file is sorted by the table's sort order, and the pool ends empty.

use std::sync::Arc;

use crate::common::{rows, session_with_limit};
use datafusion::arrow::array::{Array, Int64Array};
use datafusion::physical_plan::{collect, ExecutionPlan};
use iceberg::TableIdent;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

fn find_spills(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<(String, usize)>) {
    if plan.name() == "SortExec" {
        let spills = plan
            .metrics()
            .and_then(|m| m.spill_count())
            .unwrap_or_default();
        out.push((plan.name().to_string(), spills));
    }
    for c in plan.children() {
        find_spills(c, out);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sorted_insert_spills_under_16mib_and_files_are_sorted() {
    let dir = tempfile::tempdir().unwrap();
    let s = session_with_limit(dir.path(), 16 << 20).await;
    crate::common::sql(&s, "CREATE SCHEMA ns").await.unwrap();
    crate::common::sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, k BIGINT, payload VARCHAR)
         STORED AS ICEBERG LOCATION '' WITH ORDER (k DESC NULLS LAST)
         OPTIONS ('write.target-file-size-bytes' '8000000')",
    )
    .await
    .unwrap();

    const N: i64 = 1_500_000;
    let insert = format!(
        "INSERT INTO ns.t SELECT value, CASE WHEN value % 1000 = 0 THEN NULL ELSE value * 7919 % 1000003 END,
                'payload-' || CAST(value AS VARCHAR) FROM generate_series(1, {N})"
    );
    let df = s.context().sql(&insert).await.unwrap();
    let plan = df.create_physical_plan().await.unwrap();
    let text = datafusion::physical_plan::displayable(plan.as_ref())
        .indent(true)
        .to_string();
    assert!(
        text.contains("CommitExec")
            && text.contains("DataFileWriterExec")
            && text.contains("SortExec"),
        "{text}"
    );
    let result = collect(Arc::clone(&plan), s.context().task_ctx())
        .await
        .unwrap();
    assert_eq!(crate::common::render(&result), [N.to_string()]);

    let mut sorts = vec![];
    find_spills(&plan, &mut sorts);
    assert!(!sorts.is_empty());
    assert!(
        sorts.iter().any(|(_, spills)| *spills > 0),
        "expected the sort to spill: {sorts:?}"
    );
    drop(plan);
    assert_eq!(s.memory_pool().reserved(), 0);

    assert_eq!(
        rows(&s, "SELECT count(*), count(k), sum(id) FROM ns.t").await,
        [format!("{N}|{}|{}", N - N / 1000, N * (N + 1) / 2)]
    );

    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let snapshot = table.metadata().current_snapshot().unwrap().clone();
    let files = iceberg_exec::file_planning::plan_files(&table, &snapshot)
        .await
        .unwrap();
    assert!(
        files.len() > 1,
        "expected rolled files, got {}",
        files.len()
    );
    let mut ranges = vec![];
    for f in &files {
        let path = f.path.strip_prefix("file://").unwrap_or(&f.path);
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap())
            .unwrap()
            .build()
            .unwrap();
        let mut prev: Option<Option<i64>> = None;
        let mut first_k: Option<Option<i64>> = None;
        let mut count = 0u64;
        for batch in reader {
            let batch = batch.unwrap();
            let k = batch
                .column(1)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            for i in 0..k.len() {
                let cur = if k.is_null(i) { None } else { Some(k.value(i)) };
                if let Some(p) = prev {
                    // DESC NULLS LAST: values never increase, NULLs only at the end.
                    let ok = match (p, cur) {
                        (Some(a), Some(b)) => a >= b,
                        (Some(_), None) => true,
                        (None, None) => true,
                        (None, Some(_)) => false,
                    };
                    assert!(ok, "{path} not sorted: {p:?} before {cur:?}");
                }
                prev = Some(cur);
                first_k.get_or_insert(cur);
                count += 1;
            }
        }
        assert_eq!(count, f.record_count);
        ranges.push((first_k.flatten(), prev.flatten()));
    }
    // One globally sorted stream: files hold disjoint key ranges.
    ranges.sort_by_key(|(first, _)| std::cmp::Reverse(*first));
    for pair in ranges.windows(2) {
        let (_, last_of_prev) = pair[0];
        let (first_of_next, _) = pair[1];
        if let (Some(a), Some(b)) = (last_of_prev, first_of_next) {
            assert!(a >= b, "files overlap: {ranges:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_of_the_sort_key_writes_files_sorted_by_the_new_values() {
    let dir = tempfile::tempdir().unwrap();
    let s = session_with_limit(dir.path(), 64 << 20).await;
    crate::common::sql(&s, "CREATE SCHEMA ns").await.unwrap();
    crate::common::sql(
        &s,
        "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, k BIGINT) STORED AS ICEBERG \
         LOCATION '' WITH ORDER (k DESC NULLS LAST)",
    )
    .await
    .unwrap();
    for part in 0..3i64 {
        crate::common::sql(
            &s,
            &format!(
                "INSERT INTO ns.t SELECT value, value * 7919 % 100003 FROM generate_series({}, {})",
                part * 20_000 + 1,
                (part + 1) * 20_000
            ),
        )
        .await
        .unwrap();
    }
    // The new values reverse the order of the rows they change: a sort taken before the
    // change would leave them backwards.
    crate::common::sql(&s, "UPDATE ns.t SET k = 100003 - k WHERE id % 2 = 0")
        .await
        .unwrap();
    assert_eq!(
        rows(&s, "SELECT count(*), sum(k) FROM ns.t").await,
        rows(
            &s,
            "SELECT count(*), sum(CASE WHEN value % 2 = 0 THEN 100003 - value * 7919 % 100003 \
             ELSE value * 7919 % 100003 END) FROM generate_series(1, 60000)"
        )
        .await
    );
    let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
    let table = s.catalog().load_table(&ident).await.unwrap();
    let snapshot = table.metadata().current_snapshot().unwrap().clone();
    let files = iceberg_exec::file_planning::plan_files(&table, &snapshot)
        .await
        .unwrap();
    assert!(!files.is_empty());
    for f in &files {
        assert!(
            crate::common::non_increasing(&f.path, "k"),
            "{} is not sorted",
            f.path
        );
    }
}
