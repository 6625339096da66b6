//! What the `/_dev` routes of the hosts, the simulated cloud and the artifact server share: the `{"message"}`
//! answer of an error and the reading of a JSON request body.

use bytes::Bytes;
use serde_json::{Value, json};

/// A `/_dev` answer `{"message": text}` with `status`.
pub fn message(status: u16, text: impl Into<String>) -> (u16, Value) {
    (status, json!({"message": text.into()}))
}

/// The JSON body of a `/_dev` request, or a 400 answer.
pub fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, (u16, Value)> {
    serde_json::from_slice(body).map_err(|e| message(400, format!("the request body is not valid: {e}")))
}
