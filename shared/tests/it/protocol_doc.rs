//! The jq one-liner of docs/protocol.md, run with the real `jq` on the example JSON of the doc,
//! must print the output the doc shows.

use std::io::Write;
use std::process::{Command, Stdio};

/// The body of the first fenced code block after `<!-- marker -->`.
fn block_after(doc: &str, marker: &str) -> String {
    let start = doc.find(&format!("<!-- {marker} -->")).unwrap_or_else(|| panic!("no <!-- {marker} --> in the doc"));
    let rest = &doc[start..];
    let open = rest.find("```").expect("a code block after the marker");
    let body_start = open + rest[open..].find('\n').expect("a fence line") + 1;
    let body_len = rest[body_start..].find("```").expect("a closing fence");
    rest[body_start..body_start + body_len].to_owned()
}

#[test]
fn the_jq_one_liner_prints_what_the_doc_says() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md")).unwrap();
    let command = block_after(&doc, "jq-filter");
    let (_, filter) = command.trim().split_once("jq -r '").expect("the command runs jq -r '<filter>'");
    let filter = filter.strip_suffix('\'').expect("the filter ends the command");
    let input = block_after(&doc, "jq-input");
    let expected = block_after(&doc, "jq-output");

    let mut jq = Command::new("jq")
        .args(["-r", filter])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("jq is installed (.ci/run installs it)");
    jq.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let output = jq.wait_with_output().unwrap();
    assert!(output.status.success(), "jq failed: {}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(String::from_utf8(output.stdout).unwrap(), expected);
}

#[test]
fn the_readme_shows_the_same_one_liner() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md")).unwrap();
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let command = block_after(&doc, "jq-filter");
    assert!(readme.contains(command.trim()), "README.md's jq one-liner differs from docs/protocol.md's");
}
