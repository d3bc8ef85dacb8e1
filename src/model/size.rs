//! Byte counts with arithmetic that cannot wrap. A file can claim any 64-bit size; real
//! ones stay far below 2^63 bytes, so where a sum, an end address or a rounding would pass
//! what 64 bits hold it stops at the top instead of wrapping to a small number (a wrapped
//! sum shows an impossible file as a harmless one), and the callers count that.

/// The allocator's granule: block sizes are multiples of 512 bytes.
pub const GRANULE: u64 = 512;

/// The largest size a running count takes as it is: larger sizes (no device has 8 EiB)
/// count as this, so a signed running sum of sizes, which frees subtract from, stays
/// exact for every real file and bounded for any other.
pub const MAX_COUNTED: u64 = i64::MAX as u64;

/// `size` rounded up to the allocator's granule, as it rounds a request (a request of
/// 0 bytes still takes a granule). Within a granule of 2^64 it saturates at `u64::MAX`,
/// so the result is never below `size`.
///
/// ```
/// use leakscope::model::size::round_up_to_granule;
/// assert_eq!(round_up_to_granule(0), 512);
/// assert_eq!(round_up_to_granule(513), 1024);
/// assert_eq!(round_up_to_granule(u64::MAX - 100), u64::MAX);
/// ```
pub fn round_up_to_granule(size: u64) -> u64 {
    size.max(1).div_ceil(GRANULE).saturating_mul(GRANULE)
}

/// Σ `sizes`, stopping at `u64::MAX` rather than wrapping.
pub fn sum_sizes(sizes: impl IntoIterator<Item = u64>) -> u64 {
    sizes.into_iter().fold(0, u64::saturating_add)
}

/// `*sum += size`, stopping at `u64::MAX`; returns whether it had to.
pub fn add_size(sum: &mut u64, size: u64) -> bool {
    let (s, over) = sum.overflowing_add(size);
    *sum = if over { u64::MAX } else { s };
    over
}

/// Whether Σ `sizes` passes what 64 bits hold (where [`sum_sizes`] stops at the top).
pub fn sum_overflows(sizes: impl IntoIterator<Item = u64>) -> bool {
    sizes.into_iter().try_fold(0u64, u64::checked_add).is_none()
}

/// The end of the range of `size` bytes at `address`, at most `u64::MAX`.
pub fn end_of(address: u64, size: u64) -> u64 {
    address.saturating_add(size)
}

/// `size` as it enters a signed running count: at most [`MAX_COUNTED`].
pub fn counted(size: u64) -> i64 {
    size.min(MAX_COUNTED) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_saturates_and_never_goes_below_the_size() {
        assert_eq!(round_up_to_granule(1), 512);
        assert_eq!(round_up_to_granule(512), 512);
        assert_eq!(round_up_to_granule(1000), 1024);
        // 2^64 - 512 is a multiple of 512: kept. One more needs 2^64: saturated.
        assert_eq!(round_up_to_granule(u64::MAX - 511), u64::MAX - 511);
        assert_eq!(round_up_to_granule(u64::MAX - 510), u64::MAX);
        assert_eq!(round_up_to_granule(u64::MAX), u64::MAX);
    }

    #[test]
    fn sums_stop_at_the_top() {
        assert_eq!(sum_sizes([1, 2, 3]), 6);
        assert_eq!(sum_sizes([u64::MAX - 511, 1024]), u64::MAX);
        assert!(!sum_overflows([u64::MAX - 1, 1]));
        assert!(sum_overflows([u64::MAX, 1]));
        assert_eq!(end_of(u64::MAX - 10, 100), u64::MAX);
        let mut sum = u64::MAX - 1;
        assert!(!add_size(&mut sum, 1));
        assert_eq!(sum, u64::MAX);
        assert!(add_size(&mut sum, 1));
        assert_eq!(sum, u64::MAX);
        assert_eq!(counted(u64::MAX), i64::MAX);
        assert_eq!(counted(7), 7);
    }
}
