//! What the agent does about its node: a pure function of the controller's intent, the agent's own
//! last report and the facts of the host.
//!
//! # Guarantees
//! - The agent acts only on the steps `stage`, `reboot` and `kubeadm-upgrade`, and only on an intent
//!   it has not finished: a report with the intent's token and state `done` or `error` ends it.
//! - Restart-safe without memory: a stage in progress (`busy`) is redone (staging is idempotent);
//!   a reboot is judged by the boot ID, so a reboot that happened is never repeated and one that did
//!   not is asked for again.
//! - The report it returns differs from the current one only where something changed, so a node
//!   with nothing to do costs no write.

use shared::protocol::{AgentReport, AgentState, BootId, ComponentsHash, Intent, Step, Token};

/// What the host says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub os_image: String,
    pub boot_id: BootId,
    pub staged_image: Option<String>,
    pub components_hash: Option<ComponentsHash>,
}

/// Work for the host, carried out outside this function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    Stage { token: Token, target: String },
    Reboot { token: Token, target: String },
}

impl Work {
    pub fn token(&self) -> &Token {
        match self {
            Work::Stage { token, .. } | Work::Reboot { token, .. } => token,
        }
    }
}

/// The report to publish and the work to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub report: AgentReport,
    pub work: Option<Work>,
}

/// Decides. `running` is the token of the work this process has under way (a stage still running,
/// or a reboot asked for and not yet seen).
pub fn decide(intent: Option<&Intent>, current: &AgentReport, facts: &Facts, running: Option<&Token>) -> Decision {
    let mut report = AgentReport {
        boot_id: Some(facts.boot_id.clone()),
        os_image: Some(facts.os_image.clone()),
        components_hash: facts.components_hash.clone().or_else(|| current.components_hash.clone()),
        ..current.clone()
    };
    let Some(intent) = intent.filter(|i| i.step.agent_acts()) else {
        return Decision { report, work: None };
    };
    let token = &intent.token;
    if current.finished(token).is_some() || running == Some(token) {
        return Decision { report, work: None };
    }
    let settle = |report: &mut AgentReport, state: AgentState, message: Option<String>| {
        report.state = Some(state);
        report.token = Some(token.clone());
        report.message = message;
    };
    match intent.step {
        Step::Stage => {
            if facts.staged_image.as_deref() == Some(intent.target.as_str()) || facts.os_image == intent.target {
                // Already staged (or running it): nothing to download.
                settle(&mut report, AgentState::Done, None);
                return Decision { report, work: None };
            }
            settle(&mut report, AgentState::Busy, None);
            Decision { report, work: Some(Work::Stage { token: token.clone(), target: intent.target.clone() }) }
        }
        Step::Reboot => {
            let rebooted = intent.boot_id_before.as_ref().is_some_and(|before| *before != facts.boot_id);
            if rebooted {
                if facts.os_image == intent.target {
                    settle(&mut report, AgentState::Done, None);
                } else {
                    let message =
                        format!("the host booted {} instead of {} after the reboot", facts.os_image, intent.target);
                    settle(&mut report, AgentState::Error, Some(message));
                }
                return Decision { report, work: None };
            }
            Decision { report, work: Some(Work::Reboot { token: token.clone(), target: intent.target.clone() }) }
        }
        Step::KubeadmUpgrade => {
            let message = "this agent version does not carry out kubeadm upgrades".to_owned();
            settle(&mut report, AgentState::Error, Some(message));
            Decision { report, work: None }
        }
        Step::Drain | Step::Replace | Step::Done | Step::Failed | Step::Blocked => Decision { report, work: None },
    }
}

/// The report after work finished: `done`, or `error` with the host's message.
pub fn finished(current: &AgentReport, token: &Token, result: Result<(), String>) -> AgentReport {
    let (state, message) = match result {
        Ok(()) => (AgentState::Done, None),
        Err(message) => (AgentState::Error, Some(message)),
    };
    AgentReport { state: Some(state), token: Some(token.clone()), message, ..current.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(s: &str) -> Token {
        Token::parse("k", s).unwrap()
    }

    fn boot(s: &str) -> BootId {
        BootId::parse("k", s).unwrap()
    }

    fn facts(image: &str, boot_id: &str, staged: Option<&str>) -> Facts {
        Facts {
            os_image: image.into(),
            boot_id: boot(boot_id),
            staged_image: staged.map(Into::into),
            components_hash: None,
        }
    }

    fn intent(step: Step, token: &str) -> Intent {
        Intent {
            step,
            target: "v2".into(),
            token: tok(token),
            since: "2026-11-21T10:00:00Z".parse().unwrap(),
            boot_id_before: (step == Step::Reboot).then(|| boot("b0")),
            message: None,
        }
    }

    fn reported(state: AgentState, token: &str) -> AgentReport {
        AgentReport {
            state: Some(state),
            token: Some(tok(token)),
            boot_id: Some(boot("b0")),
            os_image: Some("v1".into()),
            ..Default::default()
        }
    }

    #[test]
    fn host_facts_are_reported_and_nothing_else_changes_without_an_intent() {
        let d = decide(None, &AgentReport::default(), &facts("v1", "b0", None), None);
        assert_eq!(d.work, None);
        assert_eq!(d.report.os_image.as_deref(), Some("v1"));
        assert_eq!(d.report.boot_id, Some(boot("b0")));
        assert_eq!(d.report.state, None);
        // Reported already: the same report comes back, so no write follows.
        let again = decide(None, &d.report, &facts("v1", "b0", None), None);
        assert_eq!(again.report, d.report);
    }

    #[test]
    fn a_stage_intent_reports_busy_and_stages_once() {
        let i = intent(Step::Stage, "s1");
        let d = decide(Some(&i), &reported(AgentState::Done, "old"), &facts("v1", "b0", None), None);
        assert_eq!(d.work, Some(Work::Stage { token: tok("s1"), target: "v2".into() }));
        assert_eq!((d.report.state, d.report.token.clone()), (Some(AgentState::Busy), Some(tok("s1"))));
        // While it runs, nothing new starts.
        let running = decide(Some(&i), &d.report, &facts("v1", "b0", None), Some(&tok("s1")));
        assert_eq!(running.work, None);
        // After a restart in the middle (busy, nothing running), it stages again.
        let restarted = decide(Some(&i), &d.report, &facts("v1", "b0", None), None);
        assert!(matches!(restarted.work, Some(Work::Stage { .. })));
        // Finished: nothing more.
        let done = finished(&d.report, &tok("s1"), Ok(()));
        assert_eq!(decide(Some(&i), &done, &facts("v1", "b0", Some("v2")), None).work, None);
    }

    #[test]
    fn an_already_staged_target_is_reported_done_at_once() {
        let i = intent(Step::Stage, "s1");
        let d = decide(Some(&i), &reported(AgentState::Busy, "s1"), &facts("v1", "b0", Some("v2")), None);
        assert_eq!(d.work, None);
        assert_eq!(d.report.state, Some(AgentState::Done));
    }

    #[test]
    fn a_reboot_is_asked_for_until_the_boot_id_changes() {
        let i = intent(Step::Reboot, "r1");
        let before = reported(AgentState::Done, "s1");
        let d = decide(Some(&i), &before, &facts("v1", "b0", Some("v2")), None);
        assert_eq!(d.work, Some(Work::Reboot { token: tok("r1"), target: "v2".into() }));
        assert_eq!(d.report.state, Some(AgentState::Done), "no write before the reboot");
        assert_eq!(d.report.token, Some(tok("s1")));
        // Asked for, not happened yet: wait.
        assert_eq!(decide(Some(&i), &before, &facts("v1", "b0", Some("v2")), Some(&tok("r1"))).work, None);
        // After the reboot (new process, new boot ID): done with the new facts.
        let after = decide(Some(&i), &before, &facts("v2", "b1", None), None);
        assert_eq!(after.work, None);
        assert_eq!((after.report.state, after.report.token.clone()), (Some(AgentState::Done), Some(tok("r1"))));
        assert_eq!(after.report.os_image.as_deref(), Some("v2"));
        assert_eq!(after.report.boot_id, Some(boot("b1")));
    }

    #[test]
    fn booting_the_wrong_image_is_an_error() {
        let i = intent(Step::Reboot, "r1");
        let d = decide(Some(&i), &reported(AgentState::Done, "s1"), &facts("v1", "b1", None), None);
        assert_eq!(d.report.state, Some(AgentState::Error));
        assert!(d.report.message.unwrap().contains("booted v1 instead of v2"));
    }

    #[test]
    fn steps_the_agent_does_not_act_on_change_nothing() {
        for step in [Step::Drain, Step::Done, Step::Failed, Step::Blocked, Step::Replace] {
            let i = intent(step, "x");
            let current = reported(AgentState::Done, "s1");
            let d = decide(Some(&i), &current, &facts("v1", "b0", None), None);
            assert_eq!(d, Decision { report: current, work: None }, "{step}");
        }
    }

    #[test]
    fn kubeadm_upgrades_are_refused_clearly() {
        let d =
            decide(Some(&intent(Step::KubeadmUpgrade, "k1")), &AgentReport::default(), &facts("v1", "b0", None), None);
        assert_eq!(d.report.state, Some(AgentState::Error));
        assert!(d.report.message.unwrap().contains("kubeadm"));
    }
}
