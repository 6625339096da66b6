//! The API server out of file descriptors: its accept loop pauses between failed accepts (5 ms doubling up to
//! 1 s, as Go's net/http server does) instead of spinning a core, and serves the waiting connection as soon as a
//! descriptor is free again. A spinning loop starved a 5000-node benchmark whose process ran out of them.
//!
//! It lowers its process's descriptor limit, which would starve the tests running beside it in the crate's one
//! test binary: so it runs alone, in a child process of this binary (`in_a_process_of_its_own`).

use memory_apiserver::{ApiServer, ApiServerConfig};
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Set in the child process that runs the test body.
const CHILD: &str = "UPDATE_OPERATOR_TEST_OWN_PROCESS";

fn open_descriptors() -> u64 {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(0)
}

#[test]
fn out_of_descriptors_the_api_server_pauses_between_accepts_and_serves_again_once_one_is_free() {
    in_a_process_of_its_own(
        "out_of_descriptors_the_api_server_pauses_between_accepts_and_serves_again_once_one_is_free",
        || {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
            runtime.expect("a runtime").block_on(starved_server());
        },
    );
}

/// Runs `body` in a child process of this test binary that runs only the test `name` of this module, or runs it
/// here when this is that child.
fn in_a_process_of_its_own(name: &str, body: impl FnOnce()) {
    if std::env::var_os(CHILD).is_some() {
        return body();
    }
    // The test's name as libtest knows it: the module path without the crate's name.
    let module = module_path!().split_once("::").map_or("", |(_, module)| module);
    let test = format!("{module}::{name}");
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(exe)
        .args([test.as_str(), "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .expect("running the test binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = format!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{test} failed in its own process:\n{report}");
    // A filter that matched nothing would pass without running anything.
    assert!(stdout.contains("test result: ok. 1 passed"), "{test} did not run in its own process:\n{report}");
}

async fn starved_server() {
    let server = ApiServer::start(ApiServerConfig::default()).await.expect("the API server starts");
    let address = server.url().trim_start_matches("http://").to_owned();
    let before = getrlimit(Resource::Nofile);

    // Take every descriptor but one, which the client's socket takes: the server has none left to accept with.
    setrlimit(Resource::Nofile, Rlimit { current: Some(open_descriptors() + 32), maximum: before.maximum })
        .expect("lowering the soft limit");
    let mut files = Vec::new();
    while let Ok(file) = std::fs::File::open("/dev/null") {
        files.push(file);
    }
    files.pop();
    let mut client = tokio::net::TcpStream::connect(&address).await.expect("the kernel completes the connection");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let failures = server.accept_failures();

    drop(files);
    setrlimit(Resource::Nofile, before).expect("restoring the limit");
    // 5 + 10 + ... + 640 ms: about 9 attempts in 1.5 s; a loop without pauses makes thousands even when starved.
    assert!((1..=12).contains(&failures), "{failures} failed accepts in 1.5 s");

    client.write_all(b"GET /version HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), client.read_to_end(&mut answer))
        .await
        .expect("the waiting connection is served within the longest pause")
        .expect("reading the answer");
    assert!(answer.starts_with(b"HTTP/1.1 "), "{}", String::from_utf8_lossy(&answer));
    server.shutdown().await;
}
