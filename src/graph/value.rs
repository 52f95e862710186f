//! Concrete tensors: a constant's data held in the graph, and the values the reference
//! interpreter reads and writes. Dense, row-major (the last dimension contiguous), with the
//! elements in a vector of their own type; s8 elements are `Shared`, so that a network's weights
//! can be a view of the file they were read from and are handed on without a copy.

use std::fmt;

use half::{bf16, f16};

use super::dtype::DataType;
use crate::shared::Shared;

/// The elements of a value, one vector per element type (s8: shared, read-only).
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    F32(Vec<f32>),
    S32(Vec<i32>),
    S8(Shared<i8>),
    U8(Vec<u8>),
    Boolean(Vec<bool>),
}

impl Data {
    /// The element type.
    pub fn dtype(&self) -> DataType {
        match self {
            Data::F16(_) => DataType::F16,
            Data::Bf16(_) => DataType::Bf16,
            Data::F32(_) => DataType::F32,
            Data::S32(_) => DataType::S32,
            Data::S8(_) => DataType::S8,
            Data::U8(_) => DataType::U8,
            Data::Boolean(_) => DataType::Boolean,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            Data::F16(v) => v.len(),
            Data::Bf16(v) => v.len(),
            Data::F32(v) => v.len(),
            Data::S32(v) => v.len(),
            Data::S8(v) => v.len(),
            Data::U8(v) => v.len(),
            Data::Boolean(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `n` zeros (`false`) of `dtype`.
    pub fn zeros(dtype: DataType, n: usize) -> Data {
        match dtype {
            DataType::F16 => Data::F16(vec![f16::ZERO; n]),
            DataType::Bf16 => Data::Bf16(vec![bf16::ZERO; n]),
            DataType::F32 => Data::F32(vec![0.0; n]),
            DataType::S32 => Data::S32(vec![0; n]),
            DataType::S8 => Data::S8(vec![0; n].into()),
            DataType::U8 => Data::U8(vec![0; n]),
            DataType::Boolean => Data::Boolean(vec![false; n]),
        }
    }

    /// The elements at `indices`, in that order (each index must be in range).
    pub fn gather(&self, indices: &[usize]) -> Data {
        fn pick<T: Copy>(v: &[T], indices: &[usize]) -> Vec<T> {
            indices.iter().map(|&i| v[i]).collect()
        }
        match self {
            Data::F16(v) => Data::F16(pick(v, indices)),
            Data::Bf16(v) => Data::Bf16(pick(v, indices)),
            Data::F32(v) => Data::F32(pick(v, indices)),
            Data::S32(v) => Data::S32(pick(v, indices)),
            Data::S8(v) => Data::S8(pick(v, indices).into()),
            Data::U8(v) => Data::U8(pick(v, indices)),
            Data::Boolean(v) => Data::Boolean(pick(v, indices)),
        }
    }

    /// Every element widened exactly to f32 (floats only: f16 and bf16 are subsets of f32).
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        match self {
            Data::F32(v) => Some(v.clone()),
            Data::F16(v) => Some(v.iter().map(|x| x.to_f32()).collect()),
            Data::Bf16(v) => Some(v.iter().map(|x| x.to_f32()).collect()),
            _ => None,
        }
    }

    /// Every element as i32 (integers only; exact).
    pub fn to_i32(&self) -> Option<Vec<i32>> {
        match self {
            Data::S32(v) => Some(v.clone()),
            Data::S8(v) => Some(v.iter().map(|&x| i32::from(x)).collect()),
            Data::U8(v) => Some(v.iter().map(|&x| i32::from(x)).collect()),
            _ => None,
        }
    }

    /// f32 values stored as `dtype` (a float type), each rounded once to nearest, ties to even.
    pub fn from_f32(dtype: DataType, v: Vec<f32>) -> Option<Data> {
        match dtype {
            DataType::F32 => Some(Data::F32(v)),
            DataType::F16 => Some(Data::F16(v.into_iter().map(f16::from_f32).collect())),
            DataType::Bf16 => Some(Data::Bf16(v.into_iter().map(bf16::from_f32).collect())),
            _ => None,
        }
    }

    /// i32 values stored as `dtype` (an integer type); each must already lie in its range.
    pub fn from_i32(dtype: DataType, v: Vec<i32>) -> Option<Data> {
        match dtype {
            DataType::S32 => Some(Data::S32(v)),
            DataType::S8 => {
                v.into_iter().map(|x| i8::try_from(x).ok()).collect::<Option<Vec<_>>>().map(|v| Data::S8(v.into()))
            }
            DataType::U8 => v.into_iter().map(|x| u8::try_from(x).ok()).collect::<Option<_>>().map(Data::U8),
            _ => None,
        }
    }
}

/// Why a value could not be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a value of shape {dims:?} holds {expected} elements, found {found}")]
pub struct ValueError {
    pub dims: Vec<usize>,
    pub expected: usize,
    pub found: usize,
}

/// A dense row-major tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    dims: Vec<usize>,
    data: Data,
}

impl Value {
    /// A value of shape `dims`; errors if the element count is not their product.
    pub fn new(dims: &[usize], data: Data) -> Result<Value, ValueError> {
        let expected = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        match expected {
            Some(n) if n == data.len() => Ok(Value { dims: dims.to_vec(), data }),
            _ => Err(ValueError { dims: dims.to_vec(), expected: expected.unwrap_or(usize::MAX), found: data.len() }),
        }
    }

    /// An f32 value.
    pub fn f32(dims: &[usize], v: Vec<f32>) -> Result<Value, ValueError> {
        Value::new(dims, Data::F32(v))
    }

    /// An s32 value.
    pub fn s32(dims: &[usize], v: Vec<i32>) -> Result<Value, ValueError> {
        Value::new(dims, Data::S32(v))
    }

    /// An s8 value.
    pub fn s8(dims: &[usize], v: Vec<i8>) -> Result<Value, ValueError> {
        Value::new(dims, Data::S8(v.into()))
    }

    /// A u8 value.
    pub fn u8(dims: &[usize], v: Vec<u8>) -> Result<Value, ValueError> {
        Value::new(dims, Data::U8(v))
    }

    /// The shape.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// The elements.
    pub fn data(&self) -> &Data {
        &self.data
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        self.data.dtype()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Whether two values have the same shape, type and bits (NaNs compare by their bits).
    pub fn bits_eq(&self, other: &Value) -> bool {
        fn same<T, U: PartialEq>(a: &[T], b: &[T], bits: impl Fn(&T) -> U) -> bool {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| bits(x) == bits(y))
        }
        self.dims == other.dims
            && match (&self.data, &other.data) {
                (Data::F16(a), Data::F16(b)) => same(a, b, |x| x.to_bits()),
                (Data::Bf16(a), Data::Bf16(b)) => same(a, b, |x| x.to_bits()),
                (Data::F32(a), Data::F32(b)) => same(a, b, |x| x.to_bits()),
                (a, b) => a == b,
            }
    }
}

impl fmt::Display for Value {
    /// The type and shape, then up to eight elements.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?} [", self.dtype(), self.dims)?;
        let shown = self.len().min(8);
        let items: Vec<String> = match &self.data {
            Data::F16(v) => v[..shown].iter().map(|x| x.to_string()).collect(),
            Data::Bf16(v) => v[..shown].iter().map(|x| x.to_string()).collect(),
            Data::F32(v) => v[..shown].iter().map(|x| x.to_string()).collect(),
            Data::S32(v) => v[..shown].iter().map(|x| x.to_string()).collect(),
            Data::S8(v) => v[..shown].iter().map(|x| x.to_string()).collect(),
            Data::U8(v) => v[..shown].iter().map(|x| x.to_string()).collect(),
            Data::Boolean(v) => v[..shown].iter().map(|x| x.to_string()).collect(),
        };
        write!(f, "{}{}]", items.join(", "), if self.len() > shown { ", ..." } else { "" })
    }
}
