//! ONNX files: decoding and validation.
pub mod proto;
