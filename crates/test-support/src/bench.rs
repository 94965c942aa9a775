//! Helpers of the measured bench binaries (`harness = false`): their flags and their
//! median-with-spread summaries.

/// The number after `flag` in `args` (`--entries 1000`), or `default` when the flag is absent
/// or its value is not a number.
pub fn arg(args: &[String], flag: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `(median, lowest, highest)` of `values` (sorted in place; must not be empty).
pub fn summary(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_summaries() {
        let args: Vec<String> = ["x", "--n", "12", "--bad", "z"].map(String::from).into();
        assert_eq!(
            (
                arg(&args, "--n", 1),
                arg(&args, "--bad", 3),
                arg(&args, "--m", 4)
            ),
            (12, 3, 4)
        );
        assert_eq!(summary(&mut [3.0, 1.0, 2.0, 9.0, 0.5]), (2.0, 0.5, 9.0));
    }
}
