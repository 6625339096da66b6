//! A reproducible tar writer: POSIX ustar headers with fixed owner, group and modification time.
//!
//! # Guarantees
//! - The same entries in the same order give the same bytes: mtime 0, the given uid/gid, no user or group
//!   names, no extended headers.
//! - Names longer than ustar holds (100 bytes, or 155 + 100 split at a `/`) are refused, never truncated.

use std::io::Write;

/// A tar entry that cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum TarError {
    /// The name does not fit a ustar header.
    #[error("tar entry name too long for ustar: {0}")]
    NameTooLong(String),
    /// Writing failed.
    #[error("writing the tar archive: {0}")]
    Io(#[from] std::io::Error),
}

/// What a tar entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory (its name should end with `/`).
    Directory,
}

/// Writes a tar archive to `W`.
#[derive(Debug)]
pub struct TarWriter<W: Write> {
    out: W,
}

const BLOCK: usize = 512;

/// Splits `name` into ustar's prefix and name fields.
fn split_name(name: &str) -> Result<(&str, &str), TarError> {
    if name.len() <= 100 {
        return Ok(("", name));
    }
    let too_long = || TarError::NameTooLong(name.to_owned());
    let bytes = name.as_bytes();
    let split = (0..bytes.len())
        .rev()
        .find(|&i| bytes[i] == b'/' && i <= 155 && bytes.len() - i - 1 <= 100 && i > 0)
        .ok_or_else(too_long)?;
    Ok((&name[..split], &name[split + 1..]))
}

fn octal(field: &mut [u8], value: u64) {
    let digits = field.len() - 1;
    let text = format!("{value:0digits$o}");
    field[..digits].copy_from_slice(&text.as_bytes()[text.len() - digits..]);
    field[digits] = 0;
}

impl<W: Write> TarWriter<W> {
    pub fn new(out: W) -> Self {
        TarWriter { out }
    }

    /// Appends one entry (`data` is empty for a directory).
    pub fn append(
        &mut self,
        name: &str,
        kind: Kind,
        mode: u32,
        uid: u32,
        gid: u32,
        data: &[u8],
    ) -> Result<(), TarError> {
        let (prefix, short) = split_name(name)?;
        let mut header = [0u8; BLOCK];
        header[..short.len()].copy_from_slice(short.as_bytes());
        octal(&mut header[100..108], u64::from(mode));
        octal(&mut header[108..116], u64::from(uid));
        octal(&mut header[116..124], u64::from(gid));
        octal(&mut header[124..136], data.len() as u64);
        octal(&mut header[136..148], 0);
        header[156] = match kind {
            Kind::File => b'0',
            Kind::Directory => b'5',
        };
        header[257..263].copy_from_slice(b"ustar\0");
        header[263..265].copy_from_slice(b"00");
        header[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
        // The checksum is computed with its own field as spaces.
        header[148..156].copy_from_slice(b"        ");
        let sum: u64 = header.iter().map(|&b| u64::from(b)).sum();
        let text = format!("{sum:06o}\0 ");
        header[148..156].copy_from_slice(text.as_bytes());
        self.out.write_all(&header)?;
        self.out.write_all(data)?;
        let padding = (BLOCK - data.len() % BLOCK) % BLOCK;
        self.out.write_all(&[0u8; BLOCK][..padding])?;
        Ok(())
    }

    /// Writes the end-of-archive marker and returns the output.
    pub fn finish(mut self) -> Result<W, TarError> {
        self.out.write_all(&[0u8; 2 * BLOCK])?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_ustar_with_a_valid_checksum_and_padded_data() {
        let mut tar = TarWriter::new(Vec::new());
        tar.append("etc/", Kind::Directory, 0o755, 0, 0, b"").unwrap();
        tar.append("etc/passwd", Kind::File, 0o644, 0, 0, b"root:x:0:0::/:\n").unwrap();
        let bytes = tar.finish().unwrap();
        assert_eq!(bytes.len(), 512 + 512 + 512 + 1024);
        let header = &bytes[512..1024];
        assert_eq!(&header[..10], b"etc/passwd");
        assert_eq!(&header[124..136], b"00000000017\0");
        assert_eq!(&header[257..265], b"ustar\x0000");
        let mut blank = header.to_vec();
        blank[148..156].copy_from_slice(b"        ");
        let sum: u64 = blank.iter().map(|&b| u64::from(b)).sum();
        assert_eq!(std::str::from_utf8(&header[148..154]).unwrap(), format!("{sum:06o}"));
    }

    #[test]
    fn long_names_use_the_prefix_field_or_are_refused() {
        let long = format!("{}/{}", "d".repeat(120), "f".repeat(90));
        assert_eq!(split_name(&long).unwrap(), (&long[..120], &long[121..]));
        assert!(matches!(split_name(&"x".repeat(300)), Err(TarError::NameTooLong(_))));
    }
}
