//! The table a demo ends with.

use jiff::Timestamp;
use shared::protocol::Step;
use std::collections::BTreeMap;

/// Time a node spent in each step of its update, in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Phases {
    pub stage: Option<f64>,
    pub drain: Option<f64>,
    pub reboot: Option<f64>,
    /// From the first step to `done` (None if the node did not finish).
    pub total: Option<f64>,
    /// The step the node ended in.
    pub last: Option<Step>,
}

/// Each node's phases from the observer's timeline.
pub fn phases(timeline: &BTreeMap<String, Vec<(Timestamp, Step)>>) -> BTreeMap<String, Phases> {
    let mut out = BTreeMap::new();
    for (node, steps) in timeline {
        let mut p = Phases::default();
        for pair in steps.windows(2) {
            let ((start, step), (end, _)) = (pair[0], pair[1]);
            let seconds = end.duration_since(start).as_secs_f64();
            match step {
                Step::Stage => p.stage = Some(seconds),
                Step::Drain => p.drain = Some(seconds),
                Step::Reboot => p.reboot = Some(seconds),
                _ => {}
            }
        }
        if let (Some((first, _)), Some((end, Step::Done))) = (steps.first(), steps.last()) {
            p.total = Some(end.duration_since(*first).as_secs_f64());
        }
        p.last = steps.last().map(|(_, s)| *s);
        out.insert(node.clone(), p);
    }
    out
}

/// Counts for the summary's last lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub evictions: u64,
    pub refused_by_pdb: u64,
    pub controller_node_writes: u64,
    pub agent_node_writes: u64,
    pub nodes_updated: usize,
}

/// The summary table as lines.
pub fn render(wall_secs: f64, phases: &BTreeMap<String, Phases>, totals: &Totals) -> Vec<String> {
    let cell = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |s| format!("{s:.1}s"));
    let mut lines = vec![
        format!("{:<16} {:>8} {:>8} {:>8} {:>8}  {}", "node", "stage", "drain", "reboot", "total", "ended in"),
        "-".repeat(64),
    ];
    for (node, p) in phases {
        lines.push(format!(
            "{node:<16} {:>8} {:>8} {:>8} {:>8}  {}",
            cell(p.stage),
            cell(p.drain),
            cell(p.reboot),
            cell(p.total),
            p.last.map_or("-", Step::as_str)
        ));
    }
    let mean = |f: fn(&Phases) -> Option<f64>| {
        let v: Vec<f64> = phases.values().filter_map(f).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    lines.push("-".repeat(64));
    lines.push(format!(
        "{:<16} {:>8} {:>8} {:>8} {:>8}",
        "mean",
        cell(mean(|p| p.stage)),
        cell(mean(|p| p.drain)),
        cell(mean(|p| p.reboot)),
        cell(mean(|p| p.total))
    ));
    lines.push(String::new());
    lines.push(format!("wall time                 {wall_secs:.1}s"));
    lines.push(format!("nodes updated             {}", totals.nodes_updated));
    lines.push(format!("evictions                 {}", totals.evictions));
    lines.push(format!("refused by a PDB (429)    {}", totals.refused_by_pdb));
    lines.push(format!("Node writes, controller   {}", totals.controller_node_writes));
    lines.push(format!("Node writes, agents       {}", totals.agent_node_writes));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        format!("2026-11-21T10:00:{s}Z").parse().unwrap()
    }

    #[test]
    fn phases_are_the_time_between_steps() {
        let mut timeline = BTreeMap::new();
        timeline.insert(
            "w-1".to_string(),
            vec![(at("00"), Step::Stage), (at("02"), Step::Drain), (at("03.5"), Step::Reboot), (at("06"), Step::Done)],
        );
        timeline.insert("w-2".to_string(), vec![(at("00"), Step::Stage), (at("04"), Step::Failed)]);
        let p = phases(&timeline);
        assert_eq!(
            p["w-1"],
            Phases { stage: Some(2.0), drain: Some(1.5), reboot: Some(2.5), total: Some(6.0), last: Some(Step::Done) }
        );
        assert_eq!(p["w-2"], Phases { stage: Some(4.0), last: Some(Step::Failed), ..Default::default() });
        let lines = render(
            7.25,
            &p,
            &Totals {
                evictions: 4,
                refused_by_pdb: 2,
                controller_node_writes: 8,
                agent_node_writes: 6,
                nodes_updated: 1,
            },
        );
        assert_eq!(lines[2], "w-1                  2.0s     1.5s     2.5s     6.0s  done");
        assert_eq!(lines[3], "w-2                  4.0s        -        -        -  failed");
        assert!(
            lines.contains(&"wall time                 7.2s".to_string())
                || lines.contains(&"wall time                 7.3s".to_string())
        );
        assert!(lines.contains(&"refused by a PDB (429)    2".to_string()));
    }
}
