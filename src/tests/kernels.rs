//! Hand-assembled int8 GEMM kernels against the `Int8Gemm` declaration (exact, or
//! saturating pairs for the `vpmaddubsw` kernels), on random data, the boundary grid in every
//! lane and k position, ragged shapes and padded strides; and their encodings.

use iced_x86::{EncodingKind, Mnemonic, OpKind, Register};

use crate::bench::Lcg;
use crate::disasm::decode;
use crate::error::KernelError;
use crate::isa::{DotMethod, IsaLevel, KernelVariant, VectorWidth};
use crate::kernels::gemm::{Blocking, GemmShape, assemble_gemm};
use crate::kernels::peak::{ProbeKind, assemble, assemble_probe};
use crate::runtime::GemmKernel;
use crate::runtime::peak::{PeakError, Probe};
use crate::tests::skip;
use ir::DType;

/// Variants this CPU can run.
fn runnable() -> Vec<KernelVariant> {
    KernelVariant::ALL.into_iter().filter(|v| v.min_level().is_some_and(IsaLevel::is_supported)).collect()
}

/// Whether this CPU runs `variant`; if not, the running test reports its checks of it skipped.
fn runs(variant: KernelVariant) -> bool {
    let runs = runnable().contains(&variant);
    if !runs {
        let reason = match variant.min_level() {
            Some(level) => format!("{level}: this CPU lacks it"),
            None => "no ISA level runs it".to_string(),
        };
        skip::skip(&format!("the {variant} kernel"), &reason);
    }
    runs
}

/// Runnable variants with byte operands (all but `Madd16`, tested on i16 operands below); the
/// running test reports the others skipped.
fn runnable_bytes() -> Vec<KernelVariant> {
    KernelVariant::ALL.into_iter().filter(|v| v.method != DotMethod::Madd16).filter(|&v| runs(v)).collect()
}

/// `C[i, j] += Σ A[i, seg, 4ko+ki] · B[seg·k/4 + ko, j, ki]` (`=` for a resetting shape) by the declaration (A's bytes as
/// i8 when `s.a_dtype` is): exact, or with each pair of adjacent products saturated to i16 first;
/// i32 sums wrap.
fn reference(s: &GemmShape, a: &[u8], b: &[i8], c: &mut [i32], saturating: bool) {
    let av = |x: u8| if s.a_dtype == DType::I8 { i32::from(x as i8) } else { i32::from(x) };
    let pair = |x: i32| if saturating { x.clamp(i16::MIN.into(), i16::MAX.into()) } else { x };
    reference_packed(s, 4, (|i| av(a[i]), |i| i32::from(b[i])), pair, c);
}

/// The GEMM of the kernels' layout with `pack` consecutive k per group of B, pair sums through
/// `pair` (the saturation, or none), in wrapping i32.
fn reference_packed(
    s: &GemmShape,
    pack: usize,
    (a, b): (impl Fn(usize) -> i32, impl Fn(usize) -> i32),
    pair: impl Fn(i32) -> i32,
    c: &mut [i32],
) {
    if s.reset {
        for i in 0..s.m as usize {
            c[i * s.ldc as usize..][..s.n as usize].fill(0);
        }
    }
    if s.k == 0 {
        return;
    }
    let groups = s.k as usize / pack;
    for i in 0..s.m as usize {
        for j in 0..s.n as usize {
            let mut acc = c[i * s.ldc as usize + j];
            for seg in 0..s.segments as usize {
                for ko in 0..groups {
                    let row = i * s.lda as usize + seg * s.lds as usize;
                    let group = (seg * groups + ko) * s.ldb as usize;
                    let p = |ki: usize| a(row + pack * ko + ki) * b(group + pack * j + ki);
                    for kp in (0..pack).step_by(2) {
                        acc = acc.wrapping_add(pair(p(kp).wrapping_add(p(kp + 1))));
                    }
                }
            }
            c[i * s.ldc as usize + j] = acc;
        }
    }
}

/// Runs `variant` on `shape` and checks C against the declaration, including that padding
/// between rows of C is untouched.
fn check(variant: KernelVariant, shape: GemmShape, blocking: Blocking, a: &[u8], b: &[i8]) {
    let kernel = GemmKernel::new(variant, shape, blocking).unwrap_or_else(|e| panic!("{variant} {shape:?}: {e}"));
    compare_c(&kernel, |c| kernel.run(a, b, c).unwrap(), |c| reference(&shape, a, b, c, !variant.is_exact()));
}

/// Runs `kernel` (by `run`) and the declaration (by `reference`) on the same random C, which
/// covers the kernel's footprint, and asserts they agree everywhere, padding included.
fn compare_c(kernel: &GemmKernel, run: impl FnOnce(&mut [i32]), reference: impl FnOnce(&mut [i32])) {
    let (shape, blocking, variant) = (kernel.shape, kernel.blocking, kernel.variant);
    let (_, _, need_c) = shape.footprint(variant.method);
    let mut rng = Lcg::new(need_c as u64);
    let c0: Vec<i32> = (0..need_c.max(1)).map(|_| rng.next_u32() as i32 >> 8).collect();
    let mut got = c0.clone();
    run(&mut got);
    let mut want = c0;
    reference(&mut want);
    if let Some(pos) = got.iter().zip(&want).position(|(g, w)| g != w) {
        let (i, j) = (pos / shape.ldc.max(1) as usize, pos % shape.ldc.max(1) as usize);
        panic!("{variant} {shape:?} {blocking:?}: C[{i}, {j}] = {}, declaration says {}", got[pos], want[pos]);
    }
}

/// Random A and B; B without -128 for `variant`s that need it (sign transfer).
fn random_operands(variant: KernelVariant, shape: &GemmShape, seed: u64) -> (Vec<u8>, Vec<i8>) {
    let (na, nb, _) = shape.footprint(variant.method);
    let mut rng = Lcg::new(seed);
    let a = (0..na.max(1)).map(|_| rng.next_u32() as u8).collect();
    let b = (0..nb.max(1)).map(|_| allowed_b(variant, rng.next_u32() as i8)).collect();
    (a, b)
}

/// `b`, or -127 for -128 where `variant` requires B > -128.
fn allowed_b(variant: KernelVariant, b: i8) -> i8 {
    if variant.method == DotMethod::SignTransfer { b.max(-127) } else { b }
}

/// The byte A types each variant takes: both for widening.
fn a_dtypes(variant: KernelVariant) -> Vec<DType> {
    [DType::U8, DType::I8].into_iter().filter(|&dtype| variant.method.accepts_a(dtype)).collect()
}

#[test]
fn every_kernel_matches_the_declaration_on_random_ragged_shapes() {
    let shapes = [
        GemmShape::dense(1, 1, 4),
        GemmShape::dense(7, 13, 12),
        GemmShape::dense(6, 64, 64),
        GemmShape::dense(13, 70, 36),
        GemmShape::dense(19, 129, 100),
        GemmShape::dense(4, 8, 0),
        GemmShape::dense(0, 8, 8),
        // Padded rows of A and C, and B groups wider than the columns used.
        GemmShape { lda: 40, ldb: 4 * 50, ldc: 45, ..GemmShape::dense(11, 37, 28) },
        // Segments (a convolution's kernel rows): overlapping rows of A as a stride-2 3×3 layer
        // reads them, and the stem's 7 rows of 24 bytes (6 k steps: an unroll remainder).
        GemmShape { segments: 3, lda: 6, lds: 100, ldb: 4 * 40, ldc: 40, ..GemmShape::dense(7, 37, 12) },
        GemmShape { segments: 7, lda: 6, lds: 704, ldb: 4 * 64, ldc: 64, ..GemmShape::dense(4, 64, 24) },
        // A 3×3 layer's call on one 18 KiB panel of packed weights: the VNNI kernels prefetch
        // the next panel (`next_panel_prefetch`), past the end of this B.
        GemmShape { segments: 3, lda: 64, lds: 640, ldb: 4 * 32, ldc: 32, ..GemmShape::dense(7, 32, 192) },
    ];
    for variant in runnable_bytes() {
        let default = Blocking::default_for(variant);
        let blockings = [default, Blocking { unroll: 3, ..default }, Blocking { rows: 1, vectors: 1, unroll: 1 }];
        for a_dtype in a_dtypes(variant) {
            for (s, shape) in shapes.iter().enumerate() {
                // Accumulating into C, and resetting it (C's old values must not leak in).
                for reset in [false, true] {
                    let shape = GemmShape { a_dtype, reset, ..*shape };
                    let (a, b) = random_operands(variant, &shape, s as u64 + 1);
                    for blocking in blockings {
                        check(variant, shape, blocking, &a, &b);
                    }
                }
            }
        }
    }
}

/// Read as i8 (the signed kernels), these are 0, 1, 127, -128, -2, -1.
const GRID_A: [u8; 6] = [0, 1, 127, 128, 254, 255];
const GRID_B: [i8; 6] = [-128, -127, -1, 0, 1, 127];

/// Every (a, a') × (b, b') of the boundary grid as a product pair, in both pair positions of a
/// group, and in every output lane: row r holds A pair r, column j holds B pair j mod 37, and
/// 37 is coprime to the lane counts, so each pair meets every lane.
#[test]
fn every_kernel_matches_the_declaration_on_the_boundary_grid_in_every_lane() {
    let pairs_a: Vec<(u8, u8)> = GRID_A.iter().flat_map(|&x| GRID_A.iter().map(move |&y| (x, y))).collect();
    let pairs_b: Vec<(i8, i8)> = GRID_B.iter().flat_map(|&x| GRID_B.iter().map(move |&y| (x, y))).collect();
    let (m, n, k) = (pairs_a.len() as i64, 37 * 16, 8);
    let shape = GemmShape::dense(m, n, k);
    let mut a = vec![0u8; (m * k) as usize];
    for (r, &(x, y)) in pairs_a.iter().enumerate() {
        // Group 0 puts the pair in ki 0-1 and reversed in 2-3; group 1 mixes them across pairs.
        a[r * 8..r * 8 + 8].copy_from_slice(&[x, y, y, x, x, x, y, y]);
    }
    for variant in runnable_bytes() {
        let mut b = vec![0i8; (k / 4 * n * 4) as usize];
        for j in 0..n as usize {
            let (x, y) = pairs_b.get(j % 37).copied().unwrap_or((0, 0));
            let (x, y) = (allowed_b(variant, x), allowed_b(variant, y));
            b[4 * j..4 * j + 4].copy_from_slice(&[x, y, y, x]);
            let g1 = 4 * n as usize + 4 * j;
            b[g1..g1 + 4].copy_from_slice(&[y, x, x, y]);
        }
        for a_dtype in a_dtypes(variant) {
            check(variant, GemmShape { a_dtype, ..shape }, Blocking::default_for(variant), &a, &b);
        }
    }
}

/// oneDNN's example: a = {255, 255, 0, 0}, b = {127, 127, 0, 0} is 64770 exactly, 32767 with
/// saturating pairs.
#[test]
fn the_saturation_example_is_exact_on_exact_kernels_and_32767_on_saturating_ones() {
    let (a, b) = ([255u8, 255, 0, 0], [127i8, 127, 0, 0]);
    for variant in runnable_bytes() {
        // The signed kernels read 255 as -1 (sign transfer's worst case is a = -128 below).
        let (shape, expected) = match (variant.method.accepts_a(DType::U8), variant.is_exact()) {
            (true, true) => (GemmShape::dense(1, 1, 4), 64770),
            (true, false) => (GemmShape::dense(1, 1, 4), 32767),
            (false, _) => (GemmShape { a_dtype: DType::I8, ..GemmShape::dense(1, 1, 4) }, -254),
        };
        let kernel = GemmKernel::new(variant, shape, Blocking::default_for(variant)).unwrap();
        let mut c = [0i32];
        kernel.run(&a, &b, &mut c).unwrap();
        assert_eq!(c[0], expected, "{variant}");
    }
    // Sign transfer's largest pair sum: (-128)·(-127) twice is 32512, inside i16.
    if runs(KernelVariant::AVX2_SIGN) {
        let shape = GemmShape { a_dtype: DType::I8, ..GemmShape::dense(1, 1, 4) };
        let kernel =
            GemmKernel::new(KernelVariant::AVX2_SIGN, shape, Blocking::default_for(KernelVariant::AVX2_SIGN)).unwrap();
        let mut c = [0i32];
        kernel.run(&[0x80, 0x80, 0x80, 0x80], &[-127, -127, 127, 127], &mut c).unwrap();
        assert_eq!(c[0], 0);
        let mut c = [0i32];
        kernel.run(&[0x80, 0x80, 0x7f, 0x7f], &[-127, -127, 127, 127], &mut c).unwrap();
        assert_eq!(c[0], 2 * 128 * 127 + 2 * 127 * 127);
    }
}

/// `C[i, j] += Σ A[i, seg, 2ko+ki] · B[seg·k/2 + ko, j, ki]` on i16 operands (the `Int16Gemm`
/// declaration), in wrapping i32.
fn reference_i16(s: &GemmShape, a: &[i16], b: &[i16], c: &mut [i32]) {
    reference_packed(s, 2, (|i| i32::from(a[i]), |i| i32::from(b[i])), |x| x, c);
}

fn check_i16(shape: GemmShape, blocking: Blocking, a: &[i16], b: &[i16]) {
    let kernel =
        GemmKernel::new(KernelVariant::AVX2_MADD16, shape, blocking).unwrap_or_else(|e| panic!("{shape:?}: {e}"));
    compare_c(&kernel, |c| kernel.run_i16(a, b, c).unwrap(), |c| reference_i16(&shape, a, b, c));
}

/// The pre-widened kernel on every i16 (so on every widened u8/i8 pair, and on `vpmaddwd`'s one
/// overflowing case), ragged shapes, padded strides, segments and several blockings.
#[test]
fn the_pre_widened_kernel_matches_the_int16_declaration_on_every_i16() {
    if !runs(KernelVariant::AVX2_MADD16) {
        return;
    }
    let i16_shape = |m, n, k, segments, lda, lds, ldb, ldc| GemmShape {
        m,
        n,
        k,
        segments,
        lda,
        lds,
        ldb,
        ldc,
        a_dtype: DType::I16,
        reset: false,
    };
    let dense = |m, n, k| GemmShape::dense_for(DotMethod::Madd16, m, n, k);
    let shapes = [
        dense(1, 1, 2),
        dense(7, 13, 6),
        dense(6, 64, 64),
        dense(13, 70, 36),
        dense(19, 129, 100),
        dense(4, 8, 0),
        dense(0, 8, 8),
        i16_shape(11, 37, 28, 1, 40, 0, 2 * 50, 45),
        i16_shape(7, 37, 12, 3, 6, 100, 2 * 40, 40),
        i16_shape(4, 64, 24, 7, 6, 704, 2 * 64, 64),
    ];
    let default = Blocking::default_for(KernelVariant::AVX2_MADD16);
    let blockings = [
        default,
        Blocking { unroll: 3, ..default },
        Blocking { rows: 6, vectors: 2, unroll: 2 },
        Blocking { rows: 1, vectors: 1, unroll: 1 },
    ];
    for (s, shape) in shapes.into_iter().enumerate() {
        let (na, nb, _) = shape.footprint(DotMethod::Madd16);
        let mut rng = Lcg::new(s as u64 + 11);
        // Every fifth value is -32768: pairs of it meet in some lanes.
        let mut value = |i: usize| if i.is_multiple_of(5) { i16::MIN } else { rng.next_u32() as i16 };
        let a: Vec<i16> = (0..na.max(1)).map(&mut value).collect();
        let b: Vec<i16> = (0..nb.max(1)).map(&mut value).collect();
        for blocking in blockings {
            check_i16(shape, blocking, &a, &b);
            check_i16(GemmShape { reset: true, ..shape }, blocking, &a, &b);
        }
    }
    // vpmaddwd's overflow: (-32768)²·2 = 2³¹ wraps to i32::MIN, as the declaration's i32 sum does.
    let kernel = GemmKernel::new(KernelVariant::AVX2_MADD16, dense(1, 1, 2), default).unwrap();
    let mut c = [0i32];
    kernel.run_i16(&[i16::MIN, i16::MIN], &[i16::MIN, i16::MIN], &mut c).unwrap();
    assert_eq!(c[0], i32::MIN);
    // Byte operands are refused, naming the operand and its type.
    let err = kernel.run(&[0, 0, 0, 0], &[0; 4], &mut c).unwrap_err();
    assert_eq!(err.to_string(), "argument 0 (A): expected dtype i16, found u8");
}

/// The boundary grid of int8 operands, widened as the weight preparation and the padding stage
/// widen them, in every lane and both positions of a pair.
#[test]
fn the_pre_widened_kernel_is_exact_on_the_widened_boundary_grid_in_every_lane() {
    if !runs(KernelVariant::AVX2_MADD16) {
        return;
    }
    let pairs_a: Vec<(i16, i16)> =
        GRID_A.iter().flat_map(|&x| GRID_A.iter().map(move |&y| (i16::from(x), i16::from(y)))).collect();
    let pairs_b: Vec<(i16, i16)> =
        GRID_B.iter().flat_map(|&x| GRID_B.iter().map(move |&y| (i16::from(x), i16::from(y)))).collect();
    let (m, n, k) = (pairs_a.len() as i64, 37 * 16, 4);
    let shape = GemmShape::dense_for(DotMethod::Madd16, m, n, k);
    let mut a = vec![0i16; (m * k) as usize];
    for (r, &(x, y)) in pairs_a.iter().enumerate() {
        a[r * 4..r * 4 + 4].copy_from_slice(&[x, y, y, x]);
    }
    let mut b = vec![0i16; (k * n) as usize];
    for j in 0..n as usize {
        let (x, y) = pairs_b.get(j % 37).copied().unwrap_or((0, 0));
        b[2 * j..2 * j + 2].copy_from_slice(&[x, y]);
        let g1 = 2 * n as usize + 2 * j;
        b[g1..g1 + 2].copy_from_slice(&[y, x]);
    }
    check_i16(shape, Blocking::default_for(KernelVariant::AVX2_MADD16), &a, &b);
    // oneDNN's example, exact: {255, 255}·{127, 127} = 64770.
    let kernel = GemmKernel::new(
        KernelVariant::AVX2_MADD16,
        GemmShape::dense_for(DotMethod::Madd16, 1, 1, 2),
        Blocking::default_for(KernelVariant::AVX2_MADD16),
    )
    .unwrap();
    let mut c = [0i32];
    kernel.run_i16(&[255, 255], &[127, 127], &mut c).unwrap();
    assert_eq!(c[0], 64770);
}

#[test]
fn kernel_calls_check_the_footprint_and_generation_checks_registers() {
    let shape = GemmShape::dense(3, 20, 8);
    let Some(&variant) = runnable().iter().find(|v| v.method != DotMethod::Madd16) else {
        skip::skip("", "this CPU runs no kernel with byte operands");
        return;
    };
    let kernel = GemmKernel::new(variant, shape, Blocking::default_for(variant)).unwrap();
    let mut c = vec![0i32; 59];
    let err = kernel.run(&[0; 24], &[0; 160], &mut c).unwrap_err();
    assert_eq!(err.to_string(), "argument 2 (C): buffer holds 59 elements, function needs 60");
    let wide = GemmShape::dense(4, 64, 8);
    let err = assemble_gemm(KernelVariant::AVX_VNNI, &wide, Blocking { rows: 4, vectors: 4, unroll: 1 }).unwrap_err();
    assert_eq!(
        err,
        KernelError::TooManyRegisters {
            variant: KernelVariant::AVX_VNNI,
            rows: 4,
            vectors: 4,
            needed: 21,
            available: 16
        }
    );
    assert!(err.to_string().contains("needs 21 vector registers, expected at most 16"), "{err}");
    let err = assemble_gemm(variant, &GemmShape::dense(3, 20, 6), Blocking::default_for(variant)).unwrap_err();
    assert_eq!(err.to_string(), "int8 GEMM kernel: k must be a multiple of 4, found 6");
    // Offsets are 32-bit displacements: such a call keeps its fallback (`codegen::intrin`).
    let far = GemmShape { lda: 1 << 31, ..GemmShape::dense(3, 20, 8) };
    let err = assemble_gemm(variant, &far, Blocking::default_for(variant)).unwrap_err();
    assert!(matches!(err, KernelError::OffsetTooLarge { .. }), "{err}");
}

/// Whether an instruction's operands include a register of `reg`'s size class.
fn has_register(ins: &iced_x86::Instruction, class: fn(Register) -> bool) -> bool {
    (0..ins.op_count()).any(|i| ins.op_kind(i) == OpKind::Register && class(ins.op_register(i)))
}

#[test]
fn kernels_encode_the_instructions_their_level_promises() {
    let shape = GemmShape::dense(13, 70, 36);
    for variant in KernelVariant::ALL {
        let shape = GemmShape::dense_for(variant.method, shape.m, shape.n, shape.k);
        let code = decode(&assemble_gemm(variant, &shape, Blocking::default_for(variant)).unwrap(), 0);
        let mnemonic = |m: Mnemonic| code.iter().filter(move |i| i.mnemonic() == m);
        match (variant.method, variant.width) {
            (DotMethod::Vnni, VectorWidth::Zmm) => {
                assert!(mnemonic(Mnemonic::Vpdpbusd).count() > 0, "{variant}");
                assert!(mnemonic(Mnemonic::Vpdpbusd).all(|i| has_register(i, Register::is_zmm)), "{variant}");
            }
            (DotMethod::Vnni, VectorWidth::Ymm) => {
                assert!(mnemonic(Mnemonic::Vpdpbusd).count() > 0, "{variant}");
                assert!(
                    mnemonic(Mnemonic::Vpdpbusd)
                        .all(|i| has_register(i, Register::is_ymm) && i.encoding() == EncodingKind::VEX),
                    "{variant}"
                );
            }
            (DotMethod::Widen, _) => {
                assert!(mnemonic(Mnemonic::Vpmaddwd).count() > 0 && mnemonic(Mnemonic::Vpmaddubsw).count() == 0);
            }
            (DotMethod::Madd16, _) => {
                // vpmaddwd + vpaddd only: nothing widens or shuffles inside the kernel.
                let madds = mnemonic(Mnemonic::Vpmaddwd).count();
                assert!(madds > 0 && madds == mnemonic(Mnemonic::Vpaddd).count(), "{variant}");
                for other in [Mnemonic::Vpmaddubsw, Mnemonic::Vpmovzxbw, Mnemonic::Vpmovsxbw, Mnemonic::Vphaddd] {
                    assert_eq!(mnemonic(other).count(), 0, "{variant}: {other:?}");
                }
            }
            (DotMethod::MaddUbs, _) => assert!(mnemonic(Mnemonic::Vpmaddubsw).count() > 0, "{variant}"),
            (DotMethod::Amx, _) => {
                // Tiles only: the loaded configuration checked (and loaded where it differs),
                // multiplied, left loaded for the next call (the runtime releases the tiles);
                // no vector arithmetic.
                assert!(mnemonic(Mnemonic::Tdpbusd).count() > 0, "{variant}");
                assert!(mnemonic(Mnemonic::Ldtilecfg).count() > 0, "{variant}");
                assert_eq!(mnemonic(Mnemonic::Sttilecfg).count(), mnemonic(Mnemonic::Ldtilecfg).count(), "{variant}");
                assert_eq!(mnemonic(Mnemonic::Tilerelease).count(), 0, "{variant}");
                assert!(code.iter().all(|i| !has_register(i, Register::is_zmm)), "{variant}");
            }
            (DotMethod::SignTransfer, _) => {
                let signs = mnemonic(Mnemonic::Vpsignb).count();
                assert!(signs > 0 && signs == mnemonic(Mnemonic::Vpmaddubsw).count(), "{variant}");
                assert!(mnemonic(Mnemonic::Vpabsb).count() > 0, "{variant}");
            }
        }
        // Below AVX-512 nothing may be EVEX encoded or touch a zmm register.
        if variant.width == VectorWidth::Ymm {
            assert!(code.iter().all(|i| i.encoding() != EncodingKind::EVEX), "{variant} uses EVEX");
        }
        assert_eq!(code.last().map(|i| i.mnemonic()), Some(Mnemonic::Ret));
        assert_eq!(code[code.len() - 2].mnemonic(), Mnemonic::Vzeroupper, "{variant}");
        // SysV: no callee-saved register is written (rbx, rbp, r12-r15) and the stack is not used.
        let callee_saved = [Register::RBX, Register::RBP, Register::R12, Register::R13, Register::R14, Register::R15];
        for ins in &code {
            let op0 = (ins.op_count() > 0 && ins.op_kind(0) == OpKind::Register).then(|| ins.op0_register());
            assert!(op0.is_none_or(|r| !callee_saved.contains(&r.full_register())), "{variant}: {ins}");
            assert!(!ins.is_stack_instruction() || ins.mnemonic() == Mnemonic::Ret, "{variant}: {ins}");
        }
    }
}

/// A VNNI call on one panel of at least 16 KiB of packed weights with four or more rows
/// prefetches each line of B one panel ahead, every line once; a one-row call, a call over
/// several register panels, B groups wider than its columns, a smaller panel and the other
/// methods do not prefetch.
#[test]
fn large_panels_of_packed_weights_prefetch_the_next_one() {
    let prefetches = |variant: KernelVariant, shape: GemmShape, blocking: Blocking| -> Vec<i64> {
        let code = decode(&assemble_gemm(variant, &shape, blocking).unwrap(), 0);
        code.iter().filter(|i| i.mnemonic() == Mnemonic::Prefetcht1).map(|i| i.memory_displacement64() as i64).collect()
    };
    let vnni = KernelVariant::AVX512_VNNI;
    let tile = Blocking { rows: 7, vectors: 2, unroll: 4 };
    // 7 pixels × 32 channels over 3 kernel rows of 192 bytes: 3·48 groups of 128 bytes.
    let layer = GemmShape { segments: 3, lda: 64, lds: 640, ldb: 4 * 32, ldc: 32, ..GemmShape::dense(7, 32, 192) };
    let panel = 3 * 48 * 128;
    let mut lines = prefetches(vnni, layer, tile);
    // Unrolled by 4: the loop body's 8 lines, each 64 bytes on, one panel ahead, in each
    // segment's loop.
    assert_eq!(lines.len(), 3 * 8);
    lines.sort_unstable();
    lines.dedup();
    assert_eq!(lines, (0..8).map(|l| panel + 64 * l).collect::<Vec<_>>());
    assert_eq!(prefetches(vnni, GemmShape { m: 1, ..layer }, tile).len(), 0);
    assert_eq!(prefetches(vnni, layer, Blocking { vectors: 1, ..tile }).len(), 0);
    assert_eq!(prefetches(vnni, GemmShape { ldb: 4 * 48, ..layer }, tile).len(), 0);
    assert_eq!(prefetches(vnni, GemmShape { segments: 1, ..layer }, tile).len(), 0);
    let others = KernelVariant::ALL.into_iter().filter(|v| !matches!(v.method, DotMethod::Vnni | DotMethod::Amx));
    for variant in others {
        let shape = GemmShape::dense_for(variant.method, layer.m, layer.n, layer.k);
        let shape = GemmShape { segments: 3, lda: 64, lds: 640, ..shape };
        assert_eq!(prefetches(variant, shape, Blocking::default_for(variant)).len(), 0, "{variant}");
    }
}

/// A VNNI tile of one accumulator (a one-row GEMV panel) spreads its k steps over eight
/// accumulator chains, which the random-shape tests above check for the sums.
#[test]
fn a_small_vnni_tile_runs_eight_accumulator_chains() {
    let chains = |shape: GemmShape, blocking: Blocking| {
        let code = decode(&assemble_gemm(KernelVariant::AVX512_VNNI, &shape, blocking).unwrap(), 0);
        let mut registers: Vec<Register> =
            code.iter().filter(|i| i.mnemonic() == Mnemonic::Vpdpbusd).map(|i| i.op0_register()).collect();
        registers.sort_by_key(|r| *r as u32);
        registers.dedup();
        registers.len()
    };
    assert_eq!(chains(GemmShape::dense(1, 16, 256), Blocking { rows: 1, vectors: 1, unroll: 4 }), 8);
    // A tile of eight or more accumulators keeps one set.
    assert_eq!(chains(GemmShape::dense(2, 64, 256), Blocking { rows: 2, vectors: 4, unroll: 4 }), 8);
}

#[test]
fn the_peak_probe_runs_twelve_independent_vpdpbusd_per_iteration() {
    for (width, vex) in [(VectorWidth::Zmm, false), (VectorWidth::Ymm, true), (VectorWidth::Ymm, false)] {
        let code = decode(&assemble_probe(width, vex).unwrap(), 0);
        let dots: Vec<_> = code.iter().filter(|i| i.mnemonic() == Mnemonic::Vpdpbusd).collect();
        assert_eq!(dots.len(), 12);
        let mut accumulators: Vec<Register> = dots.iter().map(|i| i.op0_register()).collect();
        accumulators.dedup();
        assert_eq!(accumulators.len(), 12);
        let encoding = if vex { EncodingKind::VEX } else { EncodingKind::EVEX };
        assert!(dots.iter().all(|i| i.encoding() == encoding));
    }
}

#[test]
fn every_probe_repeats_its_methods_chain_into_independent_accumulators() {
    for kind in ProbeKind::ALL {
        let code = decode(&assemble(kind, true).unwrap(), 0);
        let count = |m: Mnemonic| code.iter().filter(|i| i.mnemonic() == m).count();
        let chains = kind.chains();
        let expected: &[(Mnemonic, usize)] = match kind {
            ProbeKind::Vnni(_) => &[(Mnemonic::Vpdpbusd, chains)],
            ProbeKind::Triple(_) => {
                &[(Mnemonic::Vpmaddubsw, chains), (Mnemonic::Vpmaddwd, chains), (Mnemonic::Vpaddd, chains)]
            }
            ProbeKind::SignTransfer => &[
                (Mnemonic::Vpsignb, chains),
                (Mnemonic::Vpmaddubsw, chains),
                (Mnemonic::Vpmaddwd, chains),
                (Mnemonic::Vpaddd, chains),
            ],
            ProbeKind::Madd16 => &[(Mnemonic::Vpmaddwd, chains), (Mnemonic::Vpaddd, chains)],
            ProbeKind::Amx => &[(Mnemonic::Tdpbusd, chains)],
        };
        for &(mnemonic, n) in expected {
            assert_eq!(count(mnemonic), n, "{kind}: {mnemonic:?}");
        }
        // Each chain ends in its own accumulator.
        let last = expected.last().map(|e| e.0).unwrap();
        let mut accumulators: Vec<Register> =
            code.iter().filter(|i| i.mnemonic() == last).map(|i| i.op0_register()).collect();
        accumulators.sort_by_key(|r| *r as u32);
        accumulators.dedup();
        assert_eq!(accumulators.len(), chains, "{kind}");
        let zmm = code.iter().any(|i| has_register(i, Register::is_zmm));
        // The AMX probe's width is bookkeeping: it runs on tiles.
        assert_eq!(zmm, kind.width() == VectorWidth::Zmm && kind != ProbeKind::Amx, "{kind}");
    }
    // A kernel is compared with the probe of its own method.
    assert_eq!(ProbeKind::for_variant(KernelVariant::AVX2_SIGN), ProbeKind::SignTransfer);
    assert_eq!(ProbeKind::for_variant(KernelVariant::AVX2_WIDEN), ProbeKind::Madd16);
    assert_eq!(ProbeKind::for_variant(KernelVariant::AVX2_MADD16), ProbeKind::Madd16);
    assert_eq!(ProbeKind::for_variant(KernelVariant::AVX2_MADDUBS), ProbeKind::Triple(VectorWidth::Ymm));
    assert_eq!(ProbeKind::for_variant(KernelVariant::AVX512_VNNI), ProbeKind::Vnni(VectorWidth::Zmm));
    assert_eq!(ProbeKind::for_variant(KernelVariant::AMX_INT8), ProbeKind::Amx);
}

/// Every probe this CPU has runs and gives a positive rate.
#[test]
fn every_supported_probe_measures_a_rate() {
    for kind in ProbeKind::ALL {
        match Probe::of(kind) {
            Ok(probe) => assert!(probe.measure(std::time::Duration::from_micros(200), 1).gops > 0.0, "{kind}"),
            Err(PeakError::Unsupported { .. }) => {}
            Err(other) => panic!("{kind}: {other}"),
        }
    }
}

/// Cores are full rate only at `avx512-vnni` with 512-bit units; the measured figures of both
/// kinds of host classify as measured.
#[test]
fn the_core_rate_is_full_only_for_zmm_vnni_on_512_bit_units() {
    use crate::build::core_rate;
    use crate::runtime::peak::full_width_zmm;
    use schedules::x86_conv::CoreRate;
    assert!(full_width_zmm(942.0, 517.0), "the Intel Xeon");
    assert!(!full_width_zmm(465.0, 464.0), "the Zen 4");
    for level in [IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::AvxVnni] {
        assert_eq!(core_rate(level), CoreRate::Slower, "{level}");
    }
    if !IsaLevel::Avx512Vnni.is_supported() {
        assert_eq!(core_rate(IsaLevel::Avx512Vnni), CoreRate::Slower);
    } else {
        skip::skip("avx512-vnni's rate", "this CPU has avx512-vnni: its rate is measured");
    }
}

#[test]
fn kernel_selection_is_exact_for_what_the_ranges_prove() {
    use crate::codegen::intrin::{Int8GemmFacts, select_int8_gemm};
    let facts = |a_signed, never_saturates, b_above_min| Int8GemmFacts { a_signed, never_saturates, b_above_min };
    let avx2 = IsaLevel::Avx2;
    // u8 A: the triple only where no pair sum can saturate, else widening; VNNI wherever it exists.
    assert_eq!(select_int8_gemm(avx2, false, facts(false, false, true)), Some(KernelVariant::AVX2_WIDEN));
    assert_eq!(select_int8_gemm(avx2, false, facts(false, true, true)), Some(KernelVariant::AVX2_MADDUBS));
    assert_eq!(select_int8_gemm(IsaLevel::AvxVnni, false, facts(false, false, false)), Some(KernelVariant::AVX_VNNI));
    // i8 A: sign transfer only without a -128 weight; never a saturating kernel; nothing at scalar.
    assert_eq!(select_int8_gemm(avx2, false, facts(true, false, true)), Some(KernelVariant::AVX2_SIGN));
    assert_eq!(select_int8_gemm(avx2, false, facts(true, false, false)), Some(KernelVariant::AVX2_WIDEN));
    assert_eq!(select_int8_gemm(IsaLevel::Avx512Vnni, false, facts(true, true, true)), Some(KernelVariant::AVX2_SIGN));
    assert_eq!(select_int8_gemm(avx2, true, facts(true, true, true)), None);
    assert_eq!(select_int8_gemm(IsaLevel::Scalar, false, facts(true, true, true)), None);
    // The triple's proof: 7-bit weights against any u8, not 8-bit ones.
    assert!(ir::intrin::pair_sums_fit_i16((0, 255), (-64, 64)));
    assert!(!ir::intrin::pair_sums_fit_i16((0, 255), (-65, 63)));
    assert!(!ir::intrin::pair_sums_fit_i16((0, 255), (-64, 65)));
    assert!(ir::intrin::pair_sums_fit_i16((0, 127), (-128, 127)));
}
