//! What the reconciler tells of a plan besides the NodeVersion status: an Event for each change of a rollout's
//! hold, one Event per node held back once the hold has lasted (`crate::notices`), and the metrics.

use super::*;

impl Reconciler {
    pub(super) fn report_hold(&mut self, version: &NodeVersion, plan: &Plan, reference: &ObjectReference) {
        let uid = version.uid().unwrap_or_default();
        if self.last_holds.get(&uid) == Some(&plan.hold) {
            return;
        }
        self.last_holds.insert(uid, plan.hold.clone());
        // A health check's first evaluation is a moment away: its Event names what the check saw instead.
        if let Some(Hold { reason, message }) = plan.hold.as_ref().filter(|h| !policy::health::pending(h)) {
            tracing::info!(nodeversion = %version.name_any(), %reason, detail = message, "rollout held back");
            self.events.publish(reference.clone(), None, *reason, message.clone(), "Hold");
        }
    }

    /// One Event per node held back for a reason of its own, once the hold has lasted a while; on
    /// the NodeVersion that holds it (the Node too, for nodes no NodeVersion selects). Returns when
    /// the next one falls due.
    pub(super) fn report_held_nodes(
        &mut self,
        versions: &[Arc<NodeVersion>],
        plan: &ClusterPlan,
        references: &[ObjectReference],
    ) -> Option<Instant> {
        let scopes: Vec<String> = versions.iter().map(|v| v.name_any()).chain([String::new()]).collect();
        let held = scopes
            .iter()
            .zip(plan.rollouts.iter().chain([&plan.unowned]))
            .flat_map(|(scope, p)| p.held.iter().map(move |h| (scope.as_str(), h.node.as_str(), &h.hold)));
        let (due, next) = self.notices.observe(held, Instant::now());
        for notice in due {
            let uid = self.nodes.get(&ObjectRef::new(&notice.node)).and_then(|n| n.uid());
            let node = node_reference(&notice.node, uid);
            let Hold { reason, message } = notice.hold;
            tracing::info!(node = %notice.node, %reason, detail = message, "node held back");
            match scopes.iter().position(|s| *s == notice.scope).and_then(|i| references.get(i)) {
                Some(version) => {
                    let note = format!("{}: {message}", notice.node);
                    self.events.publish(version.clone(), Some(node), reason, note, "Hold");
                }
                None => self.events.publish(node, None, reason, message, "Hold"),
            }
        }
        next
    }

    pub(super) fn record_metrics(&self, plan: &ClusterPlan, started: std::time::Instant) {
        let sum = |f: fn(&policy::Counts) -> u32| plan.rollouts.iter().map(|p| f(&p.counts)).sum::<u32>();
        for (situation, value) in [
            ("up_to_date", sum(|c| c.up_to_date)),
            ("outdated", sum(|c| c.outdated)),
            ("in_progress", sum(|c| c.in_progress)),
            ("failed", sum(|c| c.failed)),
            ("blocked", sum(|c| c.blocked)),
        ] {
            self.metrics.nodes.get_or_create(&NodeLabels { situation }).set(i64::from(value));
        }
        self.metrics.reconciles.inc();
        self.metrics.reconcile_seconds.observe(started.elapsed().as_secs_f64());
    }
}
