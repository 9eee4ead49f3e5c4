//! The live entries of data manifests in partition order, for `rewrite_manifests`, in bounded
//! memory.
//!
//! ```text
//!  data manifests ─► (spec, partition, manifest, entry, size) per live entry
//!     ─► SortExec (spills) ─► chunks of one spec, one output manifest each
//!     ─► a window of chunks whose entries fit the reservation
//!     ─► one read of the manifests the window needs ─► its chunks, in order ─► next window
//! ```
//!
//! Only the sort keys of every entry are sorted; the entries themselves are read back a window
//! at a time. A table whose entries fit the memory pool is read twice (keys, then entries); a
//! larger one once more per window, never more than the pool at a time.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, OnceLock};

use arrow::array::{
    ArrayRef, AsArray, Int32Builder, RecordBatch, StringBuilder, UInt32Builder, UInt64Builder,
};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef, UInt32Type, UInt64Type};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryReservation};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::expressions::Column;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::stream::RecordBatchReceiverStream;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use futures::StreamExt;
use iceberg::spec::{DataFile, ManifestContentType, ManifestEntry, ManifestFile};
use iceberg::table::Table;

/// Manifests read at the same time (each decoded whole, then dropped).
const MANIFESTS_IN_FLIGHT: usize = 4;

/// Sort keys per batch handed to the sort.
const KEYS_PER_BATCH: usize = 8192;

/// A live entry as it is written back: the file, its snapshot id, data and file sequence
/// numbers.
pub(super) type Entry = (DataFile, i64, i64, Option<i64>);

/// One output manifest's entries: its partition spec and the entries, in partition order.
pub(super) type Chunk = (i32, Vec<Entry>);

/// Bytes an entry is taken to hold in memory: its path, its metrics maps and bounds.
fn entry_bytes(file: &DataFile) -> u64 {
    let maps = file.column_sizes().len()
        + file.value_counts().len()
        + file.null_value_counts().len()
        + file.nan_value_counts().len()
        + file.lower_bounds().len()
        + file.upper_bounds().len();
    // The entry, its place in the window's sets, its path, its maps.
    (std::mem::size_of::<Entry>() + 48 + file.file_path().len() + 64 * maps) as u64
}

fn keys_schema() -> SchemaRef {
    static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
    Arc::clone(SCHEMA.get_or_init(|| {
        Arc::new(Schema::new(vec![
            Field::new("spec", DataType::Int32, false),
            Field::new("partition", DataType::Utf8, false),
            Field::new("manifest", DataType::UInt32, false),
            Field::new("entry", DataType::UInt32, false),
            Field::new("bytes", DataType::UInt64, false),
        ]))
    }))
}

/// The key of a partition: equal partitions, equal keys.
fn partition_key(file: &DataFile) -> String {
    format!("{:?}", file.partition())
}

/// The sort keys of the live entries of `manifests` (data manifests), read one manifest after
/// another.
#[derive(Debug)]
struct Keys {
    table: Table,
    manifests: Arc<[ManifestFile]>,
}

impl PartitionStream for Keys {
    fn schema(&self) -> &SchemaRef {
        static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
        SCHEMA.get_or_init(keys_schema)
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let mut builder = RecordBatchReceiverStream::builder(keys_schema(), 2);
        let tx = builder.tx();
        let table = self.table.clone();
        let manifests = Arc::clone(&self.manifests);
        builder.spawn(async move {
            let mut batch = KeyBatch::default();
            let mut loads = futures::stream::iter(0..manifests.len())
                .map(|m| {
                    let (table, manifests) = (table.clone(), Arc::clone(&manifests));
                    async move {
                        let manifest = &manifests[m];
                        let entries = crate::file_planning::load_entries(
                            manifest,
                            table.metadata(),
                            table.file_io(),
                        )
                        .await;
                        (m, entries)
                    }
                })
                .buffered(MANIFESTS_IN_FLIGHT);
            while let Some((m, entries)) = loads.next().await {
                let manifest = &manifests[m];
                for (e, entry) in entries?.iter().enumerate() {
                    if !entry.is_alive() {
                        continue;
                    }
                    let file = entry.data_file();
                    batch.push(
                        manifest.partition_spec_id,
                        &partition_key(file),
                        m as u32,
                        e as u32,
                        entry_bytes(file),
                    );
                    if batch.len >= KEYS_PER_BATCH && tx.send(batch.finish()).await.is_err() {
                        return Ok(());
                    }
                }
            }
            if batch.len > 0 {
                let _ = tx.send(batch.finish()).await;
            }
            Ok(())
        });
        builder.build()
    }
}

#[derive(Default)]
struct KeyBatch {
    spec: Int32Builder,
    partition: StringBuilder,
    manifest: UInt32Builder,
    entry: UInt32Builder,
    bytes: UInt64Builder,
    len: usize,
}

impl KeyBatch {
    fn push(&mut self, spec: i32, partition: &str, manifest: u32, entry: u32, bytes: u64) {
        self.spec.append_value(spec);
        self.partition.append_value(partition);
        self.manifest.append_value(manifest);
        self.entry.append_value(entry);
        self.bytes.append_value(bytes);
        self.len += 1;
    }

    fn finish(&mut self) -> Result<RecordBatch> {
        self.len = 0;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.spec.finish()),
            Arc::new(self.partition.finish()),
            Arc::new(self.manifest.finish()),
            Arc::new(self.entry.finish()),
            Arc::new(self.bytes.finish()),
        ];
        Ok(RecordBatch::try_new(keys_schema(), columns)?)
    }
}

/// Where an entry is: (manifest, entry) indexes.
type Place = (u32, u32);

/// Cuts sorted keys into chunks of one spec and at most `per_chunk` entries, gathered into a
/// window.
#[derive(Debug)]
struct Planner {
    per_chunk: usize,
    window: VecDeque<(i32, Vec<Place>)>,
    /// The chunk being filled.
    open: Option<(i32, Vec<Place>)>,
}

impl Planner {
    fn new(per_chunk: usize) -> Self {
        Self {
            per_chunk: per_chunk.max(1),
            window: VecDeque::new(),
            open: None,
        }
    }

    /// Whether an entry of `spec` would start a chunk.
    fn starts_chunk(&self, spec: i32) -> bool {
        !matches!(&self.open, Some((s, _)) if *s == spec)
    }

    fn push(&mut self, spec: i32, place: Place) {
        if self.starts_chunk(spec) {
            self.close();
        }
        let (_, places) = self.open.get_or_insert_with(|| (spec, vec![]));
        places.push(place);
        if places.len() >= self.per_chunk {
            self.close();
        }
    }

    fn close(&mut self) {
        if let Some(chunk) = self.open.take() {
            self.window.push_back(chunk);
        }
    }
}

/// The live entries of a snapshot's data manifests in partition order, a chunk at a time.
pub(super) struct Clustered {
    table: Table,
    manifests: Arc<[ManifestFile]>,
    keys: SendableRecordBatchStream,
    /// The keys batch being planned and the next row of it.
    pending: Option<(RecordBatch, usize)>,
    planner: Planner,
    /// Chunks whose entries are loaded, in order.
    ready: VecDeque<Chunk>,
    reservation: MemoryReservation,
    /// The most a window holds: half a bounded pool (the sort's merge takes from the rest).
    budget: usize,
    /// Windows read so far.
    pub(super) windows: usize,
}

impl Clustered {
    /// Starts sorting the keys of the live entries of the data manifests of `list`, chunks of
    /// `per_chunk` entries, the sort and the entries reserving from `context`'s pool.
    pub(super) fn start(
        table: &Table,
        list: &[ManifestFile],
        per_chunk: usize,
        context: Arc<TaskContext>,
    ) -> Result<Self> {
        let manifests: Arc<[ManifestFile]> = list
            .iter()
            .filter(|m| m.content == ManifestContentType::Data)
            .cloned()
            .collect();
        let source = Arc::new(StreamingTableExec::try_new(
            keys_schema(),
            vec![Arc::new(Keys {
                table: table.clone(),
                manifests: Arc::clone(&manifests),
            }) as Arc<dyn PartitionStream>],
            None,
            Vec::<LexOrdering>::new(),
            false,
            None,
        )?);
        let schema = keys_schema();
        let by = |name: &str| -> Result<PhysicalSortExpr> {
            Ok(PhysicalSortExpr::new(
                Arc::new(Column::new_with_schema(name, &schema)?),
                SortOptions::default(),
            ))
        };
        let order =
            LexOrdering::new([by("spec")?, by("partition")?, by("manifest")?, by("entry")?])
                .ok_or_else(|| DataFusionError::Internal("empty ordering".into()))?;
        let sort: Arc<dyn ExecutionPlan> = Arc::new(SortExec::new(order, source));
        let keys = sort.execute(0, Arc::clone(&context))?;
        let budget = match context.memory_pool().memory_limit() {
            MemoryLimit::Finite(limit) => limit / 2,
            _ => usize::MAX,
        };
        let reservation = MemoryConsumer::new("RewriteManifests").register(context.memory_pool());
        Ok(Self {
            table: table.clone(),
            manifests,
            keys,
            pending: None,
            planner: Planner::new(per_chunk),
            ready: VecDeque::new(),
            reservation,
            budget,
            windows: 0,
        })
    }

    /// The next output manifest's entries, `None` after the last.
    pub(super) async fn next_chunk(&mut self) -> Result<Option<Chunk>> {
        if self.ready.is_empty() {
            self.reservation.free();
            self.plan_window().await?;
            if self.planner.window.is_empty() {
                return Ok(None);
            }
            self.load_window().await?;
        }
        Ok(self.ready.pop_front())
    }

    /// Plans the next window: keys until whole chunks fill what the pool grants.
    async fn plan_window(&mut self) -> Result<()> {
        loop {
            let (batch, row) = match self.pending.take() {
                Some(p) => p,
                None => match self.keys.next().await {
                    Some(batch) => (batch?, 0),
                    None => {
                        self.planner.close();
                        return Ok(());
                    }
                },
            };
            let spec = batch.column(0).as_primitive::<Int32Type>().clone();
            let manifest = batch.column(2).as_primitive::<UInt32Type>().clone();
            let entry = batch.column(3).as_primitive::<UInt32Type>().clone();
            let bytes = batch.column(4).as_primitive::<UInt64Type>().clone();
            for i in row..batch.num_rows() {
                let size = bytes.value(i) as usize;
                let spec = spec.value(i);
                let granted = self.reservation.size() + size <= self.budget
                    && self.reservation.try_grow(size).is_ok();
                if !granted {
                    // The window's share is used: it ends before this entry if it starts a chunk
                    // (a window holds whole chunks, at least one); a chunk in progress is
                    // finished regardless.
                    if self.planner.starts_chunk(spec) {
                        self.planner.close();
                        if !self.planner.window.is_empty() {
                            self.pending = Some((batch, i));
                            return Ok(());
                        }
                    }
                    self.reservation.grow(size);
                }
                self.planner.push(spec, (manifest.value(i), entry.value(i)));
            }
        }
    }

    /// Reads the manifests the planned window needs, once each, and fills its chunks.
    async fn load_window(&mut self) -> Result<()> {
        self.windows += 1;
        let chunks: Vec<(i32, Vec<Place>)> = self.planner.window.drain(..).collect();
        let wanted: HashSet<Place> = chunks.iter().flat_map(|(_, p)| p.iter().copied()).collect();
        let needed: BTreeSet<u32> = wanted.iter().map(|(m, _)| *m).collect();
        let mut found: HashMap<Place, Entry> = HashMap::with_capacity(wanted.len());
        let (table, manifests) = (&self.table, &self.manifests);
        let mut loads = futures::stream::iter(needed)
            .map(|m| async move {
                let manifest = &manifests[m as usize];
                let entries =
                    crate::file_planning::load_entries(manifest, table.metadata(), table.file_io())
                        .await;
                (m, manifest, entries)
            })
            .buffered(MANIFESTS_IN_FLIGHT);
        while let Some((m, manifest, entries)) = loads.next().await {
            for (e, entry) in entries?.into_iter().enumerate() {
                let place = (m, e as u32);
                if wanted.contains(&place) {
                    found.insert(place, written_back(entry, manifest)?);
                }
            }
        }
        for (spec, places) in chunks {
            let mut entries = Vec::with_capacity(places.len());
            for place in places {
                entries.push(found.remove(&place).ok_or_else(|| {
                    DataFusionError::Execution(format!(
                        "manifest {} changed while its entries were clustered",
                        self.manifests[place.0 as usize].manifest_path
                    ))
                })?);
            }
            self.ready.push_back((spec, entries));
        }
        Ok(())
    }
}

/// An entry as it is written back: existing, with its snapshot id and sequence numbers.
fn written_back(entry: ManifestEntry, manifest: &ManifestFile) -> Result<Entry> {
    let (seq, file_seq) = crate::file_planning::sequence_numbers(&entry)?;
    let sid = entry.snapshot_id.unwrap_or(manifest.added_snapshot_id);
    Ok((entry.data_file, sid, seq, file_seq))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::memory_pool::{FairSpillPool, MemoryPool};
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;

    /// Entries of 24 manifests (four partitions each) under a pool that holds a fraction of
    /// them: several windows, each manifest read once per window, and the chunks in partition
    /// order with every live entry once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn entries_come_in_partition_order_a_window_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let s = crate::IcebergSession::open(crate::WarehouseConfig::local(dir.path()))
            .await
            .unwrap();
        let run = |q: String| {
            let ctx = s.context().clone();
            async move { ctx.sql(&q).await?.collect().await }
        };
        run("CREATE SCHEMA ns".into()).await.unwrap();
        run(
            "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, part INT NOT NULL) STORED AS \
             ICEBERG LOCATION '' PARTITIONED BY (part)"
                .into(),
        )
        .await
        .unwrap();
        for round in 0..24 {
            run(format!(
                "INSERT INTO ns.t SELECT value, CAST(value % 4 AS INT) FROM \
                 generate_series({}, {})",
                round * 8,
                round * 8 + 7
            ))
            .await
            .unwrap();
        }
        let ident = iceberg::TableIdent::from_strs(["ns", "t"]).unwrap();
        let table = s.catalog().load_table(&ident).await.unwrap();
        let snapshot = table.metadata().current_snapshot().unwrap().clone();
        let list =
            crate::file_planning::manifest_list(&table, &crate::LocationMap::default(), &snapshot)
                .await
                .unwrap();
        assert_eq!(list.len(), 24);
        let mut want: Vec<String> = crate::file_planning::plan_files(&table, &snapshot)
            .await
            .unwrap()
            .into_iter()
            .map(|f| f.path)
            .collect();
        want.sort();

        let one = {
            let e = crate::file_planning::load_entries(&list[0], table.metadata(), table.file_io())
                .await
                .unwrap();
            entry_bytes(e[0].data_file()) as usize
        };
        // Windows of about 20 of the 96 entries: half the pool.
        let limit = 40 * one;
        let pool: Arc<dyn MemoryPool> = Arc::new(FairSpillPool::new(limit));
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::clone(&pool))
            .build_arc()
            .unwrap();
        let config =
            datafusion::prelude::SessionConfig::new().with_sort_spill_reservation_bytes(4 * one);
        let context = Arc::new(
            TaskContext::default()
                .with_runtime(runtime)
                .with_session_config(config),
        );
        let mut clustered = Clustered::start(&table, &list, 6, context).unwrap();
        let mut got = vec![];
        let mut partitions = vec![];
        while let Some((spec, entries)) = clustered.next_chunk().await.unwrap() {
            assert_eq!(spec, 0);
            assert!(!entries.is_empty() && entries.len() <= 6);
            for (file, sid, seq, file_seq) in &entries {
                got.push(file.file_path().to_string());
                partitions.push(partition_key(file));
                assert!(*sid > 0 && *seq > 0 && *file_seq == Some(*seq));
            }
            assert!(pool.reserved() <= limit, "{} of {limit}", pool.reserved());
        }
        assert!(clustered.windows >= 4, "{} windows", clustered.windows);
        // Equal partitions side by side, each of the four once.
        let mut runs = partitions.clone();
        runs.dedup();
        assert_eq!(runs.len(), 4, "{runs:?}");
        got.sort();
        assert_eq!(got, want);
        drop(clustered);
        assert_eq!(pool.reserved(), 0);
    }

    #[test]
    fn chunks_hold_one_spec_and_at_most_their_entries() {
        let mut p = Planner::new(3);
        for i in 0..4 {
            p.push(0, (0, i));
        }
        assert!(!p.starts_chunk(0));
        assert!(p.starts_chunk(1));
        p.push(1, (1, 0));
        // A chunk closes at three entries and when the spec changes.
        assert_eq!(p.window.len(), 2);
        assert_eq!(p.window[0], (0, vec![(0, 0), (0, 1), (0, 2)]));
        assert_eq!(p.window[1], (0, vec![(0, 3)]));
        p.close();
        assert_eq!(p.window[2], (1, vec![(1, 0)]));
        assert!(p.starts_chunk(1), "nothing open after close");
    }
}
