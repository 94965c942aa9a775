//! Durations on the command line: a number with an optional unit.

use std::time::Duration;

/// Parses `N`, `Ns`, `Nm`, `Nh`, `Nd` or `Nw` (N a non-negative integer; no unit = seconds).
pub(crate) fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?}: expected a number with an optional unit s, m, h, d or w"))?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        other => {
            return Err(format!(
                "{s:?}: unknown unit {other:?} (use s, m, h, d or w)"
            ));
        }
    };
    n.checked_mul(scale)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{s:?}: too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse("7d"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse("1w"), Ok(Duration::from_secs(604_800)));
        for bad in [
            "",
            "h",
            "1.5h",
            "-1s",
            "3y",
            "1 h x",
            "99999999999999999999w",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
