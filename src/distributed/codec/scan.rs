//! The codec of the scan family: `IcebergScanExec`, the ORC scan, `PositionalDeleteExec`,
//! `EqualityDeleteExec`, `CompactViewsExec`, and the parts of a parquet scan DataFusion's own
//! encoding drops.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::datasource::physical_plan::{
    FileScanConfig, FileScanConfigBuilder, FileSource, ParquetSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::from_proto::{
    parse_protobuf_file_scan_config, parse_table_schema_from_proto,
};
use datafusion_proto::physical_plan::to_proto::serialize_file_scan_config;
use datafusion_proto::physical_plan::PhysicalPlanDecodeContext;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::file_planning::FieldIdAdapterFactory;
use crate::physical_plan::equality_delete::{EqualityDeleteColumns, EqualityDeleteExec};
use crate::physical_plan::join_choice::CompactViewsExec;
use crate::physical_plan::orc::OrcSource;
use crate::physical_plan::parquet_files::with_recorded_size_reader_indexed;
use crate::physical_plan::positional_delete::{FileDeletes, PositionalDeleteExec};
use crate::physical_plan::scan::IcebergScanExec;

use super::wire::*;

/// The last segment of a path or URI.
pub(super) fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The names of the data files the parquet scan below `plan` reads, found through
/// single-child nodes and the first child of others (a delete join's probe side); `None`
/// when there is no such scan.
pub(super) fn scanned_file_names(
    plan: &Arc<dyn ExecutionPlan>,
) -> Option<std::collections::HashSet<String>> {
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
pub(super) struct ScanParts {
    /// The field-id adapter's schema and table properties.
    adapter: Option<(iceberg::spec::Schema, HashMap<String, String>)>,
    /// `Some(page_index)` when footers are read through the recorded-size reader.
    recorded_size_reader: Option<bool>,
}

/// The entries of `deletes` (by object store location) of the files `config` reads.
pub(super) fn deletes_of_files(
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
pub(super) fn parquet_scan(
    plan: &Arc<dyn ExecutionPlan>,
) -> Option<(&FileScanConfig, &ParquetSource)> {
    let config = crate::physical_plan::file_scan(plan)?;
    let source = config.file_source().downcast_ref::<ParquetSource>()?;
    Some((config, source))
}

impl ScanParts {
    /// The parts of `plan` to carry, if it is a parquet scan.
    pub(super) fn of(plan: &Arc<dyn ExecutionPlan>) -> Option<Self> {
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
    pub(super) fn restore(
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

/// Decodes a node of this family.
pub(super) fn decode(node: Node, d: Decoding<'_>) -> Result<Arc<dyn ExecutionPlan>> {
    let Decoding {
        inputs,
        ctx,
        codec,
        proto_converter,
    } = d;
    let one = |name: &str| one_input(&inputs, name);
    Ok(match node {
        Node::Scan { summary } => Arc::new(IcebergScanExec::new(one("IcebergScanExec")?, summary)),
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
                &PhysicalPlanDecodeContext::new(ctx, codec),
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
            let node = EqualityDeleteExec::try_new(input, build, columns, equality_ids, fanout)?;
            Arc::new(match projection {
                Some(p) => node.with_projection(p)?,
                None => node,
            })
        }
        _ => return Err(misrouted()),
    })
}

/// Encodes `node` if it is of this family.
pub(super) fn encode(
    node: &Arc<dyn ExecutionPlan>,
    codec: &dyn PhysicalExtensionCodec,
    proto_converter: &dyn PhysicalProtoConverterExtension,
) -> Result<Option<Node>> {
    let orc = crate::physical_plan::file_scan(node)
        .and_then(|c| Some((c, c.file_source().downcast_ref::<OrcSource>()?)));
    let encoded = if let Some((config, source)) = orc {
        // A task's plan holds its share of the files: only their deletes travel.
        Node::OrcScan {
            config: serialize_file_scan_config(config, codec, proto_converter)?.encode_to_vec(),
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
        return Ok(None);
    };
    Ok(Some(encoded))
}
