//! The tables of one statement, loaded together before DataFusion plans it.
//!
//! DataFusion's SQL planner resolves a statement's tables one after another: for each, the
//! catalog provider's `schema` (a namespace lookup) and then the schema's `table` (the catalog's
//! row and the metadata file). A TPC-H query of five tables waits for ten catalog round trips
//! in a row before planning starts. [`IcebergSession::sql`](crate::IcebergSession::sql) instead
//! loads every table the statement names in this session's Iceberg catalog at once, and plans
//! the statement within a scope where the providers answer from those loads: a table loaded
//! answers `table` without another load (and the same snapshot each time the statement names
//! it), and its namespace exists without asking. A table that did not load (absent, or a load
//! that failed) is looked up the ordinary way, which reports what is wrong.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use datafusion::common::TableReference;
use datafusion::execution::context::SessionState;
use datafusion::sql::parser::Statement;
use iceberg::table::Table;
use iceberg::{NamespaceIdent, TableIdent};

use super::IcebergCatalog;

tokio::task_local! {
    static PREFETCHED: Prefetched;
}

/// Tables loaded for one statement, by catalog (its address) and identifier.
#[derive(Debug, Default)]
pub(crate) struct Prefetched {
    tables: HashMap<(usize, TableIdent), Table>,
}

/// The identity of a catalog within this process.
fn key_of(catalog: &Arc<dyn IcebergCatalog>) -> usize {
    Arc::as_ptr(catalog) as *const () as usize
}

impl Prefetched {
    /// Loads, at once, every table `statement` names (as `state` resolves names) in `catalog`,
    /// registered in `state` as `catalog_name`. Nothing when it names fewer than two: one load
    /// gains nothing from company.
    pub(crate) async fn load(
        state: &SessionState,
        catalog: &Arc<dyn IcebergCatalog>,
        catalog_name: &str,
        statement: &Statement,
    ) -> Self {
        let Ok(references) = state.resolve_table_references(statement) else {
            return Self::default();
        };
        let options = state.config_options();
        let (default_catalog, default_schema) = (
            options.catalog.default_catalog.as_str(),
            options.catalog.default_schema.as_str(),
        );
        let mut idents: Vec<TableIdent> = references
            .into_iter()
            .filter_map(|r: TableReference| {
                let r = r.resolve(default_catalog, default_schema);
                (r.catalog.as_ref() == catalog_name).then_some(r)
            })
            .filter_map(|r| {
                let namespace = NamespaceIdent::from_strs(r.schema.split('.')).ok()?;
                Some(TableIdent::new(namespace, r.table.to_string()))
            })
            .collect();
        idents
            .sort_by(|a, b| (a.namespace.as_ref(), &a.name).cmp(&(b.namespace.as_ref(), &b.name)));
        idents.dedup();
        if idents.len() < 2 {
            return Self::default();
        }
        let loads = idents.into_iter().map(|ident| async move {
            match catalog.try_load_table(&ident).await {
                Ok(Some(table)) => Some((ident, table)),
                // Absent, or failed: the ordinary lookup says so.
                _ => None,
            }
        });
        let key = key_of(catalog);
        let tables = futures::future::join_all(loads)
            .await
            .into_iter()
            .flatten()
            .map(|(ident, table)| ((key, ident), table))
            .collect();
        Self { tables }
    }

    /// Runs `f` (the planning of the statement) with these tables at hand.
    pub(crate) async fn scope<F: Future>(self, f: F) -> F::Output {
        PREFETCHED.scope(self, f).await
    }
}

/// The table `ident` of `catalog`, when the statement being planned loaded it beforehand.
pub(crate) fn table(catalog: &Arc<dyn IcebergCatalog>, ident: &TableIdent) -> Option<Table> {
    PREFETCHED
        .try_with(|p| p.tables.get(&(key_of(catalog), ident.clone())).cloned())
        .ok()
        .flatten()
}

/// Whether the statement being planned loaded a table of `namespace` of `catalog` (which then
/// exists).
pub(crate) fn holds_namespace(
    catalog: &Arc<dyn IcebergCatalog>,
    namespace: &NamespaceIdent,
) -> bool {
    let key = key_of(catalog);
    PREFETCHED
        .try_with(|p| {
            p.tables
                .keys()
                .any(|(k, ident)| *k == key && ident.namespace() == namespace)
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{IcebergSession, WarehouseConfig};

    async fn run(s: &IcebergSession, sql: &str) -> Vec<String> {
        let batches = s.sql(sql).await.unwrap().collect().await.unwrap();
        let text = arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        text.lines().map(str::to_string).collect()
    }

    #[tokio::test]
    async fn a_statement_loads_its_tables_of_this_catalog_together() {
        let dir = tempfile::tempdir().unwrap();
        let s = IcebergSession::open(WarehouseConfig::local(dir.path()))
            .await
            .unwrap();
        run(&s, "CREATE SCHEMA ns").await;
        run(&s, "CREATE SCHEMA IF NOT EXISTS default").await;
        for t in ["default.a", "ns.b", "ns.c"] {
            run(
                &s,
                &format!("CREATE EXTERNAL TABLE {t} (id INT) STORED AS ICEBERG LOCATION ''"),
            )
            .await;
            run(&s, &format!("INSERT INTO {t} VALUES (1), (2)")).await;
        }
        let catalog = s.catalog().clone();
        let loaded = |sql: &str| {
            let (s, catalog) = (s.clone(), Arc::clone(&catalog));
            let sql = sql.to_string();
            async move {
                let statement = crate::table::subquery::one_statement(&sql).unwrap();
                let p =
                    Prefetched::load(&s.context().state(), &catalog, catalog.name(), &statement)
                        .await;
                let mut names: Vec<String> = p
                    .tables
                    .keys()
                    .map(|(_, ident)| format!("{}.{}", ident.namespace().join("."), ident.name()))
                    .collect();
                names.sort();
                names
            }
        };
        // Default schema, qualified names, a CTE (not a table), a table named twice, and one
        // that does not exist (left to the ordinary lookup).
        assert_eq!(
            loaded(
                "WITH x AS (SELECT 1 AS id) SELECT * FROM a JOIN ns.b USING (id) \
                 JOIN ns.b b2 USING (id) JOIN x USING (id) JOIN ns.missing USING (id)"
            )
            .await,
            ["default.a", "ns.b"]
        );
        let name = catalog.name().to_string();
        assert_eq!(
            loaded(&format!(
                "SELECT * FROM {name}.ns.c, ns.b, datafusion.public.t"
            ))
            .await,
            ["ns.b", "ns.c"]
        );
        // One table: nothing to gain.
        assert!(loaded("SELECT * FROM ns.c").await.is_empty());
        // Planned within the scope, the statement reads the tables it loaded.
        assert_eq!(
            run(
                &s,
                "SELECT count(*) AS n FROM a JOIN ns.b USING (id) JOIN ns.c USING (id)"
            )
            .await,
            ["+---+", "| n |", "+---+", "| 2 |", "+---+"]
        );
        // The providers answer from the loads: a commit after them is not seen by the
        // statement planned in their scope.
        let statement = "SELECT count(*) AS n FROM a JOIN ns.b USING (id)";
        let p = Prefetched::load(
            &s.context().state(),
            &catalog,
            catalog.name(),
            &crate::table::subquery::one_statement(statement).unwrap(),
        )
        .await;
        run(&s, "INSERT INTO ns.b VALUES (1)").await;
        let planned = p.scope(s.context().sql(statement)).await.unwrap();
        let batches = planned.collect().await.unwrap();
        let n = batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap()
            .value(0);
        assert_eq!(n, 2);
        assert_eq!(
            run(&s, statement).await,
            ["+---+", "| n |", "+---+", "| 3 |", "+---+"]
        );
        // A missing table among loaded ones fails as it would alone.
        let err = s
            .sql("SELECT * FROM a JOIN ns.missing USING (id)")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ns.missing") && err.contains("not found"),
            "{err}"
        );
    }
}
