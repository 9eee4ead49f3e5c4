//! The session's writes that DataFusion does not plan: Spark's `CREATE [OR REPLACE] TABLE`,
//! `INSERT` with Spark's `PARTITION` clause or Delta's `REPLACE WHERE`, and the overwrite
//! verbs of the Rust API.

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::prelude::DataFrame;

use super::IcebergSession;

impl IcebergSession {
    /// Spark's `CREATE TABLE ... USING iceberg PARTITIONED BY (..) TBLPROPERTIES (..) [AS query]`
    /// (see [`crate::table`]).
    pub(super) async fn create_table(
        &self,
        create: crate::table::create::CreateTable,
    ) -> Result<DataFrame> {
        let ident = self.own_table(&create.name, "CREATE TABLE")?;
        if ident.namespace().as_ref().join(".") == crate::catalog::DEFAULT_NAMESPACE {
            crate::catalog::ensure_namespace(&self.catalog, ident.namespace()).await?;
        }
        let exists = self.catalog.table_exists(&ident).await?;
        // A replacement keeps the table's format version unless it names one.
        let create = match exists && create.or_replace {
            true => {
                let table = self.catalog.load_table(&ident).await?;
                create.replacing(table.metadata().format_version())
            }
            false => create,
        };
        if exists && !create.or_replace {
            return match create.if_not_exists {
                true => self.ctx.read_empty(),
                false => Err(DataFusionError::Plan(format!(
                    "table '{ident}' already exists"
                ))),
            };
        }
        let schema = match (&create.query, create.columns.is_empty()) {
            (Some(_), false) => {
                return Err(DataFusionError::Plan(
                    "CREATE TABLE ... AS takes its columns from the query: leave out the column \
                     list"
                        .into(),
                ))
            }
            (Some(query), true) => {
                let df = self.ctx.sql(query).await?;
                let mut def =
                    crate::table::TableDefinition::new(Arc::new(df.schema().as_arrow().clone()));
                def.format_version = create.format_version()?;
                Some(def.iceberg_schema()?)
            }
            (None, true) => {
                return Err(DataFusionError::Plan(
                    "CREATE TABLE needs a column list or AS query".into(),
                ))
            }
            (None, false) => None,
        };
        if exists {
            // CREATE OR REPLACE: a new version of the same table.
            let store: Arc<dyn crate::MetadataStore> = self.catalog.clone();
            let rows =
                crate::table::replace::replace(&self.ctx, store, &ident, &create, schema).await?;
            return match rows {
                Some(n) => self
                    .ctx
                    .read_batch(crate::physical_plan::commit::count_batch(n)?),
                None => self.ctx.read_empty(),
            };
        }
        let creation = create.creation(ident.name(), schema)?;
        self.catalog
            .create_table(ident.namespace(), creation)
            .await?;
        let Some(query) = &create.query else {
            return self.ctx.read_empty();
        };
        let target = crate::table::overwrite::quoted(&datafusion::common::TableReference::full(
            self.catalog.name(),
            ident.namespace().as_ref().join("."),
            ident.name(),
        ));
        let inserted = match self.ctx.sql(&format!("INSERT INTO {target} {query}")).await {
            Ok(df) => df.collect().await,
            Err(e) => Err(e),
        };
        match inserted {
            Ok(batches) => self.ctx.read_batches(batches),
            Err(e) => {
                // The statement failed: the table it created goes again.
                if let Err(dropped) = self.catalog.drop_table(&ident).await {
                    log::warn!(
                        "dropping '{ident}' after its CREATE TABLE ... AS failed: {dropped}"
                    );
                }
                Err(e)
            }
        }
    }

    /// Replaces the rows of `table` that `filter` selects (`None`: every row) with the rows of
    /// `data`, in one snapshot: pyiceberg's `overwrite(df, overwrite_filter)`, and SQL's
    /// `INSERT INTO t REPLACE WHERE filter query`. Files whose every row matches go whole,
    /// files that match in part are rewritten without the matching rows (copy-on-write), and
    /// every row of `data` must match `filter` (else nothing changes). `data` gives the table's
    /// columns in order (cast to their types, as `INSERT` casts). Runs when the returned frame
    /// is collected, which answers `count`: the rows written.
    pub async fn overwrite(
        &self,
        table: &str,
        data: DataFrame,
        filter: Option<datafusion::logical_expr::Expr>,
    ) -> Result<DataFrame> {
        let filter = filter.unwrap_or_else(|| datafusion::logical_expr::lit(true));
        self.insert_overwrite(table, data, |p| p.with_overwrite_filter(filter))
            .await
    }

    /// Replaces the partitions of `table` that the rows of `data` fall into (of the table's
    /// current spec; an unpartitioned table is replaced whole) with those rows, in one
    /// snapshot: pyiceberg's `dynamic_partition_overwrite(df)`, Spark's dynamic
    /// `INSERT OVERWRITE`. As [`Self::overwrite`] otherwise.
    pub async fn dynamic_overwrite(&self, table: &str, data: DataFrame) -> Result<DataFrame> {
        self.insert_overwrite(
            table,
            data,
            crate::IcebergTableProvider::with_dynamic_overwrite,
        )
        .await
    }

    async fn insert_overwrite(
        &self,
        table: &str,
        data: DataFrame,
        scope: impl FnOnce(crate::IcebergTableProvider) -> crate::IcebergTableProvider,
    ) -> Result<DataFrame> {
        let reference = datafusion::common::TableReference::from(table);
        let provider = self.ctx.table_provider(reference.clone()).await?;
        let Some(provider) = provider.downcast_ref::<crate::IcebergTableProvider>() else {
            return Err(DataFusionError::Plan(format!(
                "overwrite writes Iceberg tables; '{reference}' is not one"
            )));
        };
        let schema = datafusion::catalog::TableProvider::schema(provider);
        let (state, plan) = data.into_parts();
        let input =
            crate::table::by_position(plan, &schema, &format!("overwrite of '{reference}'"))?;
        let target = datafusion::datasource::provider_as_source(Arc::new(scope(provider.clone())));
        let plan = datafusion::logical_expr::LogicalPlanBuilder::insert_into(
            input,
            reference,
            target,
            datafusion::logical_expr::dml::InsertOp::Overwrite,
        )?
        .build()?;
        Ok(DataFrame::new(state, plan))
    }

    /// An insert with Spark's `PARTITION (c = v)` clause or Delta's `REPLACE WHERE condition`
    /// (see [`crate::table::overwrite`]).
    pub(super) async fn filtered_insert(
        &self,
        insert: crate::table::overwrite::FilteredInsert,
    ) -> Result<DataFrame> {
        let reference = insert.table_reference();
        let provider = self.ctx.table_provider(reference.clone()).await?;
        let Some(provider) = provider.downcast_ref::<crate::IcebergTableProvider>() else {
            return Err(DataFusionError::Plan(format!(
                "INSERT ... PARTITION (..) and INSERT ... REPLACE WHERE write Iceberg tables; \
                 '{reference}' is not one"
            )));
        };
        let plan = insert.plan(&self.ctx.state(), provider).await?;
        self.ctx.execute_logical_plan(plan).await
    }
}
