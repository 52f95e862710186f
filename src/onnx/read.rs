//! Reading an ONNX file: the bytes decoded by prost into a `ModelProto` (a truncated or malformed
//! protobuf is `OnnxError::Decode`; prost bounds every length by the bytes present and nesting
//! by its recursion limit), then checked before anything is built from it: a graph is present,
//! the default domain's opset is one of 13–21, and every initializer, `Constant` value and
//! declared shape has non-negative dimensions, at most `MAX_ELEMENTS` elements and data exactly
//! as long as its dimensions say.

use std::path::Path;

use prost::Message;

use super::error::OnnxError;
use super::mapped::file_bytes;
use super::proto::tensor_shape_proto::dimension;
use super::proto::type_proto;
use super::proto::{GraphProto, ModelProto, ValueInfoProto};
use super::tensor::{check, checked_dims};

/// The versions of the default domain (`""` or `"ai.onnx"`) this importer reads.
pub const OPSETS: std::ops::RangeInclusive<i64> = 13..=21;

/// Decodes and checks a model (module doc).
pub fn read(bytes: &[u8]) -> Result<ModelProto, OnnxError> {
    decode_checked(bytes)
}

/// `read` from any buffer: decoding from `Bytes` leaves every `bytes` field (tensors'
/// `raw_data`) a view of the buffer rather than a copy.
fn decode_checked(buf: impl prost::bytes::Buf) -> Result<ModelProto, OnnxError> {
    let model = ModelProto::decode(buf)?;
    let graph = model.graph.as_ref().ok_or(OnnxError::NoGraph)?;
    opset(&model)?;
    check_graph(graph)?;
    Ok(model)
}

/// Reads the file at `path` (mapped where possible: `mapped::file_bytes`) and decodes and
/// checks it.
pub fn read_file(path: &Path) -> Result<ModelProto, OnnxError> {
    let bytes = file_bytes(path).map_err(|source| OnnxError::Io { path: path.display().to_string(), source })?;
    decode_checked(bytes)
}

/// The default domain's opset version, which must be in `OPSETS`.
pub fn opset(model: &ModelProto) -> Result<i64, OnnxError> {
    let default = model.opset_import.iter().find(|o| matches!(o.domain(), "" | "ai.onnx"));
    let unsupported =
        |found: String| OnnxError::UnsupportedOpset { domain: "ai.onnx".into(), expected: "13 to 21", found };
    match default {
        Some(o) if OPSETS.contains(&o.version()) => Ok(o.version()),
        Some(o) => Err(unsupported(o.version().to_string())),
        None => Err(unsupported("none (no opset_import of the default domain)".into())),
    }
}

/// Checks the sizes of every tensor and declared shape of `graph`.
fn check_graph(graph: &GraphProto) -> Result<(), OnnxError> {
    for t in &graph.initializer {
        check(t)?;
    }
    for node in &graph.node {
        for a in &node.attribute {
            if let Some(t) = &a.t {
                check(t)?;
            }
            for t in &a.tensors {
                check(t)?;
            }
        }
    }
    for v in graph.input.iter().chain(&graph.output).chain(&graph.value_info) {
        declared_dims(v)?;
    }
    Ok(())
}

/// The declared shape of a value: `Some(size)` per known dimension, `None` for a symbolic or
/// missing one; `None` overall when no tensor shape is declared.
pub fn declared_dims(v: &ValueInfoProto) -> Result<Option<Vec<Option<usize>>>, OnnxError> {
    let Some(type_proto::Value::TensorType(t)) = v.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return Ok(None);
    };
    let Some(shape) = &t.shape else { return Ok(None) };
    let known: Vec<i64> = shape
        .dim
        .iter()
        .map(|d| match d.value {
            Some(dimension::Value::DimValue(n)) => n,
            _ => 1,
        })
        .collect();
    checked_dims(v.name(), &known)?;
    Ok(Some(
        shape
            .dim
            .iter()
            .map(|d| match d.value {
                Some(dimension::Value::DimValue(n)) => usize::try_from(n).ok(),
                _ => None,
            })
            .collect(),
    ))
}
