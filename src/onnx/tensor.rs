//! ONNX tensors (`TensorProto`: initializers and `Constant` values) decoded into constants, with
//! every size checked before anything is allocated: dimensions non-negative, their product at
//! most `MAX_ELEMENTS`, and the stored data exactly as long as the dimensions say.

use std::sync::Arc;

use prost::bytes::Bytes;

use crate::graph::{Data, DataType, Value};
use crate::shared::Shared;

use super::error::OnnxError;
use super::proto::TensorProto;
use super::proto::tensor_proto::DataType as Code;

/// The largest number of elements a tensor (or a declared shape) may have.
pub const MAX_ELEMENTS: u64 = 1 << 31;

/// A decoded constant: a graph value (f32, s32, s8, u8; shared with the graph constant made
/// from it, not copied), or i64 data, which no graph op reads but shapes (`Reshape`) and zero
/// points of other importers' files are given in.
#[derive(Clone, Debug, PartialEq)]
pub enum Constant {
    Value(Arc<Value>),
    I64 { dims: Vec<usize>, data: Vec<i64> },
}

impl Constant {
    /// The shape.
    pub fn dims(&self) -> &[usize] {
        match self {
            Constant::Value(v) => v.dims(),
            Constant::I64 { dims, .. } => dims,
        }
    }

    /// The element type's name, for messages.
    pub fn dtype_name(&self) -> &'static str {
        match self {
            Constant::Value(v) => v.dtype().name(),
            Constant::I64 { .. } => "i64",
        }
    }
}

/// The name of an ONNX element type code.
pub fn dtype_name(code: i32) -> String {
    Code::try_from(code).map_or_else(|_| format!("code {code}"), |c| c.as_str_name().to_lowercase())
}

/// The graph type of an ONNX element type code, where the graph has one.
pub fn graph_dtype(code: i32) -> Option<DataType> {
    match Code::try_from(code).ok()? {
        Code::Float => Some(DataType::F32),
        Code::Float16 => Some(DataType::F16),
        Code::Bfloat16 => Some(DataType::Bf16),
        Code::Int32 => Some(DataType::S32),
        Code::Int8 => Some(DataType::S8),
        Code::Uint8 => Some(DataType::U8),
        Code::Bool => Some(DataType::Boolean),
        _ => None,
    }
}

/// The dimensions as sizes, or why they are unacceptable: a negative one, or a product above
/// `MAX_ELEMENTS` with each zero counted as one (so that no partial product of the dimensions,
/// in any order, can overflow later; checked with saturating arithmetic).
pub fn checked_dims(tensor: &str, dims: &[i64]) -> Result<Vec<usize>, OnnxError> {
    if dims.iter().any(|&d| d < 0) {
        return Err(OnnxError::NegativeDim { tensor: tensor.to_string(), dims: dims.to_vec() });
    }
    let count = dims.iter().fold(1u64, |a, &d| a.saturating_mul((d as u64).max(1)));
    if count > MAX_ELEMENTS {
        return Err(OnnxError::TooLarge { tensor: tensor.to_string(), dims: dims.to_vec(), limit: MAX_ELEMENTS });
    }
    dims.iter().map(|&d| usize::try_from(d)).collect::<Result<_, _>>().map_err(|_| OnnxError::TooLarge {
        tensor: tensor.to_string(),
        dims: dims.to_vec(),
        limit: MAX_ELEMENTS,
    })
}

/// Checks a tensor's sizes without decoding it: its dimensions, and that the data it holds
/// (raw bytes or the typed field of its type) has exactly one element per position.
pub fn check(t: &TensorProto) -> Result<(), OnnxError> {
    let name = t.name();
    if t.data_location == Some(1) || !t.external_data.is_empty() {
        return Err(OnnxError::ExternalData { tensor: name.to_string() });
    }
    let n = checked_dims(name, &t.dims)?.iter().product::<usize>() as u64;
    let size = match Code::try_from(t.data_type()).ok() {
        Some(Code::Float | Code::Int32) => 4,
        Some(Code::Int8 | Code::Uint8) => 1,
        Some(Code::Int64) => 8,
        _ => return Ok(()), // decoding says which type is unsupported, if the tensor is used
    };
    let (field, unit, found, expected) = match &t.raw_data {
        Some(raw) => ("raw_data", "bytes", raw.len() as u64, n * size),
        None => match Code::try_from(t.data_type()).ok() {
            Some(Code::Float) => ("float_data", "elements", t.float_data.len() as u64, n),
            Some(Code::Int64) => ("int64_data", "elements", t.int64_data.len() as u64, n),
            _ => ("int32_data", "elements", t.int32_data.len() as u64, n),
        },
    };
    if found != expected {
        return Err(OnnxError::DataLength { tensor: name.to_string(), field, unit, expected, found });
    }
    Ok(())
}

/// Bytes read as s8 elements, as the owner of a `Shared` view of them.
struct I8View(Bytes);

impl AsRef<[i8]> for I8View {
    fn as_ref(&self) -> &[i8] {
        // SAFETY: i8 has the size and alignment of u8 and every bit pattern is a valid i8; the
        // slice borrows the `Bytes`, which keep the buffer alive.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast::<i8>(), self.0.len()) }
    }
}

/// Decodes a tensor (after `check`ing it) into a constant. Raw data is little-endian, as ONNX
/// stores it; 8-bit types in `int32_data` must lie in their range.
pub fn decode(t: &TensorProto) -> Result<Constant, OnnxError> {
    check(t)?;
    let name = t.name();
    let dims = checked_dims(name, &t.dims)?;
    let raw = t.raw_data.as_deref();
    fn le<const N: usize, T>(raw: &[u8], f: fn([u8; N]) -> T) -> Vec<T> {
        raw.chunks_exact(N).map(|c| f(c.try_into().unwrap_or([0; N]))).collect()
    }
    let narrow = |dtype: &'static str, lo: i32, hi: i32| -> Result<Vec<i32>, OnnxError> {
        match t.int32_data.iter().find(|&&v| v < lo || v > hi) {
            Some(&v) => Err(OnnxError::DataRange { tensor: name.to_string(), dtype, value: i64::from(v) }),
            None => Ok(t.int32_data.clone()),
        }
    };
    let data = match Code::try_from(t.data_type()).ok() {
        Some(Code::Float) => Data::F32(raw.map_or_else(|| t.float_data.clone(), |r| le(r, f32::from_le_bytes))),
        Some(Code::Int32) => Data::S32(raw.map_or_else(|| t.int32_data.clone(), |r| le(r, i32::from_le_bytes))),
        // Raw s8 data is a view of the decoded buffer (the mapped file): the weights of a
        // quantized network are not copied.
        Some(Code::Int8) => Data::S8(match &t.raw_data {
            Some(r) => Shared::from_owner(I8View(r.clone())),
            None => narrow("i8", -128, 127)?.into_iter().map(|v| v as i8).collect(),
        }),
        Some(Code::Uint8) => Data::U8(match raw {
            Some(r) => r.to_vec(),
            None => narrow("u8", 0, 255)?.into_iter().map(|v| v as u8).collect(),
        }),
        Some(Code::Int64) => {
            let data = raw.map_or_else(|| t.int64_data.clone(), |r| le(r, i64::from_le_bytes));
            return Ok(Constant::I64 { dims, data });
        }
        _ => return Err(OnnxError::UnsupportedDtype { tensor: name.to_string(), dtype: dtype_name(t.data_type()) }),
    };
    let found = data.len() as u64;
    Value::new(&dims, data).map(|v| Constant::Value(Arc::new(v))).map_err(|e| OnnxError::DataLength {
        tensor: name.to_string(),
        field: "data",
        unit: "elements",
        expected: e.expected as u64,
        found,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Raw s8 data decodes to its values (every byte as i8) as a view of the tensor's bytes, not
    /// a copy; typed `int32_data` decodes to the same values.
    #[test]
    fn raw_s8_data_is_a_view_of_the_buffer() {
        let bytes: Vec<u8> = (0..=255u8).collect();
        let raw = Bytes::from(bytes.clone());
        let t = TensorProto {
            dims: vec![16, 16],
            data_type: Some(Code::Int8 as i32),
            raw_data: Some(raw.clone()),
            ..TensorProto::default()
        };
        let Constant::Value(v) = decode(&t).unwrap() else { panic!("an s8 value") };
        let Data::S8(w) = v.data() else { panic!("s8 data, found {}", v.dtype()) };
        let expected: Vec<i8> = bytes.iter().map(|&b| b as i8).collect();
        assert_eq!(&w[..], &expected[..]);
        assert_eq!(w.as_ptr().cast::<u8>(), raw.as_ptr());
        assert_eq!(v.dims(), &[16, 16]);
        let typed = TensorProto { raw_data: None, int32_data: expected.iter().map(|&x| i32::from(x)).collect(), ..t };
        assert_eq!(decode(&typed).unwrap(), Constant::Value(v));
    }
}
