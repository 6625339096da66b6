//! The pause between failed `accept` calls of an accept loop (the probe endpoints, the dev servers).
//!
//! `accept` fails at once, again and again, while the process has no descriptor left (`EMFILE`), the
//! system none (`ENFILE`), or no memory for a socket buffer: a loop that retries without a pause spins a
//! core and starves the very connections whose end would free a descriptor. Go's `net/http` server (what
//! kube-apiserver serves with) sleeps 5 ms after such an error, doubling up to 1 s, and starts over after
//! a success; so do the loops here.

use std::time::Duration;

/// The first pause after a failed `accept`.
pub const FIRST: Duration = Duration::from_millis(5);
/// The longest pause.
pub const MAX: Duration = Duration::from_secs(1);

/// Pauses of one accept loop: [`AcceptBackoff::failed`] after each error, [`AcceptBackoff::accepted`]
/// after each success.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    last: Option<Duration>,
}

impl AcceptBackoff {
    /// The pause to take after a failed `accept`: [`FIRST`] after a success (or at first), then twice the
    /// last one, at most [`MAX`].
    pub fn failed(&mut self) -> Duration {
        let next = self.last.map_or(FIRST, |last| (last * 2).min(MAX));
        self.last = Some(next);
        next
    }

    /// A connection was accepted: the next error starts over at [`FIRST`].
    pub fn accepted(&mut self) {
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_from_five_milliseconds_up_to_a_second_and_start_over_after_a_success() {
        let mut backoff = AcceptBackoff::default();
        let pauses: Vec<u128> = (0..10).map(|_| backoff.failed().as_millis()).collect();
        assert_eq!(pauses, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        backoff.accepted();
        assert_eq!(backoff.failed(), FIRST);
    }
}
