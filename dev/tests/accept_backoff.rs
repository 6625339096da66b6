//! The API server out of file descriptors: its accept loop pauses between failed accepts (5 ms doubling up to
//! 1 s, as Go's net/http server does) instead of spinning a core, and serves the waiting connection as soon as a
//! descriptor is free again. A spinning loop starved a 5000-node benchmark whose process ran out of them.
//!
//! The only test of its binary: it lowers this process's descriptor limit.

use dev::apiserver::{ApiServer, ApiServerConfig};
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn open_descriptors() -> u64 {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_api_server_pauses_between_accepts_and_serves_again_once_one_is_free() {
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
