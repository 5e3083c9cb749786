//! Block traces: the sequence of read requests a simulation replays, and its CSV file format.
//!
//! # In memory
//!
//! A [`Trace`] is a vector of 8-byte [`Request`]s: the issuing client and a *dense* block number
//! (`0..block_count`). Dense numbers let every cache index blocks with a plain array. Synthetic
//! workloads produce dense numbers directly; a trace read from a file has its block ids renumbered
//! in order of first appearance, and the trace keeps the original ids, because the disk model
//! asks whether a read is sequential in the *original* block address space.
//!
//! # On disk: CSV
//!
//! ```text
//! # thor-cachesim block trace v1        <- optional comment lines, starting with '#'
//! client,block                          <- required header
//! 0,1017                                <- one read request per line: client number (0-based,
//! 1,88                                     below 1024) and block id (any u64)
//! 0,1018
//! ```
//!
//! Lines are in issue order across all clients. Blank lines are ignored. Any other deviation is
//! an error naming the file and line. Generated workloads are written in the same format, so a
//! run can be replayed, shared or edited. Every read is bounded: lines by
//! [`MAX_TRACE_LINE_BYTES`](crate::limits::MAX_TRACE_LINE_BYTES), requests by
//! [`MAX_TRACE_REQUESTS`](crate::limits::MAX_TRACE_REQUESTS), distinct blocks by
//! [`MAX_DISTINCT_BLOCKS`](crate::limits::MAX_DISTINCT_BLOCKS).

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::Path;

use rustc_hash::FxHashMap;

use crate::SimError;
use crate::limits::{MAX_CLIENTS, MAX_DISTINCT_BLOCKS, MAX_TRACE_LINE_BYTES, MAX_TRACE_REQUESTS};

/// The header line of the CSV format.
pub const CSV_HEADER: &str = "client,block";
/// The comment line written at the top of generated traces, naming the format version.
pub const CSV_VERSION_COMMENT: &str = "# thor-cachesim block trace v1";

/// One read request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The client issuing the read, `0..clients`.
    pub client: u16,
    /// The dense block number, `0..block_count`.
    pub block: u32,
}

/// A sequence of read requests over dense block numbers (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// The requests, in issue order.
    requests: Vec<Request>,
    /// One more than the largest client number (at least 1).
    clients: u16,
    /// The number of distinct dense block numbers (`0..block_count` may appear).
    block_count: u32,
    /// Original block ids, indexed by dense number; `None` when they are the dense numbers.
    original: Option<Vec<u64>>,
}

impl Trace {
    /// A trace whose blocks are already dense and are their own original ids.
    pub fn from_dense(
        requests: Vec<Request>,
        clients: u16,
        block_count: u32,
    ) -> Result<Self, SimError> {
        if clients == 0 || clients as usize > MAX_CLIENTS {
            return Err(SimError::config(format!("clients must be 1..={MAX_CLIENTS}")));
        }
        if requests.len() as u64 > MAX_TRACE_REQUESTS {
            return Err(SimError::config(format!("more than {MAX_TRACE_REQUESTS} requests")));
        }
        if let Some(r) = requests.iter().find(|r| r.client >= clients || r.block >= block_count) {
            return Err(SimError::config(format!(
                "request {r:?} outside {clients} clients and {block_count} blocks"
            )));
        }
        Ok(Trace { requests, clients, block_count, original: None })
    }

    /// The requests in issue order.
    pub fn requests(&self) -> &[Request] {
        &self.requests
    }

    /// Number of clients (one more than the largest client number).
    pub fn clients(&self) -> u16 {
        self.clients
    }

    /// Number of distinct dense block numbers.
    pub fn block_count(&self) -> u32 {
        self.block_count
    }

    /// The original id of dense block `block`.
    #[inline]
    pub fn original(&self, block: u32) -> u64 {
        match &self.original {
            Some(ids) => ids[block as usize],
            None => u64::from(block),
        }
    }

    /// The original ids by dense number, if they differ from the dense numbers.
    pub fn original_ids(&self) -> Option<&[u64]> {
        self.original.as_deref()
    }

    /// Reads a CSV trace (see the module documentation for the format).
    pub fn read_csv(path: &Path) -> Result<Self, SimError> {
        let file =
            File::open(path).map_err(|source| SimError::Io { path: path.into(), cause: source })?;
        Self::parse_csv(BufReader::new(file), path)
    }

    /// Parses a CSV trace from `reader`; `path` only names the source in errors.
    pub fn parse_csv(mut reader: impl BufRead, path: &Path) -> Result<Self, SimError> {
        let bad =
            |line: u64, message: String| SimError::TraceFormat { path: path.into(), line, message };
        let mut requests = Vec::new();
        let mut dense: FxHashMap<u64, u32> = FxHashMap::default();
        let mut original = Vec::new();
        let mut clients = 0u16;
        let mut seen_header = false;
        let mut buf = String::with_capacity(MAX_TRACE_LINE_BYTES + 1);
        let mut line_no = 0u64;
        loop {
            buf.clear();
            line_no += 1;
            let read =
                reader.by_ref().take(MAX_TRACE_LINE_BYTES as u64 + 1).read_line(&mut buf).map_err(
                    |source| match source.kind() {
                        std::io::ErrorKind::InvalidData => bad(line_no, "not UTF-8 text".into()),
                        _ => SimError::Io { path: path.into(), cause: source },
                    },
                )?;
            if read == 0 {
                break;
            }
            if buf.len() > MAX_TRACE_LINE_BYTES {
                return Err(bad(line_no, format!("line longer than {MAX_TRACE_LINE_BYTES} bytes")));
            }
            let line = buf.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if !seen_header {
                if line != CSV_HEADER {
                    return Err(bad(line_no, format!("expected the header {CSV_HEADER:?}")));
                }
                seen_header = true;
                continue;
            }
            let mut fields = line.split(',');
            let (Some(c), Some(b), None) = (fields.next(), fields.next(), fields.next()) else {
                return Err(bad(line_no, "expected two fields: client,block".into()));
            };
            let client: u16 =
                c.trim().parse().ok().filter(|&c: &u16| (c as usize) < MAX_CLIENTS).ok_or_else(
                    || bad(line_no, format!("client {c:?} is not a number below {MAX_CLIENTS}")),
                )?;
            let block: u64 = b
                .trim()
                .parse()
                .map_err(|_| bad(line_no, format!("block {b:?} is not an unsigned 64-bit id")))?;
            if requests.len() as u64 >= MAX_TRACE_REQUESTS {
                return Err(bad(line_no, format!("more than {MAX_TRACE_REQUESTS} requests")));
            }
            let next = original.len() as u64;
            let block = match dense.get(&block) {
                Some(&d) => d,
                None => {
                    if next >= MAX_DISTINCT_BLOCKS {
                        return Err(bad(
                            line_no,
                            format!("more than {MAX_DISTINCT_BLOCKS} distinct blocks"),
                        ));
                    }
                    dense.insert(block, next as u32);
                    original.push(block);
                    next as u32
                }
            };
            clients = clients.max(client + 1);
            requests.push(Request { client, block });
        }
        if !seen_header {
            return Err(bad(line_no, format!("empty trace: no {CSV_HEADER:?} header")));
        }
        let identity = original.iter().enumerate().all(|(i, &b)| i as u64 == b);
        Ok(Trace {
            requests,
            clients: clients.max(1),
            block_count: original.len() as u32,
            original: (!identity).then_some(original),
        })
    }

    /// Writes the trace as CSV with original block ids.
    pub fn write_csv(&self, path: &Path) -> Result<(), SimError> {
        let io = |source| SimError::Io { path: path.into(), cause: source };
        let file = File::create(path).map_err(io)?;
        let mut out = BufWriter::new(file);
        self.write_csv_to(&mut out).map_err(io)?;
        out.flush().map_err(io)
    }

    /// Writes the trace as CSV to any writer.
    pub fn write_csv_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(out, "{CSV_VERSION_COMMENT}")?;
        writeln!(out, "{CSV_HEADER}")?;
        for r in &self.requests {
            writeln!(out, "{},{}", r.client, self.original(r.block))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Trace, SimError> {
        Trace::parse_csv(text.as_bytes(), Path::new("t.csv"))
    }

    fn error_line(text: &str) -> (u64, String) {
        match parse(text) {
            Err(SimError::TraceFormat { line, message, .. }) => (line, message),
            other => panic!("expected a format error, got {other:?}"),
        }
    }

    #[test]
    fn csv_round_trips_with_original_ids() {
        let trace = parse("# comment\nclient,block\n0,900\n1,7\n\n0,900\n").unwrap();
        assert_eq!(trace.clients(), 2);
        assert_eq!(trace.block_count(), 2);
        assert_eq!(
            trace.requests(),
            [
                Request { client: 0, block: 0 },
                Request { client: 1, block: 1 },
                Request { client: 0, block: 0 }
            ]
        );
        assert_eq!(trace.original(0), 900);
        let mut out = Vec::new();
        trace.write_csv_to(&mut out).unwrap();
        let again = parse(std::str::from_utf8(&out).unwrap()).unwrap();
        assert_eq!(again, trace);
    }

    #[test]
    fn malformed_lines_are_reported_with_their_number() {
        assert_eq!(error_line("block,client\n").0, 1);
        assert_eq!(error_line("client,block\n0,1\n0\n").0, 3);
        assert_eq!(error_line("client,block\n0,1,2\n").0, 2);
        let (line, message) = error_line("client,block\n\n0,x\n");
        assert_eq!(line, 3);
        assert!(message.contains("\"x\""), "{message}");
        assert_eq!(error_line("client,block\n5000,1\n").0, 2);
        assert_eq!(error_line("client,block\n-1,1\n").0, 2);
        assert_eq!(error_line("client,block\n0,18446744073709551616\n").0, 2);
        let long = format!("client,block\n0,{}\n", "1".repeat(400));
        assert!(error_line(&long).1.contains("longer"));
        assert_eq!(error_line("").0, 1);
        assert_eq!(error_line("# only a comment\n").0, 2);
    }

    #[test]
    fn invalid_utf8_is_a_format_error() {
        let bytes: &[u8] = b"client,block\n0,\xff\n";
        assert!(matches!(
            Trace::parse_csv(bytes, Path::new("t.csv")),
            Err(SimError::TraceFormat { line: 2, .. })
        ));
    }
}
