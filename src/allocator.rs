//! The controller's memory allocator settings.
//!
//! glibc's allocator gives threads that allocate at the same time arenas of their own (up to eight per core) and
//! keeps in each what its threads free. The controller's runtime threads then each hold the free space left by the
//! transient peaks they served (a rollout's first plan, the preflight's lists, a relist), and the process's resident
//! set is their sum. With one arena the same work reuses the same free space: in the 5000-node benchmark the
//! controller's resident set after its caches synced went from 48 to 37 MiB, and from 85 to 69 MiB once the
//! rollout started (docs/performance.md). The controller allocates little per second, so the one lock costs nothing
//! measurable. `MALLOC_ARENA_MAX` or `GLIBC_TUNABLES` set in the environment still decide.

/// Limits the allocator to one arena, unless the environment sets the allocator's tunables. Call it before the
/// process starts any thread. Does nothing on other C libraries (musl has a single heap).
pub fn one_arena() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() || std::env::var_os("GLIBC_TUNABLES").is_some() {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets one parameter of the allocator under its own lock; it reads and writes no Rust memory.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use std::io::Read;
    use std::sync::{Arc, Barrier};

    /// Set in the child process the test runs (a fresh process: the test harness's own threads have arenas).
    const CHILD: &str = "UPDATE_OPERATOR_ARENA_TEST_CHILD";

    /// How many arenas glibc's allocator has, from `malloc_info`'s `<heap nr=...>` elements.
    fn arenas() -> usize {
        let path = std::env::temp_dir().join(format!("malloc-info-{}", std::process::id()));
        let Ok(c_path) = std::ffi::CString::new(path.to_string_lossy().as_bytes()) else { return 0 };
        // SAFETY: fopen and fclose on a path this test owns; malloc_info writes into the open stream.
        unsafe {
            let file = libc::fopen(c_path.as_ptr(), c"w".as_ptr());
            assert!(!file.is_null(), "cannot open {}", path.display());
            libc::malloc_info(0, file);
            libc::fclose(file);
        }
        let mut xml = String::new();
        let read = std::fs::File::open(&path).and_then(|mut f| f.read_to_string(&mut xml));
        let _ = std::fs::remove_file(&path);
        assert!(read.is_ok(), "{read:?}");
        xml.matches("<heap nr=").count()
    }

    /// Four threads allocating at once, then the arenas counted.
    fn arenas_after_threads() -> usize {
        let barrier = Arc::new(Barrier::new(4));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    barrier.wait();
                    let blocks: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 4096]).collect();
                    barrier.wait();
                    std::hint::black_box(blocks.len())
                })
            })
            .collect();
        for thread in threads {
            let _ = thread.join();
        }
        arenas()
    }

    #[test]
    fn the_controllers_threads_share_one_arena() {
        if let Some(limit) = std::env::var_os(CHILD) {
            if limit == "1" {
                super::one_arena();
            }
            // The test harness's thread already has an arena of its own: count the arenas the threads add.
            let before = arenas();
            println!("arenas={}", arenas_after_threads() - before);
            return;
        }
        let count = |limit: &str| -> usize {
            let exe = std::env::current_exe().expect("the test binary");
            let output = std::process::Command::new(exe)
                .args(["--exact", "allocator::tests::the_controllers_threads_share_one_arena", "--nocapture"])
                .env(CHILD, limit)
                .env_remove("MALLOC_ARENA_MAX")
                .env_remove("GLIBC_TUNABLES")
                .output()
                .expect("the child test runs");
            let stdout = String::from_utf8_lossy(&output.stdout);
            stdout
                .lines()
                .find_map(|l| l.strip_prefix("arenas="))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or_else(|| panic!("no count in {stdout}"))
        };
        assert!(count("0") > 0, "without the limit, threads allocating at once get arenas of their own");
        assert_eq!(count("1"), 0, "with it, they share those there are");
    }
}
