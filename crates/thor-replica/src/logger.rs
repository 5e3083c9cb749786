//! raft-rs logs through `slog`; thor logs through `tracing`. [`TracingDrain`] is a small slog
//! drain that turns each slog record into a tracing event at the same level, with the replica's
//! key-value pairs rendered into the message (bounded by
//! [`crate::limits::LOG_LINE_BYTES_MAX`]). No thread, no buffer: the event
//! is emitted in the call that logged it, so a simulation's log stays in step with its run.

use std::fmt::{self, Write as _};

use slog::{Drain, KV, Key, Level, OwnedKVList, Record, Serializer};

use crate::limits::LOG_LINE_BYTES_MAX;

/// A slog drain that forwards to tracing (target `raft`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingDrain;

/// Renders key-value pairs as ` key=value`, stopping for good at the line bound.
struct Render(String, bool);

impl Serializer for Render {
    fn emit_arguments(&mut self, key: Key, val: &fmt::Arguments<'_>) -> slog::Result {
        if !self.1 {
            // Writing to a String cannot fail.
            let _ = write!(self.0, " {key}={val}");
            if self.0.len() > LOG_LINE_BYTES_MAX {
                let mut cut = LOG_LINE_BYTES_MAX;
                while !self.0.is_char_boundary(cut) {
                    cut -= 1;
                }
                self.0.truncate(cut);
                self.1 = true;
            }
        }
        Ok(())
    }
}

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
        let mut kv = Render(String::new(), false);
        // Rendering into a String never fails; a failing KV impl only loses its pairs.
        let _ = record.kv().serialize(record, &mut kv);
        let _ = values.serialize(record, &mut kv);
        let msg = record.msg();
        match record.level() {
            Level::Critical | Level::Error => tracing::error!(target: "raft", "{msg}{}", kv.0),
            Level::Warning => tracing::warn!(target: "raft", "{msg}{}", kv.0),
            Level::Info => tracing::info!(target: "raft", "{msg}{}", kv.0),
            Level::Debug => tracing::debug!(target: "raft", "{msg}{}", kv.0),
            Level::Trace => tracing::trace!(target: "raft", "{msg}{}", kv.0),
        }
        Ok(())
    }
}

/// A slog logger for replica `id` that logs through tracing.
pub fn logger(id: u64) -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!("replica" => id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_is_bounded_and_keeps_char_boundaries() {
        let mut r = Render(String::new(), false);
        let long = "é".repeat(LOG_LINE_BYTES_MAX);
        r.emit_arguments("k", &format_args!("{long}")).unwrap();
        assert!(r.0.len() <= LOG_LINE_BYTES_MAX);
        assert!(r.0.starts_with(" k=é"));
        let before = r.0.clone();
        r.emit_arguments("more", &format_args!("x")).unwrap();
        assert_eq!(r.0, before, "nothing is added past the bound");
    }

    #[test]
    fn logging_through_the_drain_does_not_fail() {
        let log = logger(7);
        slog::info!(log, "became leader"; "term" => 3);
        slog::debug!(log, "reset election timeout"; "to" => 12);
    }
}
