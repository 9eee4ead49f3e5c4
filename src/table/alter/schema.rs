//! Schema evolution by the spec's rules, by field id: a list of column changes applied to the
//! current schema gives the next one. Nothing here touches data files: old files are read
//! through the new schema by field id (renamed, dropped, promoted and re-added columns all
//! follow from the ids, see [`crate::file_planning::field_ids`]).
//!
//! The rules are Java's `SchemaUpdate`:
//! - a new column gets the next id after the table's `last-column-id` (nested fields of its
//!   type after it); a name used by a sibling is refused, unless that sibling is dropped by the
//!   same statement (the new column is a new column with a new id);
//! - a new column is optional, or required with a `DEFAULT` (format v3: `initial-default` is
//!   what older rows read, `write-default` what writes that omit it write);
//! - types change only by the spec's promotions (int → long, float → double, decimal
//!   precision widening, and on v3 date → timestamp / timestamp_ns);
//! - a required column can become optional, never the reverse;
//! - columns a partition spec (current or older: its files are pruned by it) or the sort order
//!   are computed from, and identifier fields, cannot be dropped;
//! - identifier fields are required primitive columns, not float or double, not inside a
//!   list, a map or an optional struct.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use iceberg::spec::{
    FormatVersion, ListType, Literal, MapType, NestedField, NestedFieldRef, PrimitiveType, Schema,
    StructType, TableMetadata, Type,
};

use super::types::FieldIds;

/// The parent id standing for the table's top level.
const ROOT: i32 = -1;

/// Where a moved or added column goes among its siblings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Position {
    /// First.
    First,
    /// Right after the sibling of this name.
    After(String),
}

/// A column as `ADD COLUMN` defines it (its type already an Iceberg type, ids to assign).
#[derive(Debug, Clone)]
pub(crate) struct NewColumn {
    /// The path of the new column: parents, then its name.
    pub path: Vec<String>,
    /// Its type (nested ids are placeholders, numbered again when it is added).
    pub field_type: Type,
    /// `NOT NULL`.
    pub required: bool,
    /// `DEFAULT`: both its `initial-default` and its `write-default`.
    pub default: Option<Literal>,
    /// `COMMENT`.
    pub doc: Option<String>,
    /// `FIRST` / `AFTER x`.
    pub position: Option<Position>,
}

/// One change of the columns (names are paths: `point.z`, `m.value.f`, `xs.element.a`).
#[derive(Debug, Clone)]
pub(crate) enum ColumnChange {
    Add(NewColumn),
    Drop(Vec<String>),
    Rename {
        path: Vec<String>,
        to: String,
    },
    Retype {
        path: Vec<String>,
        to: PrimitiveType,
    },
    Doc {
        path: Vec<String>,
        doc: Option<String>,
    },
    Move {
        path: Vec<String>,
        to: Position,
    },
    Optional(Vec<String>),
    Required(Vec<String>),
    WriteDefault {
        path: Vec<String>,
        value: Option<Literal>,
    },
    SetIdentifier(Vec<Vec<String>>),
    DropIdentifier(Vec<Vec<String>>),
}

/// The schema `changes` make of `metadata`'s current one (a fresh schema id is the metadata
/// builder's to assign).
pub(crate) fn evolve(metadata: &TableMetadata, changes: &[ColumnChange]) -> Result<Schema> {
    let mut update = Update::new(metadata);
    for change in changes {
        update.apply(change)?;
    }
    update.build()
}

/// `a.b.c` as written.
fn dotted(path: &[String]) -> String {
    path.join(".")
}

fn refused(what: String) -> DataFusionError {
    DataFusionError::Plan(what)
}

struct Update<'a> {
    schema: &'a Schema,
    version: FormatVersion,
    ids: FieldIds,
    /// Source columns of the partition specs and the sort order: not droppable.
    used_by_spec: HashMap<i32, String>,
    /// Source columns of any partition spec (their type may not change from date).
    used_by_any_spec: HashSet<i32>,
    deletes: HashSet<i32>,
    /// Changed copies of existing fields (type, name, doc, nullability, write-default).
    updates: HashMap<i32, NestedField>,
    /// New fields by parent id ([`ROOT`] for the top level), in order.
    adds: HashMap<i32, Vec<NestedFieldRef>>,
    /// Moves by parent id, in order: (field id, where).
    moves: HashMap<i32, Vec<(i32, Position)>>,
    identifier: Vec<i32>,
}

impl<'a> Update<'a> {
    fn new(metadata: &'a TableMetadata) -> Self {
        let schema = metadata.current_schema().as_ref();
        let mut used_by_spec = HashMap::new();
        let mut specs: Vec<_> = metadata.partition_specs_iter().collect();
        specs.sort_by_key(|s| s.spec_id() != metadata.default_partition_spec_id());
        for spec in specs {
            let current = spec.spec_id() == metadata.default_partition_spec_id();
            for f in spec.fields() {
                used_by_spec
                    .entry(f.source_id)
                    .or_insert_with(|| match current {
                        true => format!("partition field '{}'", f.name),
                        false => format!(
                            "partition field '{}' of the older spec {} (files written with it may \
                         still be in the table)",
                            f.name,
                            spec.spec_id()
                        ),
                    });
            }
        }
        for f in metadata.default_sort_order().fields.iter() {
            used_by_spec
                .entry(f.source_id)
                .or_insert_with(|| "the table's sort order".to_string());
        }
        let used_by_any_spec = metadata
            .partition_specs_iter()
            .flat_map(|s| s.fields().iter().map(|f| f.source_id))
            .collect();
        Self {
            schema,
            version: metadata.format_version(),
            ids: FieldIds {
                last: metadata.last_column_id(),
            },
            used_by_spec,
            used_by_any_spec,
            deletes: HashSet::new(),
            updates: HashMap::new(),
            adds: HashMap::new(),
            moves: HashMap::new(),
            identifier: schema.identifier_field_ids().collect(),
        }
    }

    /// The existing field at `path`.
    fn field(&self, path: &[String]) -> Result<NestedFieldRef> {
        self.schema
            .field_by_name(&dotted(path))
            .cloned()
            .ok_or_else(|| refused(format!("no column '{}' in the table", dotted(path))))
    }

    /// The field as this update has changed it so far.
    fn current(&self, field: &NestedField) -> NestedField {
        self.updates
            .get(&field.id)
            .cloned()
            .unwrap_or_else(|| field.clone())
    }

    /// The struct new fields under `path` go into: `path`'s struct, a list's element struct, a
    /// map's value struct. Its id, and its fields now: (id, name) of those not dropped, as
    /// renamed, then those added.
    fn siblings(&self, path: &[String]) -> Result<(i32, Vec<(i32, String)>)> {
        let schema: &'a Schema = self.schema;
        let (id, fields) = match path {
            [] => (ROOT, schema.as_struct().fields()),
            _ => {
                let mut field: &'a NestedFieldRef = schema
                    .field_by_name(&dotted(path))
                    .ok_or_else(|| refused(format!("no column '{}' in the table", dotted(path))))?;
                loop {
                    match field.field_type.as_ref() {
                        Type::Struct(s) => break (field.id, s.fields()),
                        Type::List(l) => field = &l.element_field,
                        Type::Map(m) => field = &m.value_field,
                        Type::Primitive(p) => {
                            return Err(refused(format!(
                                "'{}' is a {p}, not a struct: it has no fields",
                                dotted(path)
                            )))
                        }
                    }
                }
            }
        };
        let names = fields
            .iter()
            .filter(|f| !self.deletes.contains(&f.id))
            .map(|f| (f.id, self.current(f).name))
            .chain(
                self.adds
                    .get(&id)
                    .into_iter()
                    .flatten()
                    .map(|f| (f.id, f.name.clone())),
            )
            .collect();
        Ok((id, names))
    }

    /// The parent path of `path` (empty at the top level).
    fn parents(path: &[String]) -> &[String] {
        &path[..path.len().saturating_sub(1)]
    }

    fn apply(&mut self, change: &ColumnChange) -> Result<()> {
        match change {
            ColumnChange::Add(column) => self.add(column),
            ColumnChange::Drop(path) => self.drop(path),
            ColumnChange::Rename { path, to } => self.rename(path, to),
            ColumnChange::Retype { path, to } => self.retype(path, to),
            ColumnChange::Doc { path, doc } => self.edit(path, |f| {
                f.doc = doc.clone();
                Ok(())
            }),
            ColumnChange::Move { path, to } => self.move_column(path, to),
            ColumnChange::Optional(path) => self.edit(path, |f| {
                f.required = false;
                Ok(())
            }),
            ColumnChange::Required(path) => self.edit(path, |f| match f.required {
                true => Ok(()),
                false => Err(refused(format!(
                    "cannot make column '{}' NOT NULL: rows already written may hold nulls \
                     (Iceberg allows a required column to become optional, not the reverse)",
                    dotted(path)
                ))),
            }),
            ColumnChange::WriteDefault { path, value } => {
                self.needs_v3(path, "a write default")?;
                self.edit(path, |f| {
                    if !matches!(f.field_type.as_ref(), Type::Primitive(_)) {
                        return Err(refused(format!(
                            "column '{}': defaults are supported on primitive columns only",
                            dotted(path)
                        )));
                    }
                    f.write_default = value.clone();
                    Ok(())
                })
            }
            ColumnChange::SetIdentifier(paths) => {
                let mut ids = vec![];
                for path in paths {
                    let id = self.field(path)?.id;
                    if !ids.contains(&id) {
                        ids.push(id);
                    }
                }
                self.identifier = ids;
                Ok(())
            }
            ColumnChange::DropIdentifier(paths) => {
                for path in paths {
                    let id = self.field(path)?.id;
                    let at = self
                        .identifier
                        .iter()
                        .position(|i| *i == id)
                        .ok_or_else(|| {
                            refused(format!(
                                "column '{}' is not an identifier field",
                                dotted(path)
                            ))
                        })?;
                    self.identifier.remove(at);
                }
                Ok(())
            }
        }
    }

    fn needs_v3(&self, path: &[String], what: &str) -> Result<()> {
        match self.version {
            FormatVersion::V3 => Ok(()),
            v => Err(refused(format!(
                "column '{}': {what} needs format version 3 (the table is v{}; ALTER TABLE .. \
                 SET TBLPROPERTIES ('format-version' = '3') upgrades it)",
                dotted(path),
                v as u8
            ))),
        }
    }

    /// Changes the existing field at `path` with `f`.
    fn edit(
        &mut self,
        path: &[String],
        f: impl FnOnce(&mut NestedField) -> Result<()>,
    ) -> Result<()> {
        let field = self.field(path)?;
        if self.deletes.contains(&field.id) {
            return Err(refused(format!("column '{}' is dropped", dotted(path))));
        }
        let mut changed = self.current(&field);
        f(&mut changed)?;
        self.updates.insert(field.id, changed);
        Ok(())
    }

    fn add(&mut self, column: &NewColumn) -> Result<()> {
        let (name, parents) = column
            .path
            .split_last()
            .ok_or_else(|| refused("a column needs a name".into()))?;
        if name.contains('.') {
            return Err(refused(format!(
                "column name '{name}' has a '.': names are separated by dots"
            )));
        }
        // A sibling dropped by this statement frees its name.
        let (parent, names) = self.siblings(parents)?;
        if names.iter().any(|(_, n)| n == name) {
            return Err(refused(format!(
                "cannot add column '{}': a column of that name exists",
                dotted(&column.path)
            )));
        }
        if column.default.is_some() {
            self.needs_v3(&column.path, "a DEFAULT")?;
        }
        if column.required && column.default.is_none() {
            return Err(refused(format!(
                "cannot add required column '{}' without a DEFAULT: rows already written have \
                 no value for it (add it as optional, or give it a DEFAULT on format v3)",
                dotted(&column.path)
            )));
        }
        let id = self.ids.next();
        let field_type = renumber(&column.field_type, &mut self.ids);
        let mut field = NestedField::new(id, name.clone(), field_type, column.required);
        field.doc = column.doc.clone();
        field.initial_default = column.default.clone();
        field.write_default = column.default.clone();
        self.adds.entry(parent).or_default().push(Arc::new(field));
        if let Some(to) = &column.position {
            self.moves.entry(parent).or_default().push((id, to.clone()));
        }
        Ok(())
    }

    fn drop(&mut self, path: &[String]) -> Result<()> {
        let field = self.field(path)?;
        let mut inside = vec![field.id];
        collect_ids(&field.field_type, &mut inside);
        for id in &inside {
            if let Some(user) = self.used_by_spec.get(id) {
                return Err(refused(format!(
                    "cannot drop column '{}': {user} is computed from it (change that first)",
                    dotted(path)
                )));
            }
            if self.identifier.contains(id) {
                return Err(refused(format!(
                    "cannot drop column '{}': it is an identifier field (ALTER TABLE .. DROP \
                     IDENTIFIER FIELDS first)",
                    dotted(path)
                )));
            }
        }
        if path.len() == 1 {
            let left = self
                .schema
                .as_struct()
                .fields()
                .iter()
                .filter(|f| !self.deletes.contains(&f.id) && f.id != field.id)
                .count()
                + self.adds.get(&ROOT).map_or(0, Vec::len);
            if left == 0 {
                return Err(refused(format!(
                    "cannot drop column '{}': a table needs a column",
                    dotted(path)
                )));
            }
        }
        self.deletes.insert(field.id);
        Ok(())
    }

    fn rename(&mut self, path: &[String], to: &str) -> Result<()> {
        let field = self.field(path)?;
        let (_, names) = self.siblings(Self::parents(path))?;
        if names.iter().any(|(id, n)| n == to && *id != field.id) {
            return Err(refused(format!(
                "cannot rename column '{}' to '{to}': a column of that name exists",
                dotted(path)
            )));
        }
        if to.is_empty() || to.contains('.') {
            return Err(refused(format!(
                "cannot rename column '{}' to '{to}': not a column name",
                dotted(path)
            )));
        }
        self.edit(path, |f| {
            f.name = to.to_string();
            Ok(())
        })
    }

    fn retype(&mut self, path: &[String], to: &PrimitiveType) -> Result<()> {
        let version = self.version;
        let partitioned = self.used_by_any_spec.clone();
        self.edit(path, |f| {
            let Type::Primitive(from) = f.field_type.as_ref() else {
                return Err(refused(format!(
                    "cannot change the type of '{}': it is not a primitive column (change its \
                     fields one by one)",
                    dotted(path)
                )));
            };
            if from == to {
                return Ok(());
            }
            use PrimitiveType as P;
            let allowed = match (from, to) {
                (P::Int, P::Long) | (P::Float, P::Double) => true,
                (
                    P::Decimal {
                        precision: p1,
                        scale: s1,
                    },
                    P::Decimal {
                        precision: p2,
                        scale: s2,
                    },
                ) => s1 == s2 && p2 >= p1,
                (P::Date, P::Timestamp | P::TimestampNs) => {
                    version == FormatVersion::V3 && !partitioned.contains(&f.id)
                }
                _ => false,
            };
            if !allowed {
                return Err(refused(format!(
                    "cannot change column '{}' from {from} to {to}: Iceberg allows int → long, \
                     float → double, decimal(P, S) → decimal(P', S) with P' > P, and on format \
                     v3 date → timestamp (not for a partition source)",
                    dotted(path)
                )));
            }
            *f.field_type = Type::Primitive(to.clone());
            Ok(())
        })
    }

    fn move_column(&mut self, path: &[String], to: &Position) -> Result<()> {
        let field = self.field(path)?;
        let (parent, names) = self.siblings(Self::parents(path))?;
        if let Position::After(sibling) = to {
            if names.iter().any(|(id, n)| n == sibling && *id == field.id) {
                return Err(refused(format!(
                    "cannot move column '{}' after itself",
                    dotted(path)
                )));
            }
            if !names.iter().any(|(_, n)| n == sibling) {
                return Err(refused(format!(
                    "cannot move column '{}' after '{sibling}': no such column beside it",
                    dotted(path)
                )));
            }
        }
        self.moves
            .entry(parent)
            .or_default()
            .push((field.id, to.clone()));
        Ok(())
    }

    fn build(self) -> Result<Schema> {
        let fields = self.rebuild_struct(ROOT, self.schema.as_struct().fields())?;
        for id in &self.identifier {
            self.check_identifier(*id, &fields)?;
        }
        Schema::builder()
            .with_schema_id(self.schema.schema_id())
            .with_fields(fields)
            .with_identifier_field_ids(self.identifier.clone())
            .build()
            .map_err(|e| refused(format!("the new schema is not valid: {e}")))
    }

    /// Checks the spec's rules for an identifier field, in the new schema's `fields`.
    fn check_identifier(&self, id: i32, fields: &[NestedFieldRef]) -> Result<()> {
        fn find(fields: &[NestedFieldRef], id: i32, path: &mut Vec<NestedFieldRef>) -> bool {
            for f in fields {
                path.push(Arc::clone(f));
                if f.id == id {
                    return true;
                }
                if let Type::Struct(s) = f.field_type.as_ref() {
                    if find(s.fields(), id, path) {
                        return true;
                    }
                }
                path.pop();
            }
            false
        }
        let name = self
            .schema
            .name_by_field_id(id)
            .unwrap_or_default()
            .to_string();
        let mut path = vec![];
        if !find(fields, id, &mut path) {
            return Err(refused(format!(
                "column '{name}' cannot be an identifier field: it is not a column of the table \
                 or it is inside a list or a map"
            )));
        }
        let field = path.last().expect("found");
        let why = match field.field_type.as_ref() {
            Type::Primitive(PrimitiveType::Float | PrimitiveType::Double) => {
                Some("float and double columns cannot be")
            }
            Type::Primitive(_) if !field.required => Some("it is not NOT NULL"),
            Type::Primitive(_) => None,
            _ => Some("it is not a primitive column"),
        };
        let why = why.or_else(|| {
            path[..path.len() - 1]
                .iter()
                .any(|p| !p.required)
                .then_some("a struct it is in is optional")
        });
        match why {
            Some(why) => Err(refused(format!(
                "column '{name}' cannot be an identifier field: {why}"
            ))),
            None => Ok(()),
        }
    }

    fn rebuild_struct(
        &self,
        parent: i32,
        fields: &[NestedFieldRef],
    ) -> Result<Vec<NestedFieldRef>> {
        let mut out: Vec<NestedFieldRef> = vec![];
        for f in fields {
            if self.deletes.contains(&f.id) {
                continue;
            }
            out.push(Arc::new(self.rebuild_field(f)?));
        }
        out.extend(self.adds.get(&parent).into_iter().flatten().cloned());
        for (id, to) in self.moves.get(&parent).into_iter().flatten() {
            let from = out.iter().position(|f| f.id == *id).ok_or_else(|| {
                refused("cannot move a column that this statement drops".to_string())
            })?;
            let moved = out.remove(from);
            let at = match to {
                Position::First => 0,
                Position::After(name) => {
                    out.iter().position(|f| f.name == *name).ok_or_else(|| {
                        refused(format!("cannot move column after '{name}': it is dropped"))
                    })? + 1
                }
            };
            out.insert(at, moved);
        }
        Ok(out)
    }

    fn rebuild_field(&self, field: &NestedField) -> Result<NestedField> {
        let mut out = self.current(field);
        let field_type = match out.field_type.as_ref() {
            Type::Struct(s) => {
                Type::Struct(StructType::new(self.rebuild_struct(out.id, s.fields())?))
            }
            Type::List(l) => Type::List(ListType::new(Arc::new(
                self.rebuild_field(&l.element_field)?,
            ))),
            Type::Map(m) => Type::Map(MapType::new(
                Arc::new(self.rebuild_field(&m.key_field)?),
                Arc::new(self.rebuild_field(&m.value_field)?),
            )),
            Type::Primitive(_) => return Ok(out),
        };
        out.field_type = Box::new(field_type);
        Ok(out)
    }
}

/// Every field id nested in `t`.
fn collect_ids(t: &Type, out: &mut Vec<i32>) {
    let fields: Vec<&NestedFieldRef> = match t {
        Type::Struct(s) => s.fields().iter().collect(),
        Type::List(l) => vec![&l.element_field],
        Type::Map(m) => vec![&m.key_field, &m.value_field],
        Type::Primitive(_) => vec![],
    };
    for f in fields {
        out.push(f.id);
        collect_ids(&f.field_type, out);
    }
}

/// `t` with its nested fields numbered from `ids` (a struct's fields first, then inside each).
fn renumber(t: &Type, ids: &mut FieldIds) -> Type {
    match t {
        Type::Struct(s) => {
            let fresh: Vec<i32> = s.fields().iter().map(|_| ids.next()).collect();
            Type::Struct(StructType::new(
                s.fields()
                    .iter()
                    .zip(fresh)
                    .map(|(f, id)| {
                        let mut f = f.as_ref().clone();
                        f.id = id;
                        f.field_type = Box::new(renumber(&f.field_type, ids));
                        Arc::new(f)
                    })
                    .collect(),
            ))
        }
        Type::List(l) => {
            let mut e = l.element_field.as_ref().clone();
            e.id = ids.next();
            e.field_type = Box::new(renumber(&e.field_type, ids));
            Type::List(ListType::new(Arc::new(e)))
        }
        Type::Map(m) => {
            let (mut k, mut v) = (m.key_field.as_ref().clone(), m.value_field.as_ref().clone());
            k.id = ids.next();
            v.id = ids.next();
            k.field_type = Box::new(renumber(&k.field_type, ids));
            v.field_type = Box::new(renumber(&v.field_type, ids));
            Type::Map(MapType::new(Arc::new(k), Arc::new(v)))
        }
        Type::Primitive(_) => t.clone(),
    }
}
