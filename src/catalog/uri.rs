//! Catalog database URIs: the SQLAlchemy forms pyiceberg users already have, and our own default.

use std::path::PathBuf;

use datafusion::error::{DataFusionError, Result};

/// Where the catalog database lives, parsed from a URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogUri {
    /// A SQLite database file (created if missing).
    Sqlite(PathBuf),
    /// An in-memory SQLite database (for tests; lives as long as the catalog).
    SqliteMemory,
    /// A PostgreSQL server, as a `postgres://` URL understood by the driver.
    Postgres(String),
}

impl CatalogUri {
    /// Parses a catalog URI.
    ///
    /// Accepted forms:
    /// - `sqlite:////abs/path/catalog.db` (SQLAlchemy, absolute path)
    /// - `sqlite:///relative/catalog.db` (SQLAlchemy, relative to the working directory)
    /// - `sqlite://some/dir/catalog.db` (path as written; the CLI's default form)
    /// - `sqlite://:memory:` or `sqlite:///:memory:` (in memory)
    /// - `postgresql://...`, `postgres://...`, `postgresql+<driver>://...`
    pub fn parse(uri: &str) -> Result<Self> {
        let bad = |why: &str| {
            DataFusionError::Configuration(format!("invalid catalog URI '{uri}': {why}"))
        };
        let Some((scheme, rest)) = uri.split_once("://") else {
            return Err(bad(
                "expected <scheme>://..., e.g. sqlite:////abs/path/catalog.db",
            ));
        };
        let base_scheme = scheme
            .split('+')
            .next()
            .unwrap_or(scheme)
            .to_ascii_lowercase();
        match base_scheme.as_str() {
            "sqlite" => {
                let path = match rest.strip_prefix('/') {
                    // sqlite:///<path>: SQLAlchemy; <path> is absolute when it starts with '/'.
                    Some(p) => p,
                    None => rest,
                };
                let path = path.split('?').next().unwrap_or(path);
                if path.is_empty() || path == ":memory:" {
                    return Ok(CatalogUri::SqliteMemory);
                }
                Ok(CatalogUri::Sqlite(PathBuf::from(path)))
            }
            "postgres" | "postgresql" => Ok(CatalogUri::Postgres(format!("postgres://{rest}"))),
            other => Err(bad(&format!(
                "unsupported scheme '{other}' (supported: sqlite, postgresql)"
            ))),
        }
    }

    /// The URL handed to the database driver.
    pub(crate) fn driver_url(&self) -> String {
        match self {
            CatalogUri::Sqlite(path) => format!("sqlite://{}?mode=rwc", path.display()),
            CatalogUri::SqliteMemory => "sqlite::memory:".to_string(),
            CatalogUri::Postgres(url) => url.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlalchemy_forms() {
        assert_eq!(
            CatalogUri::parse("sqlite:////abs/path/catalog.db").unwrap(),
            CatalogUri::Sqlite(PathBuf::from("/abs/path/catalog.db"))
        );
        assert_eq!(
            CatalogUri::parse("sqlite:///relative.db").unwrap(),
            CatalogUri::Sqlite(PathBuf::from("relative.db"))
        );
        assert_eq!(
            CatalogUri::parse("sqlite://./warehouse/catalog.db").unwrap(),
            CatalogUri::Sqlite(PathBuf::from("./warehouse/catalog.db"))
        );
        assert_eq!(
            CatalogUri::parse("sqlite:///:memory:").unwrap(),
            CatalogUri::SqliteMemory
        );
        assert_eq!(
            CatalogUri::parse("postgresql+psycopg2://u:p@h:5432/db").unwrap(),
            CatalogUri::Postgres("postgres://u:p@h:5432/db".into())
        );
    }

    #[test]
    fn rejects_unknown() {
        let e = CatalogUri::parse("mysql://x").unwrap_err().to_string();
        assert!(e.contains("unsupported scheme 'mysql'"), "{e}");
        let e = CatalogUri::parse("catalog.db").unwrap_err().to_string();
        assert!(e.contains("expected <scheme>://"), "{e}");
    }
}
