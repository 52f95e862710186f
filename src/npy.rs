//! NumPy `.npy` files as graph values (`tensorlift run --input/--output`), read and written with
//! the `npyz` crate: C order, little-endian, the dtypes of the graph (`f2 f4 i4 i1 u1 b1`;
//! bfloat16 has no NumPy dtype).

use std::path::Path;

use half::f16;
use npyz::{DType, TypeChar, WriterBuilder};
use thiserror::Error;

use crate::graph::{Data, Value};

/// An unreadable, unwritable or unsupported `.npy` file.
#[derive(Debug, Error)]
pub enum NpyError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: expected a C-order array of f2, f4, i4, i1, u1 or b1, found {found}")]
    Unsupported { path: String, found: String },
    #[error("{path}: {what}")]
    Bad { path: String, what: String },
    #[error("{what}: bfloat16 has no NumPy dtype")]
    Bf16 { what: String },
}

/// Reads `path` as a graph value.
pub fn read(path: &Path) -> Result<Value, NpyError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| NpyError::Io { path: name.clone(), source })?;
    let io = |source| NpyError::Io { path: name.clone(), source };
    let npy = npyz::NpyFile::new(&bytes[..]).map_err(io)?;
    let unsupported = |npy: &npyz::NpyFile<&[u8]>| NpyError::Unsupported {
        path: name.clone(),
        found: format!("{} in {:?} order", npy.dtype().descr(), npy.order()),
    };
    if npy.order() != npyz::Order::C {
        return Err(unsupported(&npy));
    }
    let dims = npy
        .shape()
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| NpyError::Bad { path: name.clone(), what: format!("dimension {d}") }))
        .collect::<Result<Vec<_>, _>>()?;
    let DType::Plain(ty) = npy.dtype() else { return Err(unsupported(&npy)) };
    let data = match (ty.type_char(), ty.size_field()) {
        (TypeChar::Float, 2) => Data::F16(npy.into_vec::<f16>().map_err(io)?),
        (TypeChar::Float, 4) => Data::F32(npy.into_vec::<f32>().map_err(io)?),
        (TypeChar::Int, 4) => Data::S32(npy.into_vec::<i32>().map_err(io)?),
        (TypeChar::Int, 1) => Data::S8(npy.into_vec::<i8>().map_err(io)?.into()),
        (TypeChar::Uint, 1) => Data::U8(npy.into_vec::<u8>().map_err(io)?),
        (TypeChar::Bool, 1) => Data::Boolean(npy.into_vec::<bool>().map_err(io)?),
        _ => return Err(unsupported(&npy)),
    };
    Value::new(&dims, data).map_err(|e| NpyError::Bad { path: name, what: e.to_string() })
}

/// Writes `value` to `path`.
pub fn write(path: &Path, value: &Value) -> Result<(), NpyError> {
    let name = path.display().to_string();
    let io = |source| NpyError::Io { path: name.clone(), source };
    let file = std::fs::File::create(path).map_err(io)?;
    let shape: Vec<u64> = value.dims().iter().map(|&d| d as u64).collect();
    fn put<T: npyz::AutoSerialize>(file: std::fs::File, shape: &[u64], v: &[T]) -> std::io::Result<()> {
        let mut w =
            npyz::WriteOptions::new().default_dtype().shape(shape).writer(std::io::BufWriter::new(file)).begin_nd()?;
        w.extend(v.iter())?;
        w.finish()
    }
    match value.data() {
        Data::F16(v) => put(file, &shape, v),
        Data::F32(v) => put(file, &shape, v),
        Data::S32(v) => put(file, &shape, v),
        Data::S8(v) => put(file, &shape, v),
        Data::U8(v) => put(file, &shape, v),
        Data::Boolean(v) => put(file, &shape, v),
        Data::Bf16(_) => return Err(NpyError::Bf16 { what: name }),
    }
    .map_err(|source| NpyError::Io { path: name.clone(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_through_files() {
        let dir = std::env::temp_dir().join(format!("tensorlift-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let values = [
            Value::f32(&[2, 3], vec![1.5, -0.0, f32::MAX, 3.25, -7.0, 1e-30]).unwrap(),
            Value::u8(&[4], vec![0, 1, 128, 255]).unwrap(),
            Value::s8(&[1, 2], vec![-128, 127]).unwrap(),
            Value::s32(&[], vec![-5]).unwrap(),
        ];
        for (i, v) in values.iter().enumerate() {
            let path = dir.join(format!("{i}.npy"));
            write(&path, v).unwrap();
            let back = read(&path).unwrap();
            assert!(back.bits_eq(v), "{i}: {back:?} != {v:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_that_is_not_npy_is_an_error() {
        let path = std::env::temp_dir().join(format!("tensorlift-npy-bad-{}.npy", std::process::id()));
        std::fs::write(&path, b"not an npy file").unwrap();
        assert!(matches!(read(&path), Err(NpyError::Io { .. })));
        std::fs::remove_file(&path).unwrap();
    }
}
