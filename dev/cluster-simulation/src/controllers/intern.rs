//! Interning of the values that thousands of cached objects share (namespaces, label sets, owner references,
//! node names, scheduling constraints), so that a cache of 150,000 pods holds each distinct value once.
//!
//! # Invariants
//! - Interning never changes a value: `intern(x) == x`.
//! - Values no cached object uses any more are dropped when the table has doubled since the last purge, so the
//!   table stays within a small factor of the live distinct values.

use parking_lot::Mutex;
use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Arc, LazyLock};

/// The table never purges below this many entries (a purge of a small table costs more than it saves).
const MIN_PURGE_SIZE: usize = 4096;

/// A table of shared values of type `T` (`str`, `[X]` or a sized type).
pub struct Interner<T: ?Sized> {
    table: Mutex<Table<T>>,
}

struct Table<T: ?Sized> {
    values: HashSet<Arc<T>>,
    purge_at: usize,
}

impl<T: ?Sized + Hash + Eq> Default for Interner<T> {
    fn default() -> Self {
        Interner { table: Mutex::new(Table { values: HashSet::new(), purge_at: MIN_PURGE_SIZE }) }
    }
}

impl<T: ?Sized + Hash + Eq> Interner<T> {
    /// The shared copy of `value`, made from it with `make` when it is new.
    pub fn intern_with<Q>(&self, value: &Q, make: impl FnOnce(&Q) -> Arc<T>) -> Arc<T>
    where
        Arc<T>: Borrow<Q>,
        Q: ?Sized + Hash + Eq,
    {
        let mut table = self.table.lock();
        if let Some(existing) = table.values.get(value) {
            return existing.clone();
        }
        if table.values.len() >= table.purge_at {
            // Only the table holds these: no cached object refers to them any more.
            table.values.retain(|v| Arc::strong_count(v) > 1);
            table.purge_at = (table.values.len() * 2).max(MIN_PURGE_SIZE);
        }
        let shared = make(value);
        table.values.insert(shared.clone());
        shared
    }

    /// Number of distinct values held.
    pub fn len(&self) -> usize {
        self.table.lock().values.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Interner<str> {
    /// The shared copy of a string.
    pub fn str(&self, value: &str) -> Arc<str> {
        self.intern_with(value, |v| Arc::from(v))
    }
}

impl<X: Hash + Eq + Clone + 'static> Interner<[X]> {
    /// The shared copy of a slice.
    pub fn slice(&self, value: &[X]) -> Arc<[X]> {
        self.intern_with(value, |v| Arc::from(v))
    }
}

/// Strings shared by every cache of the process.
pub static STRINGS: LazyLock<Interner<str>> = LazyLock::new(Interner::default);

/// The shared copy of a string.
pub fn str(value: &str) -> Arc<str> {
    STRINGS.str(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_allocation() {
        let strings: Interner<str> = Interner::default();
        let a = strings.str("app");
        let b = strings.str(&String::from("app"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(&*a, "app");
        let slices: Interner<[u32]> = Interner::default();
        assert!(Arc::ptr_eq(&slices.slice(&[1, 2]), &slices.slice(&[1, 2])));
        assert!(!Arc::ptr_eq(&slices.slice(&[1, 2]), &slices.slice(&[2, 1])));
    }

    #[test]
    fn values_nobody_holds_are_purged_when_the_table_grows() {
        let strings: Interner<str> = Interner::default();
        let kept = strings.str("kept");
        for i in 0..MIN_PURGE_SIZE * 3 {
            drop(strings.str(&format!("transient-{i}")));
        }
        assert!(strings.len() <= MIN_PURGE_SIZE + 1, "{} values held", strings.len());
        assert!(Arc::ptr_eq(&kept, &strings.str("kept")));
    }
}
