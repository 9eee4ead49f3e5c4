//! The Arrow 59 → 58 crossing at the writer boundary (`src/arrow58.rs`, the C data interface),
//! per batch of 8192 rows of four columns (integers, strings, doubles, lists), side by side in
//! the same run with what a copying bridge would at least cost: one deep copy of the batch's
//! buffers (Arrow's `MutableArrayData`), and with a plain `clone` (reference counts only).
//!
//! `cargo bench --bench bridge` (release build).

use std::sync::Arc;

use arrow::array::{
    make_array, Array, ArrayRef, Float64Array, Int64Array, ListArray, MutableArrayData,
    RecordBatch, StringArray,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, Schema};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use datafusion::arrow;
use iceberg_exec::arrow58::{batch_to_58, schema_to_58};

const ROWS: usize = 8192;

fn batch() -> RecordBatch {
    let item = Arc::new(Field::new("element", DataType::Int64, true));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("score", DataType::Float64, true),
        Field::new("tags", DataType::List(Arc::clone(&item)), true),
    ]));
    let ids = Int64Array::from_iter_values(0..ROWS as i64);
    let names = StringArray::from_iter_values((0..ROWS).map(|i| format!("name-{}", i % 1000)));
    let scores = Float64Array::from_iter_values((0..ROWS).map(|i| i as f64 / 3.0));
    let values = Int64Array::from_iter_values(0..(ROWS * 3) as i64);
    let offsets = OffsetBuffer::from_lengths(std::iter::repeat_n(3, ROWS));
    let tags = ListArray::new(item, offsets, Arc::new(values), None);
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(ids),
            Arc::new(names),
            Arc::new(scores),
            Arc::new(tags),
        ],
    )
    .expect("batch")
}

fn deep_copy(batch: &RecordBatch) -> RecordBatch {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| {
            let data = c.to_data();
            let mut copy = MutableArrayData::new(vec![&data], false, c.len());
            copy.try_extend(0, 0, c.len()).expect("copy");
            make_array(copy.freeze())
        })
        .collect();
    RecordBatch::try_new(batch.schema(), columns).expect("copy")
}

fn bench_bridge(c: &mut Criterion) {
    let batch = batch();
    let schema58 = Arc::new(schema_to_58(batch.schema().as_ref()).expect("schema"));
    let mut group = c.benchmark_group("writer_boundary_8192_rows");
    group.throughput(Throughput::Elements(ROWS as u64));
    group.bench_function("c_data_interface_59_to_58", |b| {
        b.iter(|| batch_to_58(&batch, &schema58).expect("bridge"))
    });
    group.bench_function("deep_copy_59", |b| b.iter(|| deep_copy(&batch)));
    group.bench_function("clone_59", |b| b.iter(|| batch.clone()));
    group.finish();
}

criterion_group!(benches, bench_bridge);
criterion_main!(benches);
