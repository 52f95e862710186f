//! `Tensor`, the owned host buffer compiled functions run on, and `Arg`, a borrowed argument.

use std::fmt;
use std::marker::PhantomData;

use ir::interp::Array;
use ir::{DType, ScalarType};

use super::storage::Storage;
use crate::error::RuntimeError;

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that is the storage of one tensorlift scalar type.
pub trait Element: Copy + sealed::Sealed + 'static {
    const SCALAR: ScalarType;
    /// Writes the little-endian bytes (`SCALAR.bytes()` of them).
    fn write_le(self, out: &mut [u8]);
    /// Reads from little-endian bytes; a bool is "non-zero".
    fn read_le(bytes: &[u8]) -> Self;
}

macro_rules! element {
    ($t:ty, $s:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const SCALAR: ScalarType = ScalarType::$s;
            fn write_le(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("element width"))
            }
        }
    };
}

element!(u8, U8);
element!(i8, I8);
element!(u16, U16);
element!(i16, I16);
element!(u32, U32);
element!(i32, I32);
element!(u64, U64);
element!(i64, I64);
element!(f32, F32);
element!(f64, F64);
element!(half::f16, F16);
element!(half::bf16, BF16);

impl sealed::Sealed for bool {}
impl Element for bool {
    const SCALAR: ScalarType = ScalarType::Bool;
    fn write_le(self, out: &mut [u8]) {
        out[0] = self as u8;
    }
    fn read_le(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

/// A dense, row-major, 64-byte aligned array of scalars.
#[derive(Clone)]
pub struct Tensor {
    lines: Storage,
    bytes: usize,
    dtype: DType,
    shape: Vec<i64>,
}

/// Number of elements of `shape`, if every dimension is non-negative and the bytes fit.
fn element_count(dtype: DType, shape: &[i64]) -> Result<usize, RuntimeError> {
    if dtype.is_vector() {
        return Err(RuntimeError::VectorDType { found: dtype });
    }
    let bad = || RuntimeError::BadShape { shape: shape.to_vec() };
    let mut n: usize = 1;
    for &d in shape {
        n = n.checked_mul(usize::try_from(d).map_err(|_| bad())?).ok_or_else(bad)?;
    }
    n.checked_mul(dtype.bytes()).filter(|b| *b <= isize::MAX as usize).ok_or_else(bad)?;
    Ok(n)
}

impl Tensor {
    fn alloc(dtype: DType, shape: &[i64], len: usize) -> Tensor {
        let bytes = len * dtype.bytes();
        // `element_count` bounds the bytes by isize::MAX.
        Tensor { lines: Storage::zeroed(bytes), bytes, dtype, shape: shape.to_vec() }
    }

    /// A tensor of zeros on the bytes `storage` gives for its size (`Storage::lines` of it, zero).
    /// Errors as `zeros`.
    pub(super) fn zeros_on(
        dtype: DType,
        shape: &[i64],
        storage: impl FnOnce(usize) -> Storage,
    ) -> Result<Tensor, RuntimeError> {
        let bytes = element_count(dtype, shape)? * dtype.bytes();
        Ok(Tensor { lines: storage(bytes), bytes, dtype, shape: shape.to_vec() })
    }

    /// A tensor of zeros. Errors if `dtype` is a vector or the shape has a negative dimension
    /// or does not fit in memory.
    pub fn zeros(dtype: DType, shape: &[i64]) -> Result<Tensor, RuntimeError> {
        Ok(Tensor::alloc(dtype, shape, element_count(dtype, shape)?))
    }

    /// A tensor holding exactly these little-endian bytes (bool bytes are normalized to 0/1).
    pub fn from_le_bytes(dtype: DType, shape: &[i64], bytes: &[u8]) -> Result<Tensor, RuntimeError> {
        let len = element_count(dtype, shape)?;
        if bytes.len() != len * dtype.bytes() {
            return Err(RuntimeError::DataLength {
                shape: shape.to_vec(),
                expected: len,
                found: bytes.len() / dtype.bytes(),
            });
        }
        let mut t = Tensor::alloc(dtype, shape, len);
        let out = t.as_mut_bytes();
        out.copy_from_slice(bytes);
        if dtype.is_bool() {
            out.iter_mut().for_each(|b| *b = (*b != 0) as u8);
        }
        Ok(t)
    }

    pub fn from_slice<T: Element>(shape: &[i64], data: &[T]) -> Result<Tensor, RuntimeError> {
        let dtype = DType::scalar(T::SCALAR);
        let len = element_count(dtype, shape)?;
        if data.len() != len {
            return Err(RuntimeError::DataLength { shape: shape.to_vec(), expected: len, found: data.len() });
        }
        let mut t = Tensor::alloc(dtype, shape, len);
        for (x, out) in data.iter().zip(t.as_mut_bytes().chunks_exact_mut(dtype.bytes())) {
            x.write_le(out);
        }
        Ok(t)
    }

    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, RuntimeError> {
        if T::SCALAR != self.dtype.scalar {
            return Err(RuntimeError::ElementType { expected: self.dtype, found: DType::scalar(T::SCALAR) });
        }
        Ok(self.as_bytes().chunks_exact(self.dtype.bytes()).map(T::read_le).collect())
    }

    pub fn from_array(a: &Array) -> Tensor {
        let len = a.len();
        let mut t = Tensor::alloc(a.dtype(), a.shape(), len);
        t.as_mut_bytes().copy_from_slice(&a.to_le_bytes());
        t
    }

    pub fn to_array(&self) -> Array {
        Array::from_le_bytes(self.dtype, &self.shape, self.as_bytes())
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.bytes / self.dtype.bytes()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `lines` holds at least `bytes` initialized bytes.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr(), self.bytes) }
    }

    pub(crate) fn as_mut_bytes(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_bytes`, with exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr(), self.bytes) }
    }

    pub(crate) fn data_ptr(&mut self) -> *mut u8 {
        self.lines.as_mut_ptr()
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({} {:?})", self.dtype, self.shape)
    }
}

/// A borrowed argument of `CompiledFunc::call_args`: a tensor or a raw slice.
pub struct Arg<'a> {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
    pub(crate) dtype: DType,
    /// Tensors are checked by shape, slices only by length.
    pub(crate) shape: Option<&'a [i64]>,
    pub(crate) writable: bool,
    /// A range every element was checked to lie in (`CheckedTensor`).
    pub(crate) checked: Option<(i64, i64)>,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl<'a> Arg<'a> {
    /// A read-only slice; rejected for parameters the function writes.
    pub fn from_slice<T: Element>(data: &'a [T]) -> Arg<'a> {
        Arg {
            ptr: data.as_ptr().cast::<u8>().cast_mut(),
            len: data.len(),
            dtype: DType::scalar(T::SCALAR),
            shape: None,
            writable: false,
            checked: None,
            _borrow: PhantomData,
        }
    }

    /// A read-only slice of u8 or i8 data given as its bytes (`dtype` u8 or i8); `None` for
    /// any other dtype.
    pub fn from_bytes(dtype: DType, data: &'a [u8]) -> Option<Arg<'a>> {
        [DType::U8, DType::I8].contains(&dtype).then(|| Arg { dtype, ..Arg::from_slice(data) })
    }

    /// `from_bytes`, writable.
    pub fn from_mut_bytes(dtype: DType, data: &'a mut [u8]) -> Option<Arg<'a>> {
        [DType::U8, DType::I8].contains(&dtype).then(|| Arg { dtype, ..Arg::from_mut_slice(data) })
    }

    pub fn from_mut_slice<T: Element>(data: &'a mut [T]) -> Arg<'a> {
        Arg {
            ptr: data.as_mut_ptr().cast::<u8>(),
            len: data.len(),
            dtype: DType::scalar(T::SCALAR),
            shape: None,
            writable: true,
            checked: None,
            _borrow: PhantomData,
        }
    }

    pub fn tensor(t: &'a mut Tensor) -> Arg<'a> {
        let ptr = t.data_ptr();
        Arg {
            ptr,
            len: t.len(),
            dtype: t.dtype,
            shape: Some(&t.shape),
            writable: true,
            checked: None,
            _borrow: PhantomData,
        }
    }

    /// A read-only tensor; rejected for parameters the function writes.
    pub fn tensor_ref(t: &'a Tensor) -> Arg<'a> {
        Arg {
            ptr: t.lines.as_ptr().cast_mut(),
            len: t.len(),
            dtype: t.dtype,
            shape: Some(&t.shape),
            writable: false,
            checked: None,
            _borrow: PhantomData,
        }
    }

    /// A read-only tensor checked once (`CheckedTensor`): no scan of a parameter's declared
    /// range that contains the checked one.
    pub fn checked(t: &'a CheckedTensor) -> Arg<'a> {
        Arg { checked: Some(t.range), ..Arg::tensor_ref(&t.tensor) }
    }
}

/// A tensor whose elements were checked once to lie in `range`. A compiled function whose
/// parameter declares a range (`placeholder_in_range`, the packed weights a kernel relies on)
/// scans that argument before every call; given as `Arg::checked`, this one is not scanned
/// again when the declared range contains `range`. It lends its data only immutably, so the
/// check holds for its whole life: what weights prepared once and called many times want.
#[derive(Clone, Debug)]
pub struct CheckedTensor {
    tensor: Tensor,
    range: (i64, i64),
}

impl CheckedTensor {
    /// Checks every element of `tensor` (of an integer dtype) against `lo..=hi`.
    pub fn new(tensor: Tensor, (lo, hi): (i64, i64)) -> Result<CheckedTensor, RuntimeError> {
        if !tensor.dtype.is_int() {
            return Err(RuntimeError::CheckedDType { found: tensor.dtype });
        }
        if let Some((position, value)) = super::first_outside(tensor.dtype, tensor.as_bytes(), lo, hi) {
            return Err(RuntimeError::CheckedValue { position, value, lo, hi });
        }
        Ok(CheckedTensor { tensor, range: (lo, hi) })
    }

    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }

    pub fn range(&self) -> (i64, i64) {
        self.range
    }

    pub fn into_tensor(self) -> Tensor {
        self.tensor
    }
}
