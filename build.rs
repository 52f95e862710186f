//! Build script: compiles `proto/onnx.proto` (vendored from the onnx repository, Apache-2.0)
//! into Rust types with prost, using protox as the protobuf compiler, so that a build needs
//! cargo alone and no system `protoc`. It also writes the file descriptor set, which
//! `src/onnx/budget.rs` walks to bound the memory a file takes to decode before decoding it.

use std::path::PathBuf;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    let descriptors = protox::compile(["onnx.proto"], ["proto"])?;
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("cargo sets OUT_DIR for build scripts")?);
    std::fs::write(out.join("onnx_descriptor.bin"), descriptors.encode_to_vec())?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
