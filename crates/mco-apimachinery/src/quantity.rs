//! Kubernetes resource quantities.

/// A Kubernetes quantity (`512Mi`, `1G`, `8192`) in bytes; `None` when it is not one.
pub fn bytes(q: &str) -> Option<i64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '-' || c == '+' || c == '.'))
        .unwrap_or(q.len());
    let (num, unit) = q.split_at(split);
    let mult: f64 = match unit {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        _ => return None,
    };
    let n: f64 = num.parse().ok()?;
    Some((n * mult) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_in_bytes() {
        assert_eq!(bytes("8192"), Some(8192));
        assert_eq!(bytes("1Gi"), Some(1 << 30));
        assert_eq!(bytes("10G"), Some(10_000_000_000));
        assert_eq!(bytes("-1"), Some(-1));
        assert_eq!(bytes("1Zi"), None);
    }
}
