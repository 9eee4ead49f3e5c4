//! Metadata columns in SQL: a statement that names `_file`, `_pos`, `_spec_id`, `_partition`,
//! `_row_id` or `_last_updated_sequence_number` reads each Iceberg table it scans through a
//! provider with those columns
//! ([`IcebergTableProvider::with_metadata_columns`](crate::IcebergTableProvider::with_metadata_columns)),
//! and its wildcards exclude them, so `SELECT *` stays the table's columns.
//!
//! ```text
//! SELECT *, _file FROM ns.t WHERE _pos < 10
//!   ⇒ SELECT * EXCLUDE (_file, _pos, _spec_id), _file
//!     FROM __iceberg_exec_statement.s.t<id> AS t WHERE _pos < 10
//! ```
//! where `__iceberg_exec_statement.s.t<id>` is the provider `ns.t` resolved to, with the
//! metadata columns, registered for this statement only.
//! A table with a column of a metadata column's name keeps its own column. DataFusion has no
//! hidden columns; this is the statement-level form of them (through
//! [`IcebergSession::sql`](crate::IcebergSession::sql) and the CLI).

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionContext;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{
    ExcludeSelectItem, Expr, Ident, JoinOperator, ObjectName, Query, Select, SelectItem,
    SelectItemQualifiedWildcardKind, SetExpr, Statement, TableAlias, TableFactor, Visit, VisitMut,
    Visitor, VisitorMut, WildcardAdditionalOptions,
};

use crate::ident::normalised;
use crate::physical_plan::scan::metadata::NAMES;
use crate::IcebergTableProvider;

/// Whether `statement` names a metadata column anywhere (the cheap test before any lookup).
pub(crate) fn names_metadata_column(statement: &DFStatement) -> bool {
    match statement {
        DFStatement::Statement(s) => Visit::visit(s.as_ref(), &mut FindName).is_break(),
        DFStatement::Explain(e) => names_metadata_column(&e.statement),
        _ => false,
    }
}

struct FindName;

fn is_metadata_name(i: &Ident) -> bool {
    NAMES.contains(&normalised(i).as_str())
}

impl Visitor for FindName {
    type Break = ();

    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        let hit = match e {
            Expr::Identifier(i) => is_metadata_name(i),
            // `_partition.region`, `t._file`
            Expr::CompoundIdentifier(parts) => parts.iter().any(is_metadata_name),
            _ => false,
        };
        if hit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// A statement rewritten to read metadata columns, and the statement-scoped table a `DELETE`
/// or `UPDATE` by a condition on them changes (deregistered when this is dropped: the plan
/// keeps its own reference).
pub(crate) struct Rewritten {
    /// The statement to run.
    pub sql: String,
    /// The statement-scoped tables: the target first when it is one.
    tables: Vec<StatementTable>,
}

impl Rewritten {
    /// `e` with the statement-scoped table named as the statement named it.
    pub(crate) fn named_as_written(&self, e: DataFusionError) -> DataFusionError {
        let mut text = e.to_string();
        let mut renamed = false;
        for table in &self.tables {
            let scoped = table.name.to_string();
            if text.contains(&scoped) {
                text = text.replace(&scoped, &table.written);
                renamed = true;
            }
        }
        match renamed {
            true => DataFusionError::Plan(text),
            false => e,
        }
    }
}

/// A table registered for one statement.
struct StatementTable {
    ctx: SessionContext,
    name: datafusion::common::TableReference,
    /// The name the statement gave it.
    written: String,
}

impl Drop for StatementTable {
    fn drop(&mut self) {
        if let Err(e) = self.ctx.deregister_table(self.name.clone()) {
            log::warn!("could not deregister {}: {e}", self.name);
        }
    }
}

/// The catalog statement-scoped tables live in.
const STATEMENT_CATALOG: &str = "__iceberg_exec_statement";

/// `statement` with the Iceberg tables it scans read with their metadata columns and its
/// wildcards excluding them, when it names a metadata column; `None` otherwise. A `DELETE` or
/// `UPDATE` whose condition names its target's metadata columns changes the target through a
/// provider that has them.
pub(crate) async fn rewrite(
    ctx: &SessionContext,
    statement: &DFStatement,
) -> Result<Option<Rewritten>> {
    if !names_metadata_column(statement) {
        return Ok(None);
    }
    let mut statement = statement.clone();
    let inner = match &mut statement {
        DFStatement::Statement(s) => s.as_mut(),
        DFStatement::Explain(e) => match e.statement.as_mut() {
            DFStatement::Statement(s) => s.as_mut(),
            _ => return Ok(None),
        },
        _ => return Ok(None),
    };
    let mut tables = vec![];
    if let Some(name) = dml_target(inner).filter(|_| references_metadata(inner)) {
        tables.extend(retarget(ctx, inner, &name).await?);
    }
    rewrite_statement(ctx, inner, &mut tables).await?;
    match tables.is_empty() {
        true => Ok(None),
        false => Ok(Some(Rewritten {
            sql: statement.to_string(),
            tables,
        })),
    }
}

/// Points the DELETE or UPDATE `s` at a statement-scoped provider of its target `name` that has
/// the metadata columns.
async fn retarget(
    ctx: &SessionContext,
    s: &mut Statement,
    name: &str,
) -> Result<Option<StatementTable>> {
    let refuse = |why: &str| {
        Err(DataFusionError::NotImplemented(format!(
            "metadata columns (_file, _pos, ...) in the condition of a statement that changes \
             '{name}' {why}"
        )))
    };
    let subqueries = match &*s {
        Statement::Delete(d) => d.selection.as_ref().is_some_and(has_subquery),
        Statement::Update(u) => {
            u.from.is_some()
                || u.selection.as_ref().is_some_and(has_subquery)
                || u.assignments.iter().any(|a| has_subquery(&a.value))
        }
        _ => return refuse("are supported in DELETE and UPDATE only"),
    };
    if subqueries {
        return refuse("cannot be combined with subqueries or UPDATE ... FROM yet");
    }
    let provider = ctx.table_provider(name).await?;
    let Some(iceberg) = provider.downcast_ref::<IcebergTableProvider>() else {
        return refuse("need an Iceberg table");
    };
    // A table with a column of a metadata name keeps its own (nothing to add).
    if iceberg
        .schema()
        .fields()
        .iter()
        .any(|f| NAMES.contains(&f.name().as_str()))
    {
        return Ok(None);
    }
    let provider = iceberg.clone().for_conditions_on_metadata_columns()?;
    let (registered, new_name) = register(ctx, Arc::new(provider), name)?;
    if let Some(TableFactor::Table { name: n, .. }) = target_factor(s) {
        *n = new_name;
    }
    Ok(Some(registered))
}

/// Registers `provider` for one statement (until the returned value is dropped); the name it
/// answers to there. `written` is the name the statement gave the table.
fn register(
    ctx: &SessionContext,
    provider: Arc<dyn datafusion::datasource::TableProvider>,
    written: &str,
) -> Result<(StatementTable, ObjectName)> {
    if ctx.catalog(STATEMENT_CATALOG).is_none() {
        let catalog = Arc::new(datafusion::catalog::MemoryCatalogProvider::new());
        datafusion::catalog::CatalogProvider::register_schema(
            catalog.as_ref(),
            "s",
            Arc::new(datafusion::catalog::MemorySchemaProvider::new()),
        )?;
        ctx.register_catalog(STATEMENT_CATALOG, catalog);
    }
    let table = format!("t{}", uuid::Uuid::new_v4().simple());
    let reference = datafusion::common::TableReference::full(STATEMENT_CATALOG, "s", table.clone());
    ctx.register_table(reference.clone(), provider)?;
    let registered = StatementTable {
        ctx: ctx.clone(),
        name: reference,
        written: written.to_string(),
    };
    let name = ObjectName::from(vec![
        Ident::new(STATEMENT_CATALOG),
        Ident::new("s"),
        Ident::new(table),
    ]);
    Ok((registered, name))
}

fn has_subquery(e: &Expr) -> bool {
    struct Find;
    impl Visitor for Find {
        type Break = ();
        fn pre_visit_query(&mut self, _q: &Query) -> ControlFlow<()> {
            ControlFlow::Break(())
        }
    }
    Visit::visit(e, &mut Find).is_break()
}

/// Points the tables `s` reads (not the one it changes) at statement-scoped providers with the
/// metadata columns (added to `tables`), and makes its wildcards exclude those columns.
async fn rewrite_statement(
    ctx: &SessionContext,
    s: &mut Statement,
    tables: &mut Vec<StatementTable>,
) -> Result<()> {
    // The plain table names the statement reads.
    let mut names = CollectTables::default();
    let _ = Visit::visit(&*s, &mut names);
    let mut extras: HashMap<String, (ObjectName, Vec<String>)> = HashMap::new();
    let mut providers = vec![];
    for name in names.tables {
        if providers.iter().any(|(n, _)| n == &name) {
            continue;
        }
        let Ok(provider) = ctx.table_provider(name.as_str()).await else {
            continue;
        };
        // A table with a column of a metadata name keeps it; and a name the statement uses
        // could then mean that column anywhere in it (an outer reference from a subquery): the
        // statement reads every table as it is.
        if provider
            .schema()
            .fields()
            .iter()
            .any(|f| NAMES.contains(&f.name().as_str()))
        {
            return Ok(());
        }
        providers.push((name, provider));
    }
    for (name, provider) in providers {
        let Some(iceberg) = provider.downcast_ref::<IcebergTableProvider>().cloned() else {
            continue;
        };
        let own = iceberg.schema().fields().len();
        let with = iceberg.with_metadata_columns()?;
        let added: Vec<String> = with
            .schema()
            .fields()
            .iter()
            .skip(own)
            .map(|f| f.name().clone())
            .collect();
        // The provider the name resolved to, read with the columns: not looked up again.
        let (registered, scoped) = register(ctx, Arc::new(with), &name)?;
        tables.push(registered);
        extras.insert(name, (scoped, added));
    }
    if extras.is_empty() {
        return Ok(());
    }
    let mut rewriter = Rewriter {
        extras,
        rewritten: HashMap::new(),
        error: None,
    };
    // The table a statement changes stays as written (only what it reads gains the columns).
    let target = target_factor(s).cloned();
    let _ = VisitMut::visit(s, &mut rewriter);
    if let Some(e) = rewriter.error {
        return Err(e);
    }
    if let (Some(original), Some(rewritten)) = (target, target_factor(s)) {
        *rewritten = original;
    }
    Ok(())
}

/// The relation a DELETE, UPDATE or MERGE changes.
fn target_factor(s: &mut Statement) -> Option<&mut TableFactor> {
    match s {
        Statement::Delete(d) => match &mut d.from {
            datafusion::sql::sqlparser::ast::FromTable::WithFromKeyword(t)
            | datafusion::sql::sqlparser::ast::FromTable::WithoutKeyword(t) => {
                t.first_mut().map(|t| &mut t.relation)
            }
        },
        Statement::Update(u) => Some(&mut u.table.relation),
        Statement::Merge(m) => Some(&mut m.table),
        _ => None,
    }
}

use datafusion::datasource::TableProvider as _;

/// The table a DELETE or UPDATE changes, as written.
fn dml_target(s: &Statement) -> Option<String> {
    match s {
        Statement::Delete(d) => {
            let tables = match &d.from {
                datafusion::sql::sqlparser::ast::FromTable::WithFromKeyword(t)
                | datafusion::sql::sqlparser::ast::FromTable::WithoutKeyword(t) => t,
            };
            match &tables.first()?.relation {
                TableFactor::Table { name, .. } => Some(normalised_name(name)),
                _ => None,
            }
        }
        Statement::Update(u) => match &u.table.relation {
            TableFactor::Table { name, .. } => Some(normalised_name(name)),
            _ => None,
        },
        Statement::Merge(m) => match &m.table {
            TableFactor::Table { name, .. } => Some(normalised_name(name)),
            _ => None,
        },
        _ => None,
    }
}

/// Whether a DML statement's own condition (not its subqueries) names a metadata column.
fn references_metadata(s: &Statement) -> bool {
    let direct = |e: &Expr| {
        let mut finder = FindOutsideSubqueries { depth: 0 };
        Visit::visit(e, &mut finder).is_break()
    };
    match s {
        Statement::Delete(d) => d.selection.as_ref().is_some_and(direct),
        Statement::Update(u) => {
            u.selection.as_ref().is_some_and(direct)
                || u.assignments.iter().any(|a| direct(&a.value))
        }
        Statement::Merge(m) => direct(&m.on),
        _ => false,
    }
}

/// Finds a metadata name outside any subquery.
struct FindOutsideSubqueries {
    depth: usize,
}

impl Visitor for FindOutsideSubqueries {
    type Break = ();

    fn pre_visit_query(&mut self, _q: &Query) -> ControlFlow<()> {
        self.depth += 1;
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _q: &Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        if self.depth > 0 {
            return ControlFlow::Continue(());
        }
        FindName.pre_visit_expr(e)
    }
}

fn normalised_name(name: &ObjectName) -> String {
    name.0
        .iter()
        .map(|p| {
            p.as_ident()
                .map(normalised)
                .unwrap_or_else(|| p.to_string())
        })
        .collect::<Vec<_>>()
        .join(".")
}

#[derive(Default)]
struct CollectTables {
    tables: Vec<String>,
}

impl Visitor for CollectTables {
    type Break = ();

    fn pre_visit_table_factor(&mut self, t: &TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table {
            name,
            args: None,
            version: None,
            ..
        } = t
        {
            self.tables.push(normalised_name(name));
        }
        ControlFlow::Continue(())
    }
}

struct Rewriter {
    /// For each table read, its statement-scoped name and the metadata columns it adds.
    extras: HashMap<String, (ObjectName, Vec<String>)>,
    /// For each alias a rewritten table took, the metadata columns it has.
    rewritten: HashMap<String, Vec<String>>,
    error: Option<DataFusionError>,
}

impl VisitorMut for Rewriter {
    type Break = ();

    fn pre_visit_table_factor(&mut self, t: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table {
            name,
            alias,
            args: None,
            version: None,
            ..
        } = t
        else {
            return ControlFlow::Continue(());
        };
        let table = normalised_name(name);
        let Some((scoped, extras)) = self.extras.get(&table) else {
            return ControlFlow::Continue(());
        };
        let chosen = match alias {
            Some(a) => a.clone(),
            None => TableAlias {
                explicit: true,
                name: name
                    .0
                    .last()
                    .and_then(|p| p.as_ident())
                    .cloned()
                    .unwrap_or_else(|| Ident::new(table.clone())),
                columns: vec![],
                at: None,
            },
        };
        self.rewritten
            .insert(normalised(&chosen.name), extras.clone());
        *name = scoped.clone();
        *alias = Some(chosen);
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
        if let Err(e) = self.exclude_in(q.body.as_mut()) {
            self.error = Some(e);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

impl Rewriter {
    fn exclude_in(&self, body: &mut SetExpr) -> Result<()> {
        match body {
            SetExpr::Select(select) => self.exclude_in_select(select),
            SetExpr::SetOperation { left, right, .. } => {
                self.exclude_in(left)?;
                self.exclude_in(right)
            }
            _ => Ok(()),
        }
    }

    /// The rewritten relations of `select`'s FROM (aliases with their metadata columns), in
    /// order, and whether the FROM joins by USING or NATURAL.
    fn relations(&self, select: &Select) -> (Vec<Relation>, bool) {
        let mut out = vec![];
        let mut merges_columns = false;
        let mut push = |f: &TableFactor| {
            let alias = match f {
                TableFactor::Table { alias: Some(a), .. }
                | TableFactor::Derived { alias: Some(a), .. }
                | TableFactor::Function { alias: Some(a), .. }
                | TableFactor::UNNEST { alias: Some(a), .. } => Some(a.name.clone()),
                TableFactor::Table { name, .. } => {
                    name.0.last().and_then(|p| p.as_ident()).cloned()
                }
                _ => None,
            };
            let rewritten = match f {
                TableFactor::Table {
                    name,
                    alias: Some(a),
                    ..
                } if name
                    .0
                    .first()
                    .and_then(|p| p.as_ident())
                    .map(|i| i.value.as_str())
                    == Some(STATEMENT_CATALOG) =>
                {
                    self.rewritten.get(&normalised(&a.name)).cloned()
                }
                _ => None,
            };
            out.push((alias, rewritten));
        };
        for t in &select.from {
            push(&t.relation);
            for j in &t.joins {
                if matches!(
                    &j.join_operator,
                    JoinOperator::Join(c) | JoinOperator::Inner(c) | JoinOperator::Left(c)
                        | JoinOperator::LeftOuter(c) | JoinOperator::Right(c)
                        | JoinOperator::RightOuter(c) | JoinOperator::FullOuter(c)
                        if !matches!(c, datafusion::sql::sqlparser::ast::JoinConstraint::On(_)
                            | datafusion::sql::sqlparser::ast::JoinConstraint::None)
                ) {
                    merges_columns = true;
                }
                push(&j.relation);
            }
        }
        let out = out
            .into_iter()
            .map(|(a, r)| (a.unwrap_or_else(|| Ident::new("")), r))
            .collect();
        (out, merges_columns)
    }

    fn exclude_in_select(&self, select: &mut Select) -> Result<()> {
        let (relations, merges_columns) = self.relations(select);
        if relations.iter().all(|(_, r)| r.is_none()) {
            return Ok(());
        }
        let mut items = Vec::with_capacity(select.projection.len());
        for item in std::mem::take(&mut select.projection) {
            match item {
                SelectItem::Wildcard(mut options) => {
                    let with: Vec<&Relation> =
                        relations.iter().filter(|(_, r)| r.is_some()).collect();
                    if with.len() == 1 {
                        add_exclude(&mut options, with[0].1.as_deref().unwrap_or_default())?;
                        items.push(SelectItem::Wildcard(options));
                        continue;
                    }
                    // Several tables with metadata columns: each one's own wildcard.
                    if merges_columns || has_options(&options) {
                        return Err(DataFusionError::Plan(
                            "SELECT * over several tables whose metadata columns the statement \
                             names, joined by USING or NATURAL or with wildcard options: name \
                             the columns, or use t.* per table"
                                .into(),
                        ));
                    }
                    for (alias, extras) in &relations {
                        let mut options = options.clone();
                        if let Some(extras) = extras {
                            add_exclude(&mut options, extras)?;
                        }
                        items.push(SelectItem::QualifiedWildcard(
                            SelectItemQualifiedWildcardKind::ObjectName(ObjectName::from(vec![
                                alias.clone(),
                            ])),
                            options,
                        ));
                    }
                }
                SelectItem::QualifiedWildcard(
                    SelectItemQualifiedWildcardKind::ObjectName(name),
                    mut options,
                ) => {
                    let last = name.0.last().and_then(|p| p.as_ident()).map(normalised);
                    let extras = relations.iter().find_map(|(a, r)| {
                        (Some(normalised(a)) == last)
                            .then_some(r.as_ref())
                            .flatten()
                    });
                    if let Some(extras) = extras {
                        add_exclude(&mut options, extras)?;
                    }
                    items.push(SelectItem::QualifiedWildcard(
                        SelectItemQualifiedWildcardKind::ObjectName(name),
                        options,
                    ));
                }
                other => items.push(other),
            }
        }
        select.projection = items;
        Ok(())
    }
}

/// A relation of a FROM: its alias, and the metadata columns it has when the rewrite gave it
/// them.
type Relation = (Ident, Option<Vec<String>>);

fn has_options(o: &WildcardAdditionalOptions) -> bool {
    o.opt_ilike.is_some()
        || o.opt_exclude.is_some()
        || o.opt_except.is_some()
        || o.opt_replace.is_some()
        || o.opt_rename.is_some()
}

/// `options` excluding `names` too.
fn add_exclude(options: &mut WildcardAdditionalOptions, names: &[String]) -> Result<()> {
    if options.opt_except.is_some() || options.opt_ilike.is_some() {
        return Err(DataFusionError::Plan(
            "SELECT * EXCEPT/ILIKE with metadata columns named: use EXCLUDE".into(),
        ));
    }
    let mut excluded: Vec<ObjectName> = match options.opt_exclude.take() {
        Some(ExcludeSelectItem::Single(n)) => vec![n],
        Some(ExcludeSelectItem::Multiple(ns)) => ns,
        None => vec![],
    };
    for n in names {
        let present = excluded.iter().any(|e| {
            e.0.last()
                .and_then(|p| p.as_ident())
                .is_some_and(|i| normalised(i) == *n)
        });
        if !present {
            excluded.push(ObjectName::from(vec![Ident::new(n.clone())]));
        }
    }
    options.opt_exclude = Some(ExcludeSelectItem::Multiple(excluded));
    Ok(())
}
