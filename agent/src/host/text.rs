//! Cuts what hosts print down to a message fit for a node's `state-message` and an Event.
//!
//! # Guarantees
//! - Both functions count characters, never bytes, so they never split a character.
//! - The result is never longer than the limit given (plus the marker of [`head`]).

/// The last `max_lines` non-empty lines of `text`, each trimmed, joined with " / ", of which the
/// last `max_chars` characters are kept: where a failing command or update step usually says why.
pub(crate) fn tail(text: &str, max_lines: usize, max_chars: usize) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
    let joined = lines[lines.len().saturating_sub(max_lines)..].join(" / ");
    let skip = joined.chars().count().saturating_sub(max_chars);
    joined.chars().skip(skip).collect()
}

/// `text` trimmed, cut to its first `max_chars` characters with " ..." appended when cut;
/// "(no message)" when nothing is left.
pub(crate) fn head(text: &str, max_chars: usize) -> String {
    let text = text.trim();
    if text.is_empty() {
        return "(no message)".to_owned();
    }
    let mut cut: String = text.chars().take(max_chars).collect();
    if cut.len() < text.len() {
        cut.push_str(" ...");
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_non_empty_lines_within_bounds() {
        let many: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        assert_eq!(tail(&many, 3, 100), "line 28 / line 29 / line 30");
        assert_eq!(tail("  a  \n\n\n b \n", 10, 100), "a / b");
        assert_eq!(tail(&"x".repeat(5000), 10, 800).len(), 800);
        assert_eq!(tail("\n\n", 10, 100), "");
        assert_eq!(tail("äöü", 10, 2), "öü", "characters, not bytes");
    }

    #[test]
    fn the_head_is_cut_with_a_marker() {
        assert_eq!(head("  disk full \n", 300), "disk full");
        assert_eq!(head("", 300), "(no message)");
        let long = head(&"x".repeat(1000), 300);
        assert!(long.len() == 304 && long.ends_with(" ..."), "{long}");
        assert_eq!(head("ääää", 2), "ää ...", "characters, not bytes");
    }
}
