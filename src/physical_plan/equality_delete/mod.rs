//! Equality deletes applied as a spillable, sequence-gated hash anti-join.

mod exec;
mod table;

pub use exec::{EqualityDeleteColumns, EqualityDeleteExec, FileGate};
pub use table::{GLOBAL_SCOPE, NO_SCOPE};
