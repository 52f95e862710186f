//! The end of a worker process's stderr, kept while the process runs, so that the record of a
//! worker that crashed or hung says what it printed last (a panic's message, an abort's
//! reason).

use std::collections::VecDeque;
use std::io::Read;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The most bytes of a stream kept ...
pub const TAIL_BYTES: usize = 4096;
/// ... and the most lines of them reported.
pub const TAIL_LINES: usize = 24;

/// What the reading thread shares: the last bytes, whether any were dropped before them, and
/// whether the stream has closed.
#[derive(Default)]
struct State {
    bytes: VecDeque<u8>,
    dropped: bool,
    closed: bool,
}

/// The last `TAIL_BYTES` of a stream, read on a thread of its own until the stream closes.
pub struct Tail {
    shared: Arc<(Mutex<State>, Condvar)>,
}

impl Tail {
    /// Starts keeping the end of `stream`.
    pub fn keep(mut stream: impl Read + Send + 'static) -> Tail {
        let shared = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let writer = Arc::clone(&shared);
        std::thread::spawn(move || {
            let mut chunk = [0u8; 1024];
            loop {
                let read = stream.read(&mut chunk);
                let (state, closed) = &*writer;
                let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
                match read {
                    Ok(n) if n > 0 => {
                        state.bytes.extend(&chunk[..n]);
                        let excess = state.bytes.len().saturating_sub(TAIL_BYTES);
                        if excess > 0 {
                            state.bytes.drain(..excess);
                            state.dropped = true;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    _ => {
                        state.closed = true;
                        closed.notify_all();
                        return;
                    }
                }
            }
        });
        Tail { shared }
    }

    /// The last lines read (at most `TAIL_LINES`, from the last `TAIL_BYTES`, a line cut by
    /// that limit left out), after waiting up to `wait` for the stream to close: a process
    /// that has exited may have left its last lines in the pipe.
    pub fn text(&self, wait: Duration) -> String {
        let (state, closed) = &*self.shared;
        let state = state.lock().unwrap_or_else(|e| e.into_inner());
        let (state, _) = closed.wait_timeout_while(state, wait, |s| !s.closed).unwrap_or_else(|e| e.into_inner());
        let (front, back) = state.bytes.as_slices();
        let text = String::from_utf8_lossy(&[front, back].concat()).into_owned();
        let text = match (state.dropped, text.find('\n')) {
            (true, Some(end)) => text[end + 1..].to_string(),
            _ => text,
        };
        let lines: Vec<&str> = text.trim_end().lines().collect();
        lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_whole_lines_of_a_long_stream() {
        let text: String = (0..2000).map(|i| format!("line {i}\n")).collect();
        let tail = Tail::keep(std::io::Cursor::new(text.into_bytes()));
        let kept = tail.text(Duration::from_secs(10));
        let lines: Vec<&str> = kept.lines().collect();
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!((lines[0], lines[TAIL_LINES - 1]), ("line 1976", "line 1999"));
        let short = Tail::keep(std::io::Cursor::new(b"only\nthis".to_vec()));
        assert_eq!(short.text(Duration::from_secs(10)), "only\nthis");
    }
}
