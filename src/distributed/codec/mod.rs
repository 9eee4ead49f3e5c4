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
//!
//! ```text
//!  wire.rs     the wire form (Encoded, Node) and the helpers both directions share
//!  scan.rs     scans and delete joins; the parts of a parquet scan DataFusion's encoding drops
//!  write.rs    writers and ChangeRowsExec
//!  merge.rs    MERGE's nodes
//!  logical.rs  the logical codec (table providers)
//! ```

mod logical;
mod merge;
mod scan;
mod wire;
mod write;

use std::sync::Arc;

use datafusion::common::not_impl_err;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use serde::{Deserialize, Serialize};

pub use logical::IcebergLogicalCodec;
use scan::ScanParts;
pub(crate) use wire::own_json;
use wire::{Decoding, Node, MAGIC};

/// One node, as its bytes hold it.
#[derive(Serialize, Deserialize)]
struct Encoded {
    node: Node,
    /// For each child: the parts of its parquet scan to put back (`None`: not a parquet scan).
    scans: Vec<Option<ScanParts>>,
}

/// The [`PhysicalExtensionCodec`] of this crate's execution plan nodes.
#[derive(Debug, Default, Clone)]
pub struct IcebergPhysicalCodec;

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
        let d = Decoding {
            inputs,
            ctx,
            codec: self,
            proto_converter,
        };
        match encoded.node {
            node @ (Node::Scan { .. }
            | Node::CompactViews
            | Node::OrcScan { .. }
            | Node::PositionalDelete { .. }
            | Node::EqualityDelete { .. }) => scan::decode(node, d),
            node @ (Node::DataFileWriter { .. }
            | Node::ChangeRows { .. }
            | Node::PositionDeleteWriter { .. }) => write::decode(node, d),
            node => merge::decode(node, d),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let encoded = if let Some(n) = scan::encode(&node, self, proto_converter)? {
            n
        } else if let Some(n) = write::encode(&node, self, proto_converter)? {
            n
        } else if let Some(n) = merge::encode(&node, self, proto_converter)? {
            n
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::listing::PartitionedFile;
    use datafusion::datasource::physical_plan::ParquetSource;
    use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
    use datafusion::datasource::source::DataSourceExec;
    use datafusion::execution::object_store::ObjectStoreUrl;
    use datafusion::prelude::SessionContext;
    use datafusion_proto::bytes::{
        physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec,
    };
    use roaring::RoaringTreemap;

    use super::*;
    use crate::physical_plan::join_choice::CompactViewsExec;
    use crate::physical_plan::merge::positions::{DropCounts, DropPositionsExec};

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
