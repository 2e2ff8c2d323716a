//! The figures' arithmetic: percentiles, a latency line, MB.

pub fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

pub fn lat_summary(mut lat: Vec<f64>) -> String {
    lat.sort_by(|a, b| a.total_cmp(b));
    format!(
        "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        pct(&lat, 0.5) * 1e3,
        pct(&lat, 0.99) * 1e3,
        lat.last().copied().unwrap_or(0.0) * 1e3
    )
}

/// Bytes as MB (10^6 bytes).
pub fn mb(b: f64) -> f64 {
    b / 1e6
}
