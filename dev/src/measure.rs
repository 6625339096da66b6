//! What the benchmark programs measure with: memory from `/proc` and quantiles of latencies.

/// A memory field of `/proc/PID/status` (`VmRSS`, `VmHWM`, without the colon), in MiB; `None`
/// when the process or the field is not there.
pub fn status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let value = status.lines().find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))?;
    let kib: f64 = value.split_whitespace().next()?.parse().ok()?;
    Some(kib / 1024.0)
}

/// This process's resident set and its peak (`VmRSS`, `VmHWM`), in MiB; 0 where unreadable.
pub fn own_memory_mib() -> (f64, f64) {
    let field = |name| status_mib(std::process::id(), name).unwrap_or(0.0);
    (field("VmRSS"), field("VmHWM"))
}

/// The value at quantile `q` (0 to 1) of ascending `sorted`, by nearest rank; NaN when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let values: Vec<f64> = (1..=101).map(f64::from).collect();
        assert_eq!(quantile(&values, 0.0), 1.0);
        assert_eq!(quantile(&values, 0.5), 51.0);
        assert_eq!(quantile(&values, 0.99), 100.0);
        assert_eq!(quantile(&values, 1.0), 101.0);
        assert_eq!(quantile(&[7.0], 0.99), 7.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn memory_is_read_from_proc_and_missing_fields_or_processes_are_none() {
        let (rss, peak) = own_memory_mib();
        assert!(rss > 0.0 && peak >= rss, "rss {rss} MiB, peak {peak} MiB");
        // `VmRSS` must not match a field that merely starts with it.
        assert_eq!(status_mib(std::process::id(), "Vm"), None);
        assert_eq!(status_mib(u32::MAX, "VmRSS"), None);
    }
}
