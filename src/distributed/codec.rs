//! The plan codec of this crate's nodes, for plans that cross a process boundary.
//!
//! ```text
//!   IcebergScanExec ──► summary                 ┐
//!   PositionalDeleteExec ──► deletes per file   ├ JSON after a magic prefix, plus, for every
//!     (of the files its scan reads: a task's)   │
//!   EqualityDeleteExec ──► key/gate columns     │ direct child that is a parquet scan, the
//!   ChangeRowsExec ──► condition, assignments   │ (expressions as datafusion-proto messages)
//!   DataFileWriterExec ──► table metadata       │
//!   PositionDeleteWriterExec ──► table metadata,│
//!     the data files and their position deletes │
//!   MergeRowsExec ──► clauses, the join rows'   │
//!     schema                                    │
//!   KeyFilterExec ──► the source's key bitmap   │
//!   DropPositionsExec ──► changed positions     ┘
//!                                                 parts DataFusion's own encoding drops
//! ```
//!
//! A parquet `DataSourceExec` is always encoded by DataFusion itself, and that encoding drops
//! what this crate's scans depend on: the field-id adapter (columns matched by Iceberg field
//! id, so a renamed column reads right), the reader factory (footers located by the size the
//! manifest records, with page indexes when a filter can use them) and the footer size hint. The node above a scan writes
//! those into its own bytes, and puts them back into its decoded child.
//!
//! Nodes of other crates are refused with `not_impl_err!`, so the codec composes with others.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::common::not_impl_err;
use datafusion::common::TableReference;
use datafusion::datasource::physical_plan::{
    FileScanConfig, FileScanConfigBuilder, FileSource, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Extension, LogicalPlan};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use datafusion_proto::physical_plan::from_proto::parse_physical_expr;
use datafusion_proto::physical_plan::from_proto::{
    parse_protobuf_file_scan_config, parse_table_schema_from_proto,
};
use datafusion_proto::physical_plan::to_proto::{
    serialize_file_scan_config, serialize_physical_expr,
};
use datafusion_proto::physical_plan::PhysicalPlanDecodeContext;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use datafusion_proto::protobuf::PhysicalExprNode;
use prost::Message;
use serde::{Deserialize, Serialize};

use super::planned::EncodedFiles;
use crate::file_planning::FieldIdAdapterFactory;
use crate::physical_plan::change_rows::{ChangeCounts, ChangeRowsExec, RowChange};
use crate::physical_plan::equality_delete::{EqualityDeleteColumns, EqualityDeleteExec, FileGate};
use crate::physical_plan::join_choice::CompactViewsExec;
use crate::physical_plan::merge::clauses::{Clause, ClauseAction, ClauseKind, RowLayout};
use crate::physical_plan::merge::key_filter::{KeyFilter, KeyFilterExec};
use crate::physical_plan::merge::positions::{
    bitmap_hex, bitmap_of_hex, DropCounts, DropPositionsExec, MergePositions,
};
use crate::physical_plan::merge::rows::{MergeRowsExec, RowsMode};
use crate::physical_plan::orc::OrcSource;
use crate::physical_plan::parquet_files::with_recorded_size_reader_indexed;
use crate::physical_plan::positional_delete::{FileDeletes, PositionalDeleteExec};
use crate::physical_plan::scan::{IcebergScanExec, ScanSummary};
use crate::physical_plan::write::PositionDeleteWriterExec;
use crate::physical_plan::write::{
    sort_requirement, DataFileWriterExec, WriterTally, WrittenFiles,
};
use crate::IcebergTableProvider;

/// What starts every node this codec writes (and tells its bytes from another codec's).
const MAGIC: &[u8] = b"ICEBERG-EXEC/1\n";

/// The JSON of a node or table this crate's codecs wrote (`None`: another codec's bytes).
pub(crate) fn own_json(buf: &[u8]) -> Option<&[u8]> {
    buf.strip_prefix(MAGIC)
}

/// The [`PhysicalExtensionCodec`] of this crate's execution plan nodes.
#[derive(Debug, Default, Clone)]
pub struct IcebergPhysicalCodec;

/// One node, as its bytes hold it.
#[derive(Serialize, Deserialize)]
struct Encoded {
    node: Node,
    /// For each child: the parts of its parquet scan to put back (`None`: not a parquet scan).
    scans: Vec<Option<ScanParts>>,
}

#[derive(Serialize, Deserialize)]
enum Node {
    Scan {
        summary: ScanSummary,
    },
    /// String views copied out of shared buffers (under a sort-merge join chosen for a memory
    /// limit).
    CompactViews,
    /// A scan of ORC data files (a `DataSourceExec` of this crate's ORC source).
    OrcScan {
        /// The file scan (datafusion-proto `FileScanExecConf`).
        config: Vec<u8>,
        field_ids: Vec<i32>,
        deletes: HashMap<String, FileDeletes>,
        /// The field-id adapter's schema and table properties.
        adapter: Box<(iceberg::spec::Schema, HashMap<String, String>)>,
    },
    PositionalDelete {
        deletes: HashMap<String, FileDeletes>,
        positions: bool,
        join_threshold: u64,
        /// Marks dense deletes in the live column.
        live: bool,
    },
    DataFileWriter {
        table: iceberg::TableIdent,
        metadata_location: Option<String>,
        metadata: Box<iceberg::spec::TableMetadata>,
        sorted: bool,
        row_lineage: bool,
        target_file_size: Option<usize>,
        single_writer: bool,
        local_sort: bool,
        /// Reports the counts of the `ChangeRowsExec` below it.
        tally: bool,
        /// Top-level columns (field ids) written without dictionary encoding.
        #[serde(default)]
        plain_columns: Vec<i32>,
    },
    ChangeRows {
        condition: Vec<u8>,
        change: Change,
    },
    MergeRows {
        clauses: Vec<EncodedClause>,
        source_columns: usize,
        target_columns: Vec<usize>,
        /// The join rows' schema (datafusion-proto `DfSchema`), with the statement's
        /// qualifiers.
        layout_schema: Vec<u8>,
        /// The rows written (datafusion-proto `Schema`).
        table_schema: Vec<u8>,
    },
    KeyFilter {
        /// The target's key expressions (datafusion-proto messages).
        keys: Vec<Vec<u8>>,
        words: Vec<u64>,
        dense_min: Option<i64>,
    },
    DropPositions {
        /// Positions by data file, as roaring bitmaps in hex.
        positions: Vec<(String, String)>,
        /// The rows out (datafusion-proto `Schema`).
        schema: Vec<u8>,
    },
    PositionDeleteWriter {
        table: iceberg::TableIdent,
        metadata_location: Option<String>,
        metadata: Box<iceberg::spec::TableMetadata>,
        locations: crate::LocationMap,
        files: EncodedFiles,
        whole: Vec<String>,
    },
    EqualityDelete {
        keys: Vec<usize>,
        gate: usize,
        gates: Vec<FileGate>,
        equality_ids: Vec<i32>,
        fanout: usize,
        projection: Option<Vec<usize>>,
        /// The live column of the positional deletes below.
        live: Option<usize>,
    },
}

/// A `MERGE` clause, its expressions as datafusion-proto messages over the join rows.
#[derive(Serialize, Deserialize)]
struct EncodedClause {
    kind: ClauseKind,
    predicate: Option<Vec<u8>>,
    action: EncodedAction,
    text: String,
}

#[derive(Serialize, Deserialize)]
enum EncodedAction {
    Update(Vec<(usize, Vec<u8>)>),
    Delete,
    Insert(Vec<Option<Vec<u8>>>),
}

/// A [`RowChange`], its expressions as datafusion-proto messages.
#[derive(Serialize, Deserialize)]
enum Change {
    Delete,
    Update(Vec<(usize, Vec<u8>)>),
    UpdateSelected(Vec<(usize, Vec<u8>)>),
}

/// `expr` as the bytes of its datafusion-proto message.
fn expr_bytes(expr: &Arc<dyn PhysicalExpr>, codec: &IcebergPhysicalCodec) -> Result<Vec<u8>> {
    Ok(serialize_physical_expr(expr, codec)?.encode_to_vec())
}

/// The expression `bytes` hold, over `schema`.
fn expr_of(
    bytes: &[u8],
    schema: &arrow::datatypes::Schema,
    ctx: &TaskContext,
    codec: &IcebergPhysicalCodec,
) -> Result<Arc<dyn PhysicalExpr>> {
    let node = PhysicalExprNode::decode(bytes)
        .map_err(|e| DataFusionError::Internal(format!("undecodable expression: {e}")))?;
    parse_physical_expr(&node, ctx, schema, codec)
}

/// What a decoded writer reports: the counts of the `ChangeRowsExec`, or the positions of the
/// `MergeRowsExec`, below it in the same process, found through single-child nodes (the sort, a
/// projection).
fn tally_below(plan: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn WriterTally>> {
    let mut node = Arc::clone(plan);
    loop {
        if let Some(change) = node.downcast_ref::<ChangeRowsExec>() {
            return Ok(Arc::clone(change.counts()) as Arc<dyn WriterTally>);
        }
        if let Some(merge) = node.downcast_ref::<MergeRowsExec>() {
            return Ok(Arc::clone(merge.positions()) as Arc<dyn WriterTally>);
        }
        if let Some(drop) = node.downcast_ref::<DropPositionsExec>() {
            return Ok(Arc::clone(drop.counts()) as Arc<dyn WriterTally>);
        }
        node = match node.children().as_slice() {
            [child] => Arc::clone(child),
            _ => {
                return Err(DataFusionError::Internal(
                    "a writer that reports a tally has no ChangeRowsExec, MergeRowsExec or \
                     DropPositionsExec below it in its task"
                        .into(),
                ))
            }
        };
    }
}

/// The last segment of a path or URI.
fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The names of the data files the parquet scan below `plan` reads, found through
/// single-child nodes and the first child of others (a delete join's probe side); `None`
/// when there is no such scan.
fn scanned_file_names(plan: &Arc<dyn ExecutionPlan>) -> Option<std::collections::HashSet<String>> {
    let mut node = Arc::clone(plan);
    loop {
        if let Some((config, _)) = parquet_scan(&node) {
            return Some(
                config
                    .file_groups
                    .iter()
                    .flat_map(|g| g.iter())
                    .map(|f| file_name(f.object_meta.location.as_ref()).to_string())
                    .collect(),
            );
        }
        node = Arc::clone(node.children().first()?);
    }
}

/// What DataFusion's encoding of a parquet scan leaves out.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct ScanParts {
    /// The field-id adapter's schema and table properties.
    adapter: Option<(iceberg::spec::Schema, HashMap<String, String>)>,
    /// `Some(page_index)` when footers are read through the recorded-size reader.
    recorded_size_reader: Option<bool>,
}

/// The entries of `deletes` (by object store location) of the files `config` reads.
fn deletes_of_files(
    config: &FileScanConfig,
    deletes: &HashMap<String, FileDeletes>,
) -> HashMap<String, FileDeletes> {
    let files: std::collections::HashSet<&str> = config
        .file_groups
        .iter()
        .flat_map(|g| g.iter())
        .map(|f| f.object_meta.location.as_ref())
        .collect();
    deletes
        .iter()
        .filter(|(location, _)| files.contains(location.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The file scan of a parquet `DataSourceExec`.
fn parquet_scan(plan: &Arc<dyn ExecutionPlan>) -> Option<(&FileScanConfig, &ParquetSource)> {
    let config = crate::physical_plan::file_scan(plan)?;
    let source = config.file_source().downcast_ref::<ParquetSource>()?;
    Some((config, source))
}

impl ScanParts {
    /// The parts of `plan` to carry, if it is a parquet scan.
    fn of(plan: &Arc<dyn ExecutionPlan>) -> Option<Self> {
        let (config, source) = parquet_scan(plan)?;
        let adapter = config
            .expr_adapter_factory
            .as_ref()
            .and_then(FieldIdAdapterFactory::of)
            .map(|a| {
                let (schema, properties) = a.source();
                (schema.clone(), properties.clone())
            });
        // This crate's scans (those with its adapter) read footers through the recorded-size
        // reader, with page indexes when a predicate reached the reader and the session
        // enables them.
        let recorded_size_reader =
            (adapter.is_some() && source.parquet_file_reader_factory().is_some()).then(|| {
                source.filter().is_some() && source.table_parquet_options().global.enable_page_index
            });
        Some(Self {
            adapter,
            recorded_size_reader,
        })
    }

    /// `plan` (a decoded parquet scan) with these parts put back, reading through `context`'s
    /// object stores.
    fn restore(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        context: &TaskContext,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some((config, source)) = parquet_scan(&plan) else {
            return Err(DataFusionError::Internal(format!(
                "expected a decoded parquet scan, got {}",
                plan.name()
            )));
        };
        let mut source = source.clone();
        // The footer size hint is one of the parquet options (which travel), applied to the
        // reader as planning does.
        if let Some(hint) = source.table_parquet_options().global.metadata_size_hint {
            source = source.with_metadata_size_hint(hint);
        }
        if let Some(page_index) = self.recorded_size_reader {
            source = with_recorded_size_reader_indexed(
                source,
                &context.runtime_env(),
                &config.object_store_url,
                page_index,
            )?;
        }
        let mut builder = FileScanConfigBuilder::from(config.clone()).with_source(Arc::new(source));
        if let Some((schema, properties)) = &self.adapter {
            builder = builder.with_expr_adapter(Some(Arc::new(FieldIdAdapterFactory::new(
                schema, properties,
            ))));
        }
        Ok(DataSourceExec::from_data_source(builder.build()))
    }
}

/// The object stores of the runtime a plan is decoded in (no storage secrets travel in a
/// plan: the receiving side reads and writes through the stores it has).
fn task_stores(ctx: &TaskContext) -> Arc<crate::storage::ObjectStores> {
    crate::storage::ObjectStores::new(
        Arc::clone(&ctx.runtime_env().object_store_registry),
        crate::storage::StorageOptions::default(),
    )
}

/// A decoded table, with file I/O over `stores`.
fn decoded_table(
    ident: iceberg::TableIdent,
    metadata_location: Option<String>,
    metadata: iceberg::spec::TableMetadata,
    stores: &Arc<crate::storage::ObjectStores>,
) -> Result<iceberg::table::Table> {
    let file_io = crate::storage::table_file_io(&crate::LocationMap::default(), stores);
    let location = metadata_location.unwrap_or_default();
    crate::catalog::table_handle(ident, location, metadata, file_io)
}

impl PhysicalExtensionCodec for IcebergPhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(json) = own_json(buf) else {
            return not_impl_err!("not a node of iceberg-exec's plan codec");
        };
        let encoded: Encoded = serde_json::from_slice(json).map_err(|e| {
            DataFusionError::Internal(format!("undecodable iceberg-exec plan node: {e}"))
        })?;
        if encoded.scans.len() != inputs.len() {
            return Err(DataFusionError::Internal(format!(
                "iceberg-exec plan node encoded with {} children, decoded with {}",
                encoded.scans.len(),
                inputs.len()
            )));
        }
        let inputs = inputs
            .iter()
            .zip(&encoded.scans)
            .map(|(input, parts)| match parts {
                Some(parts) => parts.restore(Arc::clone(input), ctx),
                None => Ok(Arc::clone(input)),
            })
            .collect::<Result<Vec<_>>>()?;
        let one = |node: &str| -> Result<Arc<dyn ExecutionPlan>> {
            match inputs.as_slice() {
                [input] => Ok(Arc::clone(input)),
                _ => Err(DataFusionError::Internal(format!(
                    "{node} has one child, decoded with {}",
                    inputs.len()
                ))),
            }
        };
        Ok(match encoded.node {
            Node::DataFileWriter {
                table,
                metadata_location,
                metadata,
                sorted,
                row_lineage,
                target_file_size,
                single_writer,
                local_sort,
                tally,
                plain_columns,
            } => {
                let input = one("DataFileWriterExec")?;
                let counts = tally.then(|| tally_below(&input)).transpose()?;
                let table = decoded_table(table, metadata_location, *metadata, &task_stores(ctx))?;
                let sort = match sorted {
                    true => sort_requirement(&table, &input.schema())?,
                    false => None,
                };
                let mut node =
                    DataFileWriterExec::try_new(input, table, sort, WrittenFiles::default())?
                        .with_row_lineage(row_lineage)?;
                if let Some(bytes) = target_file_size {
                    node = node.with_target_file_size(bytes);
                }
                if single_writer {
                    node = node.with_single_writer();
                }
                node = node
                    .with_local_sort(local_sort)
                    .with_plain_columns(plain_columns);
                if let Some(counts) = counts {
                    node = node.with_report(counts);
                }
                Arc::new(node)
            }
            Node::ChangeRows { condition, change } => {
                let input = one("ChangeRowsExec")?;
                let schema = input.schema();
                let condition = expr_of(&condition, &schema, ctx, self)?;
                let assigned = |a: Vec<(usize, Vec<u8>)>| -> Result<Vec<_>> {
                    a.into_iter()
                        .map(|(i, e)| Ok((i, expr_of(&e, &schema, ctx, self)?)))
                        .collect()
                };
                let change = match change {
                    Change::Delete => RowChange::Delete,
                    Change::Update(a) => RowChange::Update(assigned(a)?),
                    Change::UpdateSelected(a) => RowChange::UpdateSelected(assigned(a)?),
                };
                Arc::new(ChangeRowsExec::try_new(
                    input,
                    condition,
                    change,
                    Arc::new(ChangeCounts::default()),
                )?)
            }
            Node::MergeRows {
                clauses,
                source_columns,
                target_columns,
                layout_schema,
                table_schema,
            } => {
                let input = one("MergeRowsExec")?;
                let schema = input.schema();
                let expr = |bytes: &[u8]| expr_of(bytes, &schema, ctx, self);
                let clauses = clauses
                    .into_iter()
                    .map(|c| {
                        Ok(Clause {
                            kind: c.kind,
                            predicate: c.predicate.as_deref().map(expr).transpose()?,
                            action: match c.action {
                                EncodedAction::Update(a) => ClauseAction::Update(
                                    a.iter()
                                        .map(|(i, e)| Ok((*i, expr(e)?)))
                                        .collect::<Result<_>>()?,
                                ),
                                EncodedAction::Delete => ClauseAction::Delete,
                                EncodedAction::Insert(v) => ClauseAction::Insert(
                                    v.iter()
                                        .map(|e| e.as_deref().map(expr).transpose())
                                        .collect::<Result<_>>()?,
                                ),
                            },
                            text: c.text,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let bad = |e: prost::DecodeError| {
                    DataFusionError::Internal(format!("undecodable MergeRowsExec schema: {e}"))
                };
                let layout_schema =
                    datafusion_proto::protobuf::DfSchema::decode(layout_schema.as_slice())
                        .map_err(bad)?;
                let table_schema =
                    datafusion_proto::protobuf::Schema::decode(table_schema.as_slice())
                        .map_err(bad)?;
                let layout = RowLayout {
                    source_columns,
                    target_columns,
                    schema: Arc::new(datafusion::common::DFSchema::try_from(&layout_schema)?),
                };
                let table_schema = Arc::new(arrow::datatypes::Schema::try_from(&table_schema)?);
                let positions = Arc::new(MergePositions::new(
                    datafusion::execution::memory_pool::MemoryConsumer::new("MergePositions")
                        .with_can_spill(true)
                        .register(ctx.memory_pool()),
                ));
                Arc::new(MergeRowsExec::new(
                    input,
                    clauses.into(),
                    Arc::new(layout),
                    table_schema,
                    positions,
                ))
            }
            Node::KeyFilter {
                keys,
                words,
                dense_min,
            } => {
                let input = one("KeyFilterExec")?;
                let schema = input.schema();
                let keys = keys
                    .iter()
                    .map(|k| expr_of(k, &schema, ctx, self))
                    .collect::<Result<Vec<_>>>()?;
                let reservation =
                    datafusion::execution::memory_pool::MemoryConsumer::new("MergeKeyFilter")
                        .register(ctx.memory_pool());
                let filter = KeyFilter::from_parts(words, dense_min, reservation)?;
                Arc::new(KeyFilterExec::new(input, keys, Arc::new(filter)))
            }
            Node::DropPositions { positions, schema } => {
                let input = one("DropPositionsExec")?;
                let positions = positions
                    .iter()
                    .map(|(file, hex)| Ok((file.clone(), bitmap_of_hex(hex)?)))
                    .collect::<Result<HashMap<_, _>>>()?;
                let schema = datafusion_proto::protobuf::Schema::decode(schema.as_slice())
                    .map_err(|e| {
                        DataFusionError::Internal(format!("undecodable DropPositionsExec: {e}"))
                    })?;
                Arc::new(DropPositionsExec::new(
                    input,
                    Arc::new(positions),
                    Arc::new(arrow::datatypes::Schema::try_from(&schema)?),
                    Arc::new(DropCounts::default()),
                ))
            }
            Node::PositionDeleteWriter {
                table,
                metadata_location,
                metadata,
                locations,
                files,
                whole,
            } => {
                let input = one("PositionDeleteWriterExec")?;
                let files = files.decode(&metadata)?;
                let table = decoded_table(table, metadata_location, *metadata, &task_stores(ctx))?;
                Arc::new(PositionDeleteWriterExec::try_new(
                    input,
                    table,
                    locations,
                    files,
                    whole.into_iter().collect(),
                )?)
            }
            Node::Scan { summary } => {
                Arc::new(IcebergScanExec::new(one("IcebergScanExec")?, summary))
            }
            Node::CompactViews => Arc::new(CompactViewsExec::new(one("CompactViewsExec")?)),
            Node::OrcScan {
                config,
                field_ids,
                deletes,
                adapter,
            } => {
                let (schema, properties) = *adapter;
                let proto = datafusion_proto::protobuf::FileScanExecConf::decode(config.as_slice())
                    .map_err(|e| {
                        DataFusionError::Internal(format!("undecodable ORC file scan: {e}"))
                    })?;
                let source = OrcSource::new(
                    parse_table_schema_from_proto(&proto)?,
                    field_ids.into(),
                    deletes,
                    Arc::new(FieldIdAdapterFactory::new(&schema, &properties)),
                );
                let config = parse_protobuf_file_scan_config(
                    &proto,
                    &PhysicalPlanDecodeContext::new(ctx, self),
                    proto_converter,
                    Arc::new(source),
                )?;
                DataSourceExec::from_data_source(config)
            }
            Node::PositionalDelete {
                deletes,
                positions,
                join_threshold,
                live,
            } => {
                let node = PositionalDeleteExec::try_new(one("PositionalDeleteExec")?, deletes)?
                    .with_join_threshold(join_threshold);
                Arc::new(match (positions, live) {
                    (true, _) => node.with_positions()?,
                    (false, true) => node.with_live_column(),
                    (false, false) => node,
                })
            }
            Node::EqualityDelete {
                keys,
                gate,
                gates,
                equality_ids,
                fanout,
                projection,
                live,
            } => {
                let [input, build] = <[_; 2]>::try_from(inputs).map_err(|v| {
                    DataFusionError::Internal(format!(
                        "EqualityDeleteExec has two children, decoded with {}",
                        v.len()
                    ))
                })?;
                let columns = EqualityDeleteColumns {
                    keys,
                    gate,
                    gates: gates.into(),
                    live,
                };
                let node =
                    EqualityDeleteExec::try_new(input, build, columns, equality_ids, fanout)?;
                Arc::new(match projection {
                    Some(p) => node.with_projection(p)?,
                    None => node,
                })
            }
        })
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let orc = crate::physical_plan::file_scan(&node)
            .and_then(|c| Some((c, c.file_source().downcast_ref::<OrcSource>()?)));
        let encoded = if let Some((config, source)) = orc {
            // A task's plan holds its share of the files: only their deletes travel.
            Node::OrcScan {
                config: serialize_file_scan_config(config, self, proto_converter)?.encode_to_vec(),
                field_ids: source.field_ids().to_vec(),
                deletes: deletes_of_files(config, source.deletes()),
                adapter: {
                    let (schema, properties) = source.adapter().source();
                    Box::new((schema.clone(), properties.clone()))
                },
            }
        } else if node.downcast_ref::<CompactViewsExec>().is_some() {
            Node::CompactViews
        } else if let Some(scan) = node.downcast_ref::<IcebergScanExec>() {
            Node::Scan {
                summary: scan.summary().clone(),
            }
        } else if let Some(p) = node.downcast_ref::<PositionalDeleteExec>() {
            // A task's plan holds its share of the data files: only their deletes travel.
            let deletes = match node.children().first().and_then(|c| parquet_scan(c)) {
                Some((config, _)) => deletes_of_files(config, p.deletes()),
                None => p.deletes().clone(),
            };
            Node::PositionalDelete {
                deletes,
                positions: p.has_positions(),
                join_threshold: p.join_threshold(),
                live: p.has_live_column(),
            }
        } else if let Some(w) = node.downcast_ref::<DataFileWriterExec>() {
            let table = w.table();
            Node::DataFileWriter {
                table: table.identifier().clone(),
                metadata_location: table.metadata_location().map(str::to_string),
                metadata: Box::new(table.metadata().clone()),
                sorted: w.is_sorted(),
                row_lineage: w.writes_row_lineage(),
                target_file_size: w.target_file_size(),
                single_writer: w.is_single_writer(),
                local_sort: w.is_local_sort(),
                tally: w.has_tally(),
                plain_columns: w.plain_columns().to_vec(),
            }
        } else if let Some(c) = node.downcast_ref::<ChangeRowsExec>() {
            let assigned = |a: &[(usize, Arc<dyn PhysicalExpr>)]| -> Result<Vec<_>> {
                a.iter()
                    .map(|(i, e)| Ok((*i, expr_bytes(e, self)?)))
                    .collect()
            };
            Node::ChangeRows {
                condition: expr_bytes(c.condition(), self)?,
                change: match c.change() {
                    RowChange::Delete => Change::Delete,
                    RowChange::Update(a) => Change::Update(assigned(a)?),
                    RowChange::UpdateSelected(a) => Change::UpdateSelected(assigned(a)?),
                },
            }
        } else if let Some(m) = node.downcast_ref::<MergeRowsExec>() {
            if !matches!(m.mode(), RowsMode::NewRows) {
                return not_impl_err!("iceberg-exec's plan codec encodes MERGE's first pass only");
            }
            let clauses = m
                .clauses()
                .iter()
                .map(|c| {
                    Ok(EncodedClause {
                        kind: c.kind,
                        predicate: c
                            .predicate
                            .as_ref()
                            .map(|e| expr_bytes(e, self))
                            .transpose()?,
                        action: match &c.action {
                            ClauseAction::Update(a) => EncodedAction::Update(
                                a.iter()
                                    .map(|(i, e)| Ok((*i, expr_bytes(e, self)?)))
                                    .collect::<Result<_>>()?,
                            ),
                            ClauseAction::Delete => EncodedAction::Delete,
                            ClauseAction::Insert(v) => EncodedAction::Insert(
                                v.iter()
                                    .map(|e| e.as_ref().map(|e| expr_bytes(e, self)).transpose())
                                    .collect::<Result<_>>()?,
                            ),
                        },
                        text: c.text.clone(),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let layout = m.layout();
            let layout_schema =
                datafusion_proto::protobuf::DfSchema::try_from(layout.schema.as_ref())?;
            let table_schema =
                datafusion_proto::protobuf::Schema::try_from(m.table_schema().as_ref())?;
            Node::MergeRows {
                clauses,
                source_columns: layout.source_columns,
                target_columns: layout.target_columns.clone(),
                layout_schema: layout_schema.encode_to_vec(),
                table_schema: table_schema.encode_to_vec(),
            }
        } else if let Some(k) = node.downcast_ref::<KeyFilterExec>() {
            let (words, dense_min) = k.filter().parts();
            Node::KeyFilter {
                keys: k
                    .keys()
                    .iter()
                    .map(|e| expr_bytes(e, self))
                    .collect::<Result<_>>()?,
                words: words.to_vec(),
                dense_min,
            }
        } else if let Some(d) = node.downcast_ref::<DropPositionsExec>() {
            // A task's plan reads its share of the rewritten files: only their positions
            // travel (matched by file name; positions are keyed by recorded path, the scan by
            // object location, and a location map may change the prefix, never the name).
            let read = scanned_file_names(&node);
            let mut positions = d
                .positions()
                .iter()
                .filter(|(file, _)| read.as_ref().is_none_or(|r| r.contains(file_name(file))))
                .map(|(file, bitmap)| Ok((file.clone(), bitmap_hex(bitmap)?)))
                .collect::<Result<Vec<_>>>()?;
            positions.sort();
            Node::DropPositions {
                positions,
                schema: datafusion_proto::protobuf::Schema::try_from(d.schema_out().as_ref())?
                    .encode_to_vec(),
            }
        } else if let Some(w) = node.downcast_ref::<PositionDeleteWriterExec>() {
            let table = w.table();
            let mut whole: Vec<String> = w.whole().iter().cloned().collect();
            whole.sort();
            Node::PositionDeleteWriter {
                table: table.identifier().clone(),
                metadata_location: table.metadata_location().map(str::to_string),
                metadata: Box::new(table.metadata().clone()),
                locations: w.locations().clone(),
                files: EncodedFiles::of(w.files(), table.metadata())?,
                whole,
            }
        } else if let Some(e) = node.downcast_ref::<EqualityDeleteExec>() {
            let columns = e.columns();
            Node::EqualityDelete {
                keys: columns.keys.clone(),
                gate: columns.gate,
                gates: columns.gates.to_vec(),
                equality_ids: e.equality_ids().to_vec(),
                fanout: e.fanout(),
                projection: e.projection().map(<[usize]>::to_vec),
                live: columns.live,
            }
        } else {
            return not_impl_err!("iceberg-exec's plan codec does not encode {}", node.name());
        };
        let encoded = Encoded {
            node: encoded,
            scans: node.children().into_iter().map(ScanParts::of).collect(),
        };
        buf.extend_from_slice(MAGIC);
        serde_json::to_writer(&mut *buf, &encoded)
            .map_err(|e| DataFusionError::Internal(format!("encoding {}: {e}", node.name())))
    }
}

/// The [`LogicalExtensionCodec`] of [`IcebergTableProvider`]: for hosts that ship logical plans
/// (a client to a scheduler). A provider travels as its table's identifier, metadata location
/// and metadata (the snapshot the client planned against, so both sides read the same one) and
/// its pin (snapshot, schema, row lineage, writable). The receiving side opens files through
/// its own object stores, and commits writes through `store`, its own connection to the
/// table's catalog (without one, a decoded provider is read-only). No storage secrets travel.
///
/// Other providers and extension nodes are refused with `not_impl_err!`, so the codec composes
/// with others.
#[derive(Debug, Default, Clone)]
pub struct IcebergLogicalCodec {
    store: Option<Arc<dyn crate::MetadataStore>>,
}

impl IcebergLogicalCodec {
    /// A codec whose decoded providers commit through `store` (the receiving side's catalog).
    pub fn with_store(store: Arc<dyn crate::MetadataStore>) -> Self {
        Self { store: Some(store) }
    }
}

/// A provider, as its bytes hold it.
#[derive(Serialize, Deserialize)]
struct EncodedProvider {
    table: iceberg::TableIdent,
    metadata_location: Option<String>,
    metadata: Box<iceberg::spec::TableMetadata>,
    pin: crate::table::ProviderPin,
}

impl LogicalExtensionCodec for IcebergLogicalCodec {
    fn try_decode(
        &self,
        _buf: &[u8],
        _inputs: &[LogicalPlan],
        _ctx: &TaskContext,
    ) -> Result<Extension> {
        not_impl_err!("iceberg-exec's logical codec has no extension nodes")
    }

    fn try_encode(&self, node: &Extension, _buf: &mut Vec<u8>) -> Result<()> {
        not_impl_err!(
            "iceberg-exec's logical codec does not encode {}",
            node.node.name()
        )
    }

    fn try_decode_table_provider(
        &self,
        buf: &[u8],
        table_ref: &TableReference,
        _schema: arrow::datatypes::SchemaRef,
        ctx: &TaskContext,
    ) -> Result<Arc<dyn TableProvider>> {
        let Some(json) = own_json(buf) else {
            return not_impl_err!("not a table of iceberg-exec's plan codec");
        };
        let encoded: EncodedProvider = serde_json::from_slice(json).map_err(|e| {
            DataFusionError::Internal(format!("undecodable Iceberg table '{table_ref}': {e}"))
        })?;
        let stores = match &self.store {
            Some(store) => Arc::clone(store.object_stores()),
            None => task_stores(ctx),
        };
        let table = decoded_table(
            encoded.table,
            encoded.metadata_location,
            *encoded.metadata,
            &stores,
        )?;
        let store = match encoded.pin.writable {
            true => self.store.clone(),
            false => None,
        };
        let provider = IcebergTableProvider::try_new(table, store)?
            .with_object_stores(stores)
            .with_pin(&encoded.pin)?;
        Ok(Arc::new(provider))
    }

    fn try_encode_table_provider(
        &self,
        table_ref: &TableReference,
        node: Arc<dyn TableProvider>,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        let Some(provider) = node.downcast_ref::<IcebergTableProvider>() else {
            return not_impl_err!(
                "iceberg-exec's logical codec does not encode table '{table_ref}'"
            );
        };
        let table = provider.table();
        let encoded = EncodedProvider {
            table: table.identifier().clone(),
            metadata_location: table.metadata_location().map(str::to_string),
            metadata: Box::new(table.metadata().clone()),
            pin: provider.pin(),
        };
        buf.extend_from_slice(MAGIC);
        serde_json::to_writer(&mut *buf, &encoded).map_err(|e| {
            DataFusionError::Internal(format!("encoding Iceberg table '{table_ref}': {e}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::listing::PartitionedFile;
    use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
    use datafusion::execution::object_store::ObjectStoreUrl;
    use datafusion::prelude::SessionContext;
    use datafusion_proto::bytes::{
        physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec,
    };
    use roaring::RoaringTreemap;

    use super::*;

    /// A sort-merge join chosen for a memory limit travels with its inputs' view compaction.
    #[test]
    fn compacted_join_inputs_travel_to_workers() {
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8View, true)]));
        let input: Arc<dyn ExecutionPlan> =
            Arc::new(datafusion::physical_plan::empty::EmptyExec::new(schema));
        let node: Arc<dyn ExecutionPlan> = Arc::new(CompactViewsExec::new(input));
        let codec = IcebergPhysicalCodec;
        let bytes = physical_plan_to_bytes_with_extension_codec(node, &codec).unwrap();
        let ctx = SessionContext::new();
        let decoded =
            physical_plan_from_bytes_with_extension_codec(&bytes, &ctx.task_ctx(), &codec).unwrap();
        assert!(decoded.downcast_ref::<CompactViewsExec>().is_some());
        assert_eq!(decoded.children()[0].name(), "EmptyExec");
    }

    /// A task's rewrite carries the changed positions of its own files only, and they decode
    /// to the same bitmaps.
    #[test]
    fn a_rewrite_task_carries_the_positions_of_its_own_files() {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let groups = vec![FileGroup::new(vec![
            PartitionedFile::new("wh/t/data/a.parquet", 1000),
            PartitionedFile::new("wh/t/data/b.parquet", 1000),
        ])];
        let config = FileScanConfigBuilder::new(
            ObjectStoreUrl::local_filesystem(),
            Arc::new(ParquetSource::new(Arc::clone(&schema))),
        )
        .with_file_groups(groups)
        .build();
        let scan: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(config);
        let bitmap = |p: &[u64]| p.iter().copied().collect::<RoaringTreemap>();
        let positions: HashMap<String, RoaringTreemap> = [
            ("file:///wh/t/data/a.parquet", bitmap(&[1, 5, 1 << 33])),
            ("file:///wh/t/data/b.parquet", bitmap(&[0])),
            ("file:///wh/t/data/c.parquet", bitmap(&[7])),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let node: Arc<dyn ExecutionPlan> = Arc::new(DropPositionsExec::new(
            scan,
            Arc::new(positions.clone()),
            Arc::clone(&schema),
            Arc::new(DropCounts::default()),
        ));
        let codec = IcebergPhysicalCodec;
        let bytes = physical_plan_to_bytes_with_extension_codec(node, &codec).unwrap();
        let ctx = SessionContext::new();
        let decoded =
            physical_plan_from_bytes_with_extension_codec(&bytes, &ctx.task_ctx(), &codec).unwrap();
        let carried = decoded
            .downcast_ref::<DropPositionsExec>()
            .unwrap()
            .positions();
        let mut files: Vec<&String> = carried.keys().collect();
        files.sort();
        assert_eq!(
            files,
            ["file:///wh/t/data/a.parquet", "file:///wh/t/data/b.parquet"]
        );
        for (file, bitmap) in carried.iter() {
            assert_eq!(bitmap, &positions[file]);
        }
    }
}
