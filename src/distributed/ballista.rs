//! Ballista as a second host of this crate's plans (feature `ballista`).
//!
//! ```text
//!  client (SessionContext::standalone_with_state / remote_with_state)
//!    └─ ships the logical plan ──► scheduler: decodes the tables (IcebergLogicalCodec), plans
//!                                  with the session's state, cuts stages at repartitions
//!                                  └─ every stage ──► executors (IcebergPhysicalCodec)
//! ```
//!
//! Ballista's own codecs handle its shuffle nodes and file formats; the codecs here put this
//! crate's in front of them ([`ballista_config`]). Reads run as under datafusion-distributed.
//!
//! Ballista runs every stage, the last one too, in executor tasks that it retries, so a
//! statement's commit may run twice. `INSERT` commits there all the same: tables decoded on the
//! scheduler plan it with a statement id ([`IcebergTableProvider::with_idempotent_commits`]),
//! the executor's `CommitExec` commits through the executor's catalog connection, and a commit
//! that finds its statement's snapshot commits nothing more. `DELETE`/`UPDATE`/`MERGE` (and a
//! commit without a statement id) are refused with a clear error before anything is written.
//!
//! [`IcebergTableProvider::with_idempotent_commits`]: crate::IcebergTableProvider::with_idempotent_commits

use std::sync::Arc;

use ballista::extension::SessionConfigExt;
use ballista_core::serde::{BallistaLogicalExtensionCodec, BallistaPhysicalExtensionCodec};
use datafusion::catalog::TableProvider;
use datafusion::common::TableReference;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{AggregateUDF, Extension, LogicalPlan, ScalarUDF, WindowUDF};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

use super::codec::{own_json, IcebergLogicalCodec, IcebergPhysicalCodec};
use crate::physical_plan::commit::CommitExec;
use crate::physical_plan::write::WrittenFiles;
use crate::MetadataStore;

/// `config` made a Ballista session's (client, scheduler and executors of a standalone
/// cluster take it from the session state), with this crate's codecs in front of Ballista's.
/// Tables decoded on the scheduler, and `INSERT` commits decoded on executors, go through
/// `store` (none: read-only; see the module docs for what writes are supported).
pub fn ballista_config(
    config: SessionConfig,
    store: Option<Arc<dyn MetadataStore>>,
) -> SessionConfig {
    let logical = match &store {
        Some(store) => IcebergLogicalCodec::with_store(Arc::clone(store)),
        None => IcebergLogicalCodec::default(),
    };
    config
        .upgrade_for_ballista()
        .with_ballista_logical_extension_codec(Arc::new(BallistaIcebergLogicalCodec {
            iceberg: logical,
            ballista: BallistaLogicalExtensionCodec::default(),
        }))
        .with_ballista_physical_extension_codec(Arc::new(BallistaIcebergPhysicalCodec {
            iceberg: IcebergPhysicalCodec,
            ballista: BallistaPhysicalExtensionCodec::default(),
            store,
        }))
}

/// The function (UDF, UDAF, UDWF) methods of a codec: Ballista's codec handles them.
macro_rules! ballista_functions {
    () => {
        fn try_decode_udf(&self, name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
            self.ballista.try_decode_udf(name, buf)
        }

        fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> Result<()> {
            self.ballista.try_encode_udf(node, buf)
        }

        fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> Result<Arc<AggregateUDF>> {
            self.ballista.try_decode_udaf(name, buf)
        }

        fn try_encode_udaf(&self, node: &AggregateUDF, buf: &mut Vec<u8>) -> Result<()> {
            self.ballista.try_encode_udaf(node, buf)
        }

        fn try_decode_udwf(&self, name: &str, buf: &[u8]) -> Result<Arc<WindowUDF>> {
            self.ballista.try_decode_udwf(name, buf)
        }

        fn try_encode_udwf(&self, node: &WindowUDF, buf: &mut Vec<u8>) -> Result<()> {
            self.ballista.try_encode_udwf(node, buf)
        }
    };
}

/// Whether `result` says "this codec does not know the node" (`NotImplemented`).
fn unknown(result: &Result<()>) -> bool {
    matches!(result, Err(DataFusionError::NotImplemented(_)))
}

/// [`IcebergPhysicalCodec`] in front of Ballista's physical codec.
#[derive(Debug)]
pub struct BallistaIcebergPhysicalCodec {
    iceberg: IcebergPhysicalCodec,
    ballista: BallistaPhysicalExtensionCodec,
    /// The catalog connection `INSERT` commits go through on an executor.
    store: Option<Arc<dyn MetadataStore>>,
}

/// What starts an encoded idempotent `CommitExec` (Ballista only).
const COMMIT_MAGIC: &[u8] = b"ICEBERG-EXEC-COMMIT/1\n";

/// An idempotent `CommitExec`, as its bytes hold it.
#[derive(serde::Serialize, serde::Deserialize)]
struct EncodedCommit {
    table: iceberg::TableIdent,
    metadata_location: Option<String>,
    metadata: Box<iceberg::spec::TableMetadata>,
    statement_id: String,
    /// Where the snapshot goes (absent in commits encoded before branches: `main`).
    #[serde(default)]
    write_to: crate::commit::WriteTo,
}

impl BallistaIcebergPhysicalCodec {
    fn decode_commit(
        &self,
        json: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(store) = &self.store else {
            return Err(DataFusionError::Plan(
                "this Ballista executor has no catalog connection to commit an INSERT through \
                 (ballista_config without a store)"
                    .into(),
            ));
        };
        let encoded: EncodedCommit = serde_json::from_slice(json).map_err(|e| {
            DataFusionError::Internal(format!("undecodable iceberg-exec commit: {e}"))
        })?;
        let [input] = inputs else {
            return Err(DataFusionError::Internal(format!(
                "CommitExec has one child, decoded with {}",
                inputs.len()
            )));
        };
        let table = crate::catalog::table_handle(
            encoded.table,
            encoded.metadata_location.unwrap_or_default(),
            *encoded.metadata,
            store.file_io().clone(),
        )?;
        Ok(Arc::new(
            CommitExec::new(
                Arc::clone(input),
                Arc::clone(store),
                table,
                WrittenFiles::default(),
            )
            .with_statement_id(encoded.statement_id)
            .with_write_to(encoded.write_to),
        ))
    }
}

impl PhysicalExtensionCodec for BallistaIcebergPhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if let Some(json) = buf.strip_prefix(COMMIT_MAGIC) {
            return self.decode_commit(json, inputs);
        }
        match own_json(buf).is_some() {
            true => self.iceberg.try_decode(buf, inputs, ctx, proto_converter),
            false => self.ballista.try_decode(buf, inputs, ctx, proto_converter),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        // An INSERT's commit that may run again without committing again.
        if let Some(statement_id) = node
            .downcast_ref::<CommitExec>()
            .and_then(CommitExec::statement_id)
        {
            let Some(commit) = node.downcast_ref::<CommitExec>() else {
                return Err(DataFusionError::Internal("not a CommitExec".into()));
            };
            let table = commit.table();
            let encoded = EncodedCommit {
                table: table.identifier().clone(),
                metadata_location: table.metadata_location().map(str::to_string),
                metadata: Box::new(table.metadata().clone()),
                statement_id: statement_id.to_string(),
                write_to: commit.write_to().clone(),
            };
            buf.extend_from_slice(COMMIT_MAGIC);
            return serde_json::to_writer(&mut *buf, &encoded)
                .map_err(|e| DataFusionError::Internal(format!("encoding CommitExec: {e}")));
        }
        if super::committed::commits(&node) {
            return Err(DataFusionError::NotImplemented(format!(
                "{} is not supported on Ballista: only INSERT commits there (a retried \
                 executor task must not commit twice); run it on a datafusion-distributed \
                 coordinator or in one session",
                node.name()
            )));
        }
        let ours = self
            .iceberg
            .try_encode(Arc::clone(&node), buf, proto_converter);
        match unknown(&ours) {
            true => self.ballista.try_encode(node, buf, proto_converter),
            false => ours,
        }
    }

    ballista_functions!();
}

/// [`IcebergLogicalCodec`] in front of Ballista's logical codec.
#[derive(Debug)]
pub struct BallistaIcebergLogicalCodec {
    iceberg: IcebergLogicalCodec,
    ballista: BallistaLogicalExtensionCodec,
}

impl LogicalExtensionCodec for BallistaIcebergLogicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[LogicalPlan],
        ctx: &TaskContext,
    ) -> Result<Extension> {
        self.ballista.try_decode(buf, inputs, ctx)
    }

    fn try_encode(&self, node: &Extension, buf: &mut Vec<u8>) -> Result<()> {
        self.ballista.try_encode(node, buf)
    }

    fn try_decode_table_provider(
        &self,
        buf: &[u8],
        table_ref: &TableReference,
        schema: arrow::datatypes::SchemaRef,
        ctx: &TaskContext,
    ) -> Result<Arc<dyn TableProvider>> {
        match own_json(buf).is_some() {
            // Ballista may run the task that commits an INSERT again: it commits once.
            true => {
                let provider = self
                    .iceberg
                    .try_decode_table_provider(buf, table_ref, schema, ctx)?;
                match provider.downcast_ref::<crate::IcebergTableProvider>() {
                    Some(p) => Ok(Arc::new(p.clone().with_idempotent_commits())),
                    None => Ok(provider),
                }
            }
            false => self
                .ballista
                .try_decode_table_provider(buf, table_ref, schema, ctx),
        }
    }

    fn try_encode_table_provider(
        &self,
        table_ref: &TableReference,
        node: Arc<dyn TableProvider>,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        let ours = self
            .iceberg
            .try_encode_table_provider(table_ref, Arc::clone(&node), buf);
        match unknown(&ours) {
            true => self
                .ballista
                .try_encode_table_provider(table_ref, node, buf),
            false => ours,
        }
    }

    fn try_decode_file_format(
        &self,
        buf: &[u8],
        ctx: &TaskContext,
    ) -> Result<Arc<dyn datafusion::datasource::file_format::FileFormatFactory>> {
        self.ballista.try_decode_file_format(buf, ctx)
    }

    fn try_encode_file_format(
        &self,
        buf: &mut Vec<u8>,
        node: Arc<dyn datafusion::datasource::file_format::FileFormatFactory>,
    ) -> Result<()> {
        self.ballista.try_encode_file_format(buf, node)
    }

    ballista_functions!();
}
