//! Reading the files a user names, with bounds.
//!
//! Every input file BLIS reads (specs, configs, trace headers, coefficient
//! sets, distributions, traces, request logs) goes through here, so a wrong
//! path such as `/dev/zero`, a binary file or a hostile document is refused
//! with an [`io::Error`] that says why, instead of exhausting memory or
//! stalling a parser. Callers add the file name and flag.
//!
//! * [`read`]: a file read whole, at most [`MAX_WHOLE_FILE_BYTES`], UTF-8,
//!   with `[`/`{` nested at most [`MAX_BRACKET_DEPTH`] deep (YAML's flow
//!   collections take parse time quadratic in their depth; the deserializers
//!   refuse more than 128 levels anyway).
//! * [`open`]: a file read as a stream (CSV, JSON lines), with lines of at
//!   most [`MAX_LINE_BYTES`]; its total size is not bounded.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// Largest file [`read`] accepts: 256 MiB.
pub const MAX_WHOLE_FILE_BYTES: u64 = 256 << 20;

/// How much of a file [`read`] looks at for NUL bytes before reading the rest.
const BINARY_SNIFF_BYTES: u64 = 64 << 10;

/// Longest line a reader from [`open`] passes on: 16 MiB.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// Deepest nesting of `[` and `{` that [`read`] accepts. Brackets inside
/// strings count too, which matters only for text with a thousand unclosed
/// brackets in it.
pub const MAX_BRACKET_DEPTH: usize = 1000;

/// Reads `path` whole as UTF-8 text.
///
/// Errors (kind [`io::ErrorKind::InvalidData`]) when the file is larger than
/// [`MAX_WHOLE_FILE_BYTES`], has a NUL byte in its first 64 KiB (a binary
/// file), is not UTF-8, or nests brackets deeper than
/// [`MAX_BRACKET_DEPTH`]; the message gives the size, byte offset or line.
/// Reads at most one byte past the limit, so endless files end too.
pub fn read(path: &Path) -> io::Result<String> {
    read_capped(File::open(path)?, MAX_WHOLE_FILE_BYTES)
}

/// [`read`] of any reader, with a limit of `limit_bytes`.
fn read_capped(source: impl Read, limit_bytes: u64) -> io::Result<String> {
    let mut source = source.take(limit_bytes + 1);
    // A binary file (`/dev/zero`, an image) shows itself in its first bytes:
    // refused there, not after reading the whole limit.
    let mut bytes = Vec::new();
    (&mut source).take(BINARY_SNIFF_BYTES).read_to_end(&mut bytes)?;
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        return Err(invalid(format!("not a text file (a NUL byte at offset {at})")));
    }
    source.read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit_bytes {
        return Err(invalid(format!(
            "larger than {} MiB, the most BLIS reads of a configuration or data file; is it the right file?",
            limit_bytes >> 20
        )));
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| invalid(format!("not UTF-8 text (invalid byte at offset {})", e.utf8_error().valid_up_to())))?;
    check_bracket_depth(&text)?;
    Ok(text)
}

/// Opens `path` for streaming; the reader errors (kind
/// [`io::ErrorKind::InvalidData`]) at the first line longer than
/// [`MAX_LINE_BYTES`].
pub fn open(path: &Path) -> io::Result<LineCapped<File>> {
    Ok(LineCapped::new(File::open(path)?, MAX_LINE_BYTES))
}

/// A reader that fails once a line (bytes between `\n`s) grows past a limit,
/// so that line-oriented parsers over it hold bounded memory.
#[derive(Debug)]
pub struct LineCapped<R> {
    inner: R,
    max_line_bytes: usize,
    /// Bytes read since the last `\n`.
    line_bytes: usize,
}

impl<R: Read> LineCapped<R> {
    /// Wraps `inner`, allowing lines of at most `max_line_bytes` bytes.
    pub fn new(inner: R, max_line_bytes: usize) -> LineCapped<R> {
        LineCapped { inner, max_line_bytes, line_bytes: 0 }
    }
}

impl<R: Read> Read for LineCapped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut segments = buf[..n].split(|&b| b == b'\n');
        // The first segment continues the current line; each later one starts a new line.
        self.line_bytes += segments.next().map_or(0, <[u8]>::len);
        for segment in segments {
            if self.line_bytes > self.max_line_bytes {
                break;
            }
            self.line_bytes = segment.len();
        }
        if self.line_bytes > self.max_line_bytes {
            let cap = match self.max_line_bytes {
                b if b > 0 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
                b => format!("{b} bytes"),
            };
            return Err(invalid(format!("a line is longer than {cap}; is it the right file?")));
        }
        Ok(n)
    }
}

/// Seeking is for returning to the start of a line (as CSV readers do to
/// re-read from a recorded record position); the line count restarts there.
impl<R: Seek> Seek for LineCapped<R> {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.line_bytes = 0;
        self.inner.seek(pos)
    }
}

fn check_bracket_depth(text: &str) -> io::Result<()> {
    let mut depth = 0usize;
    for (offset, b) in text.bytes().enumerate() {
        match b {
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_BRACKET_DEPTH {
                    let line = text.as_bytes()[..offset].iter().filter(|&&c| c == b'\n').count() + 1;
                    return Err(invalid(format!(
                        "brackets ([ or {{) nested more than {MAX_BRACKET_DEPTH} deep at line {line}; \
                         BLIS's files nest a few levels"
                    )));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn write(name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("blis-textfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn endless_files_are_refused_after_the_limit() {
        #[cfg(unix)]
        {
            let e = read(Path::new("/dev/zero")).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(e.to_string().contains("not a text file (a NUL byte at offset 0)"), "{e}");
            let mut reader = open(Path::new("/dev/zero")).unwrap();
            let e = io::copy(&mut reader, &mut io::sink()).unwrap_err();
            assert!(e.to_string().contains("a line is longer than 16 MiB"), "{e}");
        }
    }

    #[test]
    fn text_beyond_the_limit_is_refused_after_reading_one_byte_past_it() {
        let e = read_capped(io::repeat(b'a'), 1 << 20).unwrap_err();
        assert!(e.to_string().contains("larger than 1 MiB"), "{e}");
        assert_eq!(read_capped(io::repeat(b'a').take(1 << 20), 1 << 20).unwrap().len(), 1 << 20);
    }

    #[test]
    fn binary_and_deeply_nested_text_is_refused_with_where() {
        let e = read(&write("bin", b"ab\xffcd")).unwrap_err();
        assert!(e.to_string().contains("not UTF-8 text (invalid byte at offset 2)"), "{e}");
        let deep = format!("a: 1\nb: {}{}", "[".repeat(MAX_BRACKET_DEPTH + 1), "]".repeat(MAX_BRACKET_DEPTH + 1));
        let e = read(&write("deep.yaml", deep.as_bytes())).unwrap_err();
        assert!(e.to_string().contains("nested more than 1000 deep at line 2"), "{e}");
        let ok = format!("{}{}", "{".repeat(MAX_BRACKET_DEPTH), "}".repeat(MAX_BRACKET_DEPTH));
        assert_eq!(read(&write("ok.yaml", ok.as_bytes())).unwrap(), ok);
        // Closed brackets do not accumulate.
        let wide = "[a]".repeat(10 * MAX_BRACKET_DEPTH);
        assert_eq!(read(&write("wide.yaml", wide.as_bytes())).unwrap(), wide);
        let _ = std::fs::remove_dir_all(write("done", b"").parent().unwrap());
    }

    proptest! {
        /// Whatever way the bytes are split into reads, a `LineCapped`
        /// reader passes them through unchanged exactly when no line is
        /// longer than the cap (checked against `str::split`).
        #[test]
        fn line_cap_matches_a_split_reference(
            lines in proptest::collection::vec(0usize..40, 0..20),
            cap in 0usize..30,
            chunk in 1usize..17,
        ) {
            let text: String = lines.iter().enumerate().map(|(i, &len)| {
                let line = "x".repeat(len);
                if i + 1 < lines.len() { line + "\n" } else { line }
            }).collect();
            let expect_ok = text.split('\n').all(|l| l.len() <= cap);
            /// Hands out at most `chunk` bytes per read.
            struct Chunked<'a>(&'a [u8], usize);
            impl Read for Chunked<'_> {
                fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                    let n = self.0.len().min(self.1).min(buf.len());
                    buf[..n].copy_from_slice(&self.0[..n]);
                    self.0 = &self.0[n..];
                    Ok(n)
                }
            }
            let mut out = Vec::new();
            let result = LineCapped::new(Chunked(text.as_bytes(), chunk), cap).read_to_end(&mut out);
            prop_assert_eq!(result.is_ok(), expect_ok);
            if expect_ok {
                prop_assert_eq!(out, text.as_bytes());
            }
        }
    }
}
