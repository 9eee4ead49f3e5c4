//! The `WHEN` clauses of a `MERGE`, checked and compiled against the rows of the join
//! ([`super::rows::MergeRowsExec`] applies them): the first clause whose kind and condition fit
//! a row decides what happens to it.
//!
//! ```text
//!   join row (source…, __merge_source_row, target…, _file, _pos)
//!     matched        (both sides)      ─► WHEN MATCHED [AND c]             UPDATE | DELETE
//!     source only    (no target row)   ─► WHEN NOT MATCHED [AND c]         INSERT
//!     target only    (no source row)   ─► WHEN NOT MATCHED BY SOURCE [AND c] UPDATE | DELETE
//!   output: the new rows (updated and inserted) in the table's schema; the (_file, _pos) of
//!           every target row updated or deleted go to the shared MergePositions
//! ```

use std::collections::HashSet;
use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::dml::{MergeIntoAction, MergeIntoClause, MergeIntoClauseKind};
use datafusion::logical_expr::{Expr, ExprSchemable};
use datafusion::physical_expr::PhysicalExpr;

/// Which rows a clause applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum ClauseKind {
    /// A target row and a source row the `ON` condition pairs.
    Matched,
    /// A source row no target row matches.
    NotMatchedByTarget,
    /// A target row no source row matches.
    NotMatchedBySource,
}

impl ClauseKind {
    fn of(kind: MergeIntoClauseKind) -> Self {
        match kind.canonical() {
            MergeIntoClauseKind::Matched => Self::Matched,
            MergeIntoClauseKind::NotMatchedBySource => Self::NotMatchedBySource,
            _ => Self::NotMatchedByTarget,
        }
    }

    fn sql(self) -> &'static str {
        match self {
            Self::Matched => "WHEN MATCHED",
            Self::NotMatchedByTarget => "WHEN NOT MATCHED",
            Self::NotMatchedBySource => "WHEN NOT MATCHED BY SOURCE",
        }
    }
}

/// A clause's action, compiled.
#[derive(Debug, Clone)]
pub(crate) enum ClauseAction {
    /// The target row's new version: (table column, value) pairs; other columns keep theirs.
    Update(Vec<(usize, Arc<dyn PhysicalExpr>)>),
    /// The target row goes.
    Delete,
    /// A new row: one value per table column (`None`: NULL).
    Insert(Vec<Option<Arc<dyn PhysicalExpr>>>),
}

/// One compiled `WHEN` clause.
#[derive(Debug, Clone)]
pub(crate) struct Clause {
    pub kind: ClauseKind,
    pub predicate: Option<Arc<dyn PhysicalExpr>>,
    pub action: ClauseAction,
    /// The clause as written (for EXPLAIN).
    pub text: String,
}

/// Where the parts of a join row are. The join's left side is the source (its columns, then a
/// marker column that is NULL on rows without a source row); the right side is the target (the
/// table columns read, then each row's file and position, NULL on rows without a target row).
#[derive(Debug, Clone)]
pub(crate) struct RowLayout {
    /// Columns of the source.
    pub source_columns: usize,
    /// Table columns read from the target, in join order (indices into the table schema).
    pub target_columns: Vec<usize>,
    /// The join rows' schema, with the qualifiers of the statement.
    pub schema: Arc<DFSchema>,
}

impl RowLayout {
    /// The marker column: TRUE on rows with a source row.
    pub fn source_marker(&self) -> usize {
        self.source_columns
    }

    /// The first target column.
    pub fn target_start(&self) -> usize {
        self.source_columns + 1
    }

    /// The file column of the target rows.
    pub fn file(&self) -> usize {
        self.target_start() + self.target_columns.len()
    }

    /// The position column of the target rows.
    pub fn pos(&self) -> usize {
        self.file() + 1
    }

    /// The join column of table column `c`, when read.
    pub(super) fn target_column(&self, c: usize) -> Option<usize> {
        self.target_columns
            .iter()
            .position(|&t| t == c)
            .map(|k| self.target_start() + k)
    }
}

/// Which side of the statement a column belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Side {
    Target,
    Source,
}

/// Resolves columns of the statement's expressions: the first `target_fields` fields of
/// `merge_schema` are the target's, the rest the source's.
pub(crate) struct Sides<'a> {
    pub merge_schema: &'a DFSchema,
    pub target_fields: usize,
}

impl Sides<'_> {
    /// The side and index (in `merge_schema`) of `column`.
    pub fn of(&self, column: &Column) -> Result<(Side, usize)> {
        let i = self.merge_schema.index_of_column(column)?;
        Ok(match i < self.target_fields {
            true => (Side::Target, i),
            false => (Side::Source, i - self.target_fields),
        })
    }

    /// The sides `e` names columns of, and the table columns it reads.
    pub fn used(&self, e: &Expr, table_columns: &mut HashSet<usize>) -> Result<HashSet<Side>> {
        let mut sides = HashSet::new();
        for c in e.column_refs() {
            let (side, i) = self.of(c)?;
            if side == Side::Target {
                table_columns.insert(i);
            }
            sides.insert(side);
        }
        Ok(sides)
    }
}

/// Errors on expressions the statement cannot evaluate row by row.
pub(crate) fn check_expression(e: &Expr, what: &str) -> Result<()> {
    let mut bad = None;
    e.apply(|x| {
        if matches!(
            x,
            Expr::Exists(_)
                | Expr::InSubquery(_)
                | Expr::ScalarSubquery(_)
                | Expr::SetComparison(_)
                | Expr::OuterReferenceColumn(..)
        ) {
            bad = Some("a subquery");
        } else if matches!(x, Expr::AggregateFunction(_) | Expr::WindowFunction(_)) {
            bad = Some("an aggregate or window function");
        }
        Ok(match bad {
            Some(_) => TreeNodeRecursion::Stop,
            None => TreeNodeRecursion::Continue,
        })
    })?;
    match bad {
        Some(b) => Err(DataFusionError::Plan(format!(
            "MERGE {what} with {b} is not supported ({e}); nothing was changed"
        ))),
        None => Ok(()),
    }
}

/// The table columns the clauses read, and whether any clause updates (then every column is
/// read: the new version of a row is the whole row).
pub(crate) fn clause_columns(
    clauses: &[MergeIntoClause],
    sides: &Sides<'_>,
    table_schema: &SchemaRef,
) -> Result<(HashSet<usize>, bool)> {
    let mut columns = HashSet::new();
    let mut updates = false;
    for clause in clauses {
        let kind = ClauseKind::of(clause.kind);
        let mut sides_used = HashSet::new();
        if let Some(p) = &clause.predicate {
            check_expression(p, &format!("{} condition", kind.sql()))?;
            sides_used.extend(sides.used(p, &mut columns)?);
        }
        match (&clause.action, kind) {
            (
                MergeIntoAction::Insert { .. },
                ClauseKind::Matched | ClauseKind::NotMatchedBySource,
            ) => {
                return Err(DataFusionError::Plan(format!(
                    "MERGE {} cannot INSERT (only WHEN NOT MATCHED inserts); nothing was changed",
                    kind.sql()
                )))
            }
            (
                MergeIntoAction::Update(_) | MergeIntoAction::Delete,
                ClauseKind::NotMatchedByTarget,
            ) => {
                return Err(DataFusionError::Plan(
                    "MERGE WHEN NOT MATCHED can only INSERT (there is no target row to update or \
                     delete); nothing was changed"
                        .into(),
                ))
            }
            (MergeIntoAction::Update(assignments), _) => {
                updates = true;
                for (column, value) in assignments {
                    table_schema.index_of(column).map_err(|_| {
                        DataFusionError::Plan(format!(
                            "MERGE UPDATE of unknown column '{column}'; nothing was changed"
                        ))
                    })?;
                    check_expression(value, "UPDATE value")?;
                    sides_used.extend(sides.used(value, &mut columns)?);
                }
            }
            (MergeIntoAction::Insert { values, .. }, _) => {
                for value in values {
                    check_expression(value, "INSERT value")?;
                    sides_used.extend(sides.used(value, &mut columns)?);
                }
            }
            (MergeIntoAction::Delete, _) => {}
        }
        let forbidden = match kind {
            ClauseKind::Matched => None,
            ClauseKind::NotMatchedByTarget => Some((Side::Target, "target", "no target row")),
            ClauseKind::NotMatchedBySource => Some((Side::Source, "source", "no source row")),
        };
        if let Some((side, name, why)) = forbidden {
            if sides_used.contains(&side) {
                return Err(DataFusionError::Plan(format!(
                    "MERGE {} may not name {name} columns (its rows have {why}); nothing was \
                     changed",
                    kind.sql()
                )));
            }
        }
    }
    Ok((columns, updates))
}

/// Compiles `clauses` against the join rows of `layout`. `table_schema` is the table's Arrow
/// schema (the output of the new rows).
pub(crate) fn compile(
    clauses: &[MergeIntoClause],
    layout: &RowLayout,
    table_schema: &SchemaRef,
    state: &SessionState,
) -> Result<Vec<Clause>> {
    let physical = |e: &Expr, ty: Option<&DataType>| -> Result<Arc<dyn PhysicalExpr>> {
        let e = match ty {
            Some(ty) if &e.get_type(&layout.schema)? != ty => {
                e.clone().cast_to(ty, &layout.schema)?
            }
            _ => e.clone(),
        };
        state.create_physical_expr(e, &layout.schema)
    };
    let mut out = vec![];
    for clause in clauses {
        let kind = ClauseKind::of(clause.kind);
        let predicate = match &clause.predicate {
            Some(p) => {
                let ty = p.get_type(&layout.schema)?;
                if ty != DataType::Boolean && ty != DataType::Null {
                    return Err(DataFusionError::Plan(format!(
                        "a MERGE {} condition must be boolean, got {ty} for {p}",
                        kind.sql()
                    )));
                }
                Some(physical(p, Some(&DataType::Boolean))?)
            }
            None => None,
        };
        let (action, text) = match &clause.action {
            MergeIntoAction::Update(assignments) => {
                let mut compiled = vec![];
                let mut set = vec![];
                for (column, value) in assignments {
                    let i = table_schema.index_of(column)?;
                    compiled.push((i, physical(value, Some(table_schema.field(i).data_type()))?));
                    set.push(format!("{column} = {value}"));
                }
                (
                    ClauseAction::Update(compiled),
                    format!("UPDATE SET {}", set.join(", ")),
                )
            }
            MergeIntoAction::Delete => (ClauseAction::Delete, "DELETE".to_string()),
            MergeIntoAction::Insert { columns, values } => {
                let names: Vec<String> = match columns.is_empty() {
                    true => table_schema
                        .fields()
                        .iter()
                        .map(|f| f.name().clone())
                        .collect(),
                    false => columns.clone(),
                };
                if names.len() != values.len() {
                    return Err(DataFusionError::Plan(format!(
                        "MERGE INSERT names {} column(s) but gives {} value(s)",
                        names.len(),
                        values.len()
                    )));
                }
                let mut compiled: Vec<Option<Arc<dyn PhysicalExpr>>> =
                    vec![None; table_schema.fields().len()];
                for (name, value) in names.iter().zip(values) {
                    let i = table_schema.index_of(name)?;
                    compiled[i] = Some(physical(value, Some(table_schema.field(i).data_type()))?);
                }
                for (field, value) in table_schema.fields().iter().zip(&compiled) {
                    if value.is_none() && !field.is_nullable() {
                        return Err(DataFusionError::Plan(format!(
                            "MERGE INSERT must give a value for required column '{}'; nothing \
                             was changed",
                            field.name()
                        )));
                    }
                }
                let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
                (
                    ClauseAction::Insert(compiled),
                    format!(
                        "INSERT ({}) VALUES ({})",
                        names.join(", "),
                        values.join(", ")
                    ),
                )
            }
        };
        let text = match &clause.predicate {
            Some(p) => format!("{} AND {p} THEN {text}", kind.sql()),
            None => format!("{} THEN {text}", kind.sql()),
        };
        out.push(Clause {
            kind,
            predicate,
            action,
            text,
        });
    }
    Ok(out)
}
