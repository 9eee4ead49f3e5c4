//! The codec of the write family: `DataFileWriterExec`, `ChangeRowsExec`,
//! `PositionDeleteWriterExec`.

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

use crate::distributed::planned::EncodedFiles;
use crate::physical_plan::change_rows::{ChangeCounts, ChangeRowsExec, RowChange};
use crate::physical_plan::merge::positions::DropPositionsExec;
use crate::physical_plan::merge::rows::MergeRowsExec;
use crate::physical_plan::write::PositionDeleteWriterExec;
use crate::physical_plan::write::{
    sort_requirement, DataFileWriterExec, WriterTally, WrittenFiles,
};

use super::wire::*;

/// What a decoded writer reports: the counts of the `ChangeRowsExec`, or the positions of the
/// `MergeRowsExec`, below it in the same process, found through single-child nodes (the sort, a
/// projection).
pub(super) fn tally_below(plan: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn WriterTally>> {
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

/// Decodes a node of this family.
pub(super) fn decode(node: Node, d: Decoding<'_>) -> Result<Arc<dyn ExecutionPlan>> {
    let Decoding {
        inputs, ctx, codec, ..
    } = d;
    let one = |name: &str| one_input(&inputs, name);
    Ok(match node {
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
            let condition = expr_of(&condition, &schema, ctx, codec)?;
            let assigned = |a: Vec<(usize, Vec<u8>)>| -> Result<Vec<_>> {
                a.into_iter()
                    .map(|(i, e)| Ok((i, expr_of(&e, &schema, ctx, codec)?)))
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
        _ => return Err(misrouted()),
    })
}

/// Encodes `node` if it is of this family.
pub(super) fn encode(
    node: &Arc<dyn ExecutionPlan>,
    codec: &dyn PhysicalExtensionCodec,
    _proto_converter: &dyn PhysicalProtoConverterExtension,
) -> Result<Option<Node>> {
    let encoded = if let Some(w) = node.downcast_ref::<DataFileWriterExec>() {
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
                .map(|(i, e)| Ok((*i, expr_bytes(e, codec)?)))
                .collect()
        };
        Node::ChangeRows {
            condition: expr_bytes(c.condition(), codec)?,
            change: match c.change() {
                RowChange::Delete => Change::Delete,
                RowChange::Update(a) => Change::Update(assigned(a)?),
                RowChange::UpdateSelected(a) => Change::UpdateSelected(assigned(a)?),
            },
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
    } else {
        return Ok(None);
    };
    Ok(Some(encoded))
}
