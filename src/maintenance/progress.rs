//! Progress of long maintenance runs, for whoever watches: a session extension the procedures
//! report to (the CLI draws a bar on a terminal).
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use iceberg_exec::maintenance::{MaintenanceProgress, ProgressEvent};
//! # fn f(session: &iceberg_exec::IcebergSession) {
//! let progress = MaintenanceProgress::new(|e: &ProgressEvent| {
//!     eprintln!("{}: {}/{} {}", e.procedure, e.done, e.total, e.unit)
//! });
//! session
//!     .context()
//!     .state_ref()
//!     .write()
//!     .config_mut()
//!     .set_extension(Arc::new(progress));
//! # }
//! ```

use std::sync::Arc;

use datafusion::execution::context::SessionState;

/// One step of a procedure: `done` of `total` units (files) so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgressEvent {
    /// The procedure (`rewrite_data_files`).
    pub procedure: &'static str,
    /// Units finished.
    pub done: u64,
    /// Units in all.
    pub total: u64,
    /// What a unit is (`files`).
    pub unit: &'static str,
}

/// A session extension that receives [`ProgressEvent`]s (see the module documentation).
pub struct MaintenanceProgress {
    report: Box<dyn Fn(&ProgressEvent) + Send + Sync>,
}

impl MaintenanceProgress {
    /// Reports each event to `report`.
    pub fn new(report: impl Fn(&ProgressEvent) + Send + Sync + 'static) -> Self {
        Self {
            report: Box::new(report),
        }
    }
}

impl std::fmt::Debug for MaintenanceProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MaintenanceProgress")
    }
}

/// Where a run reports: the session's [`MaintenanceProgress`], if it has one.
#[derive(Clone, Default)]
pub(crate) struct Reporter(Option<Arc<MaintenanceProgress>>);

impl Reporter {
    pub(crate) fn of(state: &SessionState) -> Self {
        Self(state.config().get_extension::<MaintenanceProgress>())
    }

    pub(crate) fn report(
        &self,
        procedure: &'static str,
        done: u64,
        total: u64,
        unit: &'static str,
    ) {
        if let Some(p) = &self.0 {
            (p.report)(&ProgressEvent {
                procedure,
                done,
                total,
                unit,
            });
        }
    }
}
