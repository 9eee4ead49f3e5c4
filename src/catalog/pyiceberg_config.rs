//! Catalog settings the way pyiceberg users already have them: `.pyiceberg.yaml` (in
//! `$PYICEBERG_HOME`, else the home directory) and `PYICEBERG_CATALOG__<NAME>__<KEY>`
//! environment variables, which override the file.
//!
//! ```yaml
//! catalog:
//!   lake:
//!     uri: https://catalog.example.com        # REST; sqlite:// or postgresql:// for SQL
//!     warehouse: s3://bucket/warehouse
//!     credential: client-id:client-secret
//!     s3.endpoint: https://s3.example.com
//! ```
//!
//! As in pyiceberg, keys are case-insensitive, and in a variable's name `__` separates the
//! levels and `_` stands for `-` (`PYICEBERG_CATALOG__LAKE__S3__ACCESS_KEY_ID` sets
//! `s3.access-key-id` of catalog `lake`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use datafusion::error::{DataFusionError, Result};
use yaml_rust2::{Yaml, YamlLoader};

/// Where pyiceberg looks for its configuration file.
pub fn pyiceberg_config_path() -> Option<PathBuf> {
    let dir = std::env::var_os("PYICEBERG_HOME").or_else(|| std::env::var_os("HOME"))?;
    Some(Path::new(&dir).join(".pyiceberg.yaml"))
}

/// The text of pyiceberg's configuration file (none when there is no file) and its path as
/// errors show it.
fn config_file() -> Result<(Option<String>, String)> {
    let path = pyiceberg_config_path();
    let text = match &path {
        Some(p) if p.is_file() => Some(std::fs::read_to_string(p).map_err(|e| {
            DataFusionError::Configuration(format!("cannot read {}: {e}", p.display()))
        })?),
        _ => None,
    };
    let shown = path
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| ".pyiceberg.yaml".into());
    Ok((text, shown))
}

/// The properties of catalog `name` from pyiceberg's configuration file and environment.
pub fn pyiceberg_catalog(name: &str) -> Result<BTreeMap<String, String>> {
    let (text, shown) = config_file()?;
    catalog_from(name, text.as_deref(), &shown, std::env::vars())
}

/// The engine's own settings from pyiceberg's configuration: the `execution` section of
/// `.pyiceberg.yaml` (`memory-limit`, `planning-threshold`, ...) and the
/// `PYICEBERG_EXECUTION__<KEY>` variables, which override it. Keys lower-cased, `-` for `_`.
pub fn pyiceberg_execution() -> Result<BTreeMap<String, String>> {
    let (text, shown) = config_file()?;
    execution_from(text.as_deref(), &shown, std::env::vars())
}

/// The `execution` settings of the configuration `text` (shown as `shown` in errors) and `env`.
pub(crate) fn execution_from(
    text: Option<&str>,
    shown: &str,
    env: impl Iterator<Item = (String, String)>,
) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    if let Some(text) = text {
        let docs = YamlLoader::load_from_str(text).map_err(|e| {
            DataFusionError::Configuration(format!("{shown} is not valid YAML: {e}"))
        })?;
        if let Some(Yaml::Hash(top)) = docs.first() {
            for (k, v) in top {
                if !scalar(k).is_some_and(|k| k.eq_ignore_ascii_case("execution")) {
                    continue;
                }
                let Yaml::Hash(entries) = v else {
                    return Err(DataFusionError::Configuration(format!(
                        "{shown}: 'execution' is not a mapping of settings"
                    )));
                };
                for (k, v) in entries {
                    let (Some(k), Some(v)) = (scalar(k), scalar(v)) else {
                        return Err(DataFusionError::Configuration(format!(
                            "{shown}: 'execution' has a setting that is not a plain value"
                        )));
                    };
                    out.insert(k.to_lowercase(), v);
                }
            }
        }
    }
    for (var, value) in env {
        let lower = var.to_lowercase();
        if let Some(key) = lower.strip_prefix("pyiceberg_execution__") {
            out.insert(key.replace("__", ".").replace('_', "-"), value);
        }
    }
    Ok(out)
}

/// A YAML scalar as pyiceberg reads it: a string.
fn scalar(value: &Yaml) -> Option<String> {
    match value {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Catalog `name` from the configuration `text` (shown as `shown` in errors) and `env`.
pub(crate) fn catalog_from(
    name: &str,
    text: Option<&str>,
    shown: &str,
    env: impl Iterator<Item = (String, String)>,
) -> Result<BTreeMap<String, String>> {
    let wanted = name.to_lowercase();
    let mut catalogs: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    if let Some(text) = text {
        let docs = YamlLoader::load_from_str(text).map_err(|e| {
            DataFusionError::Configuration(format!("{shown} is not valid YAML: {e}"))
        })?;
        if let Some(Yaml::Hash(top)) = docs.first() {
            for (k, v) in top {
                let is_catalogs = scalar(k).is_some_and(|k| k.eq_ignore_ascii_case("catalog"));
                let Yaml::Hash(entries) = v else { continue };
                if !is_catalogs {
                    continue;
                }
                for (cat, props) in entries {
                    let Some(cat) = scalar(cat) else { continue };
                    let Yaml::Hash(props) = props else {
                        return Err(DataFusionError::Configuration(format!(
                            "{shown}: catalog '{cat}' is not a mapping of properties"
                        )));
                    };
                    let out = catalogs.entry(cat.to_lowercase()).or_default();
                    for (k, v) in props {
                        let (Some(k), Some(v)) = (scalar(k), scalar(v)) else {
                            return Err(DataFusionError::Configuration(format!(
                                "{shown}: catalog '{cat}' has a property that is not a plain value"
                            )));
                        };
                        out.insert(k.to_lowercase(), v);
                    }
                }
            }
        }
    }
    for (var, value) in env {
        let lower = var.to_lowercase();
        let Some(rest) = lower.strip_prefix("pyiceberg_catalog__") else {
            continue;
        };
        let Some((cat, key)) = rest.split_once("__") else {
            continue;
        };
        let key = key.replace("__", ".").replace('_', "-");
        catalogs
            .entry(cat.replace('_', "-"))
            .or_default()
            .insert(key, value);
    }
    catalogs.remove(&wanted).ok_or_else(|| {
        let known: Vec<&str> = catalogs.keys().map(String::as_str).collect();
        DataFusionError::Configuration(if known.is_empty() {
            format!(
                "catalog '{name}' is not configured: no catalogs in {shown} or in \
                 PYICEBERG_CATALOG__* variables"
            )
        } else {
            format!(
                "catalog '{name}' is not configured (configured: {})",
                known.join(", ")
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "
catalog:
  Lake:
    uri: http://127.0.0.1:8181
    warehouse: s3://warehouse/
    S3.Endpoint: http://127.0.0.1:8333
    s3.path-style-access: true
    retries: 3
  local:
    uri: sqlite:////tmp/cat.db
";

    #[test]
    fn the_file_then_the_environment() {
        let env = vec![
            (
                "PYICEBERG_CATALOG__LAKE__S3__ACCESS_KEY_ID".to_string(),
                "id".to_string(),
            ),
            (
                "PYICEBERG_CATALOG__LAKE__WAREHOUSE".to_string(),
                "s3://other/".to_string(),
            ),
            ("UNRELATED".to_string(), "x".to_string()),
        ];
        let lake = catalog_from("lake", Some(FILE), "f", env.into_iter()).unwrap();
        assert_eq!(lake["uri"], "http://127.0.0.1:8181");
        assert_eq!(lake["s3.endpoint"], "http://127.0.0.1:8333");
        assert_eq!(lake["s3.path-style-access"], "true");
        assert_eq!(lake["retries"], "3");
        assert_eq!(lake["s3.access-key-id"], "id");
        assert_eq!(lake["warehouse"], "s3://other/");
        let only_env = catalog_from(
            "dev",
            None,
            "f",
            vec![(
                "PYICEBERG_CATALOG__DEV__URI".to_string(),
                "sqlite:///x.db".to_string(),
            )]
            .into_iter(),
        )
        .unwrap();
        assert_eq!(only_env["uri"], "sqlite:///x.db");
    }

    #[test]
    fn execution_settings_from_the_file_then_the_environment() {
        let text = "catalog:\n  x:\n    uri: sqlite:///x.db\nexecution:\n  Memory-Limit: 536870912\n  planning-threshold: 100000\n";
        let env = vec![(
            "PYICEBERG_EXECUTION__PLANNING_THRESHOLD".to_string(),
            "5".to_string(),
        )];
        let got = execution_from(Some(text), "f", env.into_iter()).unwrap();
        assert_eq!(got["memory-limit"], "536870912");
        assert_eq!(got["planning-threshold"], "5");
        assert!(execution_from(None, "f", std::iter::empty())
            .unwrap()
            .is_empty());
        let e = execution_from(Some("execution: 3"), "f", std::iter::empty())
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a mapping"), "{e}");
    }

    #[test]
    fn unknown_catalogs_and_bad_files_say_so() {
        let e = catalog_from("nope", Some(FILE), "f", std::iter::empty())
            .unwrap_err()
            .to_string();
        assert!(e.contains("configured: lake, local"), "{e}");
        let e = catalog_from("x", Some("catalog: [unclosed"), "f", std::iter::empty())
            .unwrap_err()
            .to_string();
        assert!(e.contains("not valid YAML"), "{e}");
        let e = catalog_from("x", None, "f", std::iter::empty())
            .unwrap_err()
            .to_string();
        assert!(e.contains("no catalogs"), "{e}");
    }
}
