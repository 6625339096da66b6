//! Content negotiation as kube-apiserver does it (`endpoints/handlers/negotiation`): which encoding and which
//! representation (`as=Table`, `as=PartialObjectMetadata`) a response gets from the `Accept` header, and what a
//! request body's `Content-Type` is.
//!
//! # Guarantees
//! - Accept clauses are ordered as `goautoneg.ParseAccept` orders them (by `q`, then specific before wildcard,
//!   otherwise in the order given, `q=0` included), and each clause is matched against the served media types
//!   in the server's order (JSON, YAML, then protobuf), so `*/*` and `application/*` mean JSON.
//! - A clause counts only when its parameters are acceptable: `as`/`g`/`v` name a Table (JSON or YAML) or
//!   PartialObjectMetadata(List) of meta.k8s.io v1 or v1beta1, `stream` is `watch`, `sv` is `v1`.
//! - Custom resources are never protobuf, except as PartialObjectMetadata.
//! - Nothing acceptable is a 406 listing the served media types; so is YAML for a watch (upstream has no YAML
//!   stream serializer, and negotiates before it looks for one).

use super::super::error::ApiError;
use crate::protobuf;

/// A response encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `application/json`.
    Json,
    /// `application/yaml` (keys sorted, as upstream's JSON-to-YAML conversion writes them); not for watches.
    Yaml,
    /// `application/vnd.kubernetes.protobuf`.
    Protobuf,
}

impl Encoding {
    /// The served encodings, in the order the server prefers them.
    pub const SERVED: [Encoding; 3] = [Encoding::Json, Encoding::Yaml, Encoding::Protobuf];

    /// The media type.
    pub fn media_type(self) -> &'static str {
        match self {
            Encoding::Json => "application/json",
            Encoding::Yaml => "application/yaml",
            Encoding::Protobuf => protobuf::MEDIA_TYPE,
        }
    }

    /// The `Content-Type` of a watch in this encoding (YAML has none: [`check_stream`]).
    pub fn stream_content_type(self) -> &'static str {
        match self {
            Encoding::Json | Encoding::Yaml => "application/json",
            Encoding::Protobuf => "application/vnd.kubernetes.protobuf;stream=watch",
        }
    }

    fn parts(self) -> (&'static str, &'static str) {
        match self {
            Encoding::Json => ("application", "json"),
            Encoding::Yaml => ("application", "yaml"),
            Encoding::Protobuf => ("application", "vnd.kubernetes.protobuf"),
        }
    }

    /// Reads a request's `Content-Type` (an absent one is JSON, the first served type); `None` when the media
    /// type is not one the server reads (a 415).
    pub fn of_content_type(content_type: Option<&str>) -> Option<Encoding> {
        let media = content_type.and_then(|c| c.split(';').next()).map(str::trim).unwrap_or_default();
        match media.to_ascii_lowercase().as_str() {
            "" | "application/json" => Some(Encoding::Json),
            "application/yaml" => Some(Encoding::Yaml),
            "application/vnd.kubernetes.protobuf" => Some(Encoding::Protobuf),
            _ => None,
        }
    }
}

/// What the response holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Representation {
    /// The object (or list) itself.
    Plain,
    /// `as=Table` of meta.k8s.io at this version (`v1` or `v1beta1`).
    Table(&'static str),
    /// `as=PartialObjectMetadata` (`list: false`) or `as=PartialObjectMetadataList` (`list: true`) of meta.k8s.io at
    /// this version.
    Metadata {
        /// `PartialObjectMetadataList` was asked for.
        list: bool,
        /// `v1` or `v1beta1`.
        version: &'static str,
    },
}

impl Representation {
    /// The 406 upstream gives when a representation does not fit the object (`list` tells whether it is a list);
    /// `Ok` when it fits.
    pub fn check_fits(self, list: bool) -> Result<(), ApiError> {
        match self {
            Representation::Metadata { list: false, .. } if list => Err(ApiError::not_acceptable(
                "you requested PartialObjectMetadata, but the requested object is a list (*unstructured.UnstructuredList)",
            )),
            Representation::Metadata { list: true, .. } if !list => Err(ApiError::not_acceptable(
                "you requested PartialObjectMetadataList, but the requested object is not a list (*unstructured.Unstructured)",
            )),
            _ => Ok(()),
        }
    }
}

/// The negotiated form of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// The encoding.
    pub encoding: Encoding,
    /// The representation.
    pub representation: Representation,
}

impl Negotiated {
    /// JSON of the object itself.
    pub const JSON: Negotiated = Negotiated { encoding: Encoding::Json, representation: Representation::Plain };
}

/// What the endpoint can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// The kind has a protobuf form (built-in kinds; not custom resources).
    pub protobuf: bool,
}

/// One clause of an `Accept` header.
#[derive(Debug, Clone, PartialEq)]
struct Clause<'a> {
    ty: &'a str,
    sub_type: &'a str,
    q: f64,
    params: Vec<(&'a str, &'a str)>,
}

/// The clauses of an `Accept` header in the order `goautoneg.ParseAccept` leaves them.
fn parse_accept(header: &str) -> Vec<Clause<'_>> {
    let mut clauses = Vec::new();
    for part in header.split(',') {
        let mut pieces = part.trim_matches(' ').split(';');
        let media_range = pieces.next().unwrap_or_default();
        let mut types = media_range.split('/');
        let ty = types.next().unwrap_or_default().trim_matches(' ');
        let sub_type = match (types.next(), types.next()) {
            (None, _) if ty == "*" => "*",
            (Some(sub_type), None) => sub_type.trim_matches(' '),
            _ => continue,
        };
        let mut clause = Clause { ty, sub_type, q: 1.0, params: Vec::new() };
        for param in pieces {
            let Some((token, value)) = param.split_once('=') else { continue };
            let token = token.trim_matches(' ');
            if token == "q" {
                clause.q = value.parse().unwrap_or(0.0);
            } else {
                clause.params.push((token, value.trim_matches(' ')));
            }
        }
        clauses.push(clause);
    }
    // Go sorts these few clauses with an insertion sort (stable) under goautoneg's `Less`.
    let less = |a: &Clause<'_>, b: &Clause<'_>| {
        a.q > b.q || (a.ty != "*" && b.ty == "*") || (a.sub_type != "*" && b.sub_type == "*")
    };
    for i in 1..clauses.len() {
        let mut j = i;
        while j > 0 && less(&clauses[j], &clauses[j - 1]) {
            clauses.swap(j, j - 1);
            j -= 1;
        }
    }
    clauses
}

/// The representation a clause's parameters ask for with `encoding`, or `None` when they cannot be served.
fn accept_params(clause: &Clause<'_>, encoding: Encoding, endpoint: Endpoint) -> Option<Representation> {
    let (mut kind, mut group, mut version, mut convert) = ("", "", "", false);
    for (key, value) in &clause.params {
        match *key {
            "as" => (kind, convert) = (value, true),
            "g" => (group, convert) = (value, true),
            "v" => (version, convert) = (value, true),
            "stream" if !value.is_empty() && *value != "watch" => return None,
            "sv" if !value.is_empty() && *value != "v1" => return None,
            _ => {}
        }
    }
    if !convert {
        return (encoding != Encoding::Protobuf || endpoint.protobuf).then_some(Representation::Plain);
    }
    let version = match (group, version) {
        ("meta.k8s.io", "v1") => "v1",
        ("meta.k8s.io", "v1beta1") => "v1beta1",
        _ => return None,
    };
    match kind {
        "Table" if encoding != Encoding::Protobuf => Some(Representation::Table(version)),
        "PartialObjectMetadata" => Some(Representation::Metadata { list: false, version }),
        "PartialObjectMetadataList" => Some(Representation::Metadata { list: true, version }),
        _ => None,
    }
}

/// Negotiates the response to `accept` (an absent or empty header is JSON).
pub fn negotiate(accept: Option<&str>, endpoint: Endpoint) -> Result<Negotiated, ApiError> {
    let Some(header) = accept.filter(|a| !a.is_empty()) else { return Ok(Negotiated::JSON) };
    for clause in parse_accept(header) {
        for encoding in Encoding::SERVED {
            let (ty, sub_type) = encoding.parts();
            let matches = (clause.ty == ty && (clause.sub_type == sub_type || clause.sub_type == "*"))
                || (clause.ty == "*" && clause.sub_type == "*");
            if !matches {
                continue;
            }
            if let Some(representation) = accept_params(&clause, encoding, endpoint) {
                return Ok(Negotiated { encoding, representation });
            }
        }
    }
    Err(not_acceptable())
}

/// The 406 of a watch negotiated to an encoding without a stream form (YAML); `Ok` otherwise.
pub fn check_stream(encoding: Encoding) -> Result<(), ApiError> {
    match encoding {
        Encoding::Yaml => Err(not_acceptable()),
        Encoding::Json | Encoding::Protobuf => Ok(()),
    }
}

/// The encoding of error responses: Status is in the encoding the client prefers (protobuf, YAML), JSON when
/// nothing in `Accept` can be served.
pub fn for_errors(accept: Option<&str>) -> Encoding {
    negotiate(accept, Endpoint { protobuf: true }).map(|n| n.encoding).unwrap_or(Encoding::Json)
}

/// 406 listing the served media types.
pub fn not_acceptable() -> ApiError {
    let served: Vec<&str> = Encoding::SERVED.iter().map(|e| e.media_type()).collect();
    ApiError::not_acceptable(&format!("only the following media types are accepted: {}", served.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUILT_IN: Endpoint = Endpoint { protobuf: true };
    const CUSTOM: Endpoint = Endpoint { protobuf: false };

    fn get(accept: &str, endpoint: Endpoint) -> Option<Negotiated> {
        negotiate(Some(accept), endpoint).ok()
    }

    fn plain(encoding: Encoding) -> Option<Negotiated> {
        Some(Negotiated { encoding, representation: Representation::Plain })
    }

    #[test]
    fn kubectl_and_client_go_accept_headers_pick_what_upstream_picks() {
        assert_eq!(negotiate(None, BUILT_IN).ok(), Some(Negotiated::JSON));
        let typed = "application/vnd.kubernetes.protobuf,application/json";
        assert_eq!(get(typed, BUILT_IN), plain(Encoding::Protobuf), "client-go 1.32+ typed clients");
        assert_eq!(get(typed, CUSTOM), plain(Encoding::Json), "custom resources are JSON only");
        assert_eq!(get("application/vnd.kubernetes.protobuf", CUSTOM), None, "406");
        assert_eq!(get("application/vnd.kubernetes.protobuf, */*", BUILT_IN), plain(Encoding::Protobuf));
        assert_eq!(get("*/*", BUILT_IN), plain(Encoding::Json));
        assert_eq!(get("application/*", BUILT_IN), plain(Encoding::Json));
        assert_eq!(
            get("application/json;q=0.5, application/vnd.kubernetes.protobuf", BUILT_IN),
            plain(Encoding::Protobuf)
        );
        assert_eq!(get("application/vnd.kubernetes.protobuf;q=0.5, application/json", BUILT_IN), plain(Encoding::Json));
        // goautoneg's `Less` puts a specific type before a wildcard whatever their q.
        assert_eq!(get("*/*;q=0.9, application/vnd.kubernetes.protobuf;q=0.8", BUILT_IN), plain(Encoding::Protobuf));
        assert_eq!(get("text/html, */*;q=0", BUILT_IN), plain(Encoding::Json), "q=0 still counts, last");
        assert_eq!(get("text/plain", BUILT_IN), None);
        assert_eq!(get("application/vnd.kubernetes.protobuf;stream=watch", BUILT_IN), plain(Encoding::Protobuf));
        assert_eq!(get("application/json;stream=lines", BUILT_IN), None);
    }

    #[test]
    fn tables_are_json_and_metadata_is_either() {
        let kubectl_get = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        let table = Negotiated { encoding: Encoding::Json, representation: Representation::Table("v1") };
        assert_eq!(get(kubectl_get, CUSTOM), Some(table));
        let beta = "application/json;as=Table;v=v1beta1;g=meta.k8s.io";
        assert_eq!(get(beta, BUILT_IN).map(|n| n.representation), Some(Representation::Table("v1beta1")));
        assert_eq!(
            get("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json", BUILT_IN),
            plain(Encoding::Json),
            "a Table has no protobuf form"
        );
        assert_eq!(get("application/json;as=Table", BUILT_IN), None, "as=Table without g and v is not a Table");
        assert_eq!(get("application/json;as=Widget;g=meta.k8s.io;v=v1", BUILT_IN), None);
        let metadata = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(
            get(metadata, CUSTOM),
            Some(Negotiated {
                encoding: Encoding::Protobuf,
                representation: Representation::Metadata { list: true, version: "v1" }
            }),
            "metadata is protobuf even for custom resources"
        );
        let kube_rs = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        assert_eq!(
            get(kube_rs, BUILT_IN).map(|n| n.representation),
            Some(Representation::Metadata { list: false, version: "v1" })
        );
        let yaml_table = "application/yaml;as=Table;v=v1;g=meta.k8s.io";
        assert_eq!(
            get(yaml_table, BUILT_IN),
            Some(Negotiated { encoding: Encoding::Yaml, representation: Representation::Table("v1") }),
            "a Table may be YAML"
        );
        assert!(Representation::Metadata { list: false, version: "v1" }.check_fits(true).is_err());
        assert!(Representation::Metadata { list: true, version: "v1" }.check_fits(true).is_ok());
    }

    #[test]
    fn yaml_is_served_after_json_and_never_streamed() {
        assert_eq!(get("application/yaml", BUILT_IN), plain(Encoding::Yaml));
        assert_eq!(get("application/yaml", CUSTOM), plain(Encoding::Yaml), "custom resources have YAML");
        assert_eq!(get("application/yaml;q=0.5, application/json", BUILT_IN), plain(Encoding::Json));
        assert_eq!(get("application/yaml, application/json", BUILT_IN), plain(Encoding::Yaml));
        assert!(
            check_stream(Encoding::Yaml).is_err_and(|e| e.code == 406),
            "upstream negotiates, then finds no stream"
        );
        assert!(check_stream(Encoding::Json).is_ok() && check_stream(Encoding::Protobuf).is_ok());
    }

    #[test]
    fn errors_follow_the_client_preference_and_fall_back_to_json() {
        assert_eq!(for_errors(Some("application/vnd.kubernetes.protobuf,application/json")), Encoding::Protobuf);
        assert_eq!(for_errors(Some("text/plain")), Encoding::Json);
        assert_eq!(for_errors(None), Encoding::Json);
        let refused = negotiate(Some("text/plain"), BUILT_IN).unwrap_err();
        assert_eq!(refused.code, 406);
        assert_eq!(
            refused.message,
            "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
        );
        assert_eq!(for_errors(Some("application/yaml")), Encoding::Yaml);
    }

    #[test]
    fn request_bodies_are_json_yaml_or_protobuf() {
        assert_eq!(Encoding::of_content_type(None), Some(Encoding::Json));
        assert_eq!(Encoding::of_content_type(Some("application/json; charset=utf-8")), Some(Encoding::Json));
        assert_eq!(Encoding::of_content_type(Some("application/vnd.kubernetes.protobuf")), Some(Encoding::Protobuf));
        assert_eq!(Encoding::of_content_type(Some("Application/YAML")), Some(Encoding::Yaml));
        assert_eq!(Encoding::of_content_type(Some("*/*")), None, "a body's media type is never a wildcard");
        assert_eq!(Encoding::of_content_type(Some("text/plain")), None);
    }
}
