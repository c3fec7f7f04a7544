//! The tool catalog: its vocabulary (`model`, `record`) and its SQLite persistence (`store`).

pub mod integrity;
pub mod model;
pub mod names;
pub mod record;
pub mod search;
pub mod store;
#[cfg(test)]
mod store_model;
