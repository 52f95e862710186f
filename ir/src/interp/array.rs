//! `Array`: a dense, row-major host array, the data both interpreters and the tests use.
//!
//! Elements are kept in the storage form of `Scalar` (integers sign-extended from their bits,
//! floats as f64 already rounded to their type), so reading one is a copy and writing one wraps
//! or rounds exactly as `scalar` does. NaN payloads of narrow floats may be quieted on the way
//! through f64; `bits_eq` treats all NaNs as equal.

use crate::dtype::{DType, ScalarType};
use crate::expr::{round_float, wrap_int};
use crate::interp::scalar::{self, Scalar};

#[derive(Clone, Debug)]
pub struct Array {
    dtype: DType,
    shape: Vec<i64>,
    data: Data,
}

#[derive(Clone, Debug)]
enum Data {
    Int(Vec<i64>),
    Float(Vec<f64>),
}

fn element_count(dtype: DType, shape: &[i64]) -> usize {
    assert!(dtype.is_scalar(), "array element type must be scalar, got {dtype}");
    assert!(shape.iter().all(|&d| d >= 0), "array shape {shape:?} has a negative dimension");
    shape.iter().product::<i64>() as usize
}

impl Array {
    pub fn zeros(dtype: DType, shape: &[i64]) -> Array {
        let len = element_count(dtype, shape);
        let data = if dtype.is_float() { Data::Float(vec![0.0; len]) } else { Data::Int(vec![0; len]) };
        Array { dtype, shape: shape.to_vec(), data }
    }

    /// Integer values converted to `dtype` by `Cast` semantics: integers wrap, bool is "non-zero",
    /// floats round to nearest even. Panics if `values` does not have one entry per element.
    pub fn from_i64(dtype: DType, shape: &[i64], values: &[i64]) -> Array {
        Array::from_scalars(dtype, shape, ScalarType::I64, values.iter().map(|&v| Scalar::Int(v)))
    }

    /// Float values converted to `dtype` by `Cast` semantics: rounded for floats, truncated and
    /// saturated for integers. Panics if `values` does not have one entry per element.
    pub fn from_f64(dtype: DType, shape: &[i64], values: &[f64]) -> Array {
        Array::from_scalars(dtype, shape, ScalarType::F64, values.iter().map(|&v| Scalar::Float(v)))
    }

    fn from_scalars(
        dtype: DType,
        shape: &[i64],
        from: ScalarType,
        values: impl ExactSizeIterator<Item = Scalar>,
    ) -> Array {
        let len = element_count(dtype, shape);
        assert_eq!(values.len(), len, "{} values for an array of shape {shape:?}", values.len());
        let mut array = Array::zeros(dtype, shape);
        for (i, v) in values.enumerate() {
            array.set(i, scalar::cast(from, dtype.scalar, v, false));
        }
        array
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match &self.data {
            Data::Int(v) => v.len(),
            Data::Float(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element at row-major position `flat`.
    pub fn get(&self, flat: usize) -> Scalar {
        match &self.data {
            Data::Int(v) => Scalar::Int(v[flat]),
            Data::Float(v) => Scalar::Float(v[flat]),
        }
    }

    /// Stores `v` at row-major position `flat`, wrapping integers and rounding floats to the
    /// element type. Panics if an integer is stored into a float array or vice versa.
    pub fn set(&mut self, flat: usize, v: Scalar) {
        let ty = self.dtype.scalar;
        match (&mut self.data, v) {
            (Data::Int(data), Scalar::Int(x)) => data[flat] = wrap_int(ty, x as i128),
            (Data::Float(data), Scalar::Float(x)) => data[flat] = round_float(ty, x),
            (_, v) => panic!("cannot store {v:?} into an array of {ty}"),
        }
    }

    /// The elements of an integer or bool array. Values are mathematical except that a `u64`
    /// above `i64::MAX` keeps its bit pattern (it reads as negative). Panics on float arrays.
    pub fn to_i64_vec(&self) -> Vec<i64> {
        match &self.data {
            Data::Int(v) => v.clone(),
            Data::Float(_) => panic!("to_i64_vec of a {} array", self.dtype),
        }
    }

    /// The elements as f64; integers convert exactly up to 2^53.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match &self.data {
            Data::Int(v) => v.iter().map(|&x| scalar::int_value(self.dtype.scalar, x) as f64).collect(),
            Data::Float(v) => v.clone(),
        }
    }

    /// The exact machine representation, little-endian: bool is one byte 0 or 1, `f16`/`bf16`
    /// are the `half` crate's bits.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        let ty = self.dtype.scalar;
        let mut out = Vec::with_capacity(self.len() * ty.bytes());
        for i in 0..self.len() {
            match self.get(i) {
                // Integers truncate their two's-complement bits to the element width.
                Scalar::Int(x) => out.extend_from_slice(&x.to_le_bytes()[..ty.bytes()]),
                Scalar::Float(x) => match ty {
                    ScalarType::F16 => out.extend_from_slice(&crate::dtype::f16_bits_from_f64(x).to_le_bytes()),
                    ScalarType::BF16 => out.extend_from_slice(&crate::dtype::bf16_bits_from_f64(x).to_le_bytes()),
                    ScalarType::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
                    _ => out.extend_from_slice(&x.to_le_bytes()),
                },
            }
        }
        out
    }

    /// The inverse of `to_le_bytes`; a bool byte reads as "non-zero". Panics if `bytes` does not
    /// hold exactly one element per position of `shape`.
    pub fn from_le_bytes(dtype: DType, shape: &[i64], bytes: &[u8]) -> Array {
        let len = element_count(dtype, shape);
        let ty = dtype.scalar;
        let width = ty.bytes();
        assert_eq!(bytes.len(), len * width, "{} bytes for {len} elements of {ty}", bytes.len());
        let mut array = Array::zeros(dtype, shape);
        for (i, chunk) in bytes.chunks_exact(width).enumerate() {
            let mut word = [0u8; 8];
            word[..width].copy_from_slice(chunk);
            let bits = u64::from_le_bytes(word);
            let v = match ty {
                ScalarType::F16 => Scalar::Float(half::f16::from_bits(bits as u16).to_f64()),
                ScalarType::BF16 => Scalar::Float(half::bf16::from_bits(bits as u16).to_f64()),
                ScalarType::F32 => Scalar::Float(f32::from_bits(bits as u32) as f64),
                ScalarType::F64 => Scalar::Float(f64::from_bits(bits)),
                // `set` wraps the zero-extended bits: sign-extends signed types, bool is non-zero.
                _ => Scalar::Int(bits as i64),
            };
            array.set(i, v);
        }
        array
    }

    /// Same dtype, same shape, and every element bit-identical (all NaNs are equal).
    pub fn bits_eq(&self, other: &Array) -> bool {
        self.dtype == other.dtype && self.shape == other.shape && self.first_difference(other).is_none()
    }

    /// The first position whose elements are not bit-identical, with both values, for test
    /// messages. Panics (with both types and shapes) if the arrays are not comparable.
    pub fn first_difference(&self, other: &Array) -> Option<(usize, Scalar, Scalar)> {
        assert!(
            self.dtype == other.dtype && self.shape == other.shape,
            "comparing a {}{:?} array with a {}{:?} array",
            self.dtype,
            self.shape,
            other.dtype,
            other.shape
        );
        (0..self.len()).map(|i| (i, self.get(i), other.get(i))).find(|(_, a, b)| !a.bits_eq(*b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ty: ScalarType) -> Array {
        let dtype = DType::scalar(ty);
        if ty.is_float() {
            let values = [0.0, -0.0, 1.0, -2.5, 65504.0, 1e-3, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 3.0e38];
            Array::from_f64(dtype, &[2, 5], &values)
        } else {
            let (lo, hi) = ty.int_range().unwrap_or((0, 1));
            let values = [0, 1, -1, 2, 100, -100, lo as i64, hi as i64, (lo + 1) as i64, (hi - 1) as i64];
            Array::from_i64(dtype, &[2, 5], &values)
        }
    }

    #[test]
    fn le_bytes_round_trip_every_scalar_type() {
        for ty in ScalarType::ALL {
            let a = sample(ty);
            let bytes = a.to_le_bytes();
            assert_eq!(bytes.len(), a.len() * ty.bytes(), "{ty}");
            let b = Array::from_le_bytes(a.dtype(), a.shape(), &bytes);
            assert!(a.bits_eq(&b), "{ty}: {:?}", a.first_difference(&b));
            assert_eq!(b.to_le_bytes(), bytes, "{ty}");
        }
    }

    #[test]
    fn le_bytes_are_the_machine_representation() {
        let bytes = |ty: ScalarType, v: f64| Array::from_f64(DType::scalar(ty), &[1], &[v]).to_le_bytes();
        assert_eq!(bytes(ScalarType::F16, 1.0), half::f16::ONE.to_le_bytes());
        assert_eq!(bytes(ScalarType::F16, 1.0), vec![0x00, 0x3c]);
        assert_eq!(bytes(ScalarType::BF16, 1.0), vec![0x80, 0x3f]);
        assert_eq!(bytes(ScalarType::F32, -2.0), (-2.0f32).to_le_bytes());
        let ints = |ty: ScalarType, v: i64| Array::from_i64(DType::scalar(ty), &[1], &[v]).to_le_bytes();
        assert_eq!(ints(ScalarType::Bool, 7), vec![1]);
        assert_eq!(ints(ScalarType::I8, -1), vec![0xff]);
        assert_eq!(ints(ScalarType::U16, 0x1234), vec![0x34, 0x12]);
        assert_eq!(ints(ScalarType::I32, -2), vec![0xfe, 0xff, 0xff, 0xff]);
        assert_eq!(ints(ScalarType::U64, -1), vec![0xff; 8]);
        let from = Array::from_le_bytes(DType::BOOL, &[3], &[0, 1, 5]);
        assert_eq!(from.to_i64_vec(), vec![0, 1, 1]);
    }

    #[test]
    fn conversions_wrap_round_and_saturate() {
        let u8s = Array::from_i64(DType::U8, &[3], &[256, -1, 300]);
        assert_eq!(u8s.to_i64_vec(), vec![0, 255, 44]);
        let i8s = Array::from_f64(DType::I8, &[3], &[-1e9, 2.9, f64::NAN]);
        assert_eq!(i8s.to_i64_vec(), vec![-128, 2, 0]);
        let u64s = Array::from_i64(DType::U64, &[1], &[-1]);
        assert_eq!(u64s.to_i64_vec(), vec![-1]);
        assert_eq!(u64s.to_f64_vec(), vec![u64::MAX as f64]);
        let f16s = Array::from_f64(DType::F16, &[2], &[1.0 + 1e-4, 70000.0]);
        assert_eq!(f16s.to_f64_vec(), vec![1.0, f64::INFINITY]);
        let from_int = Array::from_i64(DType::F32, &[1], &[16_777_217]);
        assert_eq!(from_int.to_f64_vec(), vec![16_777_216.0]);
    }

    #[test]
    fn set_wraps_and_first_difference_reports_position() {
        let mut a = Array::zeros(DType::I8, &[2, 2]);
        assert_eq!(a.len(), 4);
        a.set(3, Scalar::Int(200));
        assert_eq!(a.get(3), Scalar::Int(-56));
        let b = Array::zeros(DType::I8, &[2, 2]);
        assert!(!a.bits_eq(&b));
        assert_eq!(a.first_difference(&b), Some((3, Scalar::Int(-56), Scalar::Int(0))));
        assert!(!b.bits_eq(&Array::zeros(DType::I8, &[4])));
        assert!(!b.bits_eq(&Array::zeros(DType::U8, &[2, 2])));
        let nan = Array::from_f64(DType::F32, &[1], &[f64::NAN]);
        assert!(nan.bits_eq(&nan.clone()));
    }
}
