//! SQL identifiers as DataFusion resolves them.

/// An identifier as DataFusion resolves it: lower-cased unless quoted.
pub(crate) fn normalised(i: &datafusion::sql::sqlparser::ast::Ident) -> String {
    match i.quote_style {
        Some(_) => i.value.clone(),
        None => i.value.to_lowercase(),
    }
}
