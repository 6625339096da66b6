//! How many of the controller's requests of one kind run at once: a plan's Node writes, the looks at nodes' pods.
//!
//! The client speaks HTTP/1.1 to the API server, so every request in flight holds a connection of its own, and the
//! connection pool keeps each one (its TLS state and buffers, some 40 KB) until its idle timeout. A plan that wrote
//! to every node at once opened as many connections as it had writes: the first plan of a rollout with
//! `preferUpdatedNodes` taints every outdated node, and at 5000 nodes the controller's peak RSS went from 56 to
//! 262 MiB, past the manifest's 128 MiB limit (docs/performance.md, heaptrack of a 2000-node run: 75 MB of the
//! 120 MB peak heap in connections). client-go bounds a controller's requests the same way (its QPS and burst); here
//! the bound is on requests in flight, so a fast API server is not slowed down.

use std::future::Future;

use futures::StreamExt;

/// The most requests of one batch in flight at once.
pub const REQUESTS_IN_FLIGHT: usize = 32;

/// Runs `futures` with at most `limit` of them at once (at least one), and returns their outputs in their order.
/// A `Vec`, not any iterator: an iterator's closures borrowing the caller would be held across the await, which
/// keeps the caller's future from being `Send`.
pub async fn bounded<T, F: Future<Output = T>>(futures: Vec<F>, limit: usize) -> Vec<T> {
    futures::stream::iter(futures).buffered(limit.max(1)).collect().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn no_more_than_the_limit_run_at_once_and_every_output_comes_back_in_order() {
        let (running, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let work: Vec<_> = (0..100u64)
            .map(|i| {
                let (running, most) = (&running, &most);
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    // Later ones finish first: the outputs still come back in the futures' order.
                    tokio::time::sleep(Duration::from_millis(100 - i)).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    i
                }
            })
            .collect();
        let outputs = bounded(work, 8).await;
        assert_eq!(outputs, (0..100).collect::<Vec<_>>());
        assert_eq!(most.load(Ordering::SeqCst), 8, "eight at once, never more");
        let three: Vec<_> = (0..3).map(|i| async move { i }).collect();
        assert_eq!(bounded(three, 0).await, vec![0, 1, 2], "a limit of 0 runs one at a time");
    }
}
