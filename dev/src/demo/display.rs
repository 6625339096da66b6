//! Live progress of a rollout.

use crate::observer::{NodeState, Observed};
use jiff::Timestamp;
use shared::protocol::Step;

/// Width of the progress bar in characters.
const BAR: usize = 30;

/// Where the rollout stands, as the display shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub total: usize,
    pub up_to_date: usize,
    pub failed: usize,
    pub blocked: usize,
    /// (node, step, seconds in the step), by name.
    pub in_flight: Vec<(String, Step, f64)>,
}

/// The progress towards `target` in `observed`, at `now`.
pub fn progress(observed: &Observed, target: &str, now: Timestamp) -> Progress {
    let mut p = Progress { total: observed.nodes.len(), up_to_date: 0, failed: 0, blocked: 0, in_flight: Vec::new() };
    for (name, node) in &observed.nodes {
        let on_target = node.os_image.as_deref() == Some(target);
        match (node.step, node.target.as_deref() == Some(target)) {
            (Some(Step::Failed), true) if !on_target => p.failed += 1,
            (Some(Step::Blocked), true) if !on_target => p.blocked += 1,
            (Some(step @ (Step::Stage | Step::Fetch | Step::Drain | Step::Reboot | Step::KubeadmUpgrade)), _) => {
                let since = observed.timeline.get(name).and_then(|t| t.last()).map(|(at, _)| *at).unwrap_or(now);
                let seconds = now.duration_since(since).as_secs_f64().max(0.0);
                p.in_flight.push((name.clone(), step, seconds));
            }
            _ if on_target && !in_flight_step(node) => p.up_to_date += 1,
            _ => {}
        }
    }
    p
}

fn in_flight_step(node: &NodeState) -> bool {
    matches!(node.step, Some(Step::Stage | Step::Fetch | Step::Drain | Step::Reboot | Step::KubeadmUpgrade))
}

/// The terminal view: a progress bar line, then one line per in-flight node.
pub fn render_terminal(p: &Progress, elapsed_secs: f64) -> Vec<String> {
    let filled = (p.up_to_date * BAR).checked_div(p.total).unwrap_or(BAR);
    let mut lines = vec![format!(
        "[{}{}] {}/{} nodes up to date | {} updating | {} failed | {} blocked | {:>5.1}s",
        "#".repeat(filled),
        ".".repeat(BAR - filled),
        p.up_to_date,
        p.total,
        p.in_flight.len(),
        p.failed,
        p.blocked,
        elapsed_secs
    )];
    for (node, step, seconds) in &p.in_flight {
        lines.push(format!("  {node:<16} {:<7} {seconds:>5.1}s", step.as_str()));
    }
    lines
}

/// A plain line for a step a node entered, for logs and pipes.
pub fn render_transition(at: Timestamp, node: &str, step: Step) -> String {
    format!("{} {node} {}", at.strftime("%Y-%m-%dT%H:%M:%S%.3fZ"), step.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(step: Option<Step>, target: Option<&str>, image: &str) -> NodeState {
        NodeState {
            step,
            target: target.map(Into::into),
            os_image: Some(image.into()),
            ready: true,
            ..Default::default()
        }
    }

    fn observed() -> Observed {
        let mut o = Observed::default();
        let t0: Timestamp = "2026-11-21T10:00:00Z".parse().unwrap();
        o.nodes.insert("a".into(), node(Some(Step::Done), Some("v2"), "v2"));
        o.nodes.insert("b".into(), node(Some(Step::Drain), Some("v2"), "v1"));
        o.nodes.insert("c".into(), node(Some(Step::Failed), Some("v2"), "v1"));
        o.nodes.insert("d".into(), node(None, None, "v1"));
        o.timeline.insert("b".into(), vec![(t0, Step::Stage), ("2026-11-21T10:00:02Z".parse().unwrap(), Step::Drain)]);
        o
    }

    #[test]
    fn progress_counts_each_node_once() {
        let p = progress(&observed(), "v2", "2026-11-21T10:00:05.5Z".parse().unwrap());
        assert_eq!((p.total, p.up_to_date, p.failed, p.blocked), (4, 1, 1, 0));
        assert_eq!(p.in_flight, vec![("b".to_string(), Step::Drain, 3.5)]);
    }

    #[test]
    fn the_terminal_view_shows_the_bar_and_each_node_in_flight() {
        let p = progress(&observed(), "v2", "2026-11-21T10:00:05.5Z".parse().unwrap());
        let lines = render_terminal(&p, 5.5);
        assert_eq!(
            lines[0],
            format!(
                "[{}{}] 1/4 nodes up to date | 1 updating | 1 failed | 0 blocked |   5.5s",
                "#".repeat(7),
                ".".repeat(23)
            )
        );
        assert_eq!(lines[1], "  b                drain     3.5s");
    }

    #[test]
    fn transitions_are_timestamped_lines() {
        let at: Timestamp = "2026-11-21T10:00:02.25Z".parse().unwrap();
        assert_eq!(render_transition(at, "w-1", Step::Reboot), "2026-11-21T10:00:02.250Z w-1 reboot");
    }
}
