//! The encoders of the export stage: Parquet tables, Perfetto's protobuf trace and pprof's
//! profile, each from plain data the export builds (no analysis here).

pub mod parquet;
pub mod perfetto;
pub mod pprof;
pub mod protobuf;
