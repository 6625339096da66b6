//! The policy's views of the watched nodes, kept in the incremental [`Planner`] and given again only when they change.
//!
//! # Guarantees
//! - After [`NodeViews::sync`] the planner holds exactly the watched nodes, each viewed from its newest object (the
//!   executor's own write while the watch has not delivered it), its drain's progress and the current selectors.
//! - A node is viewed again only when the watch delivered a new object for it (the reflector stores a new `Arc`),
//!   its drain's progress changed, the executor's overlay has (or had) an entry for it, or the selectors changed.
//! - With [`Changes`] (the watch's record of the nodes it delivered), a sync looks only at those nodes and at the
//!   nodes with a drain or an overlay entry: its cost does not grow with the cluster. Without it (or after a
//!   relist), every cached node is compared: a pointer comparison and a few map look-ups each.

use crate::drain::Drains;
use crate::executor::Executor;
use crate::nodes::SlimNode;
use crate::policy::Hold;
use crate::policy::{DrainProgress, NodeSelector, NodeView, Planner};
use crate::reason::Reason;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The nodes the watch delivered since the reconciler last looked. The node watch records every event after the
/// reflector applied it to the store; a relist (which replaces the store without an event per node) makes the
/// next sync compare every node.
#[derive(Debug)]
pub struct Changes {
    inner: Mutex<ChangeSet>,
}

#[derive(Debug)]
struct ChangeSet {
    names: HashSet<String>,
    /// Compare every node: nothing was recorded yet, or the store was replaced.
    everything: bool,
}

impl Default for Changes {
    fn default() -> Self {
        Changes { inner: Mutex::new(ChangeSet { names: HashSet::new(), everything: true }) }
    }
}

impl Changes {
    /// Records an event of the node watch (after the reflector stored it).
    pub fn record(&self, event: &watcher::Event<SlimNode>) {
        let mut set = self.inner.lock();
        match event {
            watcher::Event::Apply(node) | watcher::Event::Delete(node) => {
                if !set.everything {
                    set.names.insert(node.name().to_owned());
                }
            }
            watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::InitDone => {
                set.everything = true;
                set.names.clear();
            }
        }
    }

    /// The nodes recorded since the last call, or None when every node must be compared.
    fn take(&self) -> Option<HashSet<String>> {
        let mut set = self.inner.lock();
        let everything = std::mem::replace(&mut set.everything, false);
        let names = std::mem::take(&mut set.names);
        (!everything).then_some(names)
    }
}

/// What a node's view is built from besides its watched object.
pub struct Sources<'a> {
    /// Each drain task's progress, by node.
    pub drains: &'a HashMap<String, DrainProgress>,
    /// The nodes the executor's overlay has an entry for.
    pub overlaid: &'a HashSet<String>,
    /// The newest object of a node: the executor's write the watch has not delivered, or the watched one.
    pub freshest: &'a dyn Fn(SlimNode) -> SlimNode,
    /// The nodes held for what the look at their pods found, with the hold (`crate::do_not_disrupt`,
    /// `crate::settle`).
    pub held: &'a HashMap<String, Hold>,
    /// The nodes deferred for a budget, with why (`crate::budget_order`).
    pub deferred: &'a HashMap<String, String>,
}

/// `view` with what the look at its node's pods before a start found (`crate::do_not_disrupt`): the pod that holds
/// it (unless the Node's own annotation does already), the workloads it waits for (`crate::settle`) and the budget
/// it is deferred for.
pub fn with_looks(view: &mut NodeView, held: Option<&Hold>, deferred: Option<&String>) {
    match held {
        // The Node's own annotation, if any, names the hold.
        Some(hold) if hold.reason == Reason::DoNotDisrupt => {
            view.do_not_disrupt.get_or_insert_with(|| hold.message.clone());
        }
        Some(hold) => view.settle = Some(hold.clone()),
        None => {}
    }
    view.deferred = deferred.cloned();
}

/// What the planner was last given of a node.
struct Seen {
    /// The watched object it was viewed from.
    node: Arc<SlimNode>,
    drain: DrainProgress,
    /// Held for what the look at its pods found, with the hold.
    held: Option<Hold>,
    /// Deferred for a budget, with why.
    deferred: Option<String>,
    /// It was viewed from the executor's overlay.
    overlaid: bool,
    /// The last full comparison that found it in the store.
    epoch: u64,
}

/// The planner and what each node's view was built from.
#[derive(Default)]
pub struct NodeViews {
    pub planner: Planner,
    seen: HashMap<String, Seen>,
    /// Nodes last viewed with a drain's progress, from the overlay or held for a pod: compared on every sync.
    special: HashSet<String>,
    /// The selectors the views were built with, by rollout.
    selectors: Vec<Option<NodeSelector>>,
    /// Every node was compared once: a sync may look at the changed ones only.
    synced: bool,
    epoch: u64,
}

impl NodeViews {
    /// Brings the planner's nodes up to date with `store`, the executor's overlay and the drains, under
    /// `selectors` (one per rollout given to the planner), looking only at the nodes in `changes` when given.
    /// Returns how many nodes were viewed again.
    pub fn sync(
        &mut self,
        store: &Store<SlimNode>,
        executor: &Executor,
        drains: &Drains,
        selectors: &[Option<&NodeSelector>],
        changes: Option<&Changes>,
    ) -> usize {
        let sources = Sources {
            drains: &drains.all_progress(),
            overlaid: &executor.overlaid(),
            freshest: &|node| executor.freshest(node),
            held: &executor.held_for_pods(),
            deferred: &executor.deferred_for_budgets(),
        };
        self.sync_with(store, &sources, selectors, changes.and_then(Changes::take))
    }

    /// [`NodeViews::sync`] with the drains' progress and the executor's overlay given, and the names of the nodes
    /// the watch delivered since the last sync (None: compare every node).
    pub fn sync_with(
        &mut self,
        store: &Store<SlimNode>,
        sources: &Sources<'_>,
        selectors: &[Option<&NodeSelector>],
        changed: Option<HashSet<String>>,
    ) -> usize {
        let reselect = self.selectors.len() != selectors.len()
            || self.selectors.iter().zip(selectors).any(|(old, new)| old.as_ref() != *new);
        if reselect {
            self.selectors = selectors.iter().map(|s| s.cloned()).collect();
        }
        match changed {
            Some(mut names) if self.synced && !reselect => {
                names.extend(sources.drains.keys().cloned());
                names.extend(sources.overlaid.iter().cloned());
                names.extend(sources.held.keys().cloned());
                names.extend(sources.deferred.keys().cloned());
                names.extend(self.special.iter().cloned());
                let mut viewed = 0;
                for name in names {
                    match store.get(&ObjectRef::new(&name)) {
                        Some(node) => viewed += usize::from(self.view(&node, sources, selectors, false)),
                        None => {
                            self.seen.remove(&name);
                            self.special.remove(&name);
                            self.planner.remove(&name);
                        }
                    }
                }
                viewed
            }
            _ => self.compare_all(store, sources, selectors, reselect),
        }
    }

    /// Compares every node of the store (viewing all of them again when `reselect`), and forgets the nodes it
    /// no longer has.
    fn compare_all(
        &mut self,
        store: &Store<SlimNode>,
        sources: &Sources<'_>,
        selectors: &[Option<&NodeSelector>],
        reselect: bool,
    ) -> usize {
        self.synced = true;
        self.epoch += 1;
        let state = store.state();
        let mut viewed = 0;
        for node in &state {
            viewed += usize::from(self.view(node, sources, selectors, reselect));
        }
        if self.seen.len() > state.len() {
            let epoch = self.epoch;
            let gone: Vec<String> =
                self.seen.iter().filter(|(_, s)| s.epoch != epoch).map(|(n, _)| n.clone()).collect();
            for name in gone {
                self.seen.remove(&name);
                self.special.remove(&name);
                self.planner.remove(&name);
            }
        }
        viewed
    }

    /// Gives the planner the node's view again if anything it is built from changed (or `again`); whether it did.
    fn view(
        &mut self,
        node: &Arc<SlimNode>,
        sources: &Sources<'_>,
        selectors: &[Option<&NodeSelector>],
        again: bool,
    ) -> bool {
        let name = node.name();
        let drain = sources.drains.get(name).cloned().unwrap_or_default();
        let overlaid = sources.overlaid.contains(name);
        let held = sources.held.get(name).cloned();
        let deferred = sources.deferred.get(name).cloned();
        if let Some(seen) = self.seen.get_mut(name) {
            seen.epoch = self.epoch;
            let same = Arc::ptr_eq(&seen.node, node)
                && seen.drain == drain
                && seen.held == held
                && seen.deferred == deferred
                && !overlaid
                && !seen.overlaid;
            if same && !again {
                return false;
            }
        }
        let fresh = (sources.freshest)(SlimNode::clone(node));
        let mut view = fresh.view(selectors.iter().copied(), drain.clone());
        with_looks(&mut view, held.as_ref(), deferred.as_ref());
        self.planner.upsert(view);
        if overlaid || drain != DrainProgress::NotRunning || held.is_some() || deferred.is_some() {
            self.special.insert(name.to_owned());
        } else {
            self.special.remove(name);
        }
        self.seen
            .insert(name.to_owned(), Seen { node: node.clone(), drain, held, deferred, overlaid, epoch: self.epoch });
        true
    }

    /// Gives the planner `views` as every node there is (each viewed again; the replacement flow's way): those
    /// that differ from the planner's, and forgets the others. Returns how many it gave.
    pub fn replace_all(&mut self, views: impl Iterator<Item = NodeView>) -> usize {
        self.seen.clear();
        self.special.clear();
        self.synced = false;
        let mut names = HashSet::new();
        let mut given = 0;
        for view in views {
            names.insert(view.name.clone());
            // The planner assesses a node given again even when it is the same: only changes are given.
            if self.planner.node(&view.name) != Some(&view) {
                given += 1;
                self.planner.upsert(view);
            }
        }
        let gone: Vec<String> =
            self.planner.nodes().filter(|v| !names.contains(&v.name)).map(|v| v.name.clone()).collect();
        for name in gone {
            self.planner.remove(&name);
        }
        given
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::{reflector, watcher};
    use serde_json::json;

    fn slim(name: &str, image: &str) -> SlimNode {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"update.edgeless.systems/managed": "true"},
                         "annotations": {"update.edgeless.systems/os-image": image}},
        }))
        .expect("a valid node")
    }

    #[test]
    fn only_nodes_whose_sources_changed_are_viewed_again() {
        let (store, mut writer) = reflector::store::<SlimNode>();
        for name in ["a", "b", "c"] {
            writer.apply_watcher_event(&watcher::Event::Apply(slim(name, "v1")));
        }
        let selector = NodeSelector::default();
        let selectors = [Some(&selector)];
        let (mut drains, mut overlaid) = (HashMap::new(), HashSet::new());
        let mut views = NodeViews::default();
        let sync = |views: &mut NodeViews, drains: &HashMap<String, DrainProgress>, overlaid: &HashSet<String>| {
            let sources =
                Sources { drains, overlaid, freshest: &|node| node, held: &HashMap::new(), deferred: &HashMap::new() };
            views.sync_with(&store, &sources, &selectors, None)
        };
        assert_eq!(sync(&mut views, &drains, &overlaid), 3);
        assert_eq!(sync(&mut views, &drains, &overlaid), 0);

        // A watch event for one node.
        writer.apply_watcher_event(&watcher::Event::Apply(slim("b", "v2")));
        assert_eq!(sync(&mut views, &drains, &overlaid), 1);
        let b = views.planner.node("b").and_then(|v| v.agent.as_ref().ok()).and_then(|a| a.os_image.clone());
        assert_eq!(b.as_deref(), Some("v2"));

        // A drain's progress.
        drains.insert("c".to_owned(), DrainProgress::Drained);
        assert_eq!(sync(&mut views, &drains, &overlaid), 1);
        assert_eq!(views.planner.node("c").map(|v| v.drain.clone()), Some(DrainProgress::Drained));

        // An overlay entry: viewed while it lasts, and once more after it is gone.
        overlaid.insert("a".to_owned());
        assert_eq!(sync(&mut views, &drains, &overlaid), 1);
        assert_eq!(sync(&mut views, &drains, &overlaid), 1);
        overlaid.clear();
        assert_eq!(sync(&mut views, &drains, &overlaid), 1);
        assert_eq!(sync(&mut views, &drains, &overlaid), 0);

        // A deleted node leaves the planner.
        writer.apply_watcher_event(&watcher::Event::Delete(slim("a", "v1")));
        assert_eq!(sync(&mut views, &drains, &overlaid), 0);
        assert_eq!(views.planner.nodes().map(|v| v.name.as_str()).collect::<Vec<_>>(), ["b", "c"]);

        // Other selectors: every node again.
        let sources = Sources {
            drains: &drains,
            overlaid: &overlaid,
            freshest: &|node| node,
            held: &HashMap::new(),
            deferred: &HashMap::new(),
        };
        assert_eq!(views.sync_with(&store, &sources, &[Some(&selector), None], None), 2);
        assert_eq!(views.planner.node("b").map(|v| v.selected_by.clone()), Some(vec![0]));
    }

    #[test]
    fn the_replacement_flow_gives_the_planner_only_the_views_that_changed() {
        let views_of = |images: &[(&str, &str)]| -> Vec<NodeView> {
            let selector = NodeSelector::default();
            images
                .iter()
                .map(|(name, image)| slim(name, image).view([Some(&selector)], DrainProgress::NotRunning))
                .collect()
        };
        let mut views = NodeViews::default();
        assert_eq!(views.replace_all(views_of(&[("a", "v1"), ("b", "v1"), ("c", "v1")]).into_iter()), 3);
        assert_eq!(views.replace_all(views_of(&[("a", "v1"), ("b", "v1"), ("c", "v1")]).into_iter()), 0);
        // One node changed, one gone.
        assert_eq!(views.replace_all(views_of(&[("a", "v1"), ("b", "v2")]).into_iter()), 1);
        assert_eq!(views.planner.nodes().map(|v| v.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        let b = views.planner.node("b").and_then(|v| v.agent.as_ref().ok()).and_then(|a| a.os_image.clone());
        assert_eq!(b.as_deref(), Some("v2"));
        // Planned: only the changed node is assessed.
        views.planner.set_context(Vec::new(), crate::policy::Fleet::default(), None);
        views.planner.plan(jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(views.replace_all(views_of(&[("a", "v1"), ("b", "v3")]).into_iter()), 1);
        views.planner.plan(jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(views.planner.assessed(), 1);
    }

    #[test]
    fn with_the_watchs_record_only_the_recorded_nodes_and_those_with_a_drain_or_an_overlay_are_looked_at() {
        let (store, mut writer) = reflector::store::<SlimNode>();
        let changes = Changes::default();
        for name in ["a", "b", "c"] {
            let event = watcher::Event::Apply(slim(name, "v1"));
            writer.apply_watcher_event(&event);
            changes.record(&event);
        }
        let selector = NodeSelector::default();
        let selectors = [Some(&selector)];
        let (mut drains, overlaid) = (HashMap::new(), HashSet::new());
        let mut views = NodeViews::default();
        let sync = |views: &mut NodeViews, drains: &HashMap<String, DrainProgress>, changes: &Changes| {
            let sources = Sources {
                drains,
                overlaid: &overlaid,
                freshest: &|node| node,
                held: &HashMap::new(),
                deferred: &HashMap::new(),
            };
            views.sync_with(&store, &sources, &selectors, changes.take())
        };
        // Nothing recorded before: every node is compared.
        assert_eq!(sync(&mut views, &drains, &changes), 3);
        assert_eq!(sync(&mut views, &drains, &changes), 0);

        // The store changes without the record (as between a store update and its record): not looked at yet.
        let event = watcher::Event::Apply(slim("b", "v2"));
        writer.apply_watcher_event(&event);
        assert_eq!(sync(&mut views, &drains, &changes), 0);
        changes.record(&event);
        assert_eq!(sync(&mut views, &drains, &changes), 1);

        // A drain is looked at on every sync while it has progress, and once after.
        drains.insert("c".to_owned(), DrainProgress::Drained);
        assert_eq!(sync(&mut views, &drains, &changes), 1);
        assert_eq!(sync(&mut views, &drains, &changes), 0);
        drains.clear();
        assert_eq!(sync(&mut views, &drains, &changes), 1);
        assert_eq!(views.planner.node("c").map(|v| v.drain.clone()), Some(DrainProgress::NotRunning));

        // A deletion.
        let event = watcher::Event::Delete(slim("a", "v1"));
        writer.apply_watcher_event(&event);
        changes.record(&event);
        sync(&mut views, &drains, &changes);
        assert!(views.planner.node("a").is_none());

        // A relist: every node is compared again (a node deleted meanwhile is forgotten).
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(slim("c", "v1")));
        writer.apply_watcher_event(&watcher::Event::InitDone);
        changes.record(&watcher::Event::InitDone);
        sync(&mut views, &drains, &changes);
        assert_eq!(views.planner.nodes().map(|v| v.name.as_str()).collect::<Vec<_>>(), ["c"]);
    }
}
