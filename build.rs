//! Build script: the generated inputs of the crate.
//!
//! - `proto/onnx.proto` (vendored from the onnx repository, Apache-2.0) compiled into Rust
//!   types with prost, using protox as the protobuf compiler, so that a build needs cargo alone
//!   and no system `protoc`.
//! - `tuning/pretuned.jsonl` without its records' traces (`OUT_DIR/pretuned_to_apply.jsonl`):
//!   what `record::pretuned_to_apply` parses while a model imports, where skipping the traces
//!   (most of the file's bytes) took about half of the parse. The records are otherwise the
//!   file's, byte for byte (`record::pretuned`'s tests compare every record).

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    let descriptors = protox::compile(["onnx.proto"], ["proto"])?;
    // `bytes` fields as `Bytes`: decoded from a file's buffer they are views of it, so that the
    // weights are not copied while decoding.
    prost_build::Config::new().bytes(["."]).compile_fds(descriptors)?;

    println!("cargo:rerun-if-changed=tuning/pretuned.jsonl");
    let pretuned = std::fs::read_to_string("tuning/pretuned.jsonl")?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("pretuned_to_apply.jsonl");
    std::fs::write(out, without_traces(&pretuned)?)?;
    Ok(())
}

/// `text` (JSON lines as the tuner writes them) with each line's `,"trace":VALUE` removed.
fn without_traces(text: &str) -> Result<String, Box<dyn Error>> {
    const KEY: &str = ",\"trace\":";
    let mut out = String::with_capacity(text.len());
    for (n, line) in text.split_inclusive('\n').enumerate() {
        let Some(at) = line.find(KEY) else {
            out.push_str(line);
            continue;
        };
        let end = value_end(line.as_bytes(), at + KEY.len())
            .ok_or_else(|| format!("tuning/pretuned.jsonl:{}: a trace that does not end", n + 1))?;
        out.push_str(&line[..at]);
        out.push_str(&line[end..]);
    }
    Ok(out)
}

/// Where the JSON value starting at `start` ends: `null`, or a bracketed value (strings and
/// their escapes skipped).
fn value_end(bytes: &[u8], start: usize) -> Option<usize> {
    if bytes[start..].starts_with(b"null") {
        return Some(start + 4);
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &c) in bytes.iter().enumerate().skip(start) {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ if depth == 0 => return None,
            _ => {}
        }
    }
    None
}
