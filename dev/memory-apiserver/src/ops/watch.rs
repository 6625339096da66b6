//! WATCH: one watcher's stream of events, bookmarks and errors.
//!
//! # Guarantees
//! - From resourceVersion R: every change after R in order (replayed from history, then live), or, when the
//!   history no longer reaches R, one ERROR 410 Expired and the end of the stream.
//! - From no resourceVersion or `0`: ADDED for every current object first (no bookmark), then changes.
//! - `sendInitialEvents=true`: ADDED for every current object, one BOOKMARK annotated
//!   `k8s.io/initial-events-end`, then changes.
//! - From a future resourceVersion: quiet until the store passes it.
//! - BOOKMARKs only with `allowWatchBookmarks`: every `bookmark_interval` and once about 2 s before the deadline,
//!   never at an RV below an event already sent.
//! - The stream ends cleanly at the deadline, when the watcher falls behind (no ERROR), when every watch is
//!   closed, or when the server shuts down. Dropping the session unregisters the watcher.

use crate::core::Core;
use crate::error::ApiError;
use crate::object::{Filter, StoredObject};
use crate::resource::ResourceType;
use crate::state::event::{EventType, StoreEvent, WatchItem};
use crate::state::watchers::deliver;
use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Upstream sends a last bookmark this long before the watch deadline.
const BOOKMARK_BEFORE_DEADLINE: Duration = Duration::from_secs(2);

/// What a watch asks for.
#[derive(Debug, Clone, Default)]
pub struct WatchOptions {
    /// Namespace, label and field constraints.
    pub filter: Filter,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `sendInitialEvents=true`.
    pub send_initial_events: bool,
    /// `allowWatchBookmarks=true`.
    pub allow_bookmarks: bool,
    /// `timeoutSeconds`, or the server's default.
    pub timeout: Option<Duration>,
}

/// One element of a watch stream.
#[derive(Debug, Clone)]
pub enum WatchOutput {
    /// ADDED, MODIFIED or DELETED.
    Event(WatchItem),
    /// A BOOKMARK at this resourceVersion.
    Bookmark {
        /// Its resourceVersion.
        rv: u64,
        /// Annotated `k8s.io/initial-events-end: "true"`.
        initial_events_end: bool,
    },
    /// An ERROR event; the stream ends after it.
    Error(ApiError),
}

enum Phase {
    Initial { items: std::vec::IntoIter<Arc<StoredObject>>, rv: u64, end_bookmark: bool },
    Replay(std::vec::IntoIter<Arc<StoreEvent>>),
    Live,
    Failed(ApiError),
    Done,
}

struct Registered {
    core: Weak<Core>,
    store_id: Arc<str>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Some(core) = self.core.upgrade() {
            core.state.lock().unregister_watch(&self.store_id, self.id);
        }
    }
}

/// One open watch.
pub struct WatchSession {
    core: Arc<Core>,
    rt: Arc<ResourceType>,
    filter: Arc<Filter>,
    phase: Phase,
    rx: Option<mpsc::Receiver<WatchItem>>,
    registered: Option<Registered>,
    pending: VecDeque<WatchItem>,
    pending_bookmark: Option<u64>,
    bookmarks: bool,
    start_rv: u64,
    deadline: Instant,
    next_bookmark: Option<Instant>,
}

fn expired(wanted: u64, oldest: u64) -> ApiError {
    ApiError::expired(format!("too old resource version: {wanted} ({oldest})"))
}

impl WatchSession {
    /// Opens a watch. Errors here are HTTP-level (bad parameters); an expired resourceVersion is not an error
    /// here but the first output of the stream, as upstream sends it.
    pub fn start(core: Arc<Core>, rt: Arc<ResourceType>, options: WatchOptions) -> Result<WatchSession, ApiError> {
        let timeout = options.timeout.unwrap_or(core.config.default_watch_timeout);
        let deadline = Instant::now() + timeout;
        let filter = Arc::new(options.filter);
        let rv_text = options.resource_version.as_deref().unwrap_or_default();
        let wanted =
            match rv_text {
                "" => None,
                text => Some(text.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid resourceVersion {text:?}: must be an integer"))
                })?),
            };
        let mut session = WatchSession {
            core,
            rt,
            filter,
            phase: Phase::Done,
            rx: None,
            registered: None,
            pending: VecDeque::new(),
            pending_bookmark: None,
            bookmarks: options.allow_bookmarks,
            start_rv: 0,
            deadline,
            next_bookmark: None,
        };
        match wanted {
            Some(rv) if rv > 0 && !options.send_initial_events => {
                session.start_rv = rv;
                session.phase = match session.register(rv) {
                    Ok(replay) => Phase::Replay(replay.into_iter()),
                    Err(oldest) => Phase::Failed(expired(rv, oldest)),
                };
            }
            _ => {
                let (objects, rv) = {
                    let state = session.core.state.lock();
                    (state.objects(&session.rt), state.rv)
                };
                let items: Vec<Arc<StoredObject>> = objects.values().cloned().collect();
                session.start_rv = rv;
                session.phase =
                    Phase::Initial { items: items.into_iter(), rv, end_bookmark: options.send_initial_events };
            }
        }
        session.schedule_bookmark();
        Ok(session)
    }

    fn register(&mut self, from_rv: u64) -> Result<Vec<Arc<StoreEvent>>, u64> {
        let registration = self.core.state.lock().register_watch(&self.rt, self.filter.clone(), from_rv)?;
        self.rx = Some(registration.rx);
        self.registered = Some(Registered {
            core: Arc::downgrade(&self.core),
            store_id: self.rt.store_id.clone(),
            id: registration.id,
        });
        Ok(registration.replay)
    }

    fn schedule_bookmark(&mut self) {
        if !self.bookmarks {
            return;
        }
        let now = Instant::now();
        let periodic = now + self.core.config.bookmark_interval;
        let last = self.deadline.checked_sub(BOOKMARK_BEFORE_DEADLINE).filter(|t| *t > now);
        self.next_bookmark = Some(match last {
            Some(last) if last < periodic => last,
            _ => periodic,
        });
    }

    /// The resource type watched.
    pub fn resource(&self) -> &Arc<ResourceType> {
        &self.rt
    }

    /// The next element, or `None` when the stream has ended.
    pub async fn next(&mut self) -> Option<WatchOutput> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(WatchOutput::Event(item));
            }
            if let Some(rv) = self.pending_bookmark.take() {
                return Some(WatchOutput::Bookmark { rv, initial_events_end: false });
            }
            match &mut self.phase {
                Phase::Done => return None,
                Phase::Failed(error) => {
                    let error = error.clone();
                    self.phase = Phase::Done;
                    return Some(WatchOutput::Error(error));
                }
                Phase::Initial { items, rv, end_bookmark } => {
                    if let Some(object) = items.by_ref().find(|o| self.filter.matches(&o.index)) {
                        return Some(WatchOutput::Event(WatchItem::of(EventType::Added, &object)));
                    }
                    let (rv, end_bookmark) = (*rv, *end_bookmark);
                    match self.register(rv) {
                        Ok(replay) => self.phase = Phase::Replay(replay.into_iter()),
                        // The history moved on while the initial events were sent: end the stream, so the client
                        // starts over (a streaming list has no 410 to send).
                        Err(_) if end_bookmark => self.phase = Phase::Done,
                        Err(oldest) => self.phase = Phase::Failed(expired(rv, oldest)),
                    }
                    if end_bookmark && self.bookmarks {
                        return Some(WatchOutput::Bookmark { rv, initial_events_end: true });
                    }
                }
                Phase::Replay(events) => {
                    let filter = &self.filter;
                    if let Some(item) = events.by_ref().find_map(|e| deliver(&e, filter)) {
                        return Some(WatchOutput::Event(item));
                    }
                    self.phase = Phase::Live;
                }
                Phase::Live => {
                    if let Some(output) = self.next_live().await {
                        return Some(output);
                    }
                }
            }
        }
    }

    /// The next live element; `None` when the stream ended (phase `Done`) or a bookmark was queued.
    async fn next_live(&mut self) -> Option<WatchOutput> {
        let Some(rx) = self.rx.as_mut() else {
            self.phase = Phase::Done;
            return None;
        };
        let bookmark_at = self.next_bookmark;
        tokio::select! {
            biased;
            item = rx.recv() => match item {
                Some(item) => Some(WatchOutput::Event(item)),
                None => {
                    self.phase = Phase::Done;
                    None
                }
            },
            () = tokio::time::sleep_until(self.deadline) => {
                self.phase = Phase::Done;
                None
            }
            () = tokio::time::sleep_until(bookmark_at.unwrap_or_else(Instant::now)), if bookmark_at.is_some() => {
                self.schedule_bookmark();
                self.queue_bookmark();
                None
            }
        }
    }

    /// Queues a bookmark at the current RV behind every event already sent to this watcher.
    fn queue_bookmark(&mut self) {
        let rv = {
            let state = self.core.state.lock();
            if let Some(rx) = self.rx.as_mut() {
                while let Ok(item) = rx.try_recv() {
                    self.pending.push_back(item);
                }
            }
            state.rv
        };
        // A watch from a future RV gets no bookmark until the store has passed that RV.
        if rv >= self.start_rv {
            self.pending_bookmark = Some(rv);
        }
    }
}
