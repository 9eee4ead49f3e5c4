//! The arguments of `CALL system.<procedure>(..)`: named (`table => 'ns.t'`) or positional, as
//! literals, `map('k', 'v', ..)` or `array(..)`, read as the procedures need them (text,
//! numbers, booleans, times, table names). Shared by every procedure module.

use std::collections::BTreeMap;

use datafusion::error::{DataFusionError, Result};
use datafusion::sql::sqlparser::ast::{
    Expr as SqlExpr, FunctionArg, FunctionArgExpr, FunctionArguments, Value,
};
use iceberg::TableIdent;

/// One argument's value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arg {
    Text(String),
    Map(BTreeMap<String, String>),
    List(Vec<String>),
}

/// The arguments by parameter name: named ones, and positional ones in `params` order.
pub(crate) fn arguments(
    procedure: &str,
    params: &[&str],
    args: &FunctionArguments,
) -> Result<BTreeMap<String, Arg>> {
    let list = match args {
        FunctionArguments::List(list) => list.args.as_slice(),
        FunctionArguments::None => &[],
        FunctionArguments::Subquery(_) => {
            return Err(DataFusionError::Plan(format!(
                "CALL {procedure}: arguments must be values"
            )))
        }
    };
    let mut out = BTreeMap::new();
    let mut named = false;
    for (i, arg) in list.iter().enumerate() {
        let (name, value) = match arg {
            FunctionArg::Named { name, arg, .. } => {
                named = true;
                (name.value.to_ascii_lowercase(), arg)
            }
            FunctionArg::Unnamed(arg) => {
                if named {
                    return Err(DataFusionError::Plan(format!(
                        "CALL {procedure}: a positional argument follows a named one"
                    )));
                }
                let Some(name) = params.get(i) else {
                    return Err(DataFusionError::Plan(format!(
                        "CALL {procedure}: too many arguments (parameters: {})",
                        params.join(", ")
                    )));
                };
                (name.to_string(), arg)
            }
            FunctionArg::ExprNamed { .. } => {
                return Err(DataFusionError::Plan(format!(
                    "CALL {procedure}: name arguments as name => value"
                )))
            }
        };
        if !params.contains(&name.as_str()) {
            return Err(DataFusionError::Plan(format!(
                "CALL {procedure}: no parameter '{name}' (parameters: {})",
                params.join(", ")
            )));
        }
        let FunctionArgExpr::Expr(expr) = value else {
            return Err(DataFusionError::Plan(format!(
                "CALL {procedure}: '{name}' must be a value"
            )));
        };
        // NULL stands for "not given" (a positional argument skipped).
        if matches!(expr, SqlExpr::Value(v) if v.value == Value::Null) {
            continue;
        }
        if out
            .insert(name.clone(), value_of(procedure, &name, expr)?)
            .is_some()
        {
            return Err(DataFusionError::Plan(format!(
                "CALL {procedure}: '{name}' is given twice"
            )));
        }
    }
    Ok(out)
}

pub(crate) fn literal(expr: &SqlExpr) -> Option<String> {
    match expr {
        SqlExpr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Some(s.clone()),
            Value::Number(n, _) => Some(n.to_string()),
            Value::Boolean(b) => Some(b.to_string()),
            _ => None,
        },
        SqlExpr::UnaryOp { op, expr } if op.to_string() == "-" => {
            literal(expr).map(|v| format!("-{v}"))
        }
        // TIMESTAMP '2026-01-01 00:00:00' and the like: the text.
        SqlExpr::TypedString(t) => match &t.value.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    }
}

pub(crate) fn value_of(procedure: &str, name: &str, expr: &SqlExpr) -> Result<Arg> {
    if let Some(text) = literal(expr) {
        return Ok(Arg::Text(text));
    }
    if let SqlExpr::Array(a) = expr {
        return list(procedure, name, a.elem.iter().collect());
    }
    if let SqlExpr::Function(f) = expr {
        if f.name.to_string().eq_ignore_ascii_case("array") {
            let FunctionArguments::List(l) = &f.args else {
                return Ok(Arg::List(vec![]));
            };
            let mut items = vec![];
            for a in &l.args {
                match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => items.push(e),
                    _ => return list(procedure, name, vec![expr]),
                }
            }
            return list(procedure, name, items);
        }
        if f.name.to_string().eq_ignore_ascii_case("map") {
            let FunctionArguments::List(list) = &f.args else {
                return Ok(Arg::Map(BTreeMap::new()));
            };
            let values: Option<Vec<String>> = list
                .args
                .iter()
                .map(|a| match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => literal(e),
                    _ => None,
                })
                .collect();
            return match values {
                Some(values) if values.len() % 2 == 0 => Ok(Arg::Map(
                    values
                        .chunks(2)
                        .map(|kv| (kv[0].clone(), kv[1].clone()))
                        .collect(),
                )),
                _ => Err(DataFusionError::Plan(format!(
                    "CALL {procedure}: '{name}' must be map('key', 'value', ..) of literals"
                ))),
            };
        }
    }
    Err(DataFusionError::Plan(format!(
        "CALL {procedure}: '{name}' must be a literal or map(..), got {expr}"
    )))
}

pub(crate) fn list(procedure: &str, name: &str, items: Vec<&SqlExpr>) -> Result<Arg> {
    items
        .into_iter()
        .map(|e| {
            literal(e).ok_or_else(|| {
                DataFusionError::Plan(format!(
                    "CALL {procedure}: '{name}' must be array(..) of literals, got {e}"
                ))
            })
        })
        .collect::<Result<Vec<_>>>()
        .map(Arg::List)
}

pub(crate) fn text(
    procedure: &str,
    args: &BTreeMap<String, Arg>,
    name: &str,
) -> Result<Option<String>> {
    match args.get(name) {
        None => Ok(None),
        Some(Arg::Text(t)) => Ok(Some(t.clone())),
        Some(_) => Err(DataFusionError::Plan(format!(
            "CALL {procedure}: '{name}' must be a single value"
        ))),
    }
}

pub(crate) fn number<T: std::str::FromStr>(
    procedure: &str,
    args: &BTreeMap<String, Arg>,
    name: &str,
) -> Result<Option<T>> {
    text(procedure, args, name)?
        .map(|t| {
            t.trim().parse().map_err(|_| {
                DataFusionError::Plan(format!(
                    "CALL {procedure}: '{name}' must be a number, got '{t}'"
                ))
            })
        })
        .transpose()
}

pub(crate) fn boolean(
    procedure: &str,
    args: &BTreeMap<String, Arg>,
    name: &str,
) -> Result<Option<bool>> {
    text(procedure, args, name)?
        .map(|t| match t.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(DataFusionError::Plan(format!(
                "CALL {procedure}: '{name}' must be true or false, got '{t}'"
            ))),
        })
        .transpose()
}

/// A time given as `TIMESTAMP '2026-01-01 00:00:00'`, a string of that form (UTC unless it
/// carries an offset, RFC 3339), or milliseconds since the epoch.
pub(crate) fn timestamp_ms(
    procedure: &str,
    args: &BTreeMap<String, Arg>,
    name: &str,
) -> Result<Option<i64>> {
    let Some(t) = text(procedure, args, name)? else {
        return Ok(None);
    };
    let t = t.trim();
    if let Ok(ms) = t.parse::<i64>() {
        return Ok(Some(ms));
    }
    if let Ok(dt) = chrono::DateTime::parse_from_rfc3339(t) {
        return Ok(Some(dt.timestamp_millis()));
    }
    for format in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(dt) = chrono::NaiveDateTime::parse_from_str(t, format) {
            return Ok(Some(dt.and_utc().timestamp_millis()));
        }
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        if let Some(dt) = d.and_hms_opt(0, 0, 0) {
            return Ok(Some(dt.and_utc().timestamp_millis()));
        }
    }
    Err(DataFusionError::Plan(format!(
        "CALL {procedure}: '{name}' must be a timestamp ('2026-01-01 00:00:00') or epoch \
         milliseconds, got '{t}'"
    )))
}

/// `'ns.t'`, `'t'` (the default namespace) or `'<catalog>.ns.t'` as a table identifier.
pub(crate) fn table_ident(
    catalog: &str,
    default_namespace: &str,
    name: &str,
) -> Result<TableIdent> {
    let mut parts: Vec<String> = name.split('.').map(|p| p.trim().to_string()).collect();
    if parts.len() >= 3 && parts[0] == catalog {
        parts.remove(0);
    }
    if parts.len() == 1 {
        parts.insert(0, default_namespace.to_string());
    }
    if parts.iter().any(String::is_empty) {
        return Err(DataFusionError::Plan(format!(
            "CALL: bad table name '{name}'"
        )));
    }
    TableIdent::from_strs(&parts).map_err(|e| DataFusionError::Plan(format!("CALL: {e}")))
}

/// The table a procedure's `table` argument names.
pub(crate) fn table_arg(
    procedure: &str,
    args: &BTreeMap<String, Arg>,
    catalog: &str,
    default_namespace: &str,
) -> Result<TableIdent> {
    let Some(table) = text(procedure, args, "table")? else {
        return Err(DataFusionError::Plan(format!(
            "CALL {procedure}: 'table' is required"
        )));
    };
    table_ident(catalog, default_namespace, &table)
}
