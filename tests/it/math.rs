//! The f32 math functions (`ir::math`): accuracy against the correctly rounded result, special
//! values, and the JIT equal to the reference interpreters bit for bit, scalar and vectorized.

use ir::interp::array::Array;
use ir::schedule::create_schedule;
use ir::te::{Tensor, compute, placeholder};
use ir::{DType, Expr, TeError, math};
use tensorlift::{CompileOptions, Tensor as RtTensor, build};

type MathFn = fn(&Expr) -> Expr;

/// A function's name, builder, f64 reference and error bound in ulps.
type Case = (&'static str, MathFn, fn(f64) -> f64, f64);

/// Each function with its f64 reference and the error bound documented in `ir::math`.
const FUNCTIONS: [Case; 7] = [
    ("exp", |x| math::exp(x), f64::exp, 1.0),
    ("log", |x| math::log(x), f64::ln, 1.0),
    ("sqrt", |x| math::sqrt(x), f64::sqrt, 0.5),
    ("rsqrt", |x| math::rsqrt(x), |x| 1.0 / x.sqrt(), 1.5),
    ("tanh", |x| math::tanh(x), f64::tanh, 1.5),
    ("sigmoid", |x| math::sigmoid(x), |x| 1.0 / (1.0 + (-x).exp()), 2.5),
    ("erf", |x| math::erf(x), libm::erf, 1.5),
];

/// `B[i] = f(A[i])` over `n` elements.
fn elementwise(f: MathFn, n: i64) -> (Tensor, Tensor) {
    let a = placeholder([n], DType::F32, "A").unwrap();
    let b = compute([n], |i| f(&a.at([&i[0]])), "B").unwrap();
    (a, b)
}

/// Runs `B = f(A)` through the JIT, vectorized by 8 lanes or with the default scalar loop.
fn jit(f: MathFn, input: &[f32], vectorized: bool) -> Vec<f32> {
    let (a, b) = elementwise(f, input.len() as i64);
    let mut s = create_schedule(&[&b]);
    if vectorized {
        let (_, inner) = s.split(&b, &b.axes()[0], 8).unwrap();
        s.vectorize(&b, &inner).unwrap();
    }
    let kernel = build(&s, &[&a, &b], "f", &CompileOptions::default()).expect("the math expansions compile");
    let mut ta = RtTensor::from_slice(&[input.len() as i64], input).unwrap();
    let mut tb = RtTensor::zeros(DType::F32, &[input.len() as i64]).unwrap();
    kernel.compiled.call(&mut [&mut ta, &mut tb]).unwrap();
    tb.to_vec::<f32>().unwrap()
}

/// The tensor-expression interpreter (the definition) on `B = f(A)`.
fn interpret(f: MathFn, input: &[f32]) -> Vec<f32> {
    let (a, b) = elementwise(f, input.len() as i64);
    let values: Vec<f64> = input.iter().map(|&x| x as f64).collect();
    let array = Array::from_f64(DType::F32, &[input.len() as i64], &values);
    let out = ir::interp::eval_te(&[&b], &[(&a, &array)]).expect("reference evaluation");
    out[0].to_f64_vec().into_iter().map(|v| v as f32).collect()
}

/// The error of `got` in ulps of the correctly rounded result `exact as f32` (the spacing of
/// f32 at that magnitude, 2^-149 among the subnormals). Infinite and NaN results must match.
fn ulp_error(got: f32, exact: f64) -> f64 {
    let rounded = exact as f32;
    if exact.is_nan() || rounded.is_infinite() || got.is_nan() || got.is_infinite() {
        let same = (exact.is_nan() && got.is_nan()) || rounded == got;
        return if same { 0.0 } else { f64::INFINITY };
    }
    let exponent = if rounded == 0.0 { -126 } else { (rounded.abs().to_bits() >> 23) as i32 - 127 }.max(-126);
    let ulp = 2f64.powi(exponent - 23);
    (got as f64 - exact).abs() / ulp
}

/// Every 1021st f32 bit pattern: 4.2 million inputs spread over the whole domain (both signs,
/// subnormals, infinities and NaNs included), plus the neighbourhood of each function's breaks.
fn sweep() -> Vec<f32> {
    let mut xs: Vec<f32> = (0..=u32::MAX / 1021).map(|k| f32::from_bits(k * 1021)).collect();
    for center in
        [0.625f32, 1.0, 3.92, 88.72284, -103.28, -87.3, std::f32::consts::FRAC_1_SQRT_2, std::f32::consts::SQRT_2]
    {
        for d in -2000i32..=2000 {
            xs.push(f32::from_bits((center.to_bits() as i32 + d) as u32));
            xs.push(-f32::from_bits((center.to_bits() as i32 + d) as u32));
        }
    }
    xs
}

/// The measured maximum errors (printed with `--nocapture`) are within the documented bounds.
#[test]
fn max_ulp_error_of_each_function() {
    let xs = sweep();
    let mut report = String::new();
    for (name, f, reference, bound) in FUNCTIONS {
        let got = jit(f, &xs, true);
        let (mut worst, mut at) = (0.0f64, 0.0f32);
        for (&x, &y) in xs.iter().zip(&got) {
            let e = ulp_error(y, reference(x as f64));
            if e > worst {
                (worst, at) = (e, x);
            }
        }
        report += &format!("{name}: max {worst:.3} ulp at {at:e} ({} inputs)\n", xs.len());
        assert!(worst <= bound, "{name}: {worst} ulp at x = {at:e} ({:#x}), documented bound {bound}", at.to_bits());
    }
    eprint!("{report}");
}

/// A bound of 0 would fail: the harness can see a wrong last bit (`exp` is not correctly rounded
/// everywhere), so the bounds above are measured, not vacuous.
#[test]
fn the_ulp_measure_detects_a_one_ulp_error() {
    let xs: Vec<f32> = (0..20000).map(|k| -10.0 + k as f32 * 0.001).collect();
    let got = jit(|x| math::exp(x), &xs, false);
    let worst = xs.iter().zip(&got).map(|(&x, &y)| ulp_error(y, (x as f64).exp())).fold(0.0, f64::max);
    assert!(worst > 0.5, "exp rounds correctly on every input tried: {worst}");
    assert_eq!(ulp_error(f32::from_bits(1.0f32.to_bits() + 1), 1.0), 1.0);
}

fn specials() -> Vec<f32> {
    let mut xs = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x007f_ffff),
        -f32::from_bits(1),
        f32::MAX,
        f32::MIN,
        1.0,
        -1.0,
        0.5,
        0.625,
        -0.625,
        1e-20,
        -1e-20,
        3.92,
        4.0,
        9.0,
        -9.0,
        88.72283,
        88.72284,
        89.0,
        -87.33655,
        -103.27893,
        -103.97208,
        -104.0,
        -200.0,
        200.0,
    ];
    // Random bit patterns and random moderate values, from a fixed xorshift seed.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for k in 0..1000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        xs.push(if k % 2 == 0 { f32::from_bits(state as u32) } else { (state % 40_000) as f32 / 1000.0 - 20.0 });
    }
    xs
}

fn same_bits(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// The interpreter and the JIT (scalar and 8-lane vector code) give the same bits.
#[test]
fn interpreter_and_jit_agree_bit_for_bit() {
    let xs = specials();
    for (name, f, ..) in FUNCTIONS {
        let reference = interpret(f, &xs);
        for vectorized in [false, true] {
            let got = jit(f, &xs, vectorized);
            for ((&x, &r), &g) in xs.iter().zip(&reference).zip(&got) {
                assert!(same_bits(r, g), "{name}({x:e}): interpreter {r:e}, JIT (vectorized: {vectorized}) {g:e}");
            }
        }
    }
}

#[test]
fn special_values() {
    let check = |f: MathFn, name: &str, cases: &[(f32, f32)]| {
        let xs: Vec<f32> = cases.iter().map(|c| c.0).collect();
        for got in [jit(f, &xs, false), interpret(f, &xs)] {
            for (&(x, want), g) in cases.iter().zip(got) {
                assert!(same_bits(g, want), "{name}({x:e}) = {g:e}, expected {want:e}");
            }
        }
    };
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    check(
        |x| math::exp(x),
        "exp",
        &[(0.0, 1.0), (-0.0, 1.0), (inf, inf), (-inf, 0.0), (nan, nan), (88.72284, inf), (89.0, inf), (-104.0, 0.0)],
    );
    check(
        |x| math::log(x),
        "log",
        &[(0.0, -inf), (-0.0, -inf), (-1.0, nan), (-inf, nan), (inf, inf), (nan, nan), (1.0, 0.0)],
    );
    check(
        |x| math::sqrt(x),
        "sqrt",
        &[(-0.0, -0.0), (-1.0, nan), (inf, inf), (4.0, 2.0), (2.0, std::f32::consts::SQRT_2)],
    );
    check(|x| math::rsqrt(x), "rsqrt", &[(0.0, inf), (-0.0, -inf), (inf, 0.0), (-4.0, nan), (4.0, 0.5)]);
    check(
        |x| math::tanh(x),
        "tanh",
        &[(0.0, 0.0), (-0.0, -0.0), (inf, 1.0), (-inf, -1.0), (9.1, 1.0), (-20.0, -1.0), (nan, nan)],
    );
    check(
        |x| math::sigmoid(x),
        "sigmoid",
        &[(0.0, 0.5), (-0.0, 0.5), (inf, 1.0), (-inf, 0.0), (nan, nan), (20.0, 1.0)],
    );
    check(
        |x| math::erf(x),
        "erf",
        &[(0.0, 0.0), (-0.0, -0.0), (inf, 1.0), (-inf, -1.0), (3.92, 1.0), (-5.0, -1.0), (nan, nan)],
    );
}

/// The functions are f32 only; any other operand is a typed error of `compute`, not a panic.
#[test]
fn a_non_f32_operand_is_a_typed_error() {
    for dtype in [DType::I32, DType::F64, DType::F16] {
        let a = placeholder([4], dtype, "A").unwrap();
        for (name, f, ..) in FUNCTIONS.iter().filter(|(name, ..)| *name != "sqrt") {
            let err = compute([4], |i| f(&a.at([&i[0]])), "B").expect_err(name);
            let TeError::DTypeMismatch { lhs, .. } = err else { panic!("{name} of {dtype}: {err}") };
            assert_eq!(lhs, dtype, "{name}: {err}");
        }
    }
    let a = placeholder([4], DType::I32, "A").unwrap();
    let err = compute([4], |i| math::sqrt(a.at([&i[0]])), "B").unwrap_err();
    assert!(matches!(err, TeError::UndefinedOperator { .. }), "{err}");
}

/// `B[i] = f(A[i])` for any element types, in the interpreter and the JIT (scalar and vectorized
/// by 8), compared bit for bit (any NaN equals any NaN).
fn agree(what: &str, input: &Array, out: DType, f: impl Fn(Expr) -> Expr) {
    let n = input.shape()[0];
    let a = placeholder([n], input.dtype(), "A").unwrap();
    let b = compute([n], |i| f(a.at([&i[0]])), "B").unwrap();
    let want = ir::interp::eval_te(&[&b], &[(&a, input)]).unwrap().remove(0);
    assert_eq!(want.dtype(), out, "{what}");
    for vectorized in [false, true] {
        let mut s = create_schedule(&[&b]);
        if vectorized {
            let (_, inner) = s.split(&b, &b.axes()[0], 8).unwrap();
            s.vectorize(&b, &inner).unwrap();
        }
        let kernel = build(&s, &[&a, &b], "f", &CompileOptions::default()).unwrap();
        let mut ta = RtTensor::from_array(input);
        let mut tb = RtTensor::zeros(out, &[n]).unwrap();
        kernel.compiled.call(&mut [&mut ta, &mut tb]).unwrap();
        let got = tb.to_array();
        assert!(got.bits_eq(&want), "{what} (vectorized: {vectorized}): {:?}", got.first_difference(&want));
    }
}

/// The two IR nodes the math functions are built from, on every type they accept.
#[test]
fn reinterpret_and_sqrt_agree_on_every_type() {
    let bits: Vec<i64> = specials().iter().map(|x| x.to_bits() as i64).collect();
    let n = bits.len() as i64;
    let i32s = Array::from_i64(DType::I32, &[n], &bits);
    agree("i32 as f32", &i32s, DType::F32, |x| x.reinterpret(DType::F32));
    agree("i32 as u32", &i32s, DType::U32, |x| x.reinterpret(DType::U32));
    // Signalling NaNs may come back quiet through a float (`ExprKind::Reinterpret`): quiet them.
    let quiet: Vec<i64> =
        bits.iter().map(|&b| if f32::from_bits(b as u32).is_nan() { b | 0x0040_0000 } else { b }).collect();
    let quiet = Array::from_i64(DType::I32, &[n], &quiet);
    agree("f32 round trip", &quiet, DType::I32, |x| x.reinterpret(DType::F32).reinterpret(DType::I32));
    let f64s = Array::from_f64(DType::F64, &[n], &specials().iter().map(|&v| v as f64 * 1.5e200).collect::<Vec<_>>());
    agree("f64 as i64", &f64s, DType::I64, |x| x.reinterpret(DType::I64));
    agree("f64 sqrt", &f64s, DType::F64, |x| x.sqrt());
    let u16s = Array::from_i64(DType::U16, &[n], &bits.iter().map(|b| b & 0xffff).collect::<Vec<_>>());
    agree("u16 as f16 and back", &u16s, DType::U16, |x| x.reinterpret(DType::F16).sqrt().reinterpret(DType::U16));
    agree("u16 as bf16", &u16s, DType::BF16, |x| x.reinterpret(DType::BF16));
    let f32s = Array::from_f64(DType::F32, &[n], &specials().iter().map(|&v| v as f64).collect::<Vec<_>>());
    agree("f32 sqrt", &f32s, DType::F32, |x| x.sqrt());
    // Exact values and the printed form: the bits of 1.0f32 and of the correctly rounded √2.
    let p = placeholder([2], DType::F32, "P").unwrap();
    let q = compute([2], |i| p.at([&i[0]]).sqrt().reinterpret(DType::I32), "Q").unwrap();
    let input = Array::from_f64(DType::F32, &[2], &[1.0, 2.0]);
    let r = ir::interp::eval_te(&[&q], &[(&p, &input)]).unwrap().remove(0);
    assert_eq!(r.to_f64_vec(), [1.0f32.to_bits() as f64, std::f32::consts::SQRT_2.to_bits() as f64]);
    assert_eq!(q.body().unwrap().to_string(), "reinterpret_i32(sqrt(P[i]))");
}

/// Vectorized, every function is straight SIMD code: no lane is extracted or inserted and no
/// host function is called (so a kernel using them links standalone, with no runtime helpers).
#[test]
fn vectorized_functions_are_pure_simd_without_host_calls() {
    for (name, f, ..) in FUNCTIONS {
        let (a, b) = elementwise(f, 64);
        let mut s = create_schedule(&[&b]);
        let (_, inner) = s.split(&b, &b.axes()[0], 8).unwrap();
        s.vectorize(&b, &inner).unwrap();
        let kernel = build(&s, &[&a, &b], "f", &CompileOptions::default()).unwrap();
        let clif = kernel.compiled.clif_text();
        for op in ["extractlane", "insertlane", "call "] {
            assert!(!clif.contains(op), "{name}: `{op}` in\n{clif}");
        }
    }
}
