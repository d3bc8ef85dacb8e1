//! Stage 2, `replay`: walks a device's trace into allocation lifetimes, a timeline of live
//! and reserved bytes, and what the trace cannot see (allocations made before it began,
//! frees whose allocation fell out of the ring buffer).

mod consistency;
mod lifetimes;
mod state;

pub use consistency::Consistency;
pub use lifetimes::{
    Coverage, Lifetime, Mismatch, Origin, Replay, block_stack, coverage, coverage_of, replay,
};
pub use state::{AllocatorState, StateBlock, StateSegment};
