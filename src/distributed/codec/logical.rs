//! The logical codec: table providers for hosts that ship logical plans.

use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::common::not_impl_err;
use datafusion::common::TableReference;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Extension, LogicalPlan};
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use serde::{Deserialize, Serialize};

use crate::IcebergTableProvider;

use super::wire::{decoded_table, own_json, task_stores, MAGIC};

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
