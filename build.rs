//! Build script: compiles `proto/onnx.proto` (vendored from the onnx repository, Apache-2.0)
//! into Rust types with prost, using protox as the protobuf compiler, so that a build needs
//! cargo alone and no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    let descriptors = protox::compile(["onnx.proto"], ["proto"])?;
    // `bytes` fields as `Bytes`: decoded from a file's buffer they are views of it, so that the
    // weights are not copied while decoding.
    prost_build::Config::new().bytes(["."]).compile_fds(descriptors)?;
    Ok(())
}
