//! Installs Kubernetes components on the host: every artifact fetched and verified against its SHA-256 before
//! anything is installed, then each installed atomically, and a record of what is installed kept on the host.
//!
//! The order is what makes a failure harmless: phase one downloads (or decodes) every component into a temporary
//! file *next to its destination* and checks its hash as it streams; any failure (unreachable, too large, hash
//! mismatch, a tarball entry that would escape its directory) removes every temporary file and leaves the host as
//! it was. Phase two renames each verified file over its destination (same filesystem, so each replacement is
//! atomic; archives are extracted into a temporary directory first and their files renamed one by one), and only
//! then the record is replaced. The components hash the agent reports is computed from that record, so it says
//! what is really installed, never what was asked for.
//!
//! Components can be fetched ahead ([`Installer::fetch`], the intent `fetch`) into a cache on the host (see
//! [`cache`]); phase one then takes each from there, hashing it again as it copies it, instead of downloading it.
//!
//! The agent runs on a single-threaded runtime: every blocking file operation (extraction, decompression,
//! `fsync`, renames, writes of downloads) runs on tokio's blocking pool ([`tokio::task::spawn_blocking`] or
//! `tokio::fs`), so the node's reports and watches go on while a 100 MB archive is extracted.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Component as PathPart, Path, PathBuf};
use std::time::Duration;

use http_body_util::BodyExt;
pub use hyper_util::client::proxy::matcher::Matcher;
use serde::{Deserialize, Serialize};
use shared::components::{Sha256, Source, VerifiedComponent, components_hash};

/// Where the record of installed components is kept on a host by default.
pub const DEFAULT_RECORD: &str = "/var/lib/update-operator/components.json";

/// Where components fetched ahead are kept on a host by default (one file per component, named by its hash).
pub const DEFAULT_FETCH_CACHE: &str = "/var/lib/update-operator/fetched";

/// The largest artifact accepted (kubelet and kubeadm binaries are about 100 MB).
pub const DEFAULT_MAX_SIZE: u64 = 512 * 1024 * 1024;

/// Why components could not be installed. Nothing was installed when [`InstallError::is_before_install`].
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("downloading {url}: {reason}")]
    Download { url: String, reason: String },
    #[error("{what} has {actual}, not the expected {expected}: nothing was installed")]
    HashMismatch { what: String, expected: Sha256, actual: Sha256 },
    #[error("{what} is larger than {limit} bytes")]
    TooLarge { what: String, limit: u64 },
    #[error("archive for {path}: {reason}")]
    Archive { path: String, reason: String },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("the record of installed components {path}: {reason}")]
    Record { path: String, reason: String },
    /// A file operation on the blocking pool did not finish (it panicked, or the runtime is shutting down).
    #[error("a file operation did not finish: {0}")]
    Interrupted(String),
}

/// What is installed, as recorded on the host after the last successful install.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// `sha256:<hex>` of the components, in the order installed.
    pub component_hashes: Vec<String>,
    pub install_paths: Vec<String>,
    /// The components hash over `component_hashes`, as reported in the node's annotation.
    pub hash: String,
}

/// Installs components under a host root (`/` on a real host, a temporary directory in tests).
pub struct Installer {
    root: PathBuf,
    record: PathBuf,
    /// The fetch cache's host path.
    cache: PathBuf,
    max_size: u64,
    timeout: Duration,
    fetcher: fetch::Fetcher,
}

impl Installer {
    /// An installer writing under `root`, keeping its record at `record` (a host path, e.g.
    /// `/var/lib/update-operator/components.json`), verifying HTTPS with the system's CA certificates,
    /// following redirects and using the proxies of the process's environment (see [`fetch`]).
    pub fn new(root: impl Into<PathBuf>, record: impl Into<PathBuf>) -> Result<Self, InstallError> {
        Ok(Installer {
            root: root.into(),
            record: record.into(),
            cache: PathBuf::from(DEFAULT_FETCH_CACHE),
            max_size: DEFAULT_MAX_SIZE,
            timeout: Duration::from_secs(600),
            fetcher: fetcher(Matcher::from_env())?,
        })
    }

    /// Uses `proxies` instead of the environment's `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY`.
    pub fn with_proxies(mut self, proxies: Matcher) -> Result<Self, InstallError> {
        self.fetcher = fetcher(proxies)?;
        Ok(self)
    }

    /// Keeps components fetched ahead at the host path `cache` instead of [`DEFAULT_FETCH_CACHE`].
    pub fn with_cache(mut self, cache: impl Into<PathBuf>) -> Self {
        self.cache = cache.into();
        self
    }

    /// Limits each artifact to `max_size` bytes and each download to `timeout`.
    pub fn with_limits(mut self, max_size: u64, timeout: Duration) -> Self {
        self.max_size = max_size;
        self.timeout = timeout;
        self
    }

    fn host_path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// Where the record is, seen from this process (under the root).
    pub fn record_path(&self) -> PathBuf {
        self.host_path(&self.record.to_string_lossy())
    }

    /// Where the fetch cache is, seen from this process (under the root).
    pub fn cache_path(&self) -> PathBuf {
        self.host_path(&self.cache.to_string_lossy())
    }

    fn fetch_cache(&self) -> cache::Cache {
        cache::Cache::new(self.cache_path())
    }

    /// The record of what is installed, `None` when nothing was installed by us.
    pub fn installed(&self) -> Result<Option<Record>, InstallError> {
        installed_at(&self.record_path())
    }

    /// Fetches and verifies every component, then installs them all and records them. On any error before the
    /// installation, nothing on the host changed.
    pub async fn install(&self, components: &[VerifiedComponent]) -> Result<Record, InstallError> {
        self.prepare(components).await?.finish().await
    }

    /// Fetches every downloaded component ahead into the fetch cache, each verified against its hash as it
    /// streams and kept only if it matched; installs nothing. The cache then holds this set only: files of any
    /// other are removed first. A component the cache holds already (and that hashes to its name) is not
    /// downloaded again; inline components need no fetch. On an error the components fetched before it stay
    /// (verified, a retry does not download them again) and nothing is left of the one that failed.
    pub async fn fetch(&self, components: &[VerifiedComponent]) -> Result<Fetched, InstallError> {
        let cache = self.fetch_cache();
        let downloads: Vec<(&str, Sha256)> = components
            .iter()
            .filter_map(|c| match &c.source {
                Source::Download(url) => Some((url.as_str(), c.hash)),
                Source::Inline(_) => None,
            })
            .collect();
        let keep: Vec<Sha256> = downloads.iter().map(|(_, hash)| *hash).collect();
        blocking({
            let cache = cache.clone();
            move || cache.keep_only(&keep)
        })
        .await?;
        let mut fetched = Fetched::default();
        for (url, hash) in downloads {
            let held = blocking({
                let cache = cache.clone();
                move || cache.holds(&hash)
            })
            .await?;
            if held {
                fetched.cached += 1;
                continue;
            }
            let temp = blocking({
                let cache = cache.clone();
                move || cache.temp_for(&hash)
            })
            .await?;
            let result = async {
                let actual = self.download(url, &temp).await?;
                if actual != hash {
                    return Err(InstallError::HashMismatch { what: url.to_owned(), expected: hash, actual });
                }
                let (cache, temp) = (cache.clone(), temp.clone());
                blocking(move || cache.commit(&temp, &hash)).await
            }
            .await;
            if let Err(error) = result {
                let _ = blocking(move || {
                    let _ = std::fs::remove_file(&temp);
                    Ok(())
                })
                .await;
                return Err(error);
            }
            fetched.downloaded += 1;
        }
        Ok(fetched)
    }

    /// Deletes the fetch cache with everything in it.
    pub async fn discard_fetched(&self) -> Result<(), InstallError> {
        let cache = self.fetch_cache();
        blocking(move || cache.discard()).await
    }

    /// Phase one: fetches and verifies every component into temporary files next to their destinations, taking
    /// those fetched ahead from the fetch cache (hashed again as they are copied) instead of downloading them. On
    /// any error every temporary file is removed and nothing on the host changed. Dropping the result without
    /// [`Prepared::finish`] removes what was not installed yet.
    pub async fn prepare(&self, components: &[VerifiedComponent]) -> Result<Prepared, InstallError> {
        let mut staged: Vec<(VerifiedComponent, Staged)> = Vec::with_capacity(components.len());
        let mut downloaded = 0;
        for component in components {
            match self.stage(component).await {
                Ok((s, download)) => {
                    downloaded += usize::from(download);
                    staged.push((component.clone(), s));
                }
                Err(error) => {
                    let discarded = blocking(move || {
                        staged.into_iter().for_each(|(_, s)| s.discard());
                        Ok(())
                    });
                    let _ = discarded.await;
                    return Err(error);
                }
            }
        }
        Ok(Prepared { record: self.record_path(), components: components.to_vec(), staged, downloaded })
    }

    /// Fetches (from the fetch cache, or by downloading) or decodes `component` into a temporary file next to its
    /// destination and verifies it; with whether it was downloaded.
    async fn stage(&self, component: &VerifiedComponent) -> Result<(Staged, bool), InstallError> {
        let target = self.host_path(&component.install_path);
        let parent = if component.extract { target.clone() } else { parent_of(&target)? };
        let temp = temp_path(&parent, &target);
        let what = match &component.source {
            Source::Download(url) => url.clone(),
            Source::Inline(_) => format!("the inline content for {}", component.install_path),
        };
        let mut downloaded = false;
        let result = async {
            blocking({
                let parent = parent.clone();
                move || std::fs::create_dir_all(&parent).map_err(io(&parent))
            })
            .await?;
            let actual = match &component.source {
                Source::Inline(bytes) => {
                    let (temp, bytes) = (temp.clone(), bytes.clone());
                    blocking(move || write_file(&temp, &bytes, 0o755).map(|()| Sha256::of(&bytes))).await?
                }
                Source::Download(url) => {
                    let (cache, copy_to, hash) = (self.fetch_cache(), temp.clone(), component.hash);
                    // IMPORTANT: `true` only when what was copied into `temp` hashed to the expected hash.
                    if blocking(move || cache.copy_verified(&hash, &copy_to)).await? {
                        hash
                    } else {
                        downloaded = true;
                        self.download(url, &temp).await?
                    }
                }
            };
            if actual != component.hash {
                return Err(InstallError::HashMismatch { what: what.clone(), expected: component.hash, actual });
            }
            if component.extract {
                let dir = temp.with_extension("d");
                extract_in_background(temp.clone(), dir.clone(), component.install_path.clone()).await?;
                let temp = temp.clone();
                blocking(move || {
                    let _ = std::fs::remove_file(&temp);
                    Ok(())
                })
                .await?;
                return Ok(Staged::Directory { temp: dir, target: target.clone() });
            }
            Ok(Staged::File { temp: temp.clone(), target: target.clone() })
        }
        .await
        .map(|staged| (staged, downloaded));
        if result.is_err() {
            let _ = blocking(move || {
                let _ = std::fs::remove_file(&temp);
                let _ = std::fs::remove_dir_all(temp.with_extension("d"));
                Ok(())
            })
            .await;
        }
        result
    }

    /// Streams `url` into `temp`, hashing as it goes; the file is synced before its hash is returned.
    async fn download(&self, url: &str, temp: &Path) -> Result<Sha256, InstallError> {
        let failed = |reason: String| InstallError::Download { url: url.to_owned(), reason };
        let uri: http::Uri = url.parse().map_err(|e: http::uri::InvalidUri| failed(e.to_string()))?;
        use tokio::io::AsyncWriteExt;
        let work = async {
            let (response, answered) = self.fetcher.get(uri.clone()).await.map_err(failed)?;
            if !response.status().is_success() {
                let at = if answered == uri { String::new() } else { format!(" (at {answered})") };
                return Err(failed(format!("the server answered {}{at}", response.status())));
            }
            let mut body = response.into_body();
            // tokio's file: every write and the sync run on the blocking pool.
            let mut file = tokio::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o755)
                .open(temp)
                .await
                .map_err(io(temp))?;
            let mut hasher = Sha256::hasher();
            let mut size: u64 = 0;
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| failed(e.to_string()))?;
                if let Ok(chunk) = frame.into_data() {
                    size += chunk.len() as u64;
                    if size > self.max_size {
                        return Err(InstallError::TooLarge { what: url.to_owned(), limit: self.max_size });
                    }
                    hasher.update(&chunk);
                    file.write_all(&chunk).await.map_err(io(temp))?;
                }
            }
            // tokio's sync_all keeps a failed background write to itself (tokio src/fs/file.rs:
            // complete_inflight stores it in last_write_err); flush returns it.
            file.flush().await.map_err(io(temp))?;
            file.sync_all().await.map_err(io(temp))?;
            Ok(hasher.finish())
        };
        match tokio::time::timeout(self.timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(failed(format!("no complete answer within {:?}", self.timeout))),
        }
    }
}

fn fetcher(proxies: Matcher) -> Result<fetch::Fetcher, InstallError> {
    fetch::Fetcher::new(proxies).map_err(|reason| InstallError::Download { url: "(any)".into(), reason })
}

/// What [`Installer::fetch`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fetched {
    /// Components downloaded (and verified) into the cache.
    pub downloaded: usize,
    /// Components the cache held already, verified again.
    pub cached: usize,
}

/// Components fetched and verified, waiting to be installed (see [`Installer::prepare`]).
pub struct Prepared {
    /// Where the record is, seen from this process.
    record: PathBuf,
    components: Vec<VerifiedComponent>,
    /// Those not installed yet.
    staged: Vec<(VerifiedComponent, Staged)>,
    /// How many were downloaded (rather than taken from the fetch cache or decoded).
    downloaded: usize,
}

impl Prepared {
    /// How many components were downloaded rather than taken, verified, from the fetch cache (inline ones are
    /// neither).
    pub fn downloaded(&self) -> usize {
        self.downloaded
    }

    /// Installs the prepared components for which `which` is true (each by an atomic rename); the others
    /// wait for a later call or [`Prepared::finish`].
    pub async fn install_where(&mut self, which: impl Fn(&VerifiedComponent) -> bool) -> Result<(), InstallError> {
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.staged).into_iter().partition(|(c, _)| which(c));
        self.staged = later;
        blocking(move || {
            let mut now = now.into_iter();
            for (_, staged) in now.by_ref() {
                if let Err(error) = staged.commit() {
                    now.for_each(|(_, rest)| rest.discard());
                    return Err(error);
                }
            }
            Ok(())
        })
        .await
    }

    /// Installs what is left and then records every prepared component as installed.
    pub async fn finish(mut self) -> Result<Record, InstallError> {
        self.install_where(|_| true).await?;
        let component_hashes: Vec<String> = self.components.iter().map(|c| c.hash.to_string()).collect();
        let record = Record {
            hash: components_hash(component_hashes.iter().map(String::as_str)).to_string(),
            component_hashes,
            install_paths: self.components.iter().map(|c| c.install_path.clone()).collect(),
        };
        let path = self.record.clone();
        let json = serde_json::to_vec_pretty(&record)
            .map_err(|e| InstallError::Record { path: path.display().to_string(), reason: e.to_string() })?;
        blocking(move || write_atomically(&path, &json, 0o644)).await?;
        Ok(record)
    }
}

impl Drop for Prepared {
    /// Removes what was not installed: on the blocking pool when dropped within a runtime.
    fn drop(&mut self) {
        let staged = std::mem::take(&mut self.staged);
        if staged.is_empty() {
            return;
        }
        let discard = move || staged.into_iter().for_each(|(_, s)| s.discard());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(discard)),
            Err(_) => discard(),
        }
    }
}

/// Runs `work` on tokio's blocking pool, so that the (single-threaded) runtime goes on meanwhile.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, InstallError> + Send + 'static,
) -> Result<T, InstallError> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|error| Err(InstallError::Interrupted(error.to_string())))
}

/// [`extract`] on the blocking pool.
async fn extract_in_background(archive: PathBuf, dir: PathBuf, install_path: String) -> Result<(), InstallError> {
    blocking(move || extract(&archive, &dir, &install_path)).await
}

/// The record of what is installed at `path` (the host path of the record under the host root), `None` when
/// nothing was installed by us. A record whose hash does not match its components is an error.
pub fn installed_at(path: &Path) -> Result<Option<Record>, InstallError> {
    let bad = |reason: String| InstallError::Record { path: path.display().to_string(), reason };
    match std::fs::read(path) {
        Ok(bytes) => {
            let record: Record = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
            let hash = components_hash(record.component_hashes.iter().map(String::as_str)).to_string();
            if hash != record.hash {
                return Err(bad(format!("its hash {} does not match its components ({hash})", record.hash)));
            }
            Ok(Some(record))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(InstallError::Io { path: path.display().to_string(), source: e }),
    }
}

/// [`installed_at`] on the blocking pool.
pub async fn installed_in_background(path: PathBuf) -> Result<Option<Record>, InstallError> {
    blocking(move || installed_at(&path)).await
}

/// A verified component waiting to be moved into place.
enum Staged {
    File { temp: PathBuf, target: PathBuf },
    Directory { temp: PathBuf, target: PathBuf },
}

impl Staged {
    fn discard(self) {
        match self {
            Staged::File { temp, .. } => drop(std::fs::remove_file(temp)),
            Staged::Directory { temp, .. } => drop(std::fs::remove_dir_all(temp)),
        }
    }

    fn commit(self) -> Result<(), InstallError> {
        match self {
            Staged::File { temp, target } => {
                std::fs::rename(&temp, &target).map_err(io(&target))?;
                sync_dir(&target)
            }
            Staged::Directory { temp, target } => {
                let result = move_tree(&temp, &target);
                let _ = std::fs::remove_dir_all(&temp);
                result
            }
        }
    }
}

/// Moves every file of `from` to the same relative path under `to`, each by an atomic rename.
fn move_tree(from: &Path, to: &Path) -> Result<(), InstallError> {
    std::fs::create_dir_all(to).map_err(io(to))?;
    for entry in std::fs::read_dir(from).map_err(io(from))? {
        let entry = entry.map_err(io(from))?;
        let source = entry.path();
        let destination = to.join(entry.file_name());
        if entry.file_type().map_err(io(&source))?.is_dir() {
            move_tree(&source, &destination)?;
        } else {
            std::fs::rename(&source, &destination).map_err(io(&destination))?;
        }
    }
    sync_dir(&to.join("."))
}

/// Extracts a gzip-compressed (or plain) tar archive into `dir`: regular files and directories only, every
/// entry a relative path without `..`, so nothing lands outside `dir`.
fn extract(archive: &Path, dir: &Path, install_path: &str) -> Result<(), InstallError> {
    let bad = |reason: String| InstallError::Archive { path: install_path.to_owned(), reason };
    let file = std::fs::File::open(archive).map_err(io(archive))?;
    // The gzip magic, peeked without seeking (the archive is read as a stream).
    let mut file = BufReader::new(file);
    let gzip = file.fill_buf().map_err(io(archive))?.starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn Read> = if gzip { Box::new(flate2::read::GzDecoder::new(file)) } else { Box::new(file) };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut tar = tar::Archive::new(reader);
    for entry in tar.entries().map_err(|e| bad(e.to_string()))? {
        let mut entry = entry.map_err(|e| bad(e.to_string()))?;
        let path = entry.path().map_err(|e| bad(e.to_string()))?.into_owned();
        let mut relative = PathBuf::new();
        for part in path.components() {
            match part {
                PathPart::Normal(name) => relative.push(name),
                PathPart::CurDir => {}
                _ => return Err(bad(format!("the entry {} would be written outside its directory", path.display()))),
            }
        }
        if relative.as_os_str().is_empty() {
            continue;
        }
        let destination = dir.join(&relative);
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            std::fs::create_dir_all(&destination).map_err(io(&destination))?;
        } else if kind.is_file() {
            if let Some(parent) = destination.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            let mode = entry.header().mode().unwrap_or(0o644) & 0o755;
            let mut out = create(&destination, mode)?;
            std::io::copy(&mut entry, &mut out).map_err(io(&destination))?;
            out.sync_all().map_err(io(&destination))?;
        } else {
            return Err(bad(format!("the entry {} is not a regular file or directory ({kind:?})", path.display())));
        }
    }
    Ok(())
}

fn parent_of(path: &Path) -> Result<PathBuf, InstallError> {
    path.parent().map(Path::to_owned).ok_or_else(|| InstallError::Io {
        path: path.display().to_string(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "no parent directory"),
    })
}

/// A fresh temporary name in `dir` for what will become `target` (hidden, unique within this process).
fn temp_path(dir: &Path, target: &Path) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "component".into());
    dir.join(format!(".{name}.update-operator-{}-{n}.tmp", std::process::id()))
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> InstallError + '_ {
    move |source| InstallError::Io { path: path.display().to_string(), source }
}

fn create(path: &Path, mode: u32) -> Result<std::fs::File, InstallError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(path).map_err(io(path))
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), InstallError> {
    let mut file = create(path, mode)?;
    file.write_all(bytes).map_err(io(path))?;
    file.sync_all().map_err(io(path))
}

/// Writes `bytes` to a temporary file beside `path`, syncs it and renames it over `path`.
fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> Result<(), InstallError> {
    let parent = parent_of(path)?;
    std::fs::create_dir_all(&parent).map_err(io(&parent))?;
    let temp = temp_path(&parent, path);
    write_file(&temp, bytes, mode)?;
    std::fs::rename(&temp, path).map_err(io(path))?;
    sync_dir(path)
}

/// Syncs the directory holding `path`, so a rename survives a crash.
fn sync_dir(path: &Path) -> Result<(), InstallError> {
    let dir = parent_of(path)?;
    std::fs::File::open(&dir).and_then(|d| d.sync_all()).map_err(io(&dir))
}

mod cache;
pub mod fetch;
#[cfg(test)]
pub(crate) mod tests;
