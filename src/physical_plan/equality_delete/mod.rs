//! Equality deletes applied as a spillable, sequence-gated hash anti-join.
//!
//! ```text
//!  exec.rs   EqualityDeleteExec: the node; the build shared by its partitions
//!  build.rs  delete keys into the key table, or hash-partitioned into spill files (Grace)
//!  probe.rs  data rows looked up, gated by sequence number and scope
//!  table.rs  the key table: keys, their sequence numbers and scopes
//! ```

mod build;
mod exec;
mod probe;
mod table;

pub use build::{EqualityDeleteColumns, FileGate};
pub use exec::EqualityDeleteExec;
pub use table::{GLOBAL_SCOPE, NO_SCOPE};
