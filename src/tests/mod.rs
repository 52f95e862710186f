//! Tests of code generation and the runtime: hand-built final-form functions, JIT-compiled and
//! compared bit for bit with the reference interpreter (`ir::interp::run_func`).

mod amx;
mod arith;
mod errors;
mod f32_gemm;
mod folds;
mod gemm_maps;
mod idioms;
mod intrinsics;
mod kernels;
mod maps;
mod native;
mod segment_ranges;
mod skip;
mod stmts;
mod vectors;

use ir::expr::BinOp;
use ir::interp::{Array, run_func};
use ir::{Buffer, DType, Expr, ForKind, Func, ScalarType, Stmt, Var};

use crate::isa::IsaLevel;
use crate::runtime::{CompileOptions, CompiledFunc, Tensor, compile};
use crate::target::Target;

/// Compiles `func` with `options`, runs it and the interpreter on copies of `args`, and asserts
/// every argument ends up bit-identical. Returns the compiled function for further checks.
fn check_with(func: &Func, args: &[Array], options: &CompileOptions) -> CompiledFunc {
    let mut expected = args.to_vec();
    run_func(func, &mut expected).unwrap_or_else(|e| panic!("interpreter on {}: {e}", func.name));
    let compiled = compile(func, options).unwrap_or_else(|e| panic!("compiling {}: {e}", func.name));
    let mut tensors: Vec<Tensor> = args.iter().map(Tensor::from_array).collect();
    let mut refs: Vec<&mut Tensor> = tensors.iter_mut().collect();
    compiled.call(&mut refs).unwrap_or_else(|e| panic!("calling {}: {e}", func.name));
    for ((t, e), p) in tensors.iter().zip(&expected).zip(&func.params) {
        let got = t.to_array();
        if let Some((i, g, w)) = got.first_difference(e) {
            let input = |k: usize| args.iter().map(|a| format!("{:?}", a.get(k.min(a.len() - 1)))).collect::<Vec<_>>();
            panic!(
                "{}: {} [{}] differs at {i}: jit {g:?}, interpreter {w:?} (inputs there: {:?})\n{}",
                func.name,
                p.name(),
                p.dtype(),
                input(i),
                compiled.clif_text()
            );
        }
    }
    compiled
}

/// `check_with` at the host's native target and at every lower supported ISA level (whose
/// lowerings differ); returns the native compilation.
fn check(func: &Func, args: &[Array]) -> CompiledFunc {
    for level in skip::levels_here([IsaLevel::Scalar, IsaLevel::Avx2]) {
        check_with(func, args, &CompileOptions { target: Target::Level(level), ..CompileOptions::default() });
    }
    check_with(func, args, &CompileOptions::default())
}

/// Interesting integers of `ty`: small values of both signs, the extremes, and a few patterns.
fn int_samples(ty: ScalarType) -> Vec<i64> {
    let (lo, hi) = ty.int_range().unwrap_or((0, 1));
    let (lo, hi) = (lo as i64, hi as i64);
    vec![
        0,
        1,
        -1,
        2,
        -2,
        3,
        -7,
        7,
        lo,
        hi,
        lo.wrapping_add(1),
        hi.wrapping_sub(1),
        100,
        -100,
        0x5a5a_5a5a_5a5a_5a5a,
        64,
    ]
}

/// Interesting floats: signed zeros, infinities, NaN, subnormals, halves, large values.
fn float_samples() -> Vec<f64> {
    vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -2.5,
        3.0,
        7.25,
        -7.0,
        1e-3,
        65504.0,
        3.0e38,
        6e-8,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ]
}

/// A 1-D array of `n` values of `ty` cycling through `values` (`Cast` semantics).
fn array_of(ty: ScalarType, n: usize, values: &[f64]) -> Array {
    let v: Vec<f64> = (0..n).map(|i| values[i % values.len()]).collect();
    Array::from_f64(DType::scalar(ty), &[n as i64], &v)
}

/// Two arrays holding every pair of samples of `ty` (`first[i] = s[i / k]`, `second[i] = s[i % k]`).
fn sample_pairs(ty: ScalarType) -> (Array, Array) {
    let dtype = DType::scalar(ty);
    if ty.is_float() {
        let s = float_samples();
        let a: Vec<f64> = (0..s.len() * s.len()).map(|i| s[i / s.len()]).collect();
        let b: Vec<f64> = (0..s.len() * s.len()).map(|i| s[i % s.len()]).collect();
        let n = [a.len() as i64];
        (Array::from_f64(dtype, &n, &a), Array::from_f64(dtype, &n, &b))
    } else {
        let s = int_samples(ty);
        let a: Vec<i64> = (0..s.len() * s.len()).map(|i| s[i / s.len()]).collect();
        let b: Vec<i64> = (0..s.len() * s.len()).map(|i| s[i % s.len()]).collect();
        let n = [a.len() as i64];
        (Array::from_i64(dtype, &n, &a), Array::from_i64(dtype, &n, &b))
    }
}

/// The first `n` elements of a 1-D array.
fn truncate(a: &Array, n: usize) -> Array {
    let mut out = Array::zeros(a.dtype(), &[n as i64]);
    for i in 0..n {
        out.set(i, a.get(i));
    }
    out
}

/// The index of lane group `i` of a loop with `lanes` lanes: `i` itself, or a contiguous ramp.
fn lane_index(i: &Var, lanes: u16) -> Expr {
    if lanes == 1 { Expr::var(i) } else { Expr::ramp(Expr::var(i) * lanes as i64, Expr::index(1), lanes) }
}

/// Builds an output expression from the loaded inputs.
type Build<'a> = &'a dyn Fn(&[Expr]) -> Expr;
type BoxedBuild = Box<dyn Fn(&[Expr]) -> Expr>;

/// `for i in 0..n/lanes { out_k[idx] = f_k(inputs[idx]...) }` for each output expression
/// builder, with every buffer 1-D of `n` elements.
fn elementwise(name: &str, inputs: &[DType], outputs: &[(DType, Build<'_>)], n: i64, lanes: u16) -> Func {
    let ins: Vec<Buffer> = inputs.iter().enumerate().map(|(k, d)| Buffer::new(format!("in{k}"), *d, vec![n])).collect();
    let outs: Vec<Buffer> =
        outputs.iter().enumerate().map(|(k, (d, _))| Buffer::new(format!("out{k}"), *d, vec![n])).collect();
    let i = Var::index("i");
    let idx = lane_index(&i, lanes);
    let loaded: Vec<Expr> = ins.iter().map(|b| Expr::load(b, vec![idx.clone()])).collect();
    let stores = outs.iter().zip(outputs).map(|(b, (_, f))| Stmt::store(b, vec![idx.clone()], f(&loaded))).collect();
    let body = Stmt::for_loop(i, n / lanes as i64, ForKind::Serial, Stmt::seq(stores));
    Func { name: name.to_string(), params: ins.into_iter().chain(outs).collect(), body }
}

fn zeros_like(func: &Func, skip: usize) -> Vec<Array> {
    func.params[skip..].iter().map(|p| Array::zeros(p.dtype(), p.shape())).collect()
}

const INT_TYPES: [ScalarType; 8] = [
    ScalarType::U8,
    ScalarType::I8,
    ScalarType::U16,
    ScalarType::I16,
    ScalarType::U32,
    ScalarType::I32,
    ScalarType::U64,
    ScalarType::I64,
];

const ALL_BINOPS: [BinOp; 12] = [
    BinOp::Add,
    BinOp::Sub,
    BinOp::Mul,
    BinOp::Div,
    BinOp::Mod,
    BinOp::Min,
    BinOp::Max,
    BinOp::And,
    BinOp::Or,
    BinOp::Xor,
    BinOp::Shl,
    BinOp::Shr,
];
