//! The tool catalog's vocabulary: listings and tools (`model`), what is recorded of them
//! (`record`), qualified names, definition integrity and search terms. Its persistence is the
//! `store` layer above it.

pub mod integrity;
pub mod model;
pub mod names;
pub mod record;
pub mod search;
