//! The metadata tables read from manifest lists and manifests: `manifests`, `all_manifests`,
//! `files` and its kin, `entries`, `all_entries`. One batch per manifest (per manifest list for
//! the manifest tables), a few manifests read at a time.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{
    ArrayBuilder, ArrayRef, BinaryBuilder, BooleanBuilder, Int32Builder, Int64Builder, ListBuilder,
    MapBuilder, RecordBatch, StringBuilder, StructArray, StructBuilder,
};
use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use futures::{Stream, StreamExt};
use iceberg::spec::{
    DataContentType, DataFile, Datum, ManifestContentType, ManifestFile, ManifestStatus,
    PrimitiveType, TableMetadata, Transform, Type,
};
use iceberg::table::Table;

use super::MetadataKind;
use crate::physical_plan::scan::metadata::FileMetadataColumns;
use crate::storage::location::LocationMap;

/// How many manifests are read at a time.
const MANIFESTS_AT_ONCE: usize = 4;

/// The `readable_metrics` column: for each primitive column of the current schema (nested ones
/// by their dotted names, outside lists and maps), its metrics, with the bounds as values of the
/// column's type.
struct Readable {
    /// Field id, Iceberg type and Arrow type of each column, in schema order.
    columns: Vec<(i32, PrimitiveType, DataType)>,
    /// The struct of every column's metrics.
    data_type: DataType,
}

impl Readable {
    fn of(metadata: &TableMetadata) -> Result<Option<Self>> {
        let schema = metadata.current_schema();
        let mut leaves = vec![];
        leaves_of(schema.as_struct().fields(), "", &mut leaves);
        let mut columns = vec![];
        let mut fields = vec![];
        for (id, name, ty) in leaves {
            let one = iceberg::spec::Schema::builder()
                .with_fields(vec![Arc::new(iceberg::spec::NestedField::optional(
                    id,
                    "c",
                    Type::Primitive(ty.clone()),
                ))])
                .build()
                .map_err(|e| DataFusionError::Internal(format!("readable_metrics: {e}")))?;
            let arrow = crate::physical_plan::scan::schema::arrow_schema(&one)?
                .field(0)
                .data_type()
                .clone();
            let arrow = match arrow {
                DataType::Utf8View => DataType::Utf8,
                DataType::BinaryView => DataType::Binary,
                other => other,
            };
            fields.push(Field::new(
                name,
                DataType::Struct(Fields::from(vec![
                    Field::new("column_size", DataType::Int64, true),
                    Field::new("value_count", DataType::Int64, true),
                    Field::new("null_value_count", DataType::Int64, true),
                    Field::new("nan_value_count", DataType::Int64, true),
                    Field::new("lower_bound", arrow.clone(), true),
                    Field::new("upper_bound", arrow.clone(), true),
                ])),
                false,
            ));
            columns.push((id, ty, arrow));
        }
        if fields.is_empty() {
            return Ok(None);
        }
        Ok(Some(Self {
            columns,
            data_type: DataType::Struct(Fields::from(fields)),
        }))
    }

    /// The metrics of `f`.
    fn value(&self, f: &DataFile) -> Result<ScalarValue> {
        let DataType::Struct(fields) = &self.data_type else {
            return Err(DataFusionError::Internal(
                "readable_metrics is a struct".into(),
            ));
        };
        let count = |m: &std::collections::HashMap<i32, u64>, id: i32| {
            ScalarValue::Int64(m.get(&id).map(|v| *v as i64))
        };
        let mut builder = datafusion::common::scalar::ScalarStructBuilder::new();
        for ((id, ty, arrow), field) in self.columns.iter().zip(fields.iter()) {
            let bound = |b: Option<&Datum>| -> Result<ScalarValue> {
                match b {
                    Some(d) => crate::physical_plan::scan::constants::partition_scalar(
                        ty,
                        d.literal(),
                        arrow,
                    ),
                    None => ScalarValue::try_from(arrow),
                }
            };
            let DataType::Struct(parts) = field.data_type() else {
                return Err(DataFusionError::Internal(
                    "a readable metric is a struct".into(),
                ));
            };
            let values = [
                count(f.column_sizes(), *id),
                count(f.value_counts(), *id),
                count(f.null_value_counts(), *id),
                count(f.nan_value_counts(), *id),
                bound(f.lower_bounds().get(id))?,
                bound(f.upper_bounds().get(id))?,
            ];
            let mut one = datafusion::common::scalar::ScalarStructBuilder::new();
            for (part, v) in parts.iter().zip(values) {
                one = one.with_scalar(part.as_ref().clone(), v);
            }
            builder = builder.with_scalar(field.as_ref().clone(), one.build()?);
        }
        builder.build()
    }
}

/// The primitive fields under `fields` (through structs), with their dotted names.
fn leaves_of(
    fields: &[iceberg::spec::NestedFieldRef],
    prefix: &str,
    out: &mut Vec<(i32, String, PrimitiveType)>,
) {
    for f in fields {
        let name = format!("{prefix}{}", f.name);
        match f.field_type.as_ref() {
            Type::Primitive(p) => out.push((f.id, name, p.clone())),
            Type::Struct(s) => leaves_of(s.fields(), &format!("{name}."), out),
            _ => {}
        }
    }
}

fn map_i64() -> MapBuilder<Int32Builder, Int64Builder> {
    MapBuilder::new(None, Int32Builder::new(), Int64Builder::new())
}

fn map_binary() -> MapBuilder<Int32Builder, BinaryBuilder> {
    MapBuilder::new(None, Int32Builder::new(), BinaryBuilder::new())
}

/// The type of the arrays `b` builds.
pub(super) fn type_of(mut b: impl ArrayBuilder) -> DataType {
    b.finish().data_type().clone()
}

/// The columns of a file (Java's `DataFile` struct; the unified `partition` struct when the
/// table has, or had, partition fields).
fn file_fields(partition: Option<DataType>) -> Vec<Field> {
    let mut fields = vec![
        Field::new("content", DataType::Int32, false),
        Field::new("file_path", DataType::Utf8, false),
        Field::new("file_format", DataType::Utf8, false),
        Field::new("spec_id", DataType::Int32, false),
    ];
    if let Some(p) = partition {
        fields.push(Field::new("partition", p, false));
    }
    fields.extend([
        Field::new("record_count", DataType::Int64, false),
        Field::new("file_size_in_bytes", DataType::Int64, false),
        Field::new("column_sizes", type_of(map_i64()), true),
        Field::new("value_counts", type_of(map_i64()), true),
        Field::new("null_value_counts", type_of(map_i64()), true),
        Field::new("nan_value_counts", type_of(map_i64()), true),
        Field::new("lower_bounds", type_of(map_binary()), true),
        Field::new("upper_bounds", type_of(map_binary()), true),
        Field::new("key_metadata", DataType::Binary, true),
        Field::new(
            "split_offsets",
            type_of(ListBuilder::new(Int64Builder::new())),
            true,
        ),
        Field::new(
            "equality_ids",
            type_of(ListBuilder::new(Int32Builder::new())),
            true,
        ),
        Field::new("sort_order_id", DataType::Int32, true),
        Field::new("first_row_id", DataType::Int64, true),
        Field::new("referenced_data_file", DataType::Utf8, true),
        Field::new("content_offset", DataType::Int64, true),
        Field::new("content_size_in_bytes", DataType::Int64, true),
    ]);
    fields
}

fn summary_fields() -> Fields {
    Fields::from(vec![
        Field::new("contains_null", DataType::Boolean, false),
        Field::new("contains_nan", DataType::Boolean, true),
        Field::new("lower_bound", DataType::Utf8, true),
        Field::new("upper_bound", DataType::Utf8, true),
    ])
}

fn summaries_builder() -> ListBuilder<StructBuilder> {
    ListBuilder::new(StructBuilder::from_fields(summary_fields(), 0))
}

/// The columns of `kind`.
pub(super) fn schema(metadata: &TableMetadata, kind: MetadataKind) -> Result<SchemaRef> {
    let partition = FileMetadataColumns::of(metadata)?.partition_type();
    let fields = match kind {
        MetadataKind::Manifests | MetadataKind::AllManifests => {
            let mut f = vec![
                Field::new("content", DataType::Int32, false),
                Field::new("path", DataType::Utf8, false),
                Field::new("length", DataType::Int64, false),
                Field::new("partition_spec_id", DataType::Int32, false),
                Field::new("added_snapshot_id", DataType::Int64, false),
            ];
            for n in [
                "added_data_files_count",
                "existing_data_files_count",
                "deleted_data_files_count",
                "added_delete_files_count",
                "existing_delete_files_count",
                "deleted_delete_files_count",
            ] {
                f.push(Field::new(n, DataType::Int32, false));
            }
            f.push(Field::new(
                "partition_summaries",
                type_of(summaries_builder()),
                false,
            ));
            if kind == MetadataKind::AllManifests {
                f.push(Field::new("reference_snapshot_id", DataType::Int64, false));
            }
            f
        }
        MetadataKind::Entries | MetadataKind::AllEntries => {
            let mut fields = vec![
                Field::new("status", DataType::Int32, false),
                Field::new("snapshot_id", DataType::Int64, true),
                Field::new("sequence_number", DataType::Int64, true),
                Field::new("file_sequence_number", DataType::Int64, true),
                Field::new(
                    "data_file",
                    DataType::Struct(Fields::from(file_fields(partition))),
                    false,
                ),
            ];
            if let Some(r) = Readable::of(metadata)? {
                fields.push(Field::new("readable_metrics", r.data_type, true));
            }
            fields
        }
        _ => {
            let mut fields = file_fields(partition);
            if let Some(r) = Readable::of(metadata)? {
                fields.push(Field::new("readable_metrics", r.data_type, true));
            }
            fields
        }
    };
    Ok(Arc::new(Schema::new(fields)))
}

/// The manifests `kind` reads: those of `snapshot_id` (or the current snapshot), or of every
/// snapshot (each manifest once for the file tables; once per snapshot for `all_manifests`),
/// with the snapshot whose list named them.
async fn manifests_of(
    table: &Table,
    locations: &LocationMap,
    kind: MetadataKind,
    snapshot_id: Option<i64>,
) -> Result<Vec<(i64, Arc<Vec<ManifestFile>>)>> {
    let md = table.metadata();
    let snapshots: Vec<_> = match (kind.every_snapshot(), snapshot_id) {
        (true, _) => {
            let mut all: Vec<_> = md.snapshots().cloned().collect();
            all.sort_by_key(|s| (s.timestamp_ms(), s.sequence_number()));
            all
        }
        (false, Some(id)) => md.snapshot_by_id(id).cloned().into_iter().collect(),
        (false, None) => md.current_snapshot().cloned().into_iter().collect(),
    };
    let mut out = vec![];
    for s in snapshots {
        let list = crate::file_planning::manifest_list(table, locations, &s).await?;
        out.push((s.snapshot_id(), list));
    }
    Ok(out)
}

/// Whether `kind`'s rows have the top-level `content` and `partition` columns its filters may
/// prune manifests by (the file tables; `entries` nests them in `data_file`).
fn prunes(kind: MetadataKind) -> bool {
    !matches!(
        kind,
        MetadataKind::Entries
            | MetadataKind::AllEntries
            | MetadataKind::Manifests
            | MetadataKind::AllManifests
    )
}

/// Whether `kind` lists the manifests of `content`.
fn reads(kind: MetadataKind, content: ManifestContentType) -> bool {
    match kind {
        MetadataKind::DataFiles | MetadataKind::AllDataFiles => {
            content == ManifestContentType::Data
        }
        MetadataKind::DeleteFiles | MetadataKind::AllDeleteFiles => {
            content == ManifestContentType::Deletes
        }
        _ => true,
    }
}

/// The rows of `kind`, a batch at a time.
pub(super) fn stream(
    table: Table,
    locations: LocationMap,
    kind: MetadataKind,
    snapshot_id: Option<i64>,
    schema: SchemaRef,
    readable: bool,
    filter: super::prune::ManifestFilter,
) -> impl Stream<Item = Result<RecordBatch>> + Send + 'static {
    let listed = {
        let (table, locations) = (table.clone(), locations.clone());
        async move { manifests_of(&table, &locations, kind, snapshot_id).await }
    };
    futures::stream::once(listed)
        .map(move |listed| {
            let (table, schema) = (table.clone(), Arc::clone(&schema));
            let lists = match listed {
                Ok(lists) => lists,
                Err(e) => return futures::stream::once(async move { Err(e) }).boxed(),
            };
            if matches!(kind, MetadataKind::Manifests | MetadataKind::AllManifests) {
                let batches: Vec<Result<RecordBatch>> = lists
                    .iter()
                    .map(|(id, list)| manifests_batch(&table, list, *id, kind, &schema))
                    .collect();
                return futures::stream::iter(batches).boxed();
            }
            let columns = match FileMetadataColumns::of(table.metadata())
                .and_then(|c| Ok((c, Readable::of(table.metadata())?)))
            {
                Ok(c) => Arc::new(c),
                Err(e) => return futures::stream::once(async move { Err(e) }).boxed(),
            };
            // Each manifest once, however many snapshots list it.
            let mut seen = HashSet::new();
            let manifests: Vec<ManifestFile> = lists
                .iter()
                .flat_map(|(_, list)| list.iter())
                .filter(|m| {
                    reads(kind, m.content)
                        && (!prunes(kind) || filter.may_match(table.metadata(), &columns.0, m))
                        && seen.insert(m.manifest_path.clone())
                })
                .cloned()
                .collect();
            futures::stream::iter(manifests)
                .map(move |m| {
                    let (table, schema, columns) =
                        (table.clone(), Arc::clone(&schema), Arc::clone(&columns));
                    async move {
                        let job = async move {
                            let entries = crate::file_planning::load_entries(
                                &m,
                                table.metadata(),
                                table.file_io(),
                            )
                            .await?;
                            let metrics = &columns.1;
                            let parts = (&columns.0, metrics.as_ref().filter(|_| readable));
                            entries_batch(&entries, &m, kind, parts, metrics, &schema)
                        };
                        crate::io_runtime::spawn(job).await
                    }
                })
                .buffered(MANIFESTS_AT_ONCE)
                .boxed()
        })
        .flatten()
}

/// The rows of the manifests of one manifest list.
fn manifests_batch(
    table: &Table,
    list: &[ManifestFile],
    snapshot_id: i64,
    kind: MetadataKind,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let md = table.metadata();
    let n = list.len();
    let mut content = Int32Builder::with_capacity(n);
    let mut path = StringBuilder::new();
    let mut length = Int64Builder::with_capacity(n);
    let mut spec = Int32Builder::with_capacity(n);
    let mut added_by = Int64Builder::with_capacity(n);
    let mut counts: Vec<Int32Builder> = (0..6).map(|_| Int32Builder::with_capacity(n)).collect();
    let mut summaries = summaries_builder();
    for m in list {
        let deletes = m.content == ManifestContentType::Deletes;
        content.append_value(if deletes { 1 } else { 0 });
        path.append_value(&m.manifest_path);
        length.append_value(m.manifest_length);
        spec.append_value(m.partition_spec_id);
        added_by.append_value(m.added_snapshot_id);
        let c = [
            m.added_files_count,
            m.existing_files_count,
            m.deleted_files_count,
        ];
        for (i, v) in c.iter().enumerate() {
            let v = v.unwrap_or(0) as i32;
            counts[i].append_value(if deletes { 0 } else { v });
            counts[i + 3].append_value(if deletes { v } else { 0 });
        }
        let partition_types = md
            .partition_spec_by_id(m.partition_spec_id)
            .map(|s| {
                s.fields()
                    .iter()
                    .map(|f| {
                        let source = md
                            .schemas_iter()
                            .find_map(|sc| sc.field_by_id(f.source_id))
                            .map(|sf| (*sf.field_type).clone());
                        let result = source.and_then(|t| f.transform.result_type(&t).ok());
                        (f.transform, result)
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        for (i, s) in m.partitions.iter().flatten().enumerate() {
            let (transform, ty) = partition_types
                .get(i)
                .cloned()
                .unwrap_or((Transform::Unknown, None));
            let human = |b: &Option<serde_bytes::ByteBuf>| -> Option<String> {
                let (Some(b), Some(Type::Primitive(p))) = (b, &ty) else {
                    return None;
                };
                let datum = Datum::try_from_bytes(b, p.clone()).ok()?;
                Some(human_string(transform, &datum))
            };
            let item = summaries.values();
            let missing = || DataFusionError::Internal("a partition summary column".into());
            item.field_builder::<BooleanBuilder>(0)
                .ok_or_else(missing)?
                .append_value(s.contains_null);
            item.field_builder::<BooleanBuilder>(1)
                .ok_or_else(missing)?
                .append_option(s.contains_nan);
            item.field_builder::<StringBuilder>(2)
                .ok_or_else(missing)?
                .append_option(human(&s.lower_bound));
            item.field_builder::<StringBuilder>(3)
                .ok_or_else(missing)?
                .append_option(human(&s.upper_bound));
            item.append(true);
        }
        summaries.append(true);
    }
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(content.finish()),
        Arc::new(path.finish()),
        Arc::new(length.finish()),
        Arc::new(spec.finish()),
        Arc::new(added_by.finish()),
    ];
    columns.extend(counts.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
    columns.push(Arc::new(summaries.finish()));
    if kind == MetadataKind::AllManifests {
        columns.push(Arc::new(arrow::array::Int64Array::from(vec![
            snapshot_id;
            n
        ])));
    }
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

/// A partition value as Java's `Transform.toHumanString` writes it: time transforms as dates
/// and times, the others as their values.
pub(crate) fn human_string(transform: Transform, value: &Datum) -> String {
    use iceberg::spec::PrimitiveLiteral::Int;
    let int = match value.literal() {
        Int(v) => Some(*v),
        _ => None,
    };
    let date = |days: i32| {
        chrono::NaiveDate::from_ymd_opt(1970, 1, 1)
            .and_then(|d| d.checked_add_signed(chrono::Duration::days(days as i64)))
    };
    match (transform, int) {
        (Transform::Year, Some(y)) => format!("{:04}", 1970 + y),
        (Transform::Month, Some(m)) => {
            let (y, m) = (1970 + m.div_euclid(12), m.rem_euclid(12) + 1);
            format!("{y:04}-{m:02}")
        }
        (Transform::Day, Some(d)) if *value.data_type() == PrimitiveType::Int => date(d)
            .map(|d| d.format("%Y-%m-%d").to_string())
            .unwrap_or_else(|| d.to_string()),
        (Transform::Hour, Some(h)) => {
            let (days, hour) = (h.div_euclid(24), h.rem_euclid(24));
            date(days)
                .map(|d| format!("{}-{hour:02}", d.format("%Y-%m-%d")))
                .unwrap_or_else(|| h.to_string())
        }
        _ => value.to_human_string(),
    }
}

/// Builders of the file columns, a row per file.
struct FileRows {
    content: Int32Builder,
    path: StringBuilder,
    format: StringBuilder,
    spec: Int32Builder,
    partition: Vec<ScalarValue>,
    records: Int64Builder,
    size: Int64Builder,
    counts: [MapBuilder<Int32Builder, Int64Builder>; 4],
    bounds: [MapBuilder<Int32Builder, BinaryBuilder>; 2],
    key_metadata: BinaryBuilder,
    split_offsets: ListBuilder<Int64Builder>,
    equality_ids: ListBuilder<Int32Builder>,
    sort_order: Int32Builder,
    first_row_id: Int64Builder,
    referenced: StringBuilder,
    offset: Int64Builder,
    blob_size: Int64Builder,
}

impl FileRows {
    fn new() -> Self {
        Self {
            content: Int32Builder::new(),
            path: StringBuilder::new(),
            format: StringBuilder::new(),
            spec: Int32Builder::new(),
            partition: vec![],
            records: Int64Builder::new(),
            size: Int64Builder::new(),
            counts: [map_i64(), map_i64(), map_i64(), map_i64()],
            bounds: [map_binary(), map_binary()],
            key_metadata: BinaryBuilder::new(),
            split_offsets: ListBuilder::new(Int64Builder::new()),
            equality_ids: ListBuilder::new(Int32Builder::new()),
            sort_order: Int32Builder::new(),
            first_row_id: Int64Builder::new(),
            referenced: StringBuilder::new(),
            offset: Int64Builder::new(),
            blob_size: Int64Builder::new(),
        }
    }

    fn append(&mut self, f: &DataFile, spec_id: i32, columns: &FileMetadataColumns) -> Result<()> {
        self.content.append_value(match f.content_type() {
            DataContentType::Data => 0,
            DataContentType::PositionDeletes => 1,
            DataContentType::EqualityDeletes => 2,
        });
        self.path.append_value(f.file_path());
        self.format
            .append_value(f.file_format().to_string().to_ascii_uppercase());
        self.spec.append_value(spec_id);
        if let Some(p) = columns.partition_value(spec_id, f.partition())? {
            self.partition.push(p);
        }
        self.records.append_value(f.record_count() as i64);
        self.size.append_value(f.file_size_in_bytes() as i64);
        let maps = [
            f.column_sizes(),
            f.value_counts(),
            f.null_value_counts(),
            f.nan_value_counts(),
        ];
        for (b, m) in self.counts.iter_mut().zip(maps) {
            let mut keys: Vec<_> = m.iter().collect();
            keys.sort();
            for (k, v) in keys {
                b.keys().append_value(*k);
                b.values().append_value(*v as i64);
            }
            b.append(true)?;
        }
        for (b, m) in self
            .bounds
            .iter_mut()
            .zip([f.lower_bounds(), f.upper_bounds()])
        {
            let mut keys: Vec<_> = m.iter().collect();
            keys.sort_by_key(|(k, _)| **k);
            for (k, v) in keys {
                b.keys().append_value(*k);
                b.values().append_value(v.to_bytes().map_err(|e| {
                    DataFusionError::Execution(format!("a bound of {}: {e}", f.file_path()))
                })?);
            }
            b.append(true)?;
        }
        self.key_metadata.append_option(f.key_metadata());
        match f.split_offsets() {
            Some(o) => {
                self.split_offsets.values().append_slice(o);
                self.split_offsets.append(true);
            }
            None => self.split_offsets.append(false),
        }
        match f.equality_ids() {
            Some(ids) => {
                self.equality_ids.values().append_slice(&ids);
                self.equality_ids.append(true);
            }
            None => self.equality_ids.append(false),
        }
        self.sort_order.append_option(f.sort_order_id());
        self.first_row_id.append_option(f.first_row_id());
        self.referenced.append_option(f.referenced_data_file());
        self.offset.append_option(f.content_offset());
        self.blob_size.append_option(f.content_size_in_bytes());
        Ok(())
    }

    fn finish(mut self, partition: Option<DataType>) -> Result<Vec<ArrayRef>> {
        let mut out: Vec<ArrayRef> = vec![
            Arc::new(self.content.finish()),
            Arc::new(self.path.finish()),
            Arc::new(self.format.finish()),
            Arc::new(self.spec.finish()),
        ];
        if let Some(ty) = partition {
            out.push(match self.partition.is_empty() {
                // A manifest without live files.
                true => arrow::array::new_empty_array(&ty),
                false => ScalarValue::iter_to_array(self.partition)?,
            });
        }
        out.push(Arc::new(self.records.finish()));
        out.push(Arc::new(self.size.finish()));
        out.extend(
            self.counts
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        out.extend(
            self.bounds
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef),
        );
        out.push(Arc::new(self.key_metadata.finish()));
        out.push(Arc::new(self.split_offsets.finish()));
        out.push(Arc::new(self.equality_ids.finish()));
        out.push(Arc::new(self.sort_order.finish()));
        out.push(Arc::new(self.first_row_id.finish()));
        out.push(Arc::new(self.referenced.finish()));
        out.push(Arc::new(self.offset.finish()));
        out.push(Arc::new(self.blob_size.finish()));
        Ok(out)
    }
}

/// The rows of one manifest's entries: its live files (`files` and kin), or every entry
/// (`entries`, `all_entries`).
/// `parts`: the partition columns, and the readable metrics when they are read; `metrics`: the
/// readable metrics column's description (NULL when not read).
fn entries_batch(
    entries: &[iceberg::spec::ManifestEntry],
    manifest: &ManifestFile,
    kind: MetadataKind,
    parts: (&FileMetadataColumns, Option<&Readable>),
    metrics_column: &Option<Readable>,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let (columns, readable) = parts;
    let every = matches!(kind, MetadataKind::Entries | MetadataKind::AllEntries);
    let partition = columns.partition_type();
    let mut rows = FileRows::new();
    let (mut status, mut snapshot, mut seq, mut file_seq) = (
        Int32Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
        Int64Builder::new(),
    );
    let mut metrics = vec![];
    let mut rows_out = 0;
    for e in entries {
        if !every && !e.is_alive() {
            continue;
        }
        rows.append(e.data_file(), manifest.partition_spec_id, columns)?;
        if let Some(r) = readable {
            metrics.push(r.value(e.data_file())?);
        }
        rows_out += 1;
        if every {
            status.append_value(match e.status() {
                ManifestStatus::Existing => 0,
                ManifestStatus::Added => 1,
                ManifestStatus::Deleted => 2,
            });
            snapshot.append_option(e.snapshot_id());
            seq.append_option(e.sequence_number());
            file_seq.append_option(e.file_sequence_number);
        }
    }
    let mut files = rows.finish(partition)?;
    let readable_column = match metrics_column {
        Some(r) => Some(match (readable.is_some(), metrics.is_empty()) {
            (false, _) => arrow::array::new_null_array(&r.data_type, rows_out),
            (true, true) => arrow::array::new_empty_array(&r.data_type),
            (true, false) => ScalarValue::iter_to_array(metrics)?,
        }),
        None => None,
    };
    let columns: Vec<ArrayRef> = match every {
        false => {
            files.extend(readable_column);
            files
        }
        true => {
            let DataType::Struct(fields) = schema.field(4).data_type().clone() else {
                return Err(DataFusionError::Internal(
                    "entries: data_file is not a struct".into(),
                ));
            };
            let mut columns: Vec<ArrayRef> = vec![
                Arc::new(status.finish()),
                Arc::new(snapshot.finish()),
                Arc::new(seq.finish()),
                Arc::new(file_seq.finish()),
                Arc::new(StructArray::try_new(fields, files, None)?),
            ];
            columns.extend(readable_column);
            columns
        }
    };
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_values_read_as_java_writes_them() {
        let int = |v| Datum::int(v);
        assert_eq!(human_string(Transform::Year, &int(54)), "2024");
        assert_eq!(human_string(Transform::Month, &int(54 * 12 + 2)), "2024-03");
        assert_eq!(human_string(Transform::Day, &int(19723)), "2024-01-01");
        assert_eq!(
            human_string(Transform::Hour, &int(19723 * 24 + 5)),
            "2024-01-01-05"
        );
        assert_eq!(human_string(Transform::Bucket(16), &int(7)), "7");
        assert_eq!(
            human_string(Transform::Identity, &Datum::string("a b")),
            "a b"
        );
    }
}
