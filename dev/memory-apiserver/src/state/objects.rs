//! How the store keeps one kind's objects: a persistent map, so that a list snapshot is an O(1) clone that shares
//! every unchanged node with the live map.

use crate::object::{ObjectKey, StoredObject};
use std::sync::Arc;

/// The objects of one kind, in key order; cloning is O(1).
pub type Objects = rpds::RedBlackTreeMapSync<ObjectKey, Arc<StoredObject>>;
