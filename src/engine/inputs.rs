//! `random_input`: seeded random data for a graph input, what `tensorlift run` feeds a model
//! without `--input` and what the tuner times whole models on.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::error::EngineError;
use crate::graph::{Data, DataType, Value};

/// Seeded random data of `dtype` and `dims`: uniform in [-1, 1) for f32, over the whole range
/// for 8-bit integers, in [-1000, 1000) for s32. Other dtypes are an error.
pub fn random_input(dtype: DataType, dims: &[usize], seed: u64) -> Result<Value, EngineError> {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = dims.iter().product();
    let data = match dtype {
        DataType::F32 => Data::F32((0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()),
        DataType::U8 => Data::U8((0..n).map(|_| rng.random()).collect()),
        DataType::S8 => Data::S8((0..n).map(|_| rng.random()).collect()),
        DataType::S32 => Data::S32((0..n).map(|_| rng.random_range(-1000..1000)).collect()),
        other => return Err(EngineError::RandomInput { dtype: other }),
    };
    Ok(Value::new(dims, data)?)
}
