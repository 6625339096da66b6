//! The fake Bottlerocket API held to the real one, over raw HTTP: routes, status codes and their
//! messages, the update status document field by field, and the settings transaction API, as
//! bottlerocket-core-kit's apiserver and thar-be-updates have them (the sources are cited in
//! `support/bottlerocket.rs`).

use crate::support;

use serde_json::{Value, json};
use std::collections::BTreeSet;
use support::bottlerocket::{FakeBottlerocket, Initial, Setup};
use support::wait_for;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request on a new connection: the status code and the body.
async fn call(fake: &FakeBottlerocket, method: &str, path: &str, body: Option<Value>) -> (u16, String) {
    let mut stream = tokio::net::UnixStream::connect(&fake.socket).await.unwrap();
    let body = body.map(|body| body.to_string()).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8(answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

fn keys(value: &Value) -> BTreeSet<&str> {
    value.as_object().unwrap().keys().map(String::as_str).collect()
}

async fn finish(fake: &FakeBottlerocket) {
    fake.finish_commands_now();
    wait_for("the command to end", || !fake.command_running()).await;
}

#[tokio::test]
async fn the_status_is_404_until_the_first_command_and_423_while_a_command_holds_the_lock() {
    let fake = FakeBottlerocket::start(Setup {
        command_duration: std::time::Duration::from_secs(3600),
        ..Setup::new("1.19.0", vec!["1.21.0", "1.20.0"])
    });
    assert_eq!(
        call(&fake, "GET", "/updates/status", None).await,
        (404, "Update status is uninitialized, refresh-updates to initialize it".into())
    );
    assert_eq!(call(&fake, "POST", "/actions/refresh-updates", None).await, (204, String::new()));
    // The forked command holds the lock exclusively: status reads and every action answer 423.
    let (status, message) = call(&fake, "GET", "/updates/status", None).await;
    assert_eq!(status, 423);
    assert!(message.starts_with("Unable to obtain shared lock for reading update status"), "{message}");
    assert_eq!(call(&fake, "POST", "/actions/prepare-update", None).await, (423, "Update lock held".into()));
    // The settings are not behind the update lock.
    assert_eq!(call(&fake, "GET", "/settings?keys=settings.updates.version-lock", None).await.0, 200);
    finish(&fake).await;

    let (status, body) = call(&fake, "GET", "/updates/status", None).await;
    assert_eq!(status, 200);
    // thar-be-updates' UpdateStatus, field by field.
    let document: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        keys(&document),
        BTreeSet::from([
            "update_state",
            "available_updates",
            "chosen_update",
            "active_partition",
            "staging_partition",
            "most_recent_command"
        ])
    );
    assert_eq!(document["update_state"], "Available");
    assert_eq!(document["available_updates"], json!(["1.21.0", "1.20.0"]));
    assert_eq!(keys(&document["chosen_update"]), BTreeSet::from(["arch", "version", "variant"]));
    assert_eq!(document["chosen_update"]["version"], "1.21.0", "latest: the newest offered");
    assert_eq!(keys(&document["active_partition"]), BTreeSet::from(["image", "next_to_boot"]));
    assert_eq!(document["staging_partition"], Value::Null);
    let command = &document["most_recent_command"];
    assert_eq!(keys(command), BTreeSet::from(["cmd_type", "cmd_status", "timestamp", "exit_status", "stderr"]));
    assert_eq!((command["cmd_type"].as_str(), command["cmd_status"].as_str()), (Some("refresh"), Some("Success")));
    command["timestamp"].as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
}

#[tokio::test]
async fn actions_refused_in_the_state_are_409_and_without_their_object_404() {
    let fake = FakeBottlerocket::start(Setup::new("1.19.0", vec!["1.20.0"]));
    let disallowed = (409, "Update action not allowed according to update state".to_owned());
    assert_eq!(call(&fake, "POST", "/actions/prepare-update", None).await, disallowed);
    // thar-be-updates writes the (initialised) status even when it refuses the command.
    assert_eq!(call(&fake, "GET", "/updates/status", None).await.0, 200);
    assert_eq!(call(&fake, "POST", "/actions/activate-update", None).await, disallowed);
    assert_eq!(call(&fake, "POST", "/actions/deactivate-update", None).await, disallowed);

    // Staged, then a refresh under a version lock the repository does not offer: no chosen update.
    let staged = FakeBottlerocket::start(Setup {
        initial: Initial::Staged("1.20.0"),
        version_lock: Some("1.25.0"),
        ..Setup::new("1.19.0", vec!["1.20.0"])
    });
    assert_eq!(call(&staged, "POST", "/actions/refresh-updates", None).await.0, 204);
    finish(&staged).await;
    let (_, body) = call(&staged, "GET", "/updates/status", None).await;
    let document: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((document["update_state"].as_str(), &document["chosen_update"]), (Some("Staged"), &Value::Null));
    assert_eq!(
        call(&staged, "POST", "/actions/prepare-update", None).await,
        (404, "Previously chosen Update no longer exists".into())
    );
    assert_eq!(call(&staged, "POST", "/actions/deactivate-update", None).await, disallowed);
}

#[tokio::test]
async fn latest_chooses_only_a_version_newer_than_the_running_one() {
    let fake = FakeBottlerocket::start(Setup::new("1.21.0", vec!["1.20.0", "1.19.0"]));
    assert_eq!(call(&fake, "POST", "/actions/refresh-updates", None).await.0, 204);
    finish(&fake).await;
    let (_, body) = call(&fake, "GET", "/updates/status", None).await;
    let document: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((document["update_state"].as_str(), &document["chosen_update"]), (Some("Idle"), &Value::Null));
}

#[tokio::test]
async fn settings_change_through_named_transactions() {
    let fake = FakeBottlerocket::start(Setup::new("1.19.0", vec!["1.20.0"]));
    assert_eq!(call(&fake, "GET", "/tx?tx=t", None).await, (200, "{}".into()));
    let pin = json!({"updates": {"version-lock": "v1.20.0"}});
    assert_eq!(call(&fake, "PATCH", "/settings?tx=t", Some(pin)).await, (204, String::new()));
    let (status, pending) = call(&fake, "GET", "/tx?tx=t", None).await;
    assert_eq!(
        (status, serde_json::from_str::<Value>(&pending).unwrap()),
        (200, json!({"updates": {"version-lock": "v1.20.0"}}))
    );
    // Pending is not live, and other transactions do not see it.
    let (_, live) = call(&fake, "GET", "/settings?keys=settings.updates.version-lock", None).await;
    assert_eq!(serde_json::from_str::<Value>(&live).unwrap(), json!({"updates": {"version-lock": "latest"}}));
    assert_eq!(
        call(&fake, "POST", "/tx/commit_and_apply", None).await,
        (422, "Tried to commit with no pending changes".into())
    );
    let (status, changed) = call(&fake, "POST", "/tx/commit_and_apply?tx=t", None).await;
    assert_eq!(
        (status, serde_json::from_str::<Value>(&changed).unwrap()),
        (200, json!(["settings.updates.version-lock"]))
    );
    assert_eq!(fake.version_lock(), "v1.20.0");
    assert_eq!(call(&fake, "POST", "/tx/commit_and_apply?tx=t", None).await.0, 422);

    // A discarded transaction commits nothing; an invalid value is refused.
    let waves = json!({"updates": {"ignore-waves": true}});
    assert_eq!(call(&fake, "PATCH", "/settings?tx=d", Some(waves)).await.0, 204);
    assert_eq!(call(&fake, "DELETE", "/tx?tx=d", None).await, (200, r#"["settings.updates.ignore-waves"]"#.into()));
    assert_eq!(call(&fake, "GET", "/tx?tx=d", None).await, (200, "{}".into()));
    assert!(!fake.ignore_waves());
    let bad = json!({"updates": {"version-lock": "not a version"}});
    assert_eq!(call(&fake, "PATCH", "/settings?tx=d", Some(bad)).await.0, 400);
}
