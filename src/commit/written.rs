//! The files a statement wrote, kept until its commit: removed when the commit fails for sure.

use std::sync::{Arc, Mutex};

/// Locations of every file a write handed out, shared by the writer and commit nodes of one
/// statement so that a failed statement can remove what it wrote.
#[derive(Debug, Clone, Default)]
pub struct WrittenFiles(Arc<Mutex<Vec<String>>>);

impl WrittenFiles {
    pub(crate) fn record(&self, location: String) {
        if let Ok(mut v) = self.0.lock() {
            v.push(location);
        }
    }

    /// Deletes every recorded file (after a failed statement), leaving none recorded. Best
    /// effort: a file that cannot be removed is an orphan, not a correctness problem.
    pub async fn remove_all(&self, file_io: &iceberg::io::FileIO) {
        for f in self.take() {
            if let Err(e) = file_io.delete(&f).await {
                log::warn!("could not remove {f} after a failed statement: {e}");
            }
        }
    }

    /// Takes the recorded locations (each once), leaving none.
    pub fn take(&self) -> Vec<String> {
        let mut taken = self
            .0
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default();
        taken.sort_unstable();
        taken.dedup();
        taken
    }
}
