//! The engine's buffers: a slot per tensor a partition reads or writes, its bytes allocated
//! once at compile time, in a buffer of its own or one it shares with tensors whose lifetimes do
//! not overlap its own (`share`). 4-D 8-bit integer tensors are stored NHWC (what the
//! convolution kernels read and write), every other tensor in its logical row-major order;
//! values cross the engine's edges (inputs, outputs, the reference's fallback) in the logical
//! order.

use std::borrow::Cow;
use std::ops::{Deref, DerefMut};

use half::{bf16, f16};

use crate::graph::{Data, DataType, Value};
use crate::layer::permute_bytes;
use crate::runtime::host::Pool;

/// A tensor's buffer.
#[derive(Clone, Debug)]
pub struct Slot {
    pub dtype: DataType,
    /// The logical dimensions (NCHW for 4-D activations).
    pub dims: Vec<usize>,
    /// Stored NHWC (4-D u8/s8 only).
    pub nhwc: bool,
    pub bytes: Bytes,
}

/// A slot's bytes: the first `len` of a buffer, which the slot may hand on to the next tensor
/// sharing it (`Bytes::release`, `Bytes::hold`). Dereferencing the bytes of a slot whose buffer moved on panics:
/// the engine never reads a tensor after its last reader ran.
#[derive(Clone, Debug, Default)]
pub struct Bytes {
    buffer: Vec<u8>,
    len: usize,
}

impl Bytes {
    /// `len` zero bytes of a buffer of `capacity` (at least `len`) bytes.
    pub fn zeroed(len: usize, capacity: usize) -> Bytes {
        Bytes { buffer: vec![0; capacity.max(len)], len }
    }

    /// `len` bytes, no buffer yet (a tensor that takes a shared one before it is written).
    pub fn unallocated(len: usize) -> Bytes {
        Bytes { buffer: Vec::new(), len }
    }

    /// Whether the slot holds its buffer (and so its tensor's bytes).
    pub fn holds(&self) -> bool {
        self.buffer.len() >= self.len
    }

    /// The tensor's size in bytes, whether or not the slot holds its buffer.
    pub fn size(&self) -> usize {
        self.len
    }

    /// Gives up the buffer (to the next tensor sharing it: this one is dead by now).
    pub fn release(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buffer)
    }

    /// Holds `buffer`, a shared buffer another tensor released.
    pub fn hold(&mut self, buffer: Vec<u8>) {
        self.buffer = buffer;
        debug_assert!(self.holds(), "a shared buffer holds each of its tensors");
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buffer[..self.len]
    }
}

impl DerefMut for Bytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buffer[..self.len]
    }
}

/// Whether a tensor of `dtype` and `dims` is stored NHWC.
pub fn stored_nhwc(dtype: DataType, dims: &[usize]) -> bool {
    dtype.is_int8() && dims.len() == 4
}

impl Slot {
    /// A zeroed buffer for a tensor of `dtype` and `dims`.
    pub fn new(dtype: DataType, dims: Vec<usize>) -> Slot {
        let mut slot = Slot::unallocated(dtype, dims);
        slot.bytes = Bytes::zeroed(slot.bytes.size(), 0);
        slot
    }

    /// The slot of a tensor of `dtype` and `dims`, its buffer not allocated yet.
    pub fn unallocated(dtype: DataType, dims: Vec<usize>) -> Slot {
        let len = dims.iter().product::<usize>() * dtype.size();
        Slot { dtype, nhwc: stored_nhwc(dtype, &dims), dims, bytes: Bytes::unallocated(len) }
    }

    /// The dimensions as 4 (NCHW), for 4-D tensors.
    pub fn nchw(&self) -> [usize; 4] {
        let d = &self.dims;
        [d[0], d[1], d[2], d[3]]
    }

    /// A slot of no tensor that allocates nothing (what stands in for a slot moved out).
    pub fn placeholder() -> Slot {
        Slot { dtype: DataType::U8, dims: Vec::new(), nhwc: false, bytes: Bytes::default() }
    }

    /// Stores `value` (logical order, same dtype and dims: the caller checked), without an
    /// intermediate copy where the data's bytes are already those stored.
    pub fn store(&mut self, value: &Value) {
        self.store_on(value, None);
    }

    /// `store`, a plain copy of f32 split across `pool` where there is one (a network's input
    /// image is hundreds of KiB, which one core copies at a fraction of the bandwidth).
    pub fn store_on(&mut self, value: &Value, pool: Option<&Pool>) {
        match (value.data(), self.nhwc) {
            (Data::U8(v), true) => permute_bytes(v, self.nchw(), 1, true, &mut self.bytes),
            (_, true) => {
                let logical = value_bytes(value.data());
                permute_bytes(&logical, self.nchw(), self.dtype.size(), true, &mut self.bytes);
            }
            (Data::F32(v), false) => {
                let src = f32_bytes(v);
                match pool {
                    Some(pool) if src.len() > 2 * COPY_PIECE => {
                        pool.for_each_chunk_mut(&mut self.bytes, COPY_PIECE, |i, part| {
                            part.copy_from_slice(&src[i * COPY_PIECE..][..part.len()])
                        })
                    }
                    _ => self.bytes.copy_from_slice(&src[..]),
                }
            }
            (Data::U8(v), false) => self.bytes.copy_from_slice(v),
            (data, false) => self.bytes.copy_from_slice(&value_bytes(data)),
        }
    }

    /// The stored tensor as a value in the logical order.
    pub fn load(&self) -> Value {
        let logical = if self.nhwc {
            let mut out = vec![0; self.bytes.len()];
            permute_bytes(&self.bytes, self.nchw(), self.dtype.size(), false, &mut out);
            out
        } else {
            self.bytes.to_vec()
        };
        Value::new(&self.dims, bytes_data(self.dtype, &logical))
            .expect("a slot's bytes hold exactly its dims' elements")
    }
}

/// Bytes per piece of a copy split across a pool.
const COPY_PIECE: usize = 64 * 1024;

/// The little-endian bytes of f32 values: on a little-endian target, as they lie in memory.
pub(super) fn f32_bytes(v: &[f32]) -> Cow<'_, [u8]> {
    #[cfg(target_endian = "little")]
    // SAFETY: any initialized f32 is 4 initialized bytes, u8 has alignment 1, and the slice
    // borrows `v` for its lifetime; on a little-endian target the bytes are `to_le_bytes`.
    return Cow::Borrowed(unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) });
    #[cfg(not(target_endian = "little"))]
    return Cow::Owned(v.iter().flat_map(|x| x.to_le_bytes()).collect());
}

/// The little-endian bytes of `data`.
pub fn value_bytes(data: &Data) -> Vec<u8> {
    match data {
        Data::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Data::Bf16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Data::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Data::S32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Data::S8(v) => v.iter().map(|&x| x as u8).collect(),
        Data::U8(v) => v.clone(),
        Data::Boolean(v) => v.iter().map(|&x| x as u8).collect(),
    }
}

/// The elements of `dtype` in little-endian `bytes`.
pub fn bytes_data(dtype: DataType, bytes: &[u8]) -> Data {
    fn chunks<const N: usize>(bytes: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
        bytes.chunks_exact(N).map(|c| c.try_into().expect("chunks of N bytes"))
    }
    match dtype {
        DataType::F16 => Data::F16(chunks(bytes).map(f16::from_le_bytes).collect()),
        DataType::Bf16 => Data::Bf16(chunks(bytes).map(bf16::from_le_bytes).collect()),
        DataType::F32 => Data::F32(chunks(bytes).map(f32::from_le_bytes).collect()),
        DataType::S32 => Data::S32(chunks(bytes).map(i32::from_le_bytes).collect()),
        DataType::S8 => Data::S8(bytes.iter().map(|&b| b as i8).collect()),
        DataType::U8 => Data::U8(bytes.to_vec()),
        DataType::Boolean => Data::Boolean(bytes.iter().map(|&b| b != 0).collect()),
    }
}
