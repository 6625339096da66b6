//! Continue tokens of paginated lists, in upstream's format: base64url of
//! `{"v":"meta.k8s.io/v1","rv":N,"start":"<key>\u0000"}`.

use base64::Engine;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Token {
    v: String,
    rv: u64,
    start: String,
}

const VERSION: &str = "meta.k8s.io/v1";

/// The token continuing a list of the snapshot at `rv` after the key `last`.
pub fn encode(rv: u64, last: &str) -> String {
    let token = Token { v: VERSION.into(), rv, start: format!("{last}\u{0}") };
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).unwrap_or_default())
}

/// The snapshot RV and first key of a token.
pub fn decode(token: &str) -> Result<(u64, String), String> {
    let bytes = URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .or_else(|_| URL_SAFE.decode(token))
        .map_err(|e| format!("continue key is not valid: {e}"))?;
    let token: Token = serde_json::from_slice(&bytes).map_err(|e| format!("continue key is not valid: {e}"))?;
    if token.v != VERSION {
        return Err(format!(
            "continue key is not valid: incorrect encoded start resourceVersion (version {})",
            token.v
        ));
    }
    if token.rv == 0 {
        return Err(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into()
        );
    }
    Ok((token.rv, token.start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_start_after_the_last_key() {
        let token = encode(42, "default/pod-1");
        assert_eq!(decode(&token).unwrap(), (42, "default/pod-1\u{0}".to_owned()));
        assert!("default/pod-1\u{0}" > "default/pod-1" && "default/pod-1\u{0}" < "default/pod-10");
    }

    #[test]
    fn garbage_is_rejected() {
        for bad in
            ["", "!!!", &URL_SAFE_NO_PAD.encode(b"{}"), &URL_SAFE_NO_PAD.encode(br#"{"v":"x","rv":1,"start":""}"#)]
        {
            assert!(decode(bad).is_err(), "{bad}");
        }
    }
}
