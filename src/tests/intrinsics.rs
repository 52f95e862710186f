//! Tensor-intrinsic calls through the whole pipeline (schedule → `tensorize` → JIT): at every
//! ISA level the result equals the reference interpreter (which runs each call's declaration),
//! the kernel chosen is the one the level and value ranges allow, and forcing a level this
//! CPU lacks is a typed error.

use cranelift_codegen::isa;
use cranelift_codegen::settings::{self, Configurable};
use iced_x86::{EncodingKind, Mnemonic, OpKind, Register};
use ir::DType;
use ir::interp::{Array, run_func};
use ir::schedule::create_schedule;
use ir::te::{Tensor as TeTensor, compute, placeholder, placeholder_in_range, reduce_axis, sum};
use schedules::intrin::int8_gemm_microkernel;
use schedules::nn::{matmul_packed, pack_b_vnni};
use schedules::x86::{GemmInt8Knobs, gemm_int8};

use crate::bench::pattern_value;
use crate::codegen::jit;
use crate::disasm::{MachineCode, decode};
use crate::error::{CompileError, RuntimeError};
use crate::isa::IsaLevel;
use crate::runtime::{CompileOptions, CompiledFunc, Tensor, compile};
use crate::target::Target;
use crate::tests::skip;

const GRID_A: [i64; 6] = [0, 1, 127, 128, 254, 255];
const GRID_B: [i64; 6] = [-128, -127, -1, 0, 1, 127];

/// `len` values in `lo..=hi`: boundary values (those of `grid` inside the range) half the
/// time, the shared pattern (a hash of the position) otherwise.
fn values(len: i64, seed: i64, lo: i64, hi: i64, grid: &[i64]) -> Vec<i64> {
    let grid: Vec<i64> = grid.iter().copied().filter(|v| (lo..=hi).contains(v)).collect();
    (0..len)
        .map(|i| {
            let h = pattern_value(i, seed);
            if h % 2 == 0 && !grid.is_empty() {
                grid[(h as usize / 2) % grid.len()]
            } else {
                lo + h.rem_euclid(hi - lo + 1)
            }
        })
        .collect()
}

/// A tensorized GEMM: `A: u8[m, k]` (optionally range-restricted), `B: i8[k, n]` packed in the
/// function, `C = A·B` through `gemm_int8`, or through the saturating declaration.
struct Gemm {
    func: ir::Func,
    a: TeTensor,
    shape: (i64, i64, i64),
}

fn gemm(m: i64, n: i64, k: i64, knobs: GemmInt8Knobs, a_range: Option<(i64, i64)>, saturating: bool) -> Gemm {
    let a = match a_range {
        Some((lo, hi)) => placeholder_in_range([m, k], DType::U8, lo..=hi, "A").unwrap(),
        None => placeholder([m, k], DType::U8, "A").unwrap(),
    };
    let b = placeholder([k, n], DType::I8, "B").unwrap();
    let bp = pack_b_vnni(&b, knobs.nr, "Bp").unwrap();
    let c = if saturating {
        saturating_matmul_packed(&a, &bp, knobs.nr)
    } else {
        matmul_packed(&a, &bp, n, DType::I32, "C").unwrap()
    };
    let s = if saturating {
        let mut s = create_schedule(&[&c]);
        let (io, jo, ii, ji) = s.tile(&c, &c.axis(0), &c.axis(1), knobs.mr, knobs.nr).unwrap();
        let reduce = c.reduce_axes();
        s.reorder(&c, &[&io, &jo, &reduce[0], &reduce[1], &ii, &ji]).unwrap();
        s.vectorize(&c, &ji).unwrap();
        s.tensorize(&c, &reduce[0], &int8_gemm_microkernel(knobs.mr, knobs.nr, k, true).unwrap()).unwrap();
        s
    } else {
        gemm_int8(&c, knobs).unwrap()
    };
    let func = ir::lower::lower(&s, &[&a, &b, &c], "gemm").unwrap();
    Gemm { func, a, shape: (m, n, k) }
}

/// `C[i, j] = Σ_{ko, kp} sat_i16(A·Bp pair)`: the saturating `Int8Gemm` declaration over the
/// packed layout, the computation `vpmaddubsw` + `vpmaddwd` + `vpaddd` performs.
fn saturating_matmul_packed(a: &TeTensor, bp: &TeTensor, nr: i64) -> TeTensor {
    let (m, k) = (a.shape()[0], a.shape()[1]);
    let n = bp.shape()[0] * nr;
    let i32 = DType::I32;
    let ko = reduce_axis(k / 4, "ko").unwrap();
    let kp = reduce_axis(2, "kp").unwrap();
    compute(
        [m, n],
        |i| {
            let product = |ki: ir::Expr| {
                a.at([&i[0], &(&ko * 4 + ki.clone())]).cast(i32)
                    * bp.at([&(&i[1] / nr), &ko.to_expr(), &(&i[1] % nr), &ki]).cast(i32)
            };
            let pair = product(&kp * 2) + product(&kp * 2 + 1);
            sum(i32, &[&ko, &kp], pair.saturating_cast(DType::I16).cast(i32))
        },
        "C",
    )
    .unwrap()
}

impl Gemm {
    fn args(&self, seed: i64) -> Vec<Array> {
        let (m, n, k) = self.shape;
        let (lo, hi) = self.a.value_range().unwrap_or((0, 255));
        vec![
            Array::from_i64(DType::U8, &[m, k], &values(m * k, seed, lo, hi, &GRID_A)),
            Array::from_i64(DType::I8, &[k, n], &values(k * n, seed + 1, -128, 127, &GRID_B)),
            Array::from_i64(DType::I32, &[m, n], &values(m * n, seed + 2, -1000, 1000, &[])),
        ]
    }

    /// Compiles at `level`, runs on `args`, and asserts C equals the interpreter's.
    fn check(&self, level: IsaLevel, args: &[Array]) -> CompiledFunc {
        let mut want = args.to_vec();
        run_func(&self.func, &mut want).unwrap();
        let options = CompileOptions { target: Target::Level(level), ..CompileOptions::default() };
        let f = compile(&self.func, &options).unwrap_or_else(|e| panic!("{level}: {e}"));
        assert_eq!(f.isa_level(), level);
        let mut tensors: Vec<Tensor> = args.iter().map(Tensor::from_array).collect();
        let mut refs: Vec<&mut Tensor> = tensors.iter_mut().collect();
        f.call(&mut refs).unwrap();
        let got = tensors[2].to_array();
        assert!(got.bits_eq(&want[2]), "{level} {:?}: {:?}\n{}", self.shape, got.first_difference(&want[2]), self.func);
        f
    }
}

/// The hand-assembled kernels among a function's machine code.
fn kernels(code: &[MachineCode]) -> Vec<&MachineCode> {
    code.iter().filter(|c| c.origin != "cranelift").collect()
}

/// Shapes with and without a row tail (whose tile runs the fallback), one and several k steps.
const SHAPES: [(i64, i64, i64, i64, i64); 4] =
    [(16, 64, 32, 8, 32), (13, 64, 36, 4, 32), (6, 96, 8, 6, 48), (5, 16, 260, 5, 16)];

/// Runs every shape at `level` (exact declarations) and returns the kernels' machine code.
fn check_level(level: IsaLevel) -> Vec<MachineCode> {
    let mut out = Vec::new();
    for (s, &(m, n, k, mr, nr)) in SHAPES.iter().enumerate() {
        let g = gemm(m, n, k, GemmInt8Knobs { mr, nr, parallel: s % 2 == 0 }, None, false);
        let f = g.check(level, &g.args(s as i64));
        out.extend(kernels(f.machine_code()).into_iter().cloned());
    }
    out
}

/// Whether some instruction of `code` is `mnemonic` with a register operand of `class`.
fn uses(code: &[MachineCode], mnemonic: Mnemonic, class: fn(Register) -> bool, encoding: EncodingKind) -> bool {
    code.iter().flat_map(|c| decode(&c.bytes, c.address)).any(|i| {
        i.mnemonic() == mnemonic
            && i.encoding() == encoding
            && (0..i.op_count()).any(|o| i.op_kind(o) == OpKind::Register && class(i.op_register(o)))
    })
}

#[test]
fn scalar_level_runs_tensorized_gemm_by_its_fallback() {
    assert!(check_level(IsaLevel::Scalar).is_empty(), "no kernels below AVX2");
}

#[test]
fn avx2_level_runs_tensorized_gemm_with_exact_widening_kernels() {
    if !skip::has_level(IsaLevel::Avx2, "") {
        return;
    }
    let code = check_level(IsaLevel::Avx2);
    assert!(!code.is_empty() && code.iter().all(|c| c.origin.starts_with("avx2-widen kernel")));
    assert!(uses(&code, Mnemonic::Vpmaddwd, Register::is_ymm, EncodingKind::VEX));
    assert!(!uses(&code, Mnemonic::Vpmaddubsw, Register::is_ymm, EncodingKind::VEX), "exact: never saturating");
}

/// AVX-VNNI without AVX-512 exists (Alder Lake) and vice versa (this CI host may have either):
/// where the CPU lacks it, the level is a typed error and its code is checked without running.
#[test]
fn avx_vnni_level_runs_tensorized_gemm_with_vex_vpdpbusd_ymm_kernels() {
    let level = IsaLevel::AvxVnni;
    let code = if skip::has_level(level, "running the kernels; their code is checked") {
        check_level(level)
    } else {
        let g = gemm(13, 64, 36, GemmInt8Knobs { mr: 4, nr: 32, parallel: false }, None, false);
        let options = CompileOptions { target: Target::Level(level), ..CompileOptions::default() };
        let err = compile(&g.func, &options).map(|_| ()).unwrap_err();
        assert!(matches!(err, CompileError::UnsupportedTarget { requested: IsaLevel::AvxVnni, .. }), "{err}");
        assert!(err.to_string().starts_with("target avx-vnni is not supported by this CPU"), "{err}");
        let mut builder = isa::lookup(target_lexicon::Triple::host()).unwrap();
        for flag in crate::codegen::backend::cranelift_flags(level) {
            builder.enable(flag).unwrap();
        }
        let isa = builder.finish(settings::Flags::new(settings::builder())).unwrap();
        let (jit, translation) = jit::compile(&g.func, isa, level, |_| std::ptr::null()).unwrap();
        kernels(&jit.machine_code(&translation)).into_iter().cloned().collect()
    };
    assert!(!code.is_empty() && code.iter().all(|c| c.origin.starts_with("avx-vnni kernel")));
    assert!(uses(&code, Mnemonic::Vpdpbusd, Register::is_ymm, EncodingKind::VEX));
    let evex = code.iter().flat_map(|c| decode(&c.bytes, c.address)).any(|i| i.encoding() == EncodingKind::EVEX);
    assert!(!evex, "AVX-VNNI code must run without AVX-512");
}

#[test]
fn avx512_vnni_level_runs_tensorized_gemm_with_vpdpbusd_zmm_kernels() {
    if !skip::has_level(IsaLevel::Avx512Vnni, "") {
        return;
    }
    let code = check_level(IsaLevel::Avx512Vnni);
    assert!(!code.is_empty() && code.iter().all(|c| c.origin.starts_with("avx512-vnni kernel")));
    assert!(uses(&code, Mnemonic::Vpdpbusd, Register::is_zmm, EncodingKind::EVEX));
}

/// The kernel variant each supported level picks for `g`.
fn chosen(g: &Gemm, args: &[Array]) -> Vec<(IsaLevel, Vec<String>)> {
    skip::levels_here(IsaLevel::ALL)
        .into_iter()
        .map(|level| {
            let f = g.check(level, args);
            let names = kernels(f.machine_code())
                .iter()
                .map(|c| c.origin.split(' ').next().unwrap_or("").to_string())
                .collect();
            (level, names)
        })
        .collect()
}

/// oneDNN's pitfall: {255, 255, 0, 0}·{127, 127, 0, 0} is 64770, but 32767 for the saturating
/// declaration, and every level must give the declared one.
#[test]
fn saturating_declarations_saturate_and_exact_ones_do_not_at_every_level() {
    for saturating in [false, true] {
        let g = gemm(4, 32, 8, GemmInt8Knobs { mr: 4, nr: 32, parallel: false }, None, saturating);
        let mut args = g.args(9);
        args[0] = Array::from_i64(DType::U8, &[4, 8], &[[255, 255, 0, 0, 0, 0, 0, 0]; 4].concat());
        let mut b = vec![0; 8 * 32];
        b[0] = 127;
        b[32] = 127;
        args[1] = Array::from_i64(DType::I8, &[8, 32], &b);
        args[2] = Array::zeros(DType::I32, &[4, 32]);
        for (level, names) in chosen(&g, &args) {
            let expected_kernel = match (level, saturating) {
                (IsaLevel::Scalar, _) => None,
                (IsaLevel::Avx2, false) => Some("avx2-widen"),
                (IsaLevel::Avx2 | IsaLevel::AvxVnni, true) => Some("avx2-maddubs"),
                (IsaLevel::AvxVnni, false) => Some("avx-vnni"),
                // 4 rows, k 8: too small for tiles (`amx_pays_off`).
                (IsaLevel::Avx512Vnni | IsaLevel::Amx, false) => Some("avx512-vnni"),
                (IsaLevel::Avx512Vnni | IsaLevel::Amx, true) => Some("avx512-maddubs"),
            };
            assert_eq!(names.first().map(String::as_str), expected_kernel, "{level} saturating={saturating}");
        }
        let options = CompileOptions::default();
        let f = compile(&g.func, &options).unwrap();
        let mut tensors: Vec<Tensor> = args.iter().map(Tensor::from_array).collect();
        let mut refs: Vec<&mut Tensor> = tensors.iter_mut().collect();
        f.call(&mut refs).unwrap();
        let c = tensors[2].to_vec::<i32>().unwrap();
        assert_eq!(c[0], if saturating { 32767 } else { 64770 });
    }
}

/// Declared activations in 0..=127 (u7) make every pair sum fit i16: an exact declaration may
/// then use `vpmaddubsw` on AVX2, and a saturating one exact VNNI; data outside the range is a
/// typed error before anything runs.
#[test]
fn declared_value_ranges_choose_kernels_and_are_checked_at_every_call() {
    for saturating in [false, true] {
        let g = gemm(13, 64, 36, GemmInt8Knobs { mr: 4, nr: 32, parallel: true }, Some((0, 127)), saturating);
        let args = g.args(4);
        for (level, names) in chosen(&g, &args) {
            let expected_kernel = match level {
                IsaLevel::Scalar => None,
                IsaLevel::Avx2 => Some("avx2-maddubs"),
                IsaLevel::AvxVnni => Some("avx-vnni"),
                // Calls of 4 rows, k 36: too small for tiles (`amx_pays_off`).
                IsaLevel::Avx512Vnni | IsaLevel::Amx => Some("avx512-vnni"),
            };
            assert_eq!(names.first().map(String::as_str), expected_kernel, "{level} saturating={saturating}");
        }
        let f = compile(&g.func, &CompileOptions::default()).unwrap();
        let mut bad = args.clone();
        let mut a = bad[0].to_i64_vec();
        a[37] = 128;
        bad[0] = Array::from_i64(DType::U8, &[13, 36], &a);
        let mut tensors: Vec<Tensor> = bad.iter().map(Tensor::from_array).collect();
        let mut refs: Vec<&mut Tensor> = tensors.iter_mut().collect();
        let err = f.call(&mut refs).unwrap_err();
        assert_eq!(
            err,
            RuntimeError::ValueOutOfRange { index: 0, name: "A".into(), position: 37, value: 128, lo: 0, hi: 127 }
        );
        assert_eq!(
            err.to_string(),
            "argument 0 (A): element 37 is 128, expected a value in the declared range 0..=127"
        );
    }
}

#[test]
fn isa_names_round_trip_and_unknown_ones_are_typed_errors() {
    for level in IsaLevel::ALL {
        assert_eq!(IsaLevel::from_name(level.name()), Ok(level));
    }
    let err = IsaLevel::from_name("avx3").unwrap_err();
    assert_eq!(err.to_string(), "ISA level: expected one of scalar|avx2|avx-vnni|avx512-vnni|amx, found \"avx3\"");
}

#[test]
fn disassembly_lists_every_function_with_kernels_by_name() {
    let g = gemm(16, 64, 32, GemmInt8Knobs { mr: 8, nr: 32, parallel: true }, None, false);
    let level = IsaLevel::detect().unwrap_or(IsaLevel::Scalar);
    let f = g.check(level, &g.args(1));
    let text = f.disassembly();
    assert!(text.starts_with("; gemm (cranelift,"), "{text}");
    assert!(text.contains("; gemm__par0 (cranelift,"), "{text}");
    for k in kernels(f.machine_code()) {
        assert!(text.contains(&format!("; {} ({}", k.name, k.origin)), "{text}");
        // The outlined body calls the kernel by name.
        assert!(text.contains(&format!("  ; {}\n", k.name)), "{text}");
    }
    if level >= IsaLevel::Avx2 {
        assert!(text.contains("vzeroupper"), "{text}");
    } else {
        skip::skip("its vzeroupper check", "avx2: this CPU lacks it");
    }
}
