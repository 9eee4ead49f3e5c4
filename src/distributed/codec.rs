//! The plan codec of this crate's nodes, for plans that cross a process boundary.
//!
//! ```text
//!   IcebergScanExec ──► summary                 ┐
//!   PositionalDeleteExec ──► deletes per file   ├ JSON after a magic prefix, plus, for every
//!     (of the files its scan reads: a task's)   │
//!   EqualityDeleteExec ──► key/gate columns     │ direct child that is a parquet scan, the
//!   DataFileWriterExec ──► table metadata       ┘
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

use datafusion::common::not_impl_err;
use datafusion::datasource::physical_plan::{
    FileScanConfig, FileScanConfigBuilder, FileSource, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use serde::{Deserialize, Serialize};

use crate::physical_plan::equality_delete::{EqualityDeleteColumns, EqualityDeleteExec, FileGate};
use crate::physical_plan::parquet_files::with_recorded_size_reader_indexed;
use crate::physical_plan::positional_delete::{FileDeletes, PositionalDeleteExec};
use crate::physical_plan::scan::{IcebergScanExec, ScanSummary};
use crate::physical_plan::write::{sort_requirement, DataFileWriterExec, WrittenFiles};
use crate::scan::FieldIdAdapterFactory;

/// What starts every node this codec writes (and tells its bytes from another codec's).
const MAGIC: &[u8] = b"ICEBERG-EXEC/1\n";

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
    PositionalDelete {
        deletes: HashMap<String, FileDeletes>,
        positions: bool,
        join_threshold: u64,
    },
    DataFileWriter {
        table: iceberg::TableIdent,
        metadata_location: Option<String>,
        metadata: Box<iceberg::spec::TableMetadata>,
        sorted: bool,
        row_lineage: bool,
        target_file_size: Option<usize>,
        single_writer: bool,
    },
    EqualityDelete {
        keys: Vec<usize>,
        gate: usize,
        gates: Vec<FileGate>,
        equality_ids: Vec<i32>,
        fanout: usize,
        projection: Option<Vec<usize>>,
    },
}

/// What DataFusion's encoding of a parquet scan leaves out.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct ScanParts {
    /// The field-id adapter's schema and table properties.
    adapter: Option<(iceberg::spec::Schema, HashMap<String, String>)>,
    /// `Some(page_index)` when footers are read through the recorded-size reader.
    recorded_size_reader: Option<bool>,
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

/// The table a decoded writer writes to, with file I/O over the worker's object stores (no
/// storage secrets travel in a plan: a worker reads and writes through the stores its own
/// runtime has).
fn worker_table(
    ident: iceberg::TableIdent,
    metadata_location: Option<String>,
    metadata: iceberg::spec::TableMetadata,
    ctx: &TaskContext,
) -> Result<iceberg::table::Table> {
    let stores = crate::storage::ObjectStores::new(
        Arc::clone(&ctx.runtime_env().object_store_registry),
        crate::storage::StorageOptions::default(),
    );
    let file_io = crate::storage::table_file_io(&crate::LocationMap::default(), &stores);
    let location = metadata_location.unwrap_or_default();
    crate::catalog::table_handle(ident, location, metadata, file_io)
}

impl PhysicalExtensionCodec for IcebergPhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(json) = buf.strip_prefix(MAGIC) else {
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
            } => {
                let input = one("DataFileWriterExec")?;
                let table = worker_table(table, metadata_location, *metadata, ctx)?;
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
                Arc::new(node)
            }
            Node::Scan { summary } => {
                Arc::new(IcebergScanExec::new(one("IcebergScanExec")?, summary))
            }
            Node::PositionalDelete {
                deletes,
                positions,
                join_threshold,
            } => {
                let node = PositionalDeleteExec::try_new(one("PositionalDeleteExec")?, deletes)?
                    .with_join_threshold(join_threshold);
                Arc::new(match positions {
                    true => node.with_positions()?,
                    false => node,
                })
            }
            Node::EqualityDelete {
                keys,
                gate,
                gates,
                equality_ids,
                fanout,
                projection,
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
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let encoded = if let Some(scan) = node.downcast_ref::<IcebergScanExec>() {
            Node::Scan {
                summary: scan.summary().clone(),
            }
        } else if let Some(p) = node.downcast_ref::<PositionalDeleteExec>() {
            // A task's plan holds its share of the data files: only their deletes travel.
            let deletes = match node.children().first().and_then(|c| parquet_scan(c)) {
                Some((config, _)) => {
                    let files: std::collections::HashSet<&str> = config
                        .file_groups
                        .iter()
                        .flat_map(|g| g.iter())
                        .map(|f| f.object_meta.location.as_ref())
                        .collect();
                    p.deletes()
                        .iter()
                        .filter(|(location, _)| files.contains(location.as_str()))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                }
                None => p.deletes().clone(),
            };
            Node::PositionalDelete {
                deletes,
                positions: p.has_positions(),
                join_threshold: p.join_threshold(),
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
