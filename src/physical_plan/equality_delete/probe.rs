//! The probe side of the equality-delete join: each data row's key looked up in the key table
//! (a bit range for one integer key, else hashed row-encoded keys), gated by the delete's
//! sequence number and scope; spilled partitions joined one at a time.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanBufferBuilder, RecordBatch};
use arrow::buffer::BooleanBuffer;
use arrow::datatypes::UInt32Type;
use arrow::row::Rows;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SpillFile;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc::Sender;

use super::build::{signed_width, FileGate, Joiner, Loaded, Partitioner};
use super::table::{
    signed_row_hash_16, signed_row_hash_4, signed_row_hash_8, table_hash, KeyBits, KeyTable,
};
use crate::physical_plan::keep_rows::keep_rows;

/// The keys of a probe batch in the row format of the build side, row by row.
pub(super) enum ProbeKeys {
    /// Materialized by the row converter.
    Rows(Rows),
    /// One column of `width`-byte signed integers (see [`signed_width`]), encoded on demand as
    /// the row format does: `[1, big-endian value with its sign bit flipped]`, or `width + 1`
    /// zero bytes for NULL (ascending, nulls first).
    Signed {
        data: arrow::array::ArrayData,
        width: usize,
    },
}

impl ProbeKeys {
    /// The [`table_hash`] of every row's key (one loop per key width, so each is compiled for
    /// its width).
    pub(super) fn hashes(&self) -> Vec<u64> {
        fn signed<T: arrow::datatypes::ArrowNativeType>(
            data: &arrow::array::ArrayData,
            hash: impl Fn(T) -> u64,
            width: usize,
        ) -> Vec<u64> {
            let values = &data.buffer::<T>(0)[..data.len()];
            let mut out: Vec<u64> = values.iter().map(|v| hash(*v)).collect();
            if let Some(nulls) = data.nulls() {
                let null = table_hash(&[0u8; 17][..=width]);
                for i in nulls.iter().enumerate().filter(|(_, v)| !v).map(|(i, _)| i) {
                    out[i] = null;
                }
            }
            out
        }
        match self {
            ProbeKeys::Rows(rows) => rows.iter().map(|r| table_hash(r.data())).collect(),
            ProbeKeys::Signed { data, width: 4 } => signed(data, signed_row_hash_4, 4),
            ProbeKeys::Signed { data, width: 8 } => signed(data, signed_row_hash_8, 8),
            ProbeKeys::Signed { data, .. } => signed(data, signed_row_hash_16, 16),
        }
    }

    /// The key of row `i` (`buf` holds it when it is encoded on demand).
    #[inline]
    pub(super) fn key<'a>(&'a self, i: usize, buf: &'a mut [u8; 17]) -> &'a [u8] {
        match self {
            ProbeKeys::Rows(rows) => rows.row(i).data(),
            ProbeKeys::Signed { data, width } => {
                let w = *width;
                let key = &mut buf[..=w];
                if data.is_null(i) {
                    key.fill(0);
                    return key;
                }
                let at = (data.offset() + i) * w;
                let le = &data.buffers()[0].as_slice()[at..at + w];
                key[0] = 1;
                for (dst, src) in key[1..].iter_mut().zip(le.iter().rev()) {
                    *dst = *src;
                }
                key[1] ^= 0x80;
                key
            }
        }
    }
}

/// Which values of `values` the range holds, 64 rows per word (bit `j` of word `w`: row
/// `64 w + j`). A run of 64 consecutive values (ids as data files usually hold them) takes its
/// bits from the range's words at once instead of one lookup per row.
pub(super) fn held_words<T: arrow::datatypes::ArrowNativeType + Into<i64>>(
    range: KeyBits<'_>,
    values: &[T],
) -> Vec<u64> {
    values
        .chunks(64)
        .map(|chunk| {
            let first: i64 = chunk[0].into();
            // Branch-free, so the check vectorizes; wrapping runs are not taken (`run`).
            let consecutive = chunk.iter().enumerate().fold(0i64, |differ, (j, v)| {
                differ | ((*v).into() ^ first.wrapping_add(j as i64))
            }) == 0;
            if let Some(word) = consecutive.then(|| range.run(first, chunk.len())).flatten() {
                return word;
            }
            let mut word = 0u64;
            for (j, v) in chunk.iter().enumerate() {
                word |= u64::from(range.holds((*v).into())) << j;
            }
            word
        })
        .collect()
}

/// [`held_words`] of a single integer key column of `width` bytes.
pub(super) fn held_of(
    range: KeyBits<'_>,
    data: &arrow::array::ArrayData,
    width: usize,
) -> Vec<u64> {
    match width {
        4 => held_words(range, &data.buffer::<i32>(0)[..data.len()]),
        _ => held_words(range, &data.buffer::<i64>(0)[..data.len()]),
    }
}

/// The rows of a single integer key column whose key `range` holds (NULL rows when it holds
/// NULL), in order.
pub(super) fn range_candidates(
    range: KeyBits<'_>,
    data: &arrow::array::ArrayData,
    width: usize,
) -> Vec<u32> {
    let held = held_of(range, data, width);
    let mut out = vec![];
    for (w, mut word) in held.into_iter().enumerate() {
        while word != 0 {
            out.push((w * 64) as u32 + word.trailing_zeros());
            word &= word - 1;
        }
    }
    if let Some(nulls) = data.nulls() {
        // A NULL row's value slot holds anything.
        out.retain(|&i| nulls.is_valid(i as usize));
        if range.holds_null() {
            out.extend(
                nulls
                    .iter()
                    .enumerate()
                    .filter(|(_, valid)| !valid)
                    .map(|(i, _)| i as u32),
            );
            out.sort_unstable();
        }
    }
    out
}

/// Which rows of a single integer key column to keep when every row whose key `range` holds
/// is deleted (set: kept).
pub(super) fn range_keep(
    range: KeyBits<'_>,
    data: &arrow::array::ArrayData,
    width: usize,
) -> BooleanBuffer {
    let words: Vec<u64> = held_of(range, data, width)
        .into_iter()
        .map(|w| !w)
        .collect();
    let keep = BooleanBuffer::new(words.into(), 0, data.len());
    // A NULL row's value slot holds anything: it is deleted iff a NULL key is.
    match data.nulls() {
        None => keep,
        Some(nulls) if range.holds_null() => &keep & nulls.inner(),
        Some(nulls) => &keep | &!nulls.inner(),
    }
}

/// The gates of a probe batch's rows: one for the whole batch (a batch holds rows of one
/// file), or one per row.
pub(super) enum Gates<'a> {
    Const(FileGate),
    Rows(&'a [u32], &'a [FileGate]),
}

impl<'a> Gates<'a> {
    pub(super) fn of(column: &'a ArrayRef, gates: &'a [FileGate]) -> Result<Self> {
        let index = column
            .as_primitive_opt::<UInt32Type>()
            .filter(|c| c.null_count() == 0)
            .ok_or_else(|| {
                DataFusionError::Internal(format!(
                    "EqualityDeleteExec: the gate column is {} (or has NULLs), not UInt32",
                    column.data_type()
                ))
            })?
            .values();
        let Some(&first) = index.first() else {
            return Ok(Gates::Rows(index, gates));
        };
        let out_of_range = || {
            DataFusionError::Internal(format!(
                "EqualityDeleteExec: a gate index beyond the {} gates",
                gates.len()
            ))
        };
        if index.iter().all(|&g| g == first) {
            return Ok(Gates::Const(
                *gates.get(first as usize).ok_or_else(out_of_range)?,
            ));
        }
        if index.iter().any(|&g| g as usize >= gates.len()) {
            return Err(out_of_range());
        }
        Ok(Gates::Rows(index, gates))
    }

    #[inline]
    pub(super) fn of_row(&self, i: usize) -> FileGate {
        match self {
            Gates::Const(g) => *g,
            Gates::Rows(index, gates) => gates[index[i] as usize],
        }
    }

    /// The lowest data sequence number (`None` for an empty batch).
    pub(super) fn min_seq(&self) -> Option<i64> {
        match self {
            Gates::Const(g) => Some(g.data_seq),
            Gates::Rows(index, gates) => index.iter().map(|&g| gates[g as usize].data_seq).min(),
        }
    }
}

impl Joiner {
    /// The keys of `batch`. A single integer-like key column is encoded row by row when asked
    /// for, without materializing the batch's rows.
    pub(super) fn probe_keys_of(&self, batch: &RecordBatch) -> Result<ProbeKeys> {
        if let ([k], [key_type]) = (&self.columns.keys[..], &self.key_types[..]) {
            let column = batch.column(*k);
            if column.data_type() == key_type {
                if let Some(width) = signed_width(key_type) {
                    return Ok(ProbeKeys::Signed {
                        data: column.to_data(),
                        width,
                    });
                }
            }
        }
        Ok(ProbeKeys::Rows(self.probe_keys(batch)?))
    }

    pub(super) fn probe_keys(&self, batch: &RecordBatch) -> Result<Rows> {
        let cols: Vec<ArrayRef> = self
            .columns
            .keys
            .iter()
            .map(|&i| Arc::clone(batch.column(i)))
            .collect();
        self.encode(&cols)
    }

    /// The output columns of a probe batch.
    pub(super) fn output(&self, batch: RecordBatch) -> Result<RecordBatch> {
        Ok(match &self.projection {
            Some(p) => batch.project(p)?,
            None => batch,
        })
    }

    /// The rows of `batch` a positional delete below marked deleted, as the mask of the rows
    /// to keep (`None`: every row is live), and how many are live.
    pub(super) fn live_rows(&self, batch: &RecordBatch) -> Result<(Option<BooleanBuffer>, usize)> {
        let n = batch.num_rows();
        let Some(at) = self.columns.live else {
            return Ok((None, n));
        };
        let live = batch
            .column(at)
            .as_boolean_opt()
            .filter(|c| c.null_count() == 0)
            .ok_or_else(|| {
                DataFusionError::Internal(
                    "EqualityDeleteExec: the live column is not Boolean (or has NULLs)".into(),
                )
            })?;
        let count = live.true_count();
        Ok(((count < n).then(|| live.values().clone()), count))
    }

    /// The output rows of `batch` that `keep` keeps (all when `None`); `live` of them were
    /// live before the equality deletes.
    pub(super) fn keep_rows(
        &self,
        batch: RecordBatch,
        keep: Option<BooleanBuffer>,
        live: usize,
    ) -> Result<RecordBatch> {
        let batch = self.output(batch)?;
        let Some(keep) = keep.filter(|k| k.count_set_bits() < k.len()) else {
            return Ok(batch);
        };
        let kept = keep_rows(batch, &keep)?;
        self.deleted.add(live - kept.num_rows());
        Ok(kept)
    }

    /// Keeps the rows of `batch` that `table` does not delete (and that are live, when a
    /// positional delete below marks its deleted rows).
    pub(super) fn filter(&self, table: &KeyTable, batch: RecordBatch) -> Result<RecordBatch> {
        let _timer = self.probe_time.timer();
        let (live, live_count) = self.live_rows(&batch)?;
        let n = batch.num_rows();
        let gates = Gates::of(batch.column(self.columns.gate), &self.columns.gates)?;
        // Rows newer than every delete need no lookup (a batch is one file: one sequence).
        if table.is_empty() || gates.min_seq().is_none_or(|m| table.spares_from(m)) {
            return self.keep_rows(batch, live, live_count);
        }
        // A batch of one file, against keys of one scope: the range alone may decide.
        let settled = match (table.range(), &gates) {
            (Some(range), Gates::Const(g)) => range.settles(g.scope, g.data_seq),
            _ => None,
        };
        if let Some(None) = settled {
            return self.keep_rows(batch, live, live_count);
        }
        let keys = self.probe_keys_of(&batch)?;
        if let (Some(Some(range)), ProbeKeys::Signed { data, width }) = (settled, &keys) {
            // Settled: a row is deleted iff the keys `settles` gave hold its key.
            self.key_range_rows.add(n);
            let keep = range_keep(range, data, *width);
            let keep = match &live {
                Some(live) => &keep & live,
                None => keep,
            };
            // The batch's columns held once again: dropping rows compacts them in place.
            drop(keys);
            return self.keep_rows(batch, Some(keep), live_count);
        }
        // First the cheap check of every row, in a tight loop, then the gate of the few
        // candidates it leaves.
        let (candidates, hashes) = match (table.range(), &keys) {
            (Some(range), ProbeKeys::Signed { data, width }) => {
                self.key_range_rows.add(n);
                (range_candidates(range.all(), data, *width), None)
            }
            _ => {
                // Hash every key and check the filter for all of them: without dependent
                // branches, many memory accesses stay in flight.
                let hashes = keys.hashes();
                let candidates = (0..n as u32)
                    .filter(|&i| table.may_hold(hashes[i as usize]))
                    .collect();
                (candidates, Some(hashes))
            }
        };
        let mut buf = [0u8; 17];
        let mut keep = BooleanBufferBuilder::new(n);
        match &live {
            Some(live) => keep.append_buffer(live),
            None => keep.append_n(n, true),
        }
        let mut any = live.is_some();
        for i in candidates.into_iter().map(|i| i as usize) {
            let key = keys.key(i, &mut buf);
            let hash = hashes.as_ref().map_or_else(|| table_hash(key), |h| h[i]);
            let gate = gates.of_row(i);
            if table.is_deleted_hashed(key, hash, gate.scope, gate.data_seq) {
                keep.set_bit(i, false);
                any = true;
            }
        }
        drop(keys);
        self.keep_rows(batch, any.then(|| keep.finish()), live_count)
    }

    /// Streams the probe input through the built keys to `tx`.
    pub(super) async fn probe(
        &self,
        built: &Loaded,
        mut input: SendableRecordBatchStream,
        tx: &Sender<Result<RecordBatch>>,
    ) -> Result<()> {
        match built {
            Loaded::Fits(table, _) => {
                while let Some(batch) = input.next().await {
                    if !send(tx, self.filter(table, batch?)?).await {
                        return Ok(());
                    }
                }
                Ok(())
            }
            Loaded::Split(build_files) => {
                let mut probe = Partitioner::new(self, &self.probe_spill, 0);
                while let Some(batch) = input.next().await {
                    let batch = batch?;
                    let rows = self.probe_keys(&batch)?;
                    probe.push(&batch, rows.iter().map(|r| r.data()))?;
                }
                let probe_files = probe.finish()?;
                self.join_partitions(build_files.clone(), probe_files, 1, tx)
                    .await
            }
        }
    }

    /// Joins matching pairs of build and probe partitions, splitting further at `level` when a
    /// build partition does not fit.
    pub(super) fn join_partitions<'a>(
        &'a self,
        build: Vec<Option<Arc<dyn SpillFile>>>,
        probe: Vec<Option<Arc<dyn SpillFile>>>,
        level: u32,
        tx: &'a Sender<Result<RecordBatch>>,
    ) -> BoxFuture<'a, Result<()>> {
        async move {
            for (b, p) in build.into_iter().zip(probe) {
                let Some(p) = p else { continue };
                self.grace_partitions.add(1);
                let mut stream = self.probe_spill.read_spill_as_stream(p.clone(), None)?;
                let Some(b) = b else {
                    // No deleted key hashes here: every probe row lives.
                    while let Some(batch) = stream.next().await {
                        if !send(tx, self.output(batch?)?).await {
                            return Ok(());
                        }
                    }
                    continue;
                };
                match self.load(b, level).await? {
                    Loaded::Fits(table, _reservation) => {
                        while let Some(batch) = stream.next().await {
                            if !send(tx, self.filter(&table, batch?)?).await {
                                return Ok(());
                            }
                        }
                    }
                    Loaded::Split(sub_build) => {
                        drop(stream);
                        let mut split = Partitioner::new(self, &self.probe_spill, level);
                        let mut stream = self.probe_spill.read_spill_as_stream(p, None)?;
                        while let Some(batch) = stream.next().await {
                            let batch = batch?;
                            let rows = self.probe_keys(&batch)?;
                            split.push(&batch, rows.iter().map(|r| r.data()))?;
                        }
                        let sub_probe = split.finish()?;
                        self.join_partitions(sub_build, sub_probe, level + 1, tx)
                            .await?;
                    }
                }
            }
            Ok(())
        }
        .boxed()
    }
}

/// Sends `batch` downstream; false once nobody listens any more.
pub(super) async fn send(tx: &Sender<Result<RecordBatch>>, batch: RecordBatch) -> bool {
    batch.num_rows() == 0 || tx.send(Ok(batch)).await.is_ok()
}
