//! The wire form of this crate's nodes (one JSON document after a magic prefix) and what
//! encoding and decoding share.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::from_proto::parse_physical_expr;
use datafusion_proto::physical_plan::to_proto::serialize_physical_expr;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use datafusion_proto::protobuf::PhysicalExprNode;
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::distributed::planned::EncodedFiles;
use crate::physical_plan::equality_delete::FileGate;
use crate::physical_plan::merge::clauses::ClauseKind;
use crate::physical_plan::positional_delete::FileDeletes;
use crate::physical_plan::scan::ScanSummary;

/// What starts every node this codec writes (and tells its bytes from another codec's).
pub(super) const MAGIC: &[u8] = b"ICEBERG-EXEC/1\n";

/// The JSON of a node or table this crate's codecs wrote (`None`: another codec's bytes).
pub(crate) fn own_json(buf: &[u8]) -> Option<&[u8]> {
    buf.strip_prefix(MAGIC)
}

#[derive(Serialize, Deserialize)]
pub(super) enum Node {
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
pub(super) struct EncodedClause {
    pub kind: ClauseKind,
    pub predicate: Option<Vec<u8>>,
    pub action: EncodedAction,
    pub text: String,
}

#[derive(Serialize, Deserialize)]
pub(super) enum EncodedAction {
    Update(Vec<(usize, Vec<u8>)>),
    Delete,
    Insert(Vec<Option<Vec<u8>>>),
}

/// A [`RowChange`], its expressions as datafusion-proto messages.
#[derive(Serialize, Deserialize)]
pub(super) enum Change {
    Delete,
    Update(Vec<(usize, Vec<u8>)>),
    UpdateSelected(Vec<(usize, Vec<u8>)>),
}

/// `expr` as the bytes of its datafusion-proto message.
pub(super) fn expr_bytes(
    expr: &Arc<dyn PhysicalExpr>,
    codec: &dyn PhysicalExtensionCodec,
) -> Result<Vec<u8>> {
    Ok(serialize_physical_expr(expr, codec)?.encode_to_vec())
}

/// The expression `bytes` hold, over `schema`.
pub(super) fn expr_of(
    bytes: &[u8],
    schema: &arrow::datatypes::Schema,
    ctx: &TaskContext,
    codec: &dyn PhysicalExtensionCodec,
) -> Result<Arc<dyn PhysicalExpr>> {
    let node = PhysicalExprNode::decode(bytes)
        .map_err(|e| DataFusionError::Internal(format!("undecodable expression: {e}")))?;
    parse_physical_expr(&node, ctx, schema, codec)
}

/// The object stores of the runtime a plan is decoded in (no storage secrets travel in a
/// plan: the receiving side reads and writes through the stores it has).
pub(super) fn task_stores(ctx: &TaskContext) -> Arc<crate::storage::ObjectStores> {
    crate::storage::ObjectStores::new(
        Arc::clone(&ctx.runtime_env().object_store_registry),
        crate::storage::StorageOptions::default(),
    )
}

/// A decoded table, with file I/O over `stores`.
pub(super) fn decoded_table(
    ident: iceberg::TableIdent,
    metadata_location: Option<String>,
    metadata: iceberg::spec::TableMetadata,
    stores: &Arc<crate::storage::ObjectStores>,
) -> Result<iceberg::table::Table> {
    let file_io = crate::storage::table_file_io(&crate::LocationMap::default(), stores);
    let location = metadata_location.unwrap_or_default();
    crate::catalog::table_handle(ident, location, metadata, file_io)
}

/// The children of a node being decoded, and what decoding needs.
pub(super) struct Decoding<'a> {
    pub inputs: Vec<Arc<dyn ExecutionPlan>>,
    pub ctx: &'a TaskContext,
    pub codec: &'a dyn PhysicalExtensionCodec,
    pub proto_converter: &'a dyn PhysicalProtoConverterExtension,
}

/// The one child of a decoded node.
pub(super) fn one_input(
    inputs: &[Arc<dyn ExecutionPlan>],
    node: &str,
) -> Result<Arc<dyn ExecutionPlan>> {
    match inputs {
        [input] => Ok(Arc::clone(input)),
        _ => Err(DataFusionError::Internal(format!(
            "{node} has one child, decoded with {}",
            inputs.len()
        ))),
    }
}

/// The error of a node handed to another family's decoder.
pub(super) fn misrouted() -> DataFusionError {
    DataFusionError::Internal("an iceberg-exec plan node reached the wrong decoder".into())
}
