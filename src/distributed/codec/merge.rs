//! The codec of MERGE's nodes: `MergeRowsExec` (its first pass), `KeyFilterExec`,
//! `DropPositionsExec`.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::common::not_impl_err;
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use prost::Message;

use crate::physical_plan::merge::clauses::{Clause, ClauseAction, RowLayout};
use crate::physical_plan::merge::key_filter::{KeyFilter, KeyFilterExec};
use crate::physical_plan::merge::positions::{
    bitmap_hex, bitmap_of_hex, DropCounts, DropPositionsExec, MergePositions,
};
use crate::physical_plan::merge::rows::{MergeRowsExec, RowsMode};

use super::scan::{file_name, scanned_file_names};
use super::wire::*;

/// Decodes a node of this family.
pub(super) fn decode(node: Node, d: Decoding<'_>) -> Result<Arc<dyn ExecutionPlan>> {
    let Decoding {
        inputs, ctx, codec, ..
    } = d;
    let one = |name: &str| one_input(&inputs, name);
    Ok(match node {
        Node::MergeRows {
            clauses,
            source_columns,
            target_columns,
            layout_schema,
            table_schema,
        } => {
            let input = one("MergeRowsExec")?;
            let schema = input.schema();
            let expr = |bytes: &[u8]| expr_of(bytes, &schema, ctx, codec);
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
                datafusion_proto::protobuf::Schema::decode(table_schema.as_slice()).map_err(bad)?;
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
                .map(|k| expr_of(k, &schema, ctx, codec))
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
            let schema =
                datafusion_proto::protobuf::Schema::decode(schema.as_slice()).map_err(|e| {
                    DataFusionError::Internal(format!("undecodable DropPositionsExec: {e}"))
                })?;
            Arc::new(DropPositionsExec::new(
                input,
                Arc::new(positions),
                Arc::new(arrow::datatypes::Schema::try_from(&schema)?),
                Arc::new(DropCounts::default()),
            ))
        }
        _ => return Err(misrouted()),
    })
}

/// Encodes `node` if it is of this family.
pub(super) fn encode(
    node: &Arc<dyn ExecutionPlan>,
    codec: &dyn PhysicalExtensionCodec,
    _proto_converter: &dyn PhysicalProtoConverterExtension,
) -> Result<Option<Node>> {
    let encoded = if let Some(m) = node.downcast_ref::<MergeRowsExec>() {
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
                        .map(|e| expr_bytes(e, codec))
                        .transpose()?,
                    action: match &c.action {
                        ClauseAction::Update(a) => EncodedAction::Update(
                            a.iter()
                                .map(|(i, e)| Ok((*i, expr_bytes(e, codec)?)))
                                .collect::<Result<_>>()?,
                        ),
                        ClauseAction::Delete => EncodedAction::Delete,
                        ClauseAction::Insert(v) => EncodedAction::Insert(
                            v.iter()
                                .map(|e| e.as_ref().map(|e| expr_bytes(e, codec)).transpose())
                                .collect::<Result<_>>()?,
                        ),
                    },
                    text: c.text.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let layout = m.layout();
        let layout_schema = datafusion_proto::protobuf::DfSchema::try_from(layout.schema.as_ref())?;
        let table_schema = datafusion_proto::protobuf::Schema::try_from(m.table_schema().as_ref())?;
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
                .map(|e| expr_bytes(e, codec))
                .collect::<Result<_>>()?,
            words: words.to_vec(),
            dense_min,
        }
    } else if let Some(d) = node.downcast_ref::<DropPositionsExec>() {
        // A task's plan reads its share of the rewritten files: only their positions
        // travel (matched by file name; positions are keyed by recorded path, the scan by
        // object location, and a location map may change the prefix, never the name).
        let read = scanned_file_names(node);
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
    } else {
        return Ok(None);
    };
    Ok(Some(encoded))
}
