//! `Map` calls through the whole pipeline (schedule → `tensorize` → JIT): at every level this CPU
//! has, the kernel compiled from the declaration is used where one exists, and the result equals
//! the interpreter bit for bit on values at every edge of the operations (NaN, ±∞, ±0,
//! subnormals, halves, the saturation bounds, i32 extremes).

use ir::expr::select;
use ir::interp::Array;
use ir::intrin::{IntrinKind, decl_tensor_intrin};
use ir::schedule::create_schedule;
use ir::te::{Tensor as TeTensor, compute};
use ir::{DType, Expr};

use super::{check_with, float_samples, int_samples, skip};
use crate::isa::IsaLevel;
use crate::runtime::{CompileOptions, CompiledFunc};
use crate::target::Target;

/// Builds a map's body from its inputs' reads.
type Body = std::rc::Rc<dyn Fn(&[Expr]) -> Expr>;

/// How a map reads an input.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Form {
    /// `[m, n]` at `[p, c]` (the stage's input is `[m, n + 3]`, so that rows are not dense).
    Element,
    /// `[n]` at `[c]`.
    Column,
    /// `[m]` at `[p]`.
    Row,
}
use Form::{Column as C, Element as E, Row as R};

/// An `[m, n]` map over inputs of the given dtypes and forms, in order.
struct MapCase {
    name: &'static str,
    inputs: Vec<(DType, Form)>,
    body: Body,
}

fn f32c(v: f32) -> Expr {
    Expr::float(DType::F32, v as f64)
}

/// The reads of `tensors` at `[p, c]`, `[c]` or `[p]` by their forms.
fn reads(tensors: &[TeTensor], forms: &[Form], i: &[Expr]) -> Vec<Expr> {
    let read = |(t, form): (&TeTensor, &Form)| match form {
        Form::Element => t.at([&i[0], &i[1]]),
        Form::Column => t.at([&i[1]]),
        Form::Row => t.at([&i[0]]),
    };
    tensors.iter().zip(forms).map(read).collect()
}

impl MapCase {
    /// The lowered function of the stage tensorized with the declaration of the same body.
    fn func(&self, m: i64, n: i64) -> ir::Func {
        let rows: Vec<Form> = self.inputs.iter().map(|&(_, r)| r).collect();
        let tensors = |prefix: &str, extra: i64| -> Vec<TeTensor> {
            let shape = |form| match form {
                Form::Element => vec![m, n + extra],
                Form::Column => vec![n],
                Form::Row => vec![m],
            };
            let placeholder = |(k, &(d, form)): (usize, &(DType, Form))| {
                ir::te::placeholder_vec(shape(form), d, &format!("{prefix}{k}")).unwrap()
            };
            self.inputs.iter().enumerate().map(placeholder).collect()
        };
        let (stage_inputs, decl_inputs) = (tensors("in", 3), tensors("x", 0));
        let body = &self.body;
        let stage = compute([m, n], |i| body(&reads(&stage_inputs, &rows, i)), "out").unwrap();
        let decl = compute([m, n], |i| body(&reads(&decl_inputs, &rows, i)), "y").unwrap();
        let refs: Vec<&TeTensor> = decl_inputs.iter().collect();
        let intrin = decl_tensor_intrin(self.name, IntrinKind::Map { m, n }, &decl, &refs).unwrap();
        let mut s = create_schedule(&[&stage]);
        s.tensorize(&stage, &stage.axis(0), &intrin).unwrap();
        let mut args: Vec<&TeTensor> = stage_inputs.iter().collect();
        args.push(&stage);
        ir::lower::lower(&s, &args, self.name).unwrap()
    }

    fn args(&self, func: &ir::Func) -> Vec<Array> {
        let floats = float_samples();
        let mut extra: Vec<f64> = vec![127.5, 128.5, 255.5, 256.0, -128.5, -129.0, 1e-40, 2.5e-3, 0.49999997];
        extra.extend(floats);
        func.params
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let len: i64 = p.shape().iter().product();
                let d = p.dtype();
                if d.is_float() {
                    let v: Vec<f64> = (0..len)
                        .map(|i| {
                            if i % 3 == 0 {
                                extra[(i as usize / 3 + k) % extra.len()]
                            } else {
                                ((i * 37 + k as i64 * 11) % 997) as f64 * 0.731 - 300.0
                            }
                        })
                        .collect();
                    Array::from_f64(d, p.shape(), &v)
                } else {
                    let ints = int_samples(d.scalar);
                    let v: Vec<i64> = (0..len)
                        .map(|i| {
                            if i % 3 == 0 {
                                ints[(i as usize / 3 + k) % ints.len()]
                            } else {
                                (i * 7919 + k as i64 * 104_729) % 20_011 - 10_000
                            }
                        })
                        .collect();
                    Array::from_i64(d, p.shape(), &v)
                }
            })
            .collect()
    }

    /// Compiles and checks at `level`; returns whether a map kernel ran.
    fn check(&self, m: i64, n: i64, level: IsaLevel) -> bool {
        let func = self.func(m, n);
        let args = self.args(&func);
        self.check_args(&func, &args, level)
    }

    fn check_args(&self, func: &ir::Func, args: &[Array], level: IsaLevel) -> bool {
        let options = CompileOptions { target: Target::Level(level), ..CompileOptions::default() };
        let f: CompiledFunc = check_with(func, args, &options);
        f.machine_code().iter().any(|c| c.origin.contains("map kernel"))
    }
}

fn cases() -> Vec<MapCase> {
    let (i32, f32) = (DType::I32, DType::F32);
    vec![
        // A layer's requantization: `sat_u8(round((f32(acc - comp) · M + bias) / s + 128))`.
        MapCase {
            name: "requantize_u8",
            inputs: vec![(i32, E), (i32, C), (f32, C), (f32, C)],
            body: std::rc::Rc::new(|x: &[Expr]| {
                let real = (&x[0] - &x[1]).cast(DType::F32) * x[2].clone() + x[3].clone();
                (real / f32c(0.273_553_1) + f32c(128.0)).round().saturating_cast(DType::U8)
            }),
        },
        // Relu (`x > 0 ? x : +0`), an i8 destination through `Cast`, a negative zero point.
        MapCase {
            name: "relu_i8",
            inputs: vec![(f32, E), (f32, C)],
            body: std::rc::Rc::new(|x: &[Expr]| {
                let v = x[0].clone() * x[1].clone();
                let relu = select(f32c(0.0).lt(&v), v, f32c(0.0));
                (relu / f32c(0.05) + f32c(-3.0)).round().cast(DType::I8)
            }),
        },
        // A u8 and an i8 input widened on load, an f32 result.
        MapCase {
            name: "sum_f32",
            inputs: vec![(DType::U8, E), (DType::I8, C), (f32, C)],
            body: std::rc::Rc::new(|x: &[Expr]| {
                x[0].cast(DType::F32) * x[2].clone() + x[1].cast(DType::F32) - f32c(1.5)
            }),
        },
        // A fused multiply-add, rounded once (edge values: NaN, ±∞, ±0, subnormals).
        MapCase {
            name: "fma_f32",
            inputs: vec![(f32, E), (f32, C), (f32, E)],
            body: std::rc::Rc::new(|x: &[Expr]| x[0].fma(&x[1], &x[2])),
        },
        // A requantization followed by onnxruntime's QLinearAdd with a u8 row (the fused
        // residual add, `schedules::quant`): two FMAs, clamps, an i8 destination.
        MapCase {
            name: "qlinear_add_i8",
            inputs: vec![(i32, E), (i32, C), (f32, C), (DType::U8, E)],
            body: std::rc::Rc::new(|x: &[Expr]| {
                let q = ((&x[0] - &x[1]).cast(DType::F32) * x[2].clone()).round() + f32c(3.0);
                let q = select(f32c(3.0).lt(&q), q, f32c(3.0));
                let q = select(q.clone().lt(f32c(255.0)), q, f32c(255.0));
                let r = x[3].cast(DType::F32);
                let c = r.fma(&f32c(0.731), &q.fma(&f32c(1.37), &f32c(-101.3)));
                let c = select(f32c(-128.0).lt(&c), c, f32c(-128.0));
                let c = select(c.lt(f32c(120.0)), c, f32c(120.0));
                c.round().saturating_cast(DType::I8)
            }),
        },
        // Clamps: `a < b ? b : a` (`vmaxps`) and `a < b ? a : b` (`vminps`), also written with
        // `>`, on NaN, equal values and zeros of either sign; and a select that is neither.
        MapCase {
            name: "min_max_f32",
            inputs: vec![(f32, E), (f32, C), (f32, E)],
            body: std::rc::Rc::new(|x: &[Expr]| {
                let (a, b, c) = (&x[0], &x[1], &x[2]);
                let max = select(a.lt(b), b.clone(), a.clone());
                let min = select(max.lt(c), max.clone(), c.clone());
                let max_gt = select(min.gt(a), min.clone(), a.clone());
                let min_gt = select(max_gt.gt(b), b.clone(), max_gt.clone());
                let neither = select(min_gt.lt(c), c.clone(), b.clone());
                neither + min_gt
            }),
        },
        // Wrapping i32 arithmetic and every comparison of a select.
        MapCase {
            name: "int_select",
            inputs: vec![(i32, E), (i32, C), (f32, E), (f32, C)],
            body: std::rc::Rc::new(|x: &[Expr]| {
                let v = &x[0] * Expr::int(DType::I32, 3) - x[1].clone() + Expr::int(DType::I32, 7);
                let (a, b) = (&x[2], &x[3]);
                let pick = |c: Expr, t: Expr, f: Expr| select(c, t, f);
                let ge = pick(a.ge(b), v.clone(), x[1].clone());
                let ne = pick(a.ne(b), ge, x[0].clone());
                pick(a.gt(b), ne.clone(), pick(a.le(b), ne, Expr::int(DType::I32, -5)))
            }),
        },
    ]
}

#[test]
fn map_kernels_equal_the_interpreter_at_every_level() {
    for case in cases() {
        for level in skip::levels_here(IsaLevel::ALL) {
            // 40 columns fill ymm and zmm vectors up to a zmm tail of 8; 37 and 139 leave a
            // partial vector: zmm kernels mask it, ymm ones store the last 8 columns again
            // (overlapping). Fewer than 8 leave a ymm call to its loop nest. 136 make groups of
            // four vectors (a narrowing store's packs) and single ones after them.
            for (m, n) in [(3, 40), (2, 37), (1, 16), (2, 136), (2, 139), (2, 5)] {
                let ran = case.check(m, n, level);
                if ran && !["int_select", "sum_f32", "fma_f32", "min_max_f32"].contains(&case.name) {
                    let lanes = if level.has_avx512() { 16 } else { 8 };
                    let code = crate::disasm::disassemble(compile_at(&case.func(m, n), level).machine_code());
                    let grouped = code.contains("vpermd");
                    assert_eq!(grouped, n >= 4 * lanes, "{} {m}x{n} at {level}\n{code}", case.name);
                }
                if ran && case.name == "min_max_f32" {
                    let code = crate::disasm::disassemble(compile_at(&case.func(m, n), level).machine_code());
                    assert!(code.contains("vmaxps") && code.contains("vminps"), "{m}x{n} at {level}\n{code}");
                }
                let expected = match level {
                    IsaLevel::Avx512Vnni | IsaLevel::Amx => true,
                    IsaLevel::AvxVnni | IsaLevel::Avx2 => n >= 8,
                    IsaLevel::Scalar => false,
                };
                assert_eq!(ran, expected, "{} {m}x{n} at {level}", case.name);
            }
        }
    }
}

#[test]
fn bodies_without_a_vector_form_run_the_loop_nest() {
    // `min` of floats returns the non-NaN operand, which `vminps` does not: no kernel.
    let case = MapCase {
        name: "float_min",
        inputs: vec![(DType::F32, E), (DType::F32, C)],
        body: std::rc::Rc::new(|x: &[Expr]| ir::expr::min(x[0].clone(), x[1].clone())),
    };
    for level in skip::levels_here(IsaLevel::ALL) {
        assert!(!case.check(2, 32, level), "{level}");
    }
}

/// `round(max(x · y, k))`, then `min(·, 300)` where `upper`, stored as u8: the body's own
/// clamp proves the value at or above 0 where `k ≥ 0`.
fn clamped_below(name: &'static str, k: f32, upper: bool) -> MapCase {
    MapCase {
        name,
        inputs: vec![(DType::F32, E), (DType::F32, C)],
        body: std::rc::Rc::new(move |x: &[Expr]| {
            let v = x[0].clone() * x[1].clone();
            let v = select(f32c(k).lt(&v), v, f32c(k));
            let v = if upper { select(v.lt(f32c(300.0)), v, f32c(300.0)) } else { v };
            v.round().saturating_cast(DType::U8)
        }),
    }
}

#[test]
fn u8_stores_leave_out_the_clamp_their_body_proves() {
    for (m, n) in [(3, 40), (2, 37), (1, 16)] {
        for level in skip::levels_here(IsaLevel::ALL) {
            // Every vector's `vmaxps`: the body's `max`, and the store's clamp from below
            // unless the body's bound is at or above 0 (zmm; ymm packs clamp from above).
            let mut maxes = Vec::new();
            for (name, k, upper) in [
                ("bound_0", 0.0, false),
                ("bound_3_min", 3.0, true),
                ("bound_neg", -5.0, false),
                ("bound_neg_half", -0.5, true),
            ] {
                let case = clamped_below(name, k, upper);
                let ran = case.check(m, n, level);
                if !ran {
                    continue;
                }
                let code = crate::disasm::disassemble(compile_at(&case.func(m, n), level).machine_code());
                maxes.push((name, code.matches("vmaxps").count()));
            }
            if level.has_avx512() {
                let [(_, zero), (_, three), (_, negative), (_, negative_half)] = maxes[..] else {
                    panic!("{m}x{n} at {level}: {maxes:?}");
                };
                assert!(zero == three && negative == negative_half && negative > zero, "{m}x{n} at {level}: {maxes:?}");
            }
        }
    }
}

/// `round(x / s + zp)` stored as `dst` over one `[1, n]` row of f32 `x`.
fn scaled_rounding(s: f32, zp: Option<f32>, dst: DType) -> MapCase {
    MapCase {
        name: "scaled_rounding",
        inputs: vec![(DType::F32, E)],
        body: std::rc::Rc::new(move |x: &[Expr]| {
            let q = x[0].clone() / f32c(s);
            let shifted = match zp {
                Some(zp) => q + f32c(zp),
                None => q,
            };
            shifted.round().saturating_cast(dst)
        }),
    }
}

/// Every `x` whose quotient `x / s + zp` lies at or next to a half-integer or an integer of
/// `[-200, 400)`: the f32 nearest to it and its neighbours up to 3 ulps away.
fn values_next_to_ties(s: f32, zp: f32) -> Vec<f64> {
    let mut out = Vec::new();
    for k in -400..800 {
        let target = f64::from(k) / 2.0;
        let x = ((target - f64::from(zp)) * f64::from(s)) as f32;
        for d in -3i32..=3 {
            out.push(f64::from(f32::from_bits(x.to_bits().wrapping_add_signed(d))));
        }
    }
    out.extend([0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e-40, 3e38, -3e38, 1e30]);
    // Whole vectors at every width: ymm kernels need them.
    out.resize(out.len().next_multiple_of(16), 1.0);
    out
}

#[test]
fn requantization_by_the_reciprocal_is_exact_next_to_every_tie() {
    let levels: Vec<IsaLevel> = skip::levels_here([IsaLevel::Avx512Vnni, IsaLevel::Avx2]);
    // Scales with inexact reciprocals (0.2735531 is R4's), a power of two (an exact one, so
    // `t` is the body's value and ties are real), zero points of both signs and none.
    for (s, zp) in [
        (0.273_553_1, Some(128.0)),
        (0.1, Some(-3.0)),
        (0.5, Some(0.0)),
        (3.0, None),
        (1e-3, Some(100.0)),
        (7.77, Some(-128.0)),
    ] {
        for dst in [DType::U8, DType::I8] {
            let case = scaled_rounding(s, zp, dst);
            let x = values_next_to_ties(s, zp.unwrap_or(0.0));
            let n = x.len() as i64;
            let func = case.func(1, n);
            let args = vec![
                Array::from_f64(DType::F32, &[1, n + 3], &x.iter().copied().chain([0.0; 3]).collect::<Vec<_>>()),
                Array::zeros(dst, &[1, n]),
            ];
            for &level in &levels {
                assert!(case.check_args(&func, &args, level), "{s} {zp:?} {dst} at {level}: no map kernel");
                let code = crate::disasm::disassemble(compile_at(&func, level).machine_code());
                assert!(code.contains("vfmadd213ps") && code.contains("vdivps"), "{s}: no reciprocal path\n{code}");
                // zmm groups of four vectors take one check (`vrangeps`), the rest one each.
                let checks = (code.contains("vrangeps"), code.contains("vandps"));
                assert_eq!(checks, (level.has_avx512(), true), "{s} at {level}\n{code}");
            }
        }
    }
}

fn compile_at(func: &ir::Func, level: IsaLevel) -> CompiledFunc {
    crate::runtime::compile(func, &CompileOptions { target: Target::Level(level), ..CompileOptions::default() })
        .unwrap()
}

#[test]
fn copies_of_short_rows_move_them_whole_at_every_level() {
    // Row lengths around each move the copy kernel picks: 8-byte and 16-byte pairs, a ymm
    // pair (zmm rows shorter than a vector), a whole vector and one past it; the stage's rows
    // are 3 bytes longer than the block's, so the kernel steps by the strides.
    let case =
        MapCase { name: "copy", inputs: vec![(DType::U8, E)], body: std::rc::Rc::new(|x: &[Expr]| x[0].clone()) };
    for level in skip::levels_here(IsaLevel::ALL) {
        for n in [8, 13, 16, 21, 24, 31, 32, 45, 63, 64, 70] {
            let ran = case.check(3, n, level);
            assert_eq!(ran, level != IsaLevel::Scalar, "copy 3x{n} at {level}");
            if ran && level.has_avx512() {
                // Shorter than a zmm vector: unmasked overlapping moves; else the masked tail.
                let code = crate::disasm::disassemble(compile_at(&case.func(3, n), level).machine_code());
                assert_eq!(code.contains("k2"), n > 64 && n % 64 != 0, "copy 3x{n} at {level}\n{code}");
            }
        }
    }
}

/// f32 values at every edge of the math functions' expansions, both signs: ±0, ±∞, NaN,
/// subnormals, `exp`'s overflow (88.72284), its subnormal (-87.34) and zero (-103.97) results
/// and its clamps (89, -104), the break points of `tanh` (0.625) and `erf` (1, 3.92), values
/// past `i32`'s range (`2^31`), huge ones; each with its neighbours up to 3 ulps away; then a
/// ramp over `[-120, 120]`. Padded to whole zmm vectors.
fn math_values() -> Vec<f64> {
    let points: [f32; 21] = [
        0.0,
        1.0,
        0.5,
        0.625,
        3.92,
        88.72283,
        88.72284,
        88.7,
        89.0,
        87.33655,
        103.97208,
        104.0,
        1e-40,
        f32::MIN_POSITIVE,
        1e-45,
        3e38,
        f32::MAX,
        2_147_483_648.0,
        1e10,
        0.346_573_6,
        std::f32::consts::LN_2,
    ];
    let mut out = vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY];
    for p in points {
        for v in [p, -p] {
            for d in -3i32..=3 {
                let near = f32::from_bits(v.to_bits().wrapping_add_signed(d));
                if !near.is_nan() {
                    out.push(f64::from(near));
                }
            }
        }
    }
    out.extend((0..650).map(|k| f64::from(k) * 0.37 - 120.0));
    out.resize(out.len().next_multiple_of(16), 0.25);
    out
}

/// Arguments of `func` over `values`: element inputs take them in order from an offset per
/// input, per-row inputs the row maxima a softmax would subtract (and NaN, ±∞, 0).
fn math_args(func: &ir::Func, values: &[f64]) -> Vec<Array> {
    let per_row = [1.5, -3.0, 88.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -100.0];
    func.params
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let len: i64 = p.shape().iter().product();
            let source: &[f64] = if p.shape().len() == 1 && k + 1 < func.params.len() { &per_row } else { values };
            let v: Vec<f64> = (0..len as usize).map(|i| source[(i + 7 * k) % source.len()]).collect();
            Array::from_f64(p.dtype(), p.shape(), &v)
        })
        .collect()
}

type Function = fn(Expr) -> Expr;

#[test]
fn math_functions_run_as_map_kernels_equal_to_the_interpreter() {
    let values = math_values();
    let functions: [(&'static str, Function); 5] = [
        ("exp", |x| ir::math::exp(x)),
        ("log", |x| ir::math::log(x)),
        ("tanh", |x| ir::math::tanh(x)),
        ("sigmoid", |x| ir::math::sigmoid(x)),
        ("erf", |x| ir::math::erf(x)),
    ];
    let f32 = DType::F32;
    for (name, f) in functions {
        let mut cases =
            vec![MapCase { name, inputs: vec![(f32, E)], body: std::rc::Rc::new(move |x| f(x[0].clone())) }];
        if name == "exp" {
            // Softmax's two element-wise stages: `exp(x - max)` and the quotient by the sum,
            // per-row operands both.
            cases.push(MapCase {
                name: "exp_shifted",
                inputs: vec![(f32, E), (f32, R)],
                body: std::rc::Rc::new(|x: &[Expr]| ir::math::exp(&x[0] - &x[1])),
            });
            cases.push(MapCase {
                name: "quotient",
                inputs: vec![(f32, E), (f32, R)],
                body: std::rc::Rc::new(|x: &[Expr]| &x[0] / &x[1]),
            });
        }
        for case in cases {
            for level in skip::levels_here(IsaLevel::ALL) {
                let whole = values.len() as i64;
                for (m, n) in [(2, 37), (1, whole), (3, 40), (8, 139), (2, 5)] {
                    let func = case.func(m, n);
                    let ran = case.check_args(&func, &math_args(&func, &values), level);
                    let expected = level != IsaLevel::Scalar && (n >= 8 || level.has_avx512());
                    assert_eq!(ran, expected, "{} {m}x{n} at {level}", case.name);
                }
            }
        }
    }
}

#[test]
fn bit_casts_shifts_and_truncation_equal_the_interpreter() {
    // `Cast` of f32 to i32 (toward zero, saturated, NaN → 0), shifts by amounts taken modulo 32
    // (`>>` arithmetic), bitwise operations and bit casts both ways.
    let i = |v: i64| Expr::int(DType::I32, v);
    let case = MapCase {
        name: "bits",
        inputs: vec![(DType::F32, E), (DType::I32, C)],
        body: std::rc::Rc::new(move |x: &[Expr]| {
            let t = x[0].cast(DType::I32);
            let b = x[0].reinterpret(ir::ScalarType::I32);
            let shifted = (&b >> i(-1)) + (&t << i(35)) - (&x[1] >> i(3));
            let mixed = (shifted ^ (&t | i(0x100))) & (&x[1] | i(-0x8000));
            let back = (mixed.clone() & i(0x7f7f_ffff)).reinterpret(ir::ScalarType::F32);
            mixed + back.cast(DType::I32) + t
        }),
    };
    let mut values = math_values();
    values.retain(|v| !v.is_nan());
    values.extend([f64::NAN, -2_147_483_904.0, 2_147_483_520.0, -2_147_483_648.0]);
    for level in skip::levels_here(IsaLevel::ALL) {
        for (m, n) in [(1, values.len() as i64), (3, 40), (2, 37)] {
            let func = case.func(m, n);
            let mut args = math_args(&func, &values);
            let ints: Vec<i64> = (0..n)
                .map(|k| [i64::from(i32::MIN), -1, 0, 1, i64::from(i32::MAX), k * 977 - 5000][k as usize % 6])
                .collect();
            args[1] = Array::from_i64(DType::I32, &[n], &ints);
            let ran = case.check_args(&func, &args, level);
            assert_eq!(ran, level != IsaLevel::Scalar, "bits {m}x{n} at {level}");
        }
    }
}

#[test]
fn whole_vectors_run_two_at_a_time_and_equal_the_interpreter() {
    // A polynomial with comparisons (an opmask each at zmm, the second vector's renamed) over
    // rows of one to four whole vectors and a partial one: pairs, an odd vector, the tail.
    let case = MapCase {
        name: "exp_shifted",
        inputs: vec![(DType::F32, E), (DType::F32, R)],
        body: std::rc::Rc::new(|x: &[Expr]| ir::math::exp(&x[0] - &x[1])),
    };
    let values = math_values();
    for level in skip::levels_here([IsaLevel::Avx512Vnni, IsaLevel::Avx2]) {
        for n in [16, 32, 48, 64, 71] {
            let func = case.func(3, n);
            assert!(case.check_args(&func, &math_args(&func, &values), level), "{level} 3x{n}");
        }
        if level.has_avx512() {
            // Both vectors' comparisons: each in its own opmask.
            let code = crate::disasm::disassemble(compile_at(&case.func(1, 64), level).machine_code());
            assert!(code.contains(",k3,") || code.contains(" k3,"), "{code}");
            assert!(code.contains(" k5,"), "{code}");
        }
    }
}
