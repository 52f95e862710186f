//! Quantized convolutions (`layer::compile_qconv`, onnxruntime's requantization order) against
//! onnxruntime's own outputs: reads the cases `scripts/peers/qlinearconv_cases.py` wrote, runs
//! each at the scalar level and at the best level of this CPU, and prints how many outputs
//! differ (0 where onnxruntime's kernels are exact).
//!
//!     python3 scripts/peers/qlinearconv_cases.py cases.json
//!     cargo run --release --example qconv_against_ort -- cases.json

use ir::DType;
use serde_json::Value;
use tensorlift::layer::{ActQuant, QConvSpec, compile_qconv};
use tensorlift::{CompileOptions, IsaLevel, Target};

type Error = Box<dyn std::error::Error>;

/// The field `key` of a case, or an error naming it.
fn field<'v>(case: &'v Value, key: &str) -> Result<&'v Value, Error> {
    case.get(key).ok_or_else(|| format!("a case without `{key}`").into())
}

fn int(case: &Value, key: &str) -> Result<i64, Error> {
    field(case, key)?.as_i64().ok_or_else(|| format!("`{key}` is not an integer").into())
}

fn float(case: &Value, key: &str) -> Result<f32, Error> {
    Ok(field(case, key)?.as_f64().ok_or_else(|| format!("`{key}` is not a number"))? as f32)
}

fn ints(case: &Value, key: &str) -> Result<Vec<i64>, Error> {
    let values = field(case, key)?.as_array().ok_or_else(|| format!("`{key}` is not a list"))?;
    values.iter().map(|v| v.as_i64().ok_or_else(|| format!("`{key}` holds a non-integer").into())).collect()
}

fn dtype(case: &Value, key: &str) -> Result<DType, Error> {
    match field(case, key)?.as_str() {
        Some("u8") => Ok(DType::U8),
        Some("s8") => Ok(DType::I8),
        other => Err(format!("`{key}` is {other:?}, expected \"u8\" or \"s8\"").into()),
    }
}

/// A case's spec, source bytes and onnxruntime's output bytes (NHWC).
fn case(c: &Value) -> Result<(QConvSpec, Vec<u8>, Vec<u8>), Error> {
    let k = int(c, "k")?;
    let scales = field(c, "ws")?.as_array().ok_or("`ws` is not a list")?;
    let spec = QConvSpec {
        name: field(c, "name")?.as_str().unwrap_or("?").to_string(),
        src: ActQuant { dtype: dtype(c, "sd")?, scale: float(c, "xs")?, zero_point: i32::try_from(int(c, "xz")?)? },
        h: int(c, "h")?,
        w: int(c, "w")?,
        ic: int(c, "ic")?,
        oc: int(c, "oc")?,
        kh: k,
        kw: k,
        stride: (int(c, "s")?, int(c, "s")?),
        pads: [int(c, "p")?; 4],
        weights: ints(c, "wt")?.into_iter().map(i8::try_from).collect::<Result<_, _>>()?,
        weight_scales: scales
            .iter()
            .map(|v| v.as_f64().map(|v| v as f32).ok_or("`ws` holds a non-number"))
            .collect::<Result<_, _>>()?,
        bias: Some(ints(c, "bias")?.into_iter().map(i32::try_from).collect::<Result<_, _>>()?),
        dst: ActQuant { dtype: dtype(c, "dd")?, scale: float(c, "ys")?, zero_point: i32::try_from(int(c, "yz")?)? },
        relu: false,
        sum: None,
    };
    // Bytes of u8 or i8 values.
    let bytes = |key: &str| -> Result<Vec<u8>, Error> { Ok(ints(c, key)?.into_iter().map(|v| v as u8).collect()) };
    Ok((spec, bytes("x")?, bytes("y")?))
}

fn main() -> Result<(), Error> {
    let path = std::env::args().nth(1).ok_or("usage: qconv_against_ort CASES.json")?;
    let cases: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let best = IsaLevel::detect().unwrap_or(IsaLevel::Scalar);
    for c in &cases {
        let (spec, src, expected) = case(c)?;
        for level in [IsaLevel::Scalar, best] {
            let options = CompileOptions { target: Target::Level(level), threads: Some(1), ..Default::default() };
            let compiled = compile_qconv(&spec, None, &options)?;
            let mut dst = vec![0u8; expected.len()];
            compiled.run(&src, &mut dst)?;
            let differing = dst.iter().zip(&expected).filter(|(a, b)| a != b).count();
            println!(
                "{} at {level}: {differing} of {} differ ({})",
                spec.name,
                dst.len(),
                compiled.kernel_description()
            );
        }
    }
    Ok(())
}
