//! A fast decoder of manifests for planning.
//!
//! The iceberg crate decodes a manifest through `apache-avro` with a reader schema it builds for
//! the file: it parses the writer's Avro schema twice (with name validation), its Iceberg
//! schema once, builds the reader schema and resolves the two. For the small manifests most
//! tables have, that is nearly all of the work (about 0.75 ms a manifest on this project's
//! machine, which made the manifests most of a cold selective scan). This module reads the
//! Avro container directly: the writer's schema is parsed once per distinct schema text (kept
//! for the process) and records are decoded by it, field by field, into the iceberg crate's
//! `ManifestEntry`. Fields are found by their names in the writer's schema, so field order,
//! optional fields a writer leaves out, and format v1's extra fields do not matter.
//!
//! It answers `None` (and the iceberg crate decodes the file) for anything it does not know:
//! a codec other than `null`, `deflate`, `snappy` and `zstandard`, a header without the Iceberg keys, a partition or
//! bound type outside what it converts. Errors in the file itself are errors.

use std::collections::HashMap;
use std::io::Read;
use std::str::FromStr;
use std::sync::{Arc, LazyLock, Mutex};

use datafusion::error::{DataFusionError, Result};
use iceberg::spec::{
    DataContentType, DataFileBuilder, DataFileFormat, Datum, Literal, ManifestEntry,
    ManifestStatus, PartitionSpec, PrimitiveLiteral, PrimitiveType, Schema, Struct, Type,
};

/// The first bytes of every Avro object container file.
const MAGIC: &[u8] = b"Obj\x01";

/// An Avro schema as decoding needs it.
#[derive(Debug, Clone)]
enum AvroType {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Fixed(usize),
    Enum,
    Array(Box<AvroType>),
    Map(Box<AvroType>),
    Record(Arc<Vec<(String, AvroType)>>),
    Union(Vec<AvroType>),
}

/// A decoded Avro value.
#[derive(Debug, Clone)]
enum Value {
    Null,
    Boolean(bool),
    Long(i64),
    Float(f32),
    Double(f64),
    Bytes(Vec<u8>),
    String(String),
    Array(Vec<Value>),
    Map(Vec<(String, Value)>),
    Record(Vec<Value>),
}

fn bad(what: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Execution(format!("not a valid Avro file: {what}"))
}

/// Reads Avro's binary encoding from a slice.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.bytes.len())
            .ok_or_else(|| bad("unexpected end of data"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn long(&mut self) -> Result<i64> {
        let mut value: u64 = 0;
        let mut shift = 0;
        loop {
            let b = self.take(1)?[0];
            if shift >= 64 {
                return Err(bad("a variable-length integer is too long"));
            }
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
        Ok((value >> 1) as i64 ^ -((value & 1) as i64))
    }

    fn len(&mut self) -> Result<usize> {
        usize::try_from(self.long()?).map_err(|_| bad("a negative length"))
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.len()?;
        self.take(n)
    }

    fn string(&mut self) -> Result<String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| bad("a string is not UTF-8"))
    }

    /// The item count of the next block of an array or map (0 at its end).
    fn block_count(&mut self) -> Result<usize> {
        let n = self.long()?;
        if n < 0 {
            // A negative count is followed by the block's size in bytes.
            self.long()?;
        }
        usize::try_from(n.unsigned_abs()).map_err(|_| bad("a block count is too large"))
    }

    fn value(&mut self, t: &AvroType) -> Result<Value> {
        Ok(match t {
            AvroType::Null => Value::Null,
            AvroType::Boolean => Value::Boolean(self.take(1)?[0] != 0),
            AvroType::Int | AvroType::Long | AvroType::Enum => Value::Long(self.long()?),
            AvroType::Float => {
                Value::Float(f32::from_le_bytes(self.take(4)?.try_into().expect("4")))
            }
            AvroType::Double => {
                Value::Double(f64::from_le_bytes(self.take(8)?.try_into().expect("8")))
            }
            AvroType::Bytes => Value::Bytes(self.bytes()?.to_vec()),
            AvroType::String => Value::String(self.string()?),
            AvroType::Fixed(n) => Value::Bytes(self.take(*n)?.to_vec()),
            AvroType::Array(items) => {
                let mut out = vec![];
                loop {
                    let n = self.block_count()?;
                    if n == 0 {
                        break;
                    }
                    for _ in 0..n {
                        out.push(self.value(items)?);
                    }
                }
                Value::Array(out)
            }
            AvroType::Map(values) => {
                let mut out = vec![];
                loop {
                    let n = self.block_count()?;
                    if n == 0 {
                        break;
                    }
                    for _ in 0..n {
                        let k = self.string()?;
                        out.push((k, self.value(values)?));
                    }
                }
                Value::Map(out)
            }
            AvroType::Record(fields) => Value::Record(
                fields
                    .iter()
                    .map(|(_, t)| self.value(t))
                    .collect::<Result<_>>()?,
            ),
            AvroType::Union(branches) => {
                let i = self.len()?;
                let branch = branches
                    .get(i)
                    .ok_or_else(|| bad(format!("union branch {i} does not exist")))?;
                self.value(branch)?
            }
        })
    }
}

/// Parses a writer's schema (JSON); `None` for what this module does not decode.
fn parse_schema(
    json: &serde_json::Value,
    named: &mut HashMap<String, AvroType>,
) -> Option<AvroType> {
    use serde_json::Value as J;
    Some(match json {
        J::String(name) => match name.as_str() {
            "null" => AvroType::Null,
            "boolean" => AvroType::Boolean,
            "int" => AvroType::Int,
            "long" => AvroType::Long,
            "float" => AvroType::Float,
            "double" => AvroType::Double,
            "bytes" => AvroType::Bytes,
            "string" => AvroType::String,
            other => named.get(other)?.clone(),
        },
        J::Array(branches) => AvroType::Union(
            branches
                .iter()
                .map(|b| parse_schema(b, named))
                .collect::<Option<_>>()?,
        ),
        J::Object(o) => {
            let t = match o.get("type")? {
                J::String(t) => t.as_str(),
                // A nested type in the "type" key: the type itself.
                other => return parse_schema(other, named),
            };
            let parsed = match t {
                "record" | "error" => {
                    let mut fields = vec![];
                    for f in o.get("fields")?.as_array()? {
                        let name = f.get("name")?.as_str()?.to_string();
                        fields.push((name, parse_schema(f.get("type")?, named)?));
                    }
                    AvroType::Record(Arc::new(fields))
                }
                "array" => AvroType::Array(Box::new(parse_schema(o.get("items")?, named)?)),
                "map" => AvroType::Map(Box::new(parse_schema(o.get("values")?, named)?)),
                "fixed" => AvroType::Fixed(usize::try_from(o.get("size")?.as_u64()?).ok()?),
                "enum" => AvroType::Enum,
                // A primitive with attributes (a logical type): its encoding is the primitive's.
                primitive => parse_schema(&J::String(primitive.to_string()), named)?,
            };
            if let Some(name) = o.get("name").and_then(|n| n.as_str()) {
                named.insert(name.to_string(), parsed.clone());
                if let Some(ns) = o.get("namespace").and_then(|n| n.as_str()) {
                    named.insert(format!("{ns}.{name}"), parsed.clone());
                }
            }
            parsed
        }
        _ => return None,
    })
}

/// Parsed schemas by their text: a table's manifests share a few.
struct Parsed {
    avro: HashMap<String, Option<Arc<AvroType>>>,
    iceberg: HashMap<String, Option<Arc<Schema>>>,
}

static PARSED: LazyLock<Mutex<Parsed>> = LazyLock::new(|| {
    Mutex::new(Parsed {
        avro: HashMap::new(),
        iceberg: HashMap::new(),
    })
});

/// Kept schemas at most (a process reading many tables does not keep every schema).
const PARSED_SCHEMAS: usize = 256;

fn parsed_avro(text: &str) -> Option<Arc<AvroType>> {
    let mut parsed = PARSED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = parsed.avro.get(text) {
        return t.clone();
    }
    let t = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|j| parse_schema(&j, &mut HashMap::new()))
        .map(Arc::new);
    if parsed.avro.len() >= PARSED_SCHEMAS {
        parsed.avro.clear();
    }
    parsed.avro.insert(text.to_string(), t.clone());
    t
}

fn parsed_iceberg(text: &str) -> Option<Arc<Schema>> {
    let mut parsed = PARSED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = parsed.iceberg.get(text) {
        return s.clone();
    }
    let s = serde_json::from_str::<Schema>(text).ok().map(Arc::new);
    if parsed.iceberg.len() >= PARSED_SCHEMAS {
        parsed.iceberg.clear();
    }
    parsed.iceberg.insert(text.to_string(), s.clone());
    s
}

/// A record's field by name.
fn field<'v>(fields: &[(String, AvroType)], values: &'v [Value], name: &str) -> Option<&'v Value> {
    fields
        .iter()
        .position(|(n, _)| n == name)
        .and_then(|i| values.get(i))
}

fn long(v: Option<&Value>) -> Option<i64> {
    match v {
        Some(Value::Long(n)) => Some(*n),
        _ => None,
    }
}

/// `(key, value)` pairs of an Iceberg map column: an array of key/value records, or an Avro map
/// with the keys as text.
fn pairs(v: Option<&Value>) -> Result<Vec<(i32, &Value)>> {
    let key = |k: i64| i32::try_from(k).map_err(|_| bad("a field id is out of range"));
    match v {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::Record(kv) if kv.len() == 2 => match &kv[0] {
                    Value::Long(k) => Ok((key(*k)?, &kv[1])),
                    _ => Err(bad("a map key is not an integer")),
                },
                _ => Err(bad("a map entry is not a key/value record")),
            })
            .collect(),
        Some(Value::Map(entries)) => entries
            .iter()
            .map(|(k, v)| {
                let k = k
                    .parse::<i64>()
                    .map_err(|_| bad("a map key is not a field id"))?;
                Ok((key(k)?, v))
            })
            .collect(),
        Some(_) => Err(bad("a map column has another type")),
    }
}

fn counts(v: Option<&Value>) -> Result<HashMap<i32, u64>> {
    pairs(v)?
        .into_iter()
        .map(|(k, v)| match v {
            Value::Long(n) => Ok((k, u64::try_from(*n).map_err(|_| bad("a negative count"))?)),
            _ => Err(bad("a count is not an integer")),
        })
        .collect()
}

/// Bounds by field id, typed by `schema` (the schema the file was written with); `None` when
/// a bound's type is one this module does not convert.
fn bounds(v: Option<&Value>, schema: &Schema) -> Result<Option<HashMap<i32, Datum>>> {
    let mut out = HashMap::new();
    for (id, value) in pairs(v)? {
        let Value::Bytes(bytes) = value else {
            return Err(bad("a bound is not bytes"));
        };
        // Bounds of columns the schema no longer has, or of nested types, are not kept
        // (nothing prunes by them); those of a position delete file's own columns are.
        let ty = match schema.field_by_id(id).map(|f| f.field_type.as_ref()) {
            Some(Type::Primitive(ty)) => ty.clone(),
            _ => match reserved_type(id) {
                Some(ty) => ty,
                None => continue,
            },
        };
        match Datum::try_from_bytes(bytes, ty) {
            Ok(d) => {
                out.insert(id, d);
            }
            Err(_) => return Ok(None),
        }
    }
    Ok(Some(out))
}

/// The type of a column the spec reserves in position delete files: `file_path` (2147483546)
/// and `pos` (2147483545).
fn reserved_type(id: i32) -> Option<PrimitiveType> {
    match id {
        2147483546 => Some(PrimitiveType::String),
        2147483545 => Some(PrimitiveType::Long),
        _ => None,
    }
}

/// A partition value as the iceberg crate holds it; `None` (outer) for a type not converted.
fn partition_value(v: &Value, ty: &PrimitiveType) -> Option<Option<Literal>> {
    let p = match (v, ty) {
        (Value::Null, _) => return Some(None),
        (Value::Boolean(b), PrimitiveType::Boolean) => PrimitiveLiteral::Boolean(*b),
        (Value::Long(n), PrimitiveType::Int | PrimitiveType::Date) => {
            PrimitiveLiteral::Int(i32::try_from(*n).ok()?)
        }
        (
            Value::Long(n),
            PrimitiveType::Long
            | PrimitiveType::Time
            | PrimitiveType::Timestamp
            | PrimitiveType::Timestamptz
            | PrimitiveType::TimestampNs
            | PrimitiveType::TimestamptzNs,
        ) => PrimitiveLiteral::Long(*n),
        (Value::Float(f), PrimitiveType::Float) => return Some(Some(Literal::float(*f))),
        (Value::Double(f), PrimitiveType::Double) => return Some(Some(Literal::double(*f))),
        (Value::String(s), PrimitiveType::String) => PrimitiveLiteral::String(s.clone()),
        (Value::Bytes(b), PrimitiveType::Binary | PrimitiveType::Fixed(_)) => {
            PrimitiveLiteral::Binary(b.clone())
        }
        (Value::Bytes(b), PrimitiveType::Uuid) if b.len() == 16 => {
            PrimitiveLiteral::UInt128(u128::from_be_bytes(b.as_slice().try_into().ok()?))
        }
        (Value::Bytes(b), PrimitiveType::Decimal { .. }) if !b.is_empty() && b.len() <= 16 => {
            // Two's complement, big-endian, sign-extended to 16 bytes.
            let fill = if b[0] & 0x80 != 0 { 0xff } else { 0 };
            let mut full = [fill; 16];
            full[16 - b.len()..].copy_from_slice(b);
            PrimitiveLiteral::Int128(i128::from_be_bytes(full))
        }
        _ => return None,
    };
    Some(Some(Literal::Primitive(p)))
}

/// The manifest's entries, when this module decodes it (see the module documentation).
/// `spec` is the partition spec of the manifest (by its list entry's spec id).
pub(crate) fn decode(bytes: &[u8], spec: &PartitionSpec) -> Result<Option<Vec<ManifestEntry>>> {
    if !bytes.starts_with(MAGIC) {
        return Err(bad("no Avro magic"));
    }
    let mut c = Cursor::new(bytes);
    c.take(MAGIC.len())?;
    let mut header: HashMap<String, &[u8]> = HashMap::new();
    loop {
        let n = c.block_count()?;
        if n == 0 {
            break;
        }
        for _ in 0..n {
            let k = c.string()?;
            header.insert(k, c.bytes()?);
        }
    }
    let sync = c.take(16)?;
    let text = |k: &str| header.get(k).and_then(|v| std::str::from_utf8(v).ok());
    let codec = text("avro.codec").unwrap_or("null");
    if !matches!(codec, "null" | "deflate" | "snappy" | "zstandard") {
        return Ok(None);
    }
    let (Some(avro), Some(schema)) = (
        text("avro.schema").and_then(parsed_avro),
        text("schema").and_then(parsed_iceberg),
    ) else {
        return Ok(None);
    };
    let AvroType::Record(entry_fields) = avro.as_ref() else {
        return Ok(None);
    };
    let Some(AvroType::Record(file_fields)) = entry_fields
        .iter()
        .find(|(n, _)| n == "data_file")
        .map(|(_, t)| t)
    else {
        return Ok(None);
    };
    let Ok(partition_type) = spec.partition_type(&schema) else {
        return Ok(None);
    };
    // Each partition field of the spec: where the writer's partition record holds it (by
    // name), and its type.
    let written: Vec<&str> = match file_fields.iter().find(|(n, _)| n == "partition") {
        Some((_, AvroType::Record(fields))) => fields.iter().map(|(n, _)| n.as_str()).collect(),
        _ => vec![],
    };
    let partition_fields: Vec<(usize, PrimitiveType)> = match partition_type
        .fields()
        .iter()
        .map(|f| match f.field_type.as_ref() {
            Type::Primitive(p) => written
                .iter()
                .position(|n| *n == f.name)
                .map(|at| (at, p.clone())),
            _ => None,
        })
        .collect::<Option<_>>()
    {
        Some(t) => t,
        None => return Ok(None),
    };
    let record = AvroType::Record(Arc::clone(entry_fields));
    let mut entries = vec![];
    while c.at < bytes.len() {
        let count = c.len()?;
        let block = c.bytes()?;
        if c.take(16)? != sync {
            return Err(bad("a block's sync marker does not match the header's"));
        }
        let inflated;
        let data = match codec {
            "deflate" => {
                let mut out = vec![];
                flate2::read::DeflateDecoder::new(block)
                    .read_to_end(&mut out)
                    .map_err(|e| bad(format!("a deflate block does not inflate: {e}")))?;
                inflated = out;
                inflated.as_slice()
            }
            "snappy" => {
                inflated = snappy_block(block)?;
                inflated.as_slice()
            }
            "zstandard" => {
                inflated = zstd::stream::decode_all(block)
                    .map_err(|e| bad(format!("a zstandard block does not inflate: {e}")))?;
                inflated.as_slice()
            }
            _ => block,
        };
        let mut d = Cursor::new(data);
        for _ in 0..count {
            let Value::Record(values) = d.value(&record)? else {
                return Err(bad("an entry is not a record"));
            };
            match entry(
                entry_fields,
                file_fields,
                &values,
                spec,
                &schema,
                &partition_fields,
            )? {
                Some(e) => entries.push(e),
                None => return Ok(None),
            }
        }
    }
    Ok(Some(entries))
}

/// An Avro block of the `snappy` codec: raw snappy, then the big-endian CRC-32 of the
/// uncompressed bytes.
fn snappy_block(block: &[u8]) -> Result<Vec<u8>> {
    let Some(split) = block.len().checked_sub(4) else {
        return Err(bad("a snappy block is shorter than its checksum"));
    };
    let (compressed, crc) = block.split_at(split);
    let out = snap::raw::Decoder::new()
        .decompress_vec(compressed)
        .map_err(|e| bad(format!("a snappy block does not decompress: {e}")))?;
    if crc32fast::hash(&out).to_be_bytes() != crc {
        return Err(bad("a snappy block's checksum does not match"));
    }
    Ok(out)
}

/// One manifest entry; `None` for a value this module does not convert.
fn entry(
    entry_fields: &[(String, AvroType)],
    file_fields: &[(String, AvroType)],
    values: &[Value],
    spec: &PartitionSpec,
    schema: &Schema,
    partition_fields: &[(usize, PrimitiveType)],
) -> Result<Option<ManifestEntry>> {
    let status = long(field(entry_fields, values, "status")).ok_or_else(|| bad("no status"))?;
    let status = ManifestStatus::try_from(status as i32).map_err(bad)?;
    let Some(Value::Record(file)) = field(entry_fields, values, "data_file") else {
        return Err(bad("no data_file"));
    };
    let get = |name: &str| field(file_fields, file, name);
    let content = long(get("content")).unwrap_or(0);
    let content = DataContentType::try_from(content as i32).map_err(bad)?;
    let Some(Value::String(path)) = get("file_path") else {
        return Err(bad("no file_path"));
    };
    let format = match get("file_format") {
        Some(Value::String(f)) => DataFileFormat::from_str(f).map_err(bad)?,
        _ => return Err(bad("no file_format")),
    };
    let partition = match get("partition") {
        Some(Value::Record(p)) => {
            let mut literals = Vec::with_capacity(partition_fields.len());
            for (at, ty) in partition_fields {
                let v = p
                    .get(*at)
                    .ok_or_else(|| bad("a partition value is missing"))?;
                match partition_value(v, ty) {
                    Some(l) => literals.push(l),
                    None => return Ok(None),
                }
            }
            Struct::from_iter(literals)
        }
        _ if partition_fields.is_empty() => Struct::empty(),
        _ => return Err(bad("no partition")),
    };
    let count = |name: &str| {
        long(get(name))
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| bad(format!("no {name}")))
    };
    let (Some(lower), Some(upper)) = (
        bounds(get("lower_bounds"), schema)?,
        bounds(get("upper_bounds"), schema)?,
    ) else {
        return Ok(None);
    };
    let ints = |name: &str| -> Result<Option<Vec<i64>>> {
        match get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| long(Some(i)).ok_or_else(|| bad(format!("{name} holds a non-integer"))))
                .collect::<Result<Vec<_>>>()
                .map(Some),
            Some(_) => Err(bad(format!("{name} is not an array"))),
        }
    };
    let mut b = DataFileBuilder::default();
    b.content(content)
        .file_path(path.clone())
        .file_format(format)
        .partition(partition)
        .partition_spec_id(spec.spec_id())
        .record_count(count("record_count")?)
        .file_size_in_bytes(count("file_size_in_bytes")?)
        .column_sizes(counts(get("column_sizes"))?)
        .value_counts(counts(get("value_counts"))?)
        .null_value_counts(counts(get("null_value_counts"))?)
        .nan_value_counts(counts(get("nan_value_counts"))?)
        .lower_bounds(lower)
        .upper_bounds(upper)
        .split_offsets(ints("split_offsets")?)
        .equality_ids(ints("equality_ids")?.map(|ids| ids.into_iter().map(|i| i as i32).collect()))
        .first_row_id(long(get("first_row_id")))
        .content_offset(long(get("content_offset")))
        .content_size_in_bytes(long(get("content_size_in_bytes")));
    if let Some(id) = long(get("sort_order_id")) {
        b.sort_order_id(id as i32);
    }
    if let Some(Value::Bytes(k)) = get("key_metadata") {
        b.key_metadata(Some(k.clone()));
    }
    if let Some(Value::String(r)) = get("referenced_data_file") {
        b.referenced_data_file(Some(r.clone()));
    }
    let data_file = b.build().map_err(bad)?;
    Ok(Some(ManifestEntry {
        status,
        snapshot_id: long(field(entry_fields, values, "snapshot_id")),
        sequence_number: long(field(entry_fields, values, "sequence_number")),
        file_sequence_number: long(field(entry_fields, values, "file_sequence_number")),
        data_file,
    }))
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use iceberg::spec::Manifest;

    use super::*;

    fn avro_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                avro_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "avro") {
                out.push(path);
            }
        }
    }

    /// Every manifest under `dir` decodes here as the iceberg crate decodes it; answers how
    /// many were manifests and how many of them this module decoded.
    fn same_as_iceberg(dir: &Path) -> (usize, usize) {
        let mut files = vec![];
        avro_files(dir, &mut files);
        let (mut manifests, mut decoded) = (0, 0);
        for path in files {
            let bytes = std::fs::read(&path).unwrap();
            // Manifest lists (and manifests the iceberg crate cannot open) are not compared.
            let Ok(reference) = Manifest::parse_avro(&bytes) else {
                continue;
            };
            manifests += 1;
            let spec = reference.metadata().partition_spec();
            let want: Vec<ManifestEntry> = reference
                .entries()
                .iter()
                .map(|e| e.as_ref().clone())
                .collect();
            if let Some(got) = decode(&bytes, spec).unwrap() {
                assert_eq!(got, want, "{}", path.display());
                decoded += 1;
            }
        }
        (manifests, decoded)
    }

    #[test]
    fn manifests_other_writers_wrote_decode_as_the_iceberg_crate_decodes_them() {
        // The clone cargo runs the test in (not the one the binary was built from).
        let root = std::env::var_os("CARGO_MANIFEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
            .join("tests/data");
        let (manifests, decoded) = same_as_iceberg(&root);
        assert!(manifests >= 15, "{manifests} manifests found");
        assert_eq!(decoded, manifests, "some were left to the iceberg crate");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn manifests_of_every_partition_type_decode_as_the_iceberg_crate_decodes_them() {
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
            "CREATE EXTERNAL TABLE ns.t (id BIGINT NOT NULL, i INT, b BOOLEAN, f FLOAT, \
             d DOUBLE, s VARCHAR, dt DATE, ts TIMESTAMP, dec DECIMAL(10, 2), bin BYTEA) \
             STORED AS ICEBERG LOCATION '' PARTITIONED BY (i, b, s, dt, dec) OPTIONS \
             ('partitioning' 'bucket(4, id), truncate(2, s), day(ts), month(dt), f, d, bin')"
                .into(),
        )
        .await
        .unwrap();
        for round in 0..3 {
            run(format!(
                "INSERT INTO ns.t SELECT value AS id, CAST(value % 3 AS INT) AS i, \
                 value % 2 = 0 AS b, CAST(value AS FLOAT) / 4 AS f, CAST(value AS DOUBLE) / 8 AS d, \
                 CASE WHEN value % 5 = 0 THEN NULL ELSE 'name-' || CAST(value % 4 AS VARCHAR) END AS s, \
                 CAST('2024-01-01' AS DATE) + CAST(value % 40 AS INT) AS dt, \
                 CAST(to_timestamp_seconds(1709287200 + value * 25200) AS TIMESTAMP) AS ts, \
                 CAST(value AS DECIMAL(10, 2)) / 100 AS dec, \
                 CAST(CAST(value % 3 AS VARCHAR) AS BYTEA) AS bin FROM generate_series({}, {})",
                round * 20,
                round * 20 + 19
            ))
            .await
            .unwrap();
        }
        run("DELETE FROM ns.t WHERE id % 7 = 0".into())
            .await
            .unwrap();
        let (manifests, decoded) = same_as_iceberg(dir.path());
        assert!(manifests >= 4, "{manifests} manifests");
        assert_eq!(decoded, manifests, "some were left to the iceberg crate");
    }

    /// Decimal partition values a legacy writer stored as minimal `bytes` (3 bytes for a
    /// decimal(8, 2) value): the iceberg crate refuses them (its Avro reader with "Precision 8
    /// too small to hold decimal values with 3 bytes", or its conversion with "must be exactly
    /// 4 bytes"); this module reads them as pyiceberg does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn decimal_partition_values_in_fewer_bytes_than_their_precision_takes() {
        use apache_avro::types::Value as Avro;
        let dir = tempfile::tempdir().unwrap();
        let s = crate::IcebergSession::open(crate::WarehouseConfig::local(dir.path()))
            .await
            .unwrap();
        for q in [
            "CREATE SCHEMA ns",
            "CREATE EXTERNAL TABLE ns.t (id INT, d DECIMAL(8, 2)) STORED AS ICEBERG \
             LOCATION '' PARTITIONED BY (d)",
            "INSERT INTO ns.t VALUES (1, 12345.67), (2, -0.05)",
        ] {
            s.context().sql(q).await.unwrap().collect().await.unwrap();
        }
        let mut files = vec![];
        avro_files(&dir.path().join("ns/t/metadata"), &mut files);
        let manifest = files
            .iter()
            .find(|p| {
                !p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("snap-")
            })
            .unwrap();
        let bytes = std::fs::read(manifest).unwrap();
        let reader = apache_avro::Reader::new(bytes.as_slice()).unwrap();
        // The writer's schema with the partition value as decimal-annotated `bytes`.
        let mut schema = serde_json::to_value(reader.writer_schema()).unwrap();
        fn retype(v: &mut serde_json::Value) -> bool {
            match v {
                serde_json::Value::Object(o) => {
                    if o.get("name").and_then(|n| n.as_str()) == Some("d")
                        && o.contains_key("field-id")
                    {
                        o.insert(
                            "type".into(),
                            serde_json::json!(["null", {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 2}]),
                        );
                        return true;
                    }
                    o.values_mut().any(retype)
                }
                serde_json::Value::Array(a) => a.iter_mut().any(retype),
                _ => false,
            }
        }
        assert!(retype(&mut schema));
        let schema = apache_avro::Schema::parse(&schema).unwrap();
        let metadata = reader.user_metadata().clone();
        let minimal = |d: &apache_avro::Decimal| -> Vec<u8> {
            let mut b: Vec<u8> = d.try_into().unwrap();
            while b.len() > 1
                && ((b[0] == 0 && b[1] & 0x80 == 0) || (b[0] == 0xff && b[1] & 0x80 != 0))
            {
                b.remove(0);
            }
            b
        };
        fn rewrite(v: Avro, minimal: &dyn Fn(&apache_avro::Decimal) -> Vec<u8>) -> Avro {
            match v {
                Avro::Record(fields) => Avro::Record(
                    fields
                        .into_iter()
                        .map(|(n, v)| (n, rewrite(v, minimal)))
                        .collect(),
                ),
                Avro::Union(i, v) => Avro::Union(i, Box::new(rewrite(*v, minimal))),
                Avro::Decimal(d) => Avro::Decimal(apache_avro::Decimal::from(minimal(&d))),
                other => other,
            }
        }
        let records: Vec<Avro> = reader.map(|r| rewrite(r.unwrap(), &minimal)).collect();
        let mut writer = apache_avro::Writer::new(&schema, Vec::new());
        for (k, v) in metadata {
            writer.add_user_metadata(k, v).unwrap();
        }
        for r in records {
            writer.append(r).unwrap();
        }
        let legacy = writer.into_inner().unwrap();

        // The iceberg crate refuses the values (its Avro reader, or its own conversion).
        let refused = Manifest::parse_avro(&legacy).unwrap_err().to_string();
        assert!(
            refused.contains("precision 8") || refused.contains("Precision 8"),
            "{refused}"
        );
        let t = s
            .catalog()
            .load_table(&iceberg::TableIdent::from_strs(["ns", "t"]).unwrap())
            .await
            .unwrap();
        let spec = t.metadata().default_partition_spec();
        let entries = decode(&legacy, spec).unwrap().expect("decoded here");
        let mut values: Vec<i128> = entries
            .iter()
            .map(|e| match e.data_file().partition().fields()[0].as_ref() {
                Some(Literal::Primitive(PrimitiveLiteral::Int128(v))) => *v,
                other => panic!("{other:?}"),
            })
            .collect();
        values.sort();
        assert_eq!(values, [-5, 1234567]);
    }

    #[test]
    fn what_it_does_not_decode_it_leaves_and_broken_files_are_errors() {
        let spec = PartitionSpec::unpartition_spec();
        assert!(decode(b"not avro", &spec).is_err());
        // A header naming a codec this module does not inflate: left to the iceberg crate.
        let mut header = MAGIC.to_vec();
        let put_long = |out: &mut Vec<u8>, n: i64| {
            let mut z = ((n << 1) ^ (n >> 63)) as u64;
            loop {
                let b = (z & 0x7f) as u8;
                z >>= 7;
                if z == 0 {
                    out.push(b);
                    break;
                }
                out.push(b | 0x80);
            }
        };
        put_long(&mut header, 1);
        for text in ["avro.codec", "snappy"] {
            put_long(&mut header, text.len() as i64);
            header.extend_from_slice(text.as_bytes());
        }
        put_long(&mut header, 0);
        header.extend_from_slice(&[7u8; 16]);
        assert!(decode(&header, &spec).unwrap().is_none());
    }
}
