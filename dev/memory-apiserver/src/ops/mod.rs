//! The operations of the API, shared by the HTTP front end and the in-process `Store`: each takes the request in
//! decoded form and goes through the same store code, so both see the same resourceVersions, events,
//! validation and status rules.

pub mod admit;
pub mod continue_token;
pub mod delete;
pub mod eviction;
pub mod namespaces;
pub mod patch;
pub mod read;
pub mod subresources;
pub mod watch;
pub mod write;

/// Which endpoint of an object a write goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// The object itself: status changes are ignored for kinds with a status subresource.
    Main,
    /// `/status`: only status changes (and, for some built-ins, metadata) are kept.
    Status,
}

/// Who maintains `managedFields` for a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tracking {
    /// A non-apply write: the writer takes over what it changed (when the object is tracked).
    Update,
    /// Server-side apply already computed the entries.
    Applied,
}
