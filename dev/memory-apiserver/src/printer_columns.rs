//! The pieces every printer of [`super::table`] (and [`super::auth::printers`]) builds its columns and cells from:
//! a column definition, the Age column and its cell, and Go's `HumanDuration` that prints ages.

use super::object::parse_time;
use super::resource::PrinterColumn;
use serde_json::Value;

/// A printer column that reads no JSONPath (a built-in printer fills its cells).
pub(crate) fn column(name: &str, type_: &str, format: &str, priority: i64, description: &str) -> PrinterColumn {
    PrinterColumn {
        name: name.into(),
        type_: type_.into(),
        format: format.into(),
        description: description.into(),
        priority,
        json_path: String::new(),
    }
}

/// The Age column every printer ends with or shows after the first columns.
pub(crate) fn age_column() -> PrinterColumn {
    column(
        "Age",
        "string",
        "",
        0,
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
    )
}

/// `translateTimestampSince`: the age of an RFC 3339 time, `<unknown>` when it is missing.
pub(crate) fn since(time: &str) -> String {
    match parse_time(time) {
        Some(then) => human_duration(jiff::Timestamp::now().duration_since(then).as_secs()),
        None => "<unknown>".into(),
    }
}

/// The Age cell of `object`.
pub(crate) fn age(object: &Value) -> String {
    since(object.pointer("/metadata/creationTimestamp").and_then(Value::as_str).unwrap_or_default())
}

/// Go's `duration.HumanDuration`: `45s`, `5m10s`, `3h`, `2d5h`, `3y`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{days}d", hours / 24 / 365) };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kubectl_prints_them() {
        for (seconds, text) in [
            (-5, "<invalid>"),
            (45, "45s"),
            (310, "5m10s"),
            (900, "15m"),
            (3 * 3600 + 60, "3h1m"),
            (50 * 3600, "2d2h"),
            (400 * 86400, "400d"),
        ] {
            assert_eq!(human_duration(seconds), text);
        }
    }
}
