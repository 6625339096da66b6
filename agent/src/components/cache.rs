//! The fetch cache: Kubernetes components fetched ahead of a kubeadm upgrade (intent `fetch`), kept on the host
//! until the upgrade installs them or the controller gives the upgrade up.
//!
//! Fetching ahead moves the slow part of a kubeadm upgrade (the downloads) out of the time the node is cordoned.
//! A file that sits on the host's disk for minutes may be changed meanwhile (a bad disk, a curious administrator),
//! so the cache is only ever a source of bytes to verify, never a source of trust.
//!
//! # Guarantees
//! - A file in the cache is named by the lowercase hex SHA-256 its content must have, and appears under that name
//!   only once that hash matched: the installer streams the download into a hidden temporary file in the cache
//!   directory, hashes it as it streams, syncs it and renames it to its name only if the hash is the expected one
//!   (otherwise the temporary file is removed).
//! - Nothing is used from the cache without being hashed again: [`Cache::copy_verified`] copies the file into the
//!   installer's temporary file while hashing it, and the copy counts only if the hash matches; a cached file that
//!   does not match (or cannot be read) is deleted, and the installer downloads the component instead.
//! - The cache holds one set: [`Cache::keep_only`] (called by every fetch) removes every file that is not one of
//!   the new set's components, earlier sets and temporary files of an interrupted fetch alike.
//!
//! Every function here blocks: the installer runs them on tokio's blocking pool.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use shared::components::Sha256;

use super::{InstallError, create, io, sync_dir, temp_path};

/// The chunk size of copies and re-hashes.
const CHUNK: usize = 256 * 1024;

/// A fetch cache directory (the path as this process sees it, under the host root).
#[derive(Debug, Clone)]
pub(super) struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub(super) fn new(dir: PathBuf) -> Self {
        Cache { dir }
    }

    /// Where the file of content `hash` is kept.
    fn path(&self, hash: &Sha256) -> PathBuf {
        self.dir.join(hash.hex())
    }

    /// A fresh temporary path in the cache directory for a download of `hash` (the directory created).
    pub(super) fn temp_for(&self, hash: &Sha256) -> Result<PathBuf, InstallError> {
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        Ok(temp_path(&self.dir, &self.path(hash)))
    }

    /// Puts the verified download `temp` in place as the file of `hash`, durably.
    pub(super) fn commit(&self, temp: &Path, hash: &Sha256) -> Result<(), InstallError> {
        let path = self.path(hash);
        std::fs::rename(temp, &path).map_err(io(&path))?;
        sync_dir(&path)
    }

    /// Copies the cached file of `hash` into `temp` (created with mode 0755, synced), hashing what it copies:
    /// `true` when the copy has that hash. `false` when nothing is cached for `hash`, or what is cached does not
    /// have that hash or cannot be read: that file is deleted, and `temp` must not be used as it is.
    pub(super) fn copy_verified(&self, hash: &Sha256, temp: &Path) -> Result<bool, InstallError> {
        self.verify(hash, Some(temp))
    }

    /// Whether the cache holds the file of `hash` with that hash; one that does not (or cannot be read) is deleted.
    pub(super) fn holds(&self, hash: &Sha256) -> Result<bool, InstallError> {
        self.verify(hash, None)
    }

    /// Hashes the cached file of `hash` (copying it to `copy_to` if given): whether it has that hash.
    fn verify(&self, hash: &Sha256, copy_to: Option<&Path>) -> Result<bool, InstallError> {
        let path = self.path(hash);
        let mut source = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(error) => return Ok(self.unusable(&path, &error.to_string())),
        };
        let mut copy = copy_to.map(|temp| create(temp, 0o755).map(|file| (temp, file))).transpose()?;
        let mut hasher = Sha256::hasher();
        let mut buffer = vec![0u8; CHUNK];
        loop {
            let read = match source.read(&mut buffer) {
                Ok(0) => break,
                Ok(read) => read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => return Ok(self.unusable(&path, &error.to_string())),
            };
            hasher.update(&buffer[..read]);
            if let Some((temp, out)) = &mut copy {
                out.write_all(&buffer[..read]).map_err(io(temp))?;
            }
        }
        let actual = hasher.finish();
        if actual != *hash {
            return Ok(self.unusable(&path, &format!("its content has {actual}")));
        }
        if let Some((temp, out)) = copy {
            out.sync_all().map_err(io(temp))?;
        }
        Ok(true)
    }

    /// Deletes the cached file at `path`, which cannot be used (`why`); always `false` (not usable).
    fn unusable(&self, path: &Path, why: &str) -> bool {
        tracing::warn!(path = %path.display(), why, "a fetched component is not what its name says; deleting it");
        if let Err(error) = std::fs::remove_file(path)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), %error, "cannot delete a fetched component that does not verify");
        }
        false
    }

    /// Removes every entry of the cache but the files of `keep`.
    pub(super) fn keep_only(&self, keep: &[Sha256]) -> Result<(), InstallError> {
        let keep: Vec<String> = keep.iter().map(Sha256::hex).collect();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(io(&self.dir)(error)),
        };
        for entry in entries {
            let entry = entry.map_err(io(&self.dir))?;
            if keep.iter().any(|name| entry.file_name() == name.as_str()) {
                continue;
            }
            let path = entry.path();
            let removed = if entry.file_type().map_err(io(&path))?.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            match removed {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(io(&path)(error)),
                _ => {}
            }
        }
        Ok(())
    }

    /// Deletes the cache with everything in it.
    pub(super) fn discard(&self) -> Result<(), InstallError> {
        match std::fs::remove_dir_all(&self.dir) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(io(&self.dir)(error)),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
