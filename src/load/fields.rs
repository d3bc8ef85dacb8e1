//! The keys of a trace entry, as small codes: keys are memoized strings, so the builder
//! classifies each distinct key string once and the reader dispatches on the code.

pub(crate) const UNSET: u8 = 0;
pub(crate) const OTHER: u8 = 1;
pub(crate) const ACTION: u8 = 2;
pub(crate) const ADDR: u8 = 3;
pub(crate) const DEVICE_FREE: u8 = 4;
pub(crate) const SIZE: u8 = 5;
pub(crate) const STREAM: u8 = 6;
pub(crate) const TIME: u8 = 7;
pub(crate) const COMPILE_CONTEXT: u8 = 8;
pub(crate) const USER_METADATA: u8 = 9;
pub(crate) const POOL_ID: u8 = 10;
pub(crate) const FRAMES: u8 = 11;

/// The code of a trace-entry key.
pub(crate) fn classify(key: &str) -> u8 {
    match key {
        "action" => ACTION,
        "addr" => ADDR,
        "device_free" => DEVICE_FREE,
        "size" => SIZE,
        "stream" => STREAM,
        "time_us" => TIME,
        "compile_context" => COMPILE_CONTEXT,
        "user_metadata" => USER_METADATA,
        "pool_id" => POOL_ID,
        "frames" => FRAMES,
        _ => OTHER,
    }
}
