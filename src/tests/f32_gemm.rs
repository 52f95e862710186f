//! The exact f32 GEMM kernels (`IntrinKind::F32Gemm`) through the whole pipeline (schedule →
//! `tensorize` → JIT) against the reference interpreter, which runs each call's declaration:
//! bit for bit (any NaN for a NaN) on data with NaN, infinities, denormals and -0.0 whose sums
//! depend on their order, for resetting and updating calls, partial column vectors, row tails,
//! k not a multiple of the unrolling, and B read in place (row stride N) or packed in panels.

use iced_x86::Mnemonic;
use ir::DType;
use ir::interp::{Array, run_func};
use ir::schedule::create_schedule;
use ir::te::{compute, placeholder, reduce_axis, sum};
use schedules::intrin::f32_gemm_microkernel;

use crate::bench::Lcg;
use crate::disasm::decode;
use crate::isa::IsaLevel;
use crate::runtime::{CompileOptions, Tensor, compile};
use crate::target::Target;
use crate::tests::skip;

/// `len` f32 values: one in eight special (NaN, ±inf, ±0, denormals, extremes), the others of
/// either sign with exponents spread over 2^-80..2^40, so that products underflow to denormals,
/// overflow, and sums of one element depend on their order.
fn values(len: i64, rng: &mut Lcg) -> Vec<f64> {
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        f32::from_bits(1),
        f32::from_bits(0x8000_0001),
        f32::from_bits(0x007f_ffff),
        f32::MIN_POSITIVE,
        f32::MAX,
        -f32::MAX,
        1.0,
        -1.0,
    ];
    (0..len)
        .map(|_| {
            let r = u64::from(rng.next_u32()) << 31 | u64::from(rng.next_u32());
            let x = if r % 8 == 0 {
                specials[(r >> 8) as usize % specials.len()]
            } else {
                let mantissa = 1.0 + ((r >> 8) % (1 << 23)) as f32 / (1 << 23) as f32;
                let exponent = ((r >> 31) % 121) as i32 - 80;
                let sign = if (r >> 50) % 2 == 0 { 1.0 } else { -1.0 };
                sign * mantissa * 2f32.powi(exponent)
            };
            f64::from(x)
        })
        .collect()
}

/// One tensorized matmul `C[m, n] = Σ_k A[m, k] · B[k, n]` in f32: tiles of `mr × nr`, the
/// reduction either inside the call (a resetting call) or split by `kc` with the call inside
/// (updating calls); `B` read in place, so its row stride is `n`.
struct Case {
    m: i64,
    n: i64,
    k: i64,
    mr: i64,
    nr: i64,
    /// `Some(kc)`: the reduction split by `kc`, calls of `kc` updating C.
    kc: Option<i64>,
}

impl Case {
    fn func(&self) -> ir::Func {
        let Case { m, n, k, mr, nr, kc } = *self;
        let a = placeholder([m, k], DType::F32, "A").unwrap();
        let b = placeholder([k, n], DType::F32, "B").unwrap();
        let r = reduce_axis(k, "k").unwrap();
        let c =
            compute([m, n], |i| sum(DType::F32, &[&r], a.at([&i[0], &r.to_expr()]) * b.at([&r.to_expr(), &i[1]])), "C")
                .unwrap();
        let mut s = create_schedule(&[&c]);
        let (io, jo, ii, ji) = s.tile(&c, &c.axis(0), &c.axis(1), mr, nr).unwrap();
        let k_axis = c.reduce_axes()[0].clone();
        let intrin = match kc {
            None => {
                s.reorder(&c, &[&io, &jo, &k_axis, &ii, &ji]).unwrap();
                s.tensorize(&c, &k_axis, &f32_gemm_microkernel(mr, nr, k).unwrap())
            }
            Some(kc) => {
                let (ko, ki) = s.split(&c, &k_axis, kc).unwrap();
                s.reorder(&c, &[&io, &jo, &ko, &ki, &ii, &ji]).unwrap();
                s.tensorize(&c, &ki, &f32_gemm_microkernel(mr, nr, kc).unwrap())
            }
        };
        intrin.unwrap_or_else(|e| panic!("{:?}: {e}", (m, n, k, mr, nr, kc)));
        ir::lower::lower(&s, &[&a, &b, &c], "f32_gemm").unwrap()
    }
}

/// Runs `case` at `level` on random data, asserts C equals the interpreter's bit for bit, and
/// returns the origins and instructions of the hand-assembled kernels it called.
fn check(case: &Case, level: IsaLevel, seed: u64) -> (Vec<String>, Vec<Mnemonic>) {
    let func = case.func();
    let mut rng = Lcg::new(seed);
    let (m, n, k) = (case.m, case.n, case.k);
    let args = vec![
        Array::from_f64(DType::F32, &[m, k], &values(m * k, &mut rng)),
        Array::from_f64(DType::F32, &[k, n], &values(k * n, &mut rng)),
        Array::from_f64(DType::F32, &[m, n], &values(m * n, &mut rng)),
    ];
    let mut want = args.clone();
    run_func(&func, &mut want).unwrap();
    let options = CompileOptions { target: Target::Level(level), ..CompileOptions::default() };
    let f = compile(&func, &options).unwrap_or_else(|e| panic!("{level}: {e}"));
    let mut tensors: Vec<Tensor> = args.iter().map(Tensor::from_array).collect();
    let mut refs: Vec<&mut Tensor> = tensors.iter_mut().collect();
    f.call(&mut refs).unwrap();
    let got = tensors[2].to_array();
    assert!(
        got.bits_eq(&want[2]),
        "{level} {:?}: first difference {:?}",
        (m, n, k, case.mr, case.nr, case.kc),
        got.first_difference(&want[2])
    );
    let kernels: Vec<_> = f.machine_code().iter().filter(|c| c.origin != "cranelift").collect();
    let origins: Vec<String> = kernels.iter().map(|c| c.origin.clone()).collect();
    assert!(level == IsaLevel::Scalar || !origins.is_empty(), "{level}: no kernel called");
    let mnemonics = kernels.iter().flat_map(|c| decode(&c.bytes, c.address)).map(|i| i.mnemonic()).collect();
    (origins, mnemonics)
}

/// Tiles with partial column vectors (20 = 16 + 4 lanes, 12 = 8 + 4), row tails of the
/// register blocks (7 rows, 13), k a multiple of the unrolling or not, one k step, updating
/// calls over a split reduction, and a matrix with a tail tile run by the fallback.
const CASES: [Case; 6] = [
    Case { m: 14, n: 40, k: 13, mr: 7, nr: 20, kc: None },
    Case { m: 12, n: 128, k: 32, mr: 12, nr: 64, kc: None },
    Case { m: 13, n: 24, k: 1, mr: 13, nr: 12, kc: None },
    Case { m: 8, n: 64, k: 30, mr: 8, nr: 32, kc: Some(6) },
    Case { m: 6, n: 16, k: 9, mr: 6, nr: 16, kc: Some(3) },
    Case { m: 10, n: 48, k: 17, mr: 4, nr: 16, kc: None },
];

/// Every case at `level`; the kernels' origins and instructions.
fn check_level(level: IsaLevel) -> (Vec<String>, Vec<Mnemonic>) {
    let (mut origins, mut mnemonics) = (Vec::new(), Vec::new());
    for (i, case) in CASES.iter().enumerate() {
        let (o, m) = check(case, level, 17 + i as u64);
        origins.extend(o);
        mnemonics.extend(m);
    }
    (origins, mnemonics)
}

/// No fused multiply-add: the declaration rounds each product.
fn assert_unfused(mnemonics: &[Mnemonic]) {
    assert!(mnemonics.contains(&Mnemonic::Vmulps) && mnemonics.contains(&Mnemonic::Vaddps));
    let fused = mnemonics.iter().find(|m| format!("{m:?}").starts_with("Vfm") || format!("{m:?}").starts_with("Vfnm"));
    assert!(fused.is_none(), "{fused:?}");
}

#[test]
fn scalar_level_runs_f32_gemm_calls_by_their_fallback() {
    assert!(check_level(IsaLevel::Scalar).0.is_empty(), "no f32 kernels below AVX2");
}

#[test]
fn avx2_level_runs_f32_gemm_calls_with_exact_ymm_kernels() {
    if !skip::has_level(IsaLevel::Avx2, "") {
        return;
    }
    let (origins, mnemonics) = check_level(IsaLevel::Avx2);
    assert!(!origins.is_empty() && origins.iter().all(|o| o.starts_with("f32-ymm kernel")), "{origins:?}");
    assert_unfused(&mnemonics);
}

#[test]
fn avx512_level_runs_f32_gemm_calls_with_exact_zmm_kernels() {
    if !skip::has_level(IsaLevel::Avx512Vnni, "") {
        return;
    }
    let (origins, mnemonics) = check_level(IsaLevel::Avx512Vnni);
    assert!(!origins.is_empty() && origins.iter().all(|o| o.starts_with("f32-zmm kernel")), "{origins:?}");
    assert_unfused(&mnemonics);
}

/// The test data tells the declared order from the others: on a case's data, summing each
/// element's products in descending k, or fusing each multiply-add, changes some results (so a
/// kernel doing either would fail the checks above).
#[test]
fn the_test_data_distinguishes_summation_orders_and_fusion() {
    let (m, n, k) = (14usize, 40usize, 13usize);
    let mut rng = Lcg::new(17);
    let a: Vec<f32> = values((m * k) as i64, &mut rng).into_iter().map(|v| v as f32).collect();
    let b: Vec<f32> = values((k * n) as i64, &mut rng).into_iter().map(|v| v as f32).collect();
    let (mut reordered, mut fused) = (0, 0);
    for i in 0..m {
        for j in 0..n {
            let p = |kk: usize| a[i * k + kk] * b[kk * n + j];
            let declared = (0..k).fold(0.0f32, |acc, kk| acc + p(kk));
            let descending = (0..k).rev().fold(0.0f32, |acc, kk| acc + p(kk));
            let fma = (0..k).fold(0.0f32, |acc, kk| a[i * k + kk].mul_add(b[kk * n + j], acc));
            let differs = |x: f32| x.to_bits() != declared.to_bits() && !(x.is_nan() && declared.is_nan());
            reordered += usize::from(differs(descending));
            fused += usize::from(differs(fma));
        }
    }
    assert!(reordered > 0 && fused > 0, "reordered {reordered}, fused {fused} of {} elements", m * n);
}
