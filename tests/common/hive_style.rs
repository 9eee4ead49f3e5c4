//! A table as Hive-style files brought in by `add_files` leave it: identity-partitioned by
//! columns of every partition type, with data files that store none of their partition columns
//! (the values are in the manifest entries alone), and an unpartitioned twin whose files store
//! every column, to compare answers with.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, FixedSizeBinaryArray, Float32Array,
    Float64Array, Int32Array, Int64Array, LargeBinaryArray, RecordBatch, StringArray,
    Time64MicrosecondArray, TimestampMicrosecondArray, TimestampNanosecondArray,
};
use arrow::datatypes::{DataType, Field, Schema as ArrowSchema, TimeUnit};
use iceberg::spec::{
    DataContentType, DataFileBuilder, DataFileFormat, FormatVersion, Literal, NestedField,
    PrimitiveLiteral, PrimitiveType, Schema as IcebergSchema, Struct, Transform, Type,
    UnboundPartitionSpec,
};
use iceberg::{NamespaceIdent, TableCreation, TableIdent};
use iceberg_exec::commit::{commit, NewFile, SnapshotChanges};
use iceberg_exec::MetadataStore;

/// A column of the identity-partitioned table: name, Iceberg type, Arrow type.
pub struct Column {
    /// Column name.
    pub name: &'static str,
    /// Iceberg type.
    pub ty: PrimitiveType,
    /// Arrow type.
    pub arrow: DataType,
}

/// The partition columns (field ids 3 and up; `region` is required), every type an identity
/// partition can have; `tsn` (nanosecond timestamps) on format v3 only. UUIDs are left out: the
/// iceberg crate's manifest writer cannot write a UUID partition value, so no table of this
/// crate has one to read.
pub fn partition_columns(v3: bool) -> Vec<Column> {
    let utc = Some("+00:00".into());
    let mut out = vec![
        ("b", PrimitiveType::Boolean, DataType::Boolean),
        ("i", PrimitiveType::Int, DataType::Int32),
        ("l", PrimitiveType::Long, DataType::Int64),
        ("f", PrimitiveType::Float, DataType::Float32),
        ("d", PrimitiveType::Double, DataType::Float64),
        (
            "dec_s",
            PrimitiveType::Decimal {
                precision: 9,
                scale: 2,
            },
            DataType::Decimal128(9, 2),
        ),
        (
            "dec_l",
            PrimitiveType::Decimal {
                precision: 38,
                scale: 6,
            },
            DataType::Decimal128(38, 6),
        ),
        ("dt", PrimitiveType::Date, DataType::Date32),
        (
            "tm",
            PrimitiveType::Time,
            DataType::Time64(TimeUnit::Microsecond),
        ),
        (
            "ts",
            PrimitiveType::Timestamp,
            DataType::Timestamp(TimeUnit::Microsecond, None),
        ),
        (
            "tstz",
            PrimitiveType::Timestamptz,
            DataType::Timestamp(TimeUnit::Microsecond, utc),
        ),
        ("s", PrimitiveType::String, DataType::Utf8),
        ("fx", PrimitiveType::Fixed(3), DataType::FixedSizeBinary(3)),
        ("bn", PrimitiveType::Binary, DataType::LargeBinary),
        ("region", PrimitiveType::String, DataType::Utf8),
    ];
    if v3 {
        out.push((
            "tsn",
            PrimitiveType::TimestampNs,
            DataType::Timestamp(TimeUnit::Nanosecond, None),
        ));
    }
    out.into_iter()
        .map(|(name, ty, arrow)| Column { name, ty, arrow })
        .collect()
}

/// The value of partition column `name` in partition `k` (0 and 1; 2 is the partition whose
/// optional values are all NULL).
pub fn partition_value(name: &str, k: i64) -> Option<PrimitiveLiteral> {
    use PrimitiveLiteral as P;
    if k == 2 {
        return (name == "region").then(|| P::String("zz".into()));
    }
    Some(match name {
        "b" => P::Boolean(k == 0),
        "i" => P::Int(k as i32 + 1),
        "l" => P::Long(100 * (k + 1)),
        "f" => P::Float((1.5 + k as f32).into()),
        "d" => P::Double((-2.25 * (k + 1) as f64).into()),
        "dec_s" => P::Int128(12345 + k as i128),
        "dec_l" => P::Int128(10i128.pow(30) + k as i128),
        "dt" => P::Int(19000 + k as i32),
        "tm" => P::Long((3600 + k) * 1_000_000),
        "ts" => P::Long(1_700_000_000_000_000 + k),
        "tstz" => P::Long(1_700_000_000_000_007 + k),
        "s" => P::String(["x", "y"][k as usize].into()),
        "fx" => P::Binary(vec![k as u8, 2, 3]),
        "bn" => P::Binary(vec![0xde, 0xad, k as u8]),
        "region" => P::String(["eu", "us"][k as usize].into()),
        "tsn" => P::Long(1_700_000_000_000_000_123 + k),
        other => panic!("no column {other}"),
    })
}

/// An Arrow column of `rows` copies of `value`.
pub fn constant_array(arrow: &DataType, value: Option<&PrimitiveLiteral>, rows: usize) -> ArrayRef {
    use PrimitiveLiteral as P;
    let n = rows;
    match (arrow, value) {
        (DataType::Boolean, v) => Arc::new(BooleanArray::from(vec![
            v.map(|v| matches!(
                v,
                P::Boolean(true)
            ));
            n
        ])),
        (DataType::Int32, v) => Arc::new(Int32Array::from(vec![
            v.map(|v| match v {
                P::Int(x) => *x,
                _ => unreachable!(),
            });
            n
        ])),
        (DataType::Int64, v) => Arc::new(Int64Array::from(vec![
            v.map(|v| match v {
                P::Long(x) => *x,
                _ => unreachable!(),
            });
            n
        ])),
        (DataType::Float32, v) => Arc::new(Float32Array::from(vec![
            v.map(|v| match v {
                P::Float(x) => x.0,
                _ => unreachable!(),
            });
            n
        ])),
        (DataType::Float64, v) => Arc::new(Float64Array::from(vec![
            v.map(|v| match v {
                P::Double(x) => x.0,
                _ => unreachable!(),
            });
            n
        ])),
        (DataType::Decimal128(p, s), v) => Arc::new(
            Decimal128Array::from(vec![
                v.map(|v| match v {
                    P::Int128(x) => *x,
                    _ => unreachable!(),
                });
                n
            ])
            .with_precision_and_scale(*p, *s)
            .unwrap(),
        ),
        (DataType::Date32, v) => Arc::new(Date32Array::from(vec![
            v.map(|v| match v {
                P::Int(x) => *x,
                _ => unreachable!(),
            });
            n
        ])),
        (DataType::Time64(_), v) => {
            Arc::new(Time64MicrosecondArray::from(vec![
                v.map(|v| match v {
                    P::Long(x) => *x,
                    _ => unreachable!(),
                });
                n
            ]))
        }
        (DataType::Timestamp(TimeUnit::Microsecond, tz), v) => Arc::new(
            TimestampMicrosecondArray::from(vec![
                v.map(|v| match v {
                    P::Long(x) => *x,
                    _ => unreachable!(),
                });
                n
            ])
            .with_timezone_opt(tz.clone()),
        ),
        (DataType::Timestamp(TimeUnit::Nanosecond, _), v) => {
            Arc::new(TimestampNanosecondArray::from(vec![
                v.map(|v| match v {
                    P::Long(x) => *x,
                    _ => unreachable!(),
                });
                n
            ]))
        }
        (DataType::Utf8, v) => Arc::new(StringArray::from(vec![
            v.map(|v| match v {
                P::String(x) => x.clone(),
                _ => unreachable!(),
            });
            n
        ])),
        (DataType::FixedSizeBinary(width), v) => {
            let bytes = v.map(|v| match v {
                P::UInt128(x) => x.to_be_bytes().to_vec(),
                P::Binary(b) => b.clone(),
                _ => unreachable!(),
            });
            Arc::new(
                FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                    std::iter::repeat_n(bytes, n),
                    *width,
                )
                .unwrap(),
            )
        }
        (DataType::LargeBinary, v) => {
            let bytes = v.map(|v| match v {
                P::Binary(b) => b.clone(),
                _ => unreachable!(),
            });
            Arc::new(LargeBinaryArray::from_iter(std::iter::repeat_n(bytes, n)))
        }
        (other, _) => panic!("no arrays of {other}"),
    }
}

/// An Arrow field carrying its Iceberg field id, as parquet writers of Iceberg tables store it.
pub fn field_with_id(name: &str, arrow: DataType, nullable: bool, id: i32) -> Field {
    Field::new(name, arrow, nullable).with_metadata(HashMap::from([(
        "PARQUET:field_id".to_string(),
        id.to_string(),
    )]))
}

/// Creates `ns.<name>`: `id` (required), `v`, then the partition columns (`region` required when
/// `required_region`), identity-partitioned by every partition column when `partitioned`.
pub async fn create_typed_table(
    s: &iceberg_exec::IcebergSession,
    name: &str,
    v3: bool,
    partitioned: bool,
    required_region: bool,
) -> iceberg::table::Table {
    let columns = partition_columns(v3);
    let mut fields = vec![
        NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
        NestedField::optional(2, "v", Type::Primitive(PrimitiveType::String)).into(),
    ];
    for (i, c) in columns.iter().enumerate() {
        let id = i as i32 + 3;
        let field = match c.name {
            "region" if required_region => {
                NestedField::required(id, c.name, Type::Primitive(c.ty.clone()))
            }
            _ => NestedField::optional(id, c.name, Type::Primitive(c.ty.clone())),
        };
        fields.push(field.into());
    }
    let schema = IcebergSchema::builder()
        .with_fields(fields)
        .build()
        .unwrap();
    let mut spec = UnboundPartitionSpec::builder();
    if partitioned {
        for (i, c) in columns.iter().enumerate() {
            spec = spec
                .add_partition_field(i as i32 + 3, c.name, Transform::Identity)
                .unwrap();
        }
    }
    let creation = TableCreation::builder()
        .name(name.to_string())
        .schema(schema)
        .partition_spec(spec.build())
        .format_version(if v3 {
            FormatVersion::V3
        } else {
            FormatVersion::V2
        })
        .build();
    s.catalog()
        .create_table(&NamespaceIdent::new("ns".into()), creation)
        .await
        .unwrap()
}

/// Appends one data file per partition (three rows each, ids 10k+1..10k+3) to both tables:
/// `hive` (identity-partitioned) gets files of `id` and `v` only, the partition values in its
/// manifest entries alone, as Hive-style files brought in by `add_files` are; `oracle`
/// (unpartitioned) gets files that store every column.
pub async fn append_hive_style(
    s: &iceberg_exec::IcebergSession,
    v3: bool,
    hive: &str,
    oracle: &str,
) {
    let columns = partition_columns(v3);
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    for (table_name, stores_partition) in [(hive, false), (oracle, true)] {
        let ident = TableIdent::from_strs(["ns", table_name]).unwrap();
        let table = s.catalog().load_table(&ident).await.unwrap();
        let location = table.metadata().location().trim_start_matches("file://");
        let data_dir = PathBuf::from(location).join("data");
        std::fs::create_dir_all(&data_dir).unwrap();
        let spec_id = table.metadata().default_partition_spec_id();
        let mut files = vec![];
        for k in 0..3i64 {
            let ids: Vec<i64> = (1..=3).map(|r| 10 * k + r).collect();
            let mut fields = vec![
                field_with_id("id", DataType::Int64, false, 1),
                field_with_id("v", DataType::Utf8, true, 2),
            ];
            let mut arrays: Vec<ArrayRef> = vec![
                Arc::new(Int64Array::from(ids.clone())),
                Arc::new(StringArray::from_iter_values(
                    ids.iter().map(|i| format!("v{i}")),
                )),
            ];
            let values: Vec<Option<PrimitiveLiteral>> =
                columns.iter().map(|c| partition_value(c.name, k)).collect();
            if stores_partition {
                for (i, (c, value)) in columns.iter().zip(&values).enumerate() {
                    fields.push(field_with_id(
                        c.name,
                        c.arrow.clone(),
                        c.name != "region",
                        i as i32 + 3,
                    ));
                    arrays.push(constant_array(&c.arrow, value.as_ref(), ids.len()));
                }
            }
            let batch = RecordBatch::try_new(Arc::new(ArrowSchema::new(fields)), arrays).unwrap();
            let path = data_dir.join(format!("k={k}-{}.parquet", uuid::Uuid::new_v4()));
            let size = write_parquet(&path, &batch);
            let partition = match stores_partition {
                true => Struct::empty(),
                false => Struct::from_iter(values.into_iter().map(|v| v.map(Literal::Primitive))),
            };
            let file = parquet_entry(
                DataContentType::Data,
                &path,
                partition,
                spec_id,
                ids.len() as u64,
                size,
            );
            files.push(NewFile { spec_id, file });
        }
        commit(Arc::clone(&store), &ident, SnapshotChanges::append(files))
            .await
            .unwrap();
    }
}

/// Writes `batch` as a parquet file at `path` (field ids from the fields' metadata); its size.
pub fn write_parquet(path: &std::path::Path, batch: &RecordBatch) -> u64 {
    let mut writer = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(path).unwrap(),
        batch.schema(),
        None,
    )
    .unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
    std::fs::metadata(path).unwrap().len()
}

/// The manifest entry's file for a parquet file of `content` at `path` (`rows` rows, `size`
/// bytes), in `partition` of spec `spec_id`.
pub fn parquet_entry(
    content: DataContentType,
    path: &std::path::Path,
    partition: Struct,
    spec_id: i32,
    rows: u64,
    size: u64,
) -> iceberg::spec::DataFile {
    DataFileBuilder::default()
        .content(content)
        .file_path(path.display().to_string())
        .file_format(DataFileFormat::Parquet)
        .partition(partition)
        .partition_spec_id(spec_id)
        .record_count(rows)
        .file_size_in_bytes(size)
        .build()
        .unwrap()
}

/// Adds the vendored ORC file `name` (tests/data/orc) to `ns.<table>` in the identity
/// partition `region`, as an `add_files`-style import does (the file does not store `region`).
pub async fn add_orc_file(s: &iceberg_exec::IcebergSession, table: &str, name: &str, region: &str) {
    let ident = iceberg::TableIdent::from_strs(["ns", table]).unwrap();
    let t = s.catalog().load_table(&ident).await.unwrap();
    let data = std::path::PathBuf::from(t.metadata().location().trim_start_matches("file://"))
        .join("data");
    std::fs::create_dir_all(&data).unwrap();
    let path = data.join(format!("{region}-{name}"));
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/orc")
            .join(name),
        &path,
    )
    .unwrap();
    let rows = match name {
        "with_ids.orc" => 5,
        _ => 3,
    };
    let spec_id = t.metadata().default_partition_spec_id();
    let file = DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path(path.display().to_string())
        .file_format(DataFileFormat::Orc)
        .partition(Struct::from_iter([Some(Literal::string(region))]))
        .partition_spec_id(spec_id)
        .record_count(rows)
        .file_size_in_bytes(std::fs::metadata(&path).unwrap().len())
        .build()
        .unwrap();
    let store: Arc<dyn MetadataStore> = s.catalog().clone();
    commit(
        store,
        &ident,
        SnapshotChanges::append(vec![NewFile { spec_id, file }]),
    )
    .await
    .unwrap();
}
