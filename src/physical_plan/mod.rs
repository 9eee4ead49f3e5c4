//! Our physical operators, one folder per family.

pub mod commit;
pub mod scan;
pub mod write;
