//! Sizes as people write them in a budget: `"1.5 MiB"`, `"20GB"`, `"512 B"`, `4096`.

/// A size that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Not a number with an optional unit.
    #[error("`{0}` is not a size (try \"1.5 MiB\" or a number of bytes)")]
    NotASize(String),
    /// A unit leakscope does not know.
    #[error("`{text}`: unknown unit `{unit}` (B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)")]
    Unit {
        /// The size as written.
        text: String,
        /// The unit as written.
        unit: String,
    },
    /// More bytes than 64 bits hold.
    #[error("`{0}` is more bytes than leakscope can count (2^64)")]
    TooLarge(String),
}

/// Parses `"1.5 MiB"`, `"20GB"`, `"512 B"`, `"4096"` into bytes (rounded to the nearest).
///
/// ```
/// use leakscope::budget::parse_size;
/// assert_eq!(parse_size("1.5 MiB"), Ok(1_572_864));
/// assert_eq!(parse_size("3 GB"), Ok(3_000_000_000));
/// assert!(parse_size("3 parsecs").is_err());
/// ```
pub fn parse_size(t: &str) -> Result<u64, SizeError> {
    let s = t.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| SizeError::NotASize(t.to_string()))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kib" | "k" => 1024.0,
        "mib" | "m" => 1024.0 * 1024.0,
        "gib" | "g" => 1024f64.powi(3),
        "tib" | "t" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => {
            return Err(SizeError::Unit {
                text: t.to_string(),
                unit: other.to_string(),
            });
        }
    };
    let bytes = (n * mult).round();
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(SizeError::TooLarge(t.to_string()));
    }
    Ok(bytes as u64)
}
