//! Analyses over the loaded model. Each produces a serializable report whose JSON form
//! carries a versioned `schema` name.

pub mod summary;
