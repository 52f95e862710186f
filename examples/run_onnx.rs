//! Runs an ONNX model through the library API: import, partition, compile, execute.
//!
//!   cargo run --release --example run_onnx -- tests/models/resnet18_w8_s32_qop_u8_pc.onnx

use std::error::Error;

use tensorlift::engine;
use tensorlift::graph::{Data, DataType, PartitionPolicy, Value};
use tensorlift::{CompileOptions, Target};

fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args().nth(1).ok_or("usage: run_onnx MODEL.onnx")?;
    let model = tensorlift::onnx::load(&path)?;
    let partitions = model.graph.get_partitions(PartitionPolicy::Fusion);
    for p in &partitions {
        println!("{}", model.graph.display_partitions(std::slice::from_ref(p)).trim_end());
    }
    let options = CompileOptions { target: Target::Native, threads: Some(1), ..CompileOptions::default() };
    let mut compiled = engine::compile(model.graph, partitions, &options)?;
    // A constant input of the model's dtype and shape.
    let inputs = compiled
        .input_specs()
        .into_iter()
        .map(|(dtype, dims)| -> Result<Value, Box<dyn Error>> {
            let n = dims.iter().product();
            let data = match dtype {
                DataType::F32 => Data::F32(vec![0.5; n]),
                DataType::U8 => Data::U8(vec![128; n]),
                other => return Err(format!("no example input of {other}").into()),
            };
            Ok(Value::new(&dims, data)?)
        })
        .collect::<Result<Vec<_>, Box<dyn Error>>>()?;
    let (outputs, times) = compiled.execute(&inputs)?;
    let total: f64 = times.iter().map(|t| t.as_secs_f64() * 1e3).sum();
    for (name, out) in model.outputs.iter().map(|(n, _)| n).zip(&outputs) {
        println!("{name}: {:?} {} ({} partitions, {total:.3} ms)", out.dims(), out.dtype(), times.len());
    }
    Ok(())
}
