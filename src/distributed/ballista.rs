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
//! Writes do not: Ballista runs every stage, the last one too, in executor tasks that it
//! retries, so a statement's commit could run twice. Plans that commit (`CommitExec`,
//! `DELETE`/`UPDATE`/`MERGE`) are refused with a clear error before anything is written; with
//! datafusion-distributed the commit stays on the coordinator.

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
use crate::MetadataStore;

/// `config` made a Ballista session's (client, scheduler and executors of a standalone
/// cluster take it from the session state), with this crate's codecs in front of Ballista's.
/// Tables decoded on the scheduler commit through `store` (none: read-only there; Ballista
/// refuses writes anyway, see the module docs).
pub fn ballista_config(
    config: SessionConfig,
    store: Option<Arc<dyn MetadataStore>>,
) -> SessionConfig {
    let logical = match store {
        Some(store) => IcebergLogicalCodec::with_store(store),
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
}

impl PhysicalExtensionCodec for BallistaIcebergPhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
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
        if super::committed::commits(&node) {
            return Err(DataFusionError::NotImplemented(format!(
                "writing to Iceberg tables is not supported on Ballista: {} would commit in a \
                 retried executor task (run writes on a datafusion-distributed coordinator or \
                 in one session)",
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
            true => self
                .iceberg
                .try_decode_table_provider(buf, table_ref, schema, ctx),
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
