//! The AMX int8 GEMM kernel (`kernels::amx`) against a plain reference on random data with the
//! operands' extremes, over row, column and k tails, segments, padded strides, resetting and
//! accumulating calls, with guard bands around C; and its selection at level `amx`.

use ir::DType;

use crate::bench::Lcg;
use crate::error::KernelError;
use crate::isa::{IsaLevel, KernelVariant};
use crate::kernels::amx::AmxSpec;
use crate::kernels::gemm::{Blocking, GemmShape, assemble_amx_gemm, assemble_gemm};
use crate::runtime::GemmKernel;
use crate::tests::skip;

const AMX: KernelVariant = KernelVariant::AMX_INT8;

/// i32 entries before and after C that the kernel must leave alone.
const GUARD: usize = 37;

/// Plain GEMM in wrapping i32: `C[i, j] (+)= Σ_s Σ_k A[i·lda + s·lds + k] · B[(s·k/4 + k/4)·ldb + 4j + k%4]`.
fn plain(s: &GemmShape, a: &[u8], b: &[i8], c: &mut [i32]) {
    let (m, n, k, segments) = (s.m as usize, s.n as usize, s.k as usize, s.segments as usize);
    let (lda, lds, ldb, ldc) = (s.lda as usize, s.lds as usize, s.ldb as usize, s.ldc as usize);
    if !s.reset && k * segments == 0 {
        // Nothing to add (and C is outside the call's footprint).
        return;
    }
    for i in 0..m {
        for j in 0..n {
            let mut sum: i32 = if s.reset { 0 } else { c[i * ldc + j] };
            for seg in 0..segments {
                for kk in 0..k {
                    let x = i32::from(a[i * lda + seg * lds + kk]);
                    let y = i32::from(b[(seg * k / 4 + kk / 4) * ldb + 4 * j + kk % 4]);
                    sum = sum.wrapping_add(x * y);
                }
            }
            c[i * ldc + j] = sum;
        }
    }
}

/// Random bytes, one in four an extreme (0 or 255 for A, -128 or 127 for B).
fn operands(shape: &GemmShape, seed: u64) -> (Vec<u8>, Vec<i8>) {
    let (na, nb, _) = shape.footprint(AMX.method);
    let mut rng = Lcg::new(seed);
    let mut byte = |extremes: [u8; 2]| {
        let r = rng.next_u32();
        if r.is_multiple_of(4) { extremes[(r >> 8) as usize % 2] } else { (r >> 16) as u8 }
    };
    let a = (0..na).map(|_| byte([0, 255])).collect();
    let b = (0..nb).map(|_| byte([0x80, 0x7f]) as i8).collect();
    (a, b)
}

/// Runs the AMX kernel and the plain GEMM on the same random C (with guard bands) and asserts
/// they agree everywhere: C's elements, the padding between its rows and the guards.
fn check(shape: GemmShape, seed: u64) {
    let kernel = GemmKernel::new(AMX, shape, Blocking::default_for(AMX)).unwrap_or_else(|e| panic!("{shape:?}: {e}"));
    compare(&kernel, seed);
}

/// `check` for the kernel built with `spec`.
fn check_spec(shape: GemmShape, spec: AmxSpec, seed: u64) {
    let kernel = GemmKernel::amx(shape, spec).unwrap_or_else(|e| panic!("{shape:?} {spec:?}: {e}"));
    compare(&kernel, seed);
}

fn compare(kernel: &GemmKernel, seed: u64) {
    let shape = kernel.shape;
    let (a, b) = operands(&shape, seed);
    let (_, _, need_c) = shape.footprint(AMX.method);
    let mut rng = Lcg::new(seed ^ 0x5eed);
    let c0: Vec<i32> = (0..need_c + 2 * GUARD).map(|_| rng.next_u32() as i32).collect();
    let mut got = c0.clone();
    kernel.run(&a, &b, &mut got[GUARD..GUARD + need_c]).unwrap_or_else(|e| panic!("{shape:?}: {e}"));
    let mut want = c0;
    plain(&shape, &a, &b, &mut want[GUARD..GUARD + need_c]);
    if let Some(pos) = got.iter().zip(&want).position(|(g, w)| g != w) {
        panic!("{shape:?}: C buffer element {pos} (C starts at {GUARD}) = {}, expected {}", got[pos], want[pos]);
    }
}

/// The sizes of the brief: row tails of 1–15, 16-column tiles and partial ones, k in whole
/// 64-byte chunks, below one and with a tail; dense and padded strides; both call kinds.
#[test]
fn the_amx_kernel_matches_a_plain_gemm_on_tails_and_strides() {
    if !skip::has_level(IsaLevel::Amx, "the amx-int8 kernel") {
        return;
    }
    let mut seed: u64 = 1;
    // 16 and 112 rows take blocks of 1 × 4 tiles where n is a multiple of 64 (one tile set).
    for m in [1, 7, 15, 16, 17, 33, 56, 112] {
        for n in [16, 32, 48, 64, 8, 20] {
            for k in [64, 128, 192, 576, 4, 68] {
                for reset in [false, true] {
                    seed += 1;
                    let padded = seed.is_multiple_of(3);
                    let (pa, pb, pc) = if padded { (12, 8, 3) } else { (0, 0, 0) };
                    let shape =
                        GemmShape { lda: k + pa, ldb: 4 * n + pb, ldc: n + pc, reset, ..GemmShape::dense(m, n, k) };
                    check(shape, seed);
                }
            }
        }
    }
}

/// Nine segments (a 3×3 convolution's taps), apart by a padded stride or overlapping as a
/// convolution's rows read them.
#[test]
fn the_amx_kernel_matches_a_plain_gemm_over_segments() {
    if !skip::has_level(IsaLevel::Amx, "the amx-int8 kernel") {
        return;
    }
    let mut seed = 1000;
    for m in [1, 7, 17, 48, 56] {
        for n in [16, 20, 64, 128] {
            for k in [4, 64, 68, 128] {
                for reset in [false, true] {
                    seed += 1;
                    let separate =
                        GemmShape { segments: 9, lds: k + 8, lda: 9 * (k + 8) + 4, ..GemmShape::dense(m, n, k) };
                    let overlapping = GemmShape { segments: 9, lds: 3 * k, lda: k, ..GemmShape::dense(m, n, k) };
                    for shape in [separate, overlapping] {
                        check(GemmShape { reset, ldc: n + 5, ..shape }, seed);
                    }
                }
            }
        }
    }
}

/// Kernels of different tile configurations called in turn on one thread, each checked on
/// every call: a kernel loads its configuration only when the loaded one differs, so a stale
/// one must never be taken for its own. `two` ends on the configuration `ends_as_two` starts
/// with (12 rows × 2 column tiles, k 64), the k-tail kernel has another tile set, and
/// releasing the tiles between calls (the runtime's end of a thread's work) or the peak probe's
/// own configuration must not matter either.
#[test]
fn amx_kernels_of_different_configurations_interleave_on_one_thread() {
    if !skip::has_level(IsaLevel::Amx, "the amx-int8 kernel") {
        return;
    }
    let ends_as_two = GemmShape::dense(12, 32, 64);
    // Rows 32 + 12 (accumulating: no overlapped block), so two configurations.
    let two = GemmShape::dense(44, 32, 64);
    let tail = GemmShape { reset: true, ..GemmShape::dense(28, 64, 68) };
    let r2 = GemmShape { segments: 3, lds: 58 * 64, lda: 64, reset: true, ..GemmShape::dense(28, 64, 192) };
    let order = [r2, r2, ends_as_two, two, ends_as_two, ends_as_two, tail, two, r2, tail, tail, ends_as_two, r2];
    let mut seed = 4000;
    for (i, shape) in order.into_iter().enumerate() {
        seed += 1;
        check(shape, seed);
        if i == 5 {
            crate::isa::release_tiles();
        }
        if i == 9 {
            let probe = crate::runtime::peak::Probe::of(crate::kernels::peak::ProbeKind::Amx)
                .unwrap_or_else(|e| panic!("the tile probe: {e}"));
            probe.run(1);
        }
    }
}

/// Kernels of different configurations interleaved on the threads of a pool, across several parallel loops (each
/// worker releases its tiles at the end of a loop): every call of every shape is checked, on
/// whichever thread runs it.
#[test]
fn amx_kernels_of_different_configurations_interleave_on_a_pool() {
    if !skip::has_level(IsaLevel::Amx, "the amx-int8 kernel") {
        return;
    }
    let shapes = [
        GemmShape { segments: 3, lds: 58 * 64, lda: 64, reset: true, ..GemmShape::dense(28, 64, 192) },
        GemmShape::dense(44, 32, 64),
        GemmShape::dense(12, 32, 64),
        GemmShape { reset: true, ..GemmShape::dense(49, 32, 68) },
    ];
    // A thread count no other test shares a pool of, so that loops are not run serially.
    let pool = crate::runtime::host::pool(4).unwrap_or_else(|e| panic!("a pool of 4 threads: {e}"));
    let threads = std::sync::Mutex::new(std::collections::HashSet::new());
    for round in 0..4u64 {
        pool.for_each(24, |i| {
            // Each thread meets the shapes in a different order in each round.
            let shape = shapes[(i * (round as usize + 1) + i / 4) % shapes.len()];
            check(shape, 6000 + 100 * round + i as u64);
            threads.lock().unwrap_or_else(|e| e.into_inner()).insert(std::thread::current().id());
        });
    }
    assert!(threads.into_inner().unwrap_or_else(|e| e.into_inner()).len() > 1, "the loops ran on one thread");
}

/// A resetting call with whole blocks and a partial one moves the last block back over the one
/// before (recomputing rows or columns to the same values) and loads one configuration; the
/// result is the plain GEMM's, with C's padding and guards untouched. Accumulating calls keep
/// their partial tiles (recomputing would add twice). Square blocks and tall ones alike.
#[test]
fn a_resetting_amx_kernel_overlaps_its_last_block_under_one_configuration() {
    use iced_x86::Mnemonic;
    if !skip::has_level(IsaLevel::Amx, "the amx-int8 kernel") {
        return;
    }
    let loads = |shape: &GemmShape, spec: &AmxSpec| {
        let code = assemble_amx_gemm(shape, spec).unwrap_or_else(|e| panic!("{shape:?}: {e}"));
        crate::disasm::decode(&code, 0).iter().filter(|i| i.mnemonic() == Mnemonic::Ldtilecfg).count()
    };
    let square = AmxSpec { block_rows: 2, prefetch: 0 };
    let tall = AmxSpec { block_rows: 4, prefetch: 2048 };
    let mut seed = 5000;
    // (m, n, k): rows 32 + 17 (R10's 49 pixels), 32 + 29, 16-row blocks with a k tail, columns
    // 32 + 16 and 32 + 8, both at once; tall: rows 64 + 13, 2 · 64 + 2 with 2 · 16 columns, 64
    // + 36 with 32 + 8 columns.
    let squares = [(49, 32, 256), (61, 32, 512), (49, 64, 68), (33, 48, 64), (32, 40, 128), (61, 56, 196)];
    let talls = [(77, 16, 256), (130, 32, 64), (100, 40, 128)];
    let cases = squares.iter().map(|&s| (s, square)).chain(talls.iter().map(|&s| (s, tall)));
    for ((m, n, k), spec) in cases {
        for (segments, lds) in [(1, 0), (3, k + 4)] {
            seed += 1;
            let lda = segments * (k + 4) + 4;
            let reset = GemmShape { segments, lds, lda, ldc: n + 3, reset: true, ..GemmShape::dense(m, n, k) };
            check_spec(reset, spec, seed);
            check(reset, seed);
            assert_eq!(loads(&reset, &spec), 1, "{reset:?} {spec:?}: one configuration");
            let accumulate = GemmShape { reset: false, ..reset };
            check_spec(accumulate, spec, seed + 100);
            check(accumulate, seed + 100);
            assert!(loads(&accumulate, &spec) > 1, "{accumulate:?} {spec:?}: partial tiles of their own");
        }
    }
}

/// Tall blocks (4 × 1 tiles, rows sharing A tiles) and B prefetching at several distances give
/// the plain GEMM's result: rows below, at and beyond one and two tall blocks, with partial
/// row tiles (the last row's own A tile), 16-column tiles and partial ones, k in whole chunks,
/// below one chunk and with a tail (where tall blocks fall back to the square ones), segments,
/// both call kinds; C's padding and guards untouched.
#[test]
fn tall_blocks_and_b_prefetching_match_a_plain_gemm() {
    if !skip::has_level(IsaLevel::Amx, "the amx-int8 kernel") {
        return;
    }
    let specs = [
        AmxSpec { block_rows: 4, prefetch: 0 },
        AmxSpec { block_rows: 4, prefetch: 2048 },
        AmxSpec { block_rows: 2, prefetch: 64 },
        AmxSpec { block_rows: 4, prefetch: 1 << 20 },
    ];
    let mut seed = 9000;
    for spec in specs {
        for m in [1, 13, 33, 49, 61, 64, 77, 130] {
            for (n, k) in [(16, 64), (20, 128), (37, 12), (32, 68), (48, 192)] {
                for (segments, lds) in [(1, 0), (3, k + 4)] {
                    for reset in [false, true] {
                        seed += 1;
                        let lda = segments * (k + 4) + 4;
                        let shape = GemmShape { segments, lds, lda, ldc: n + 3, reset, ..GemmShape::dense(m, n, k) };
                        check_spec(shape, spec, seed);
                    }
                }
            }
        }
    }
    // Padded B rows (`ldb` beyond the columns: packed panels of a wider layer).
    for spec in specs {
        seed += 1;
        check_spec(GemmShape { ldb: 4 * 40, reset: true, ..GemmShape::dense(61, 16, 256) }, spec, seed);
    }
}

/// Calls of more than two row tiles that stream B take tall blocks that prefetch it; the others
/// the square blocks without prefetching. A spec out of range is a typed error.
#[test]
fn the_default_amx_spec_prefetches_in_tall_blocks_and_bad_specs_are_errors() {
    use iced_x86::Mnemonic;
    let prefetches = |shape: &GemmShape| {
        let code = assemble_gemm(AMX, shape, Blocking::default_for(AMX)).unwrap_or_else(|e| panic!("{shape:?}: {e}"));
        crate::disasm::decode(&code, 0).iter().filter(|i| i.mnemonic() == Mnemonic::Prefetcht0).count()
    };
    let deep = GemmShape { segments: 3, lds: 9 * 512, lda: 512, reset: true, ..GemmShape::dense(61, 16, 1536) };
    assert_eq!(AmxSpec::default_for(&deep), AmxSpec { block_rows: 4, prefetch: 2048 });
    // One prefetch per line of the chunk's 16 B rows of 64 bytes, in each segment's k loop.
    assert_eq!(prefetches(&deep), 3 * 16);
    let shallow = GemmShape::dense(28, 64, 576);
    assert_eq!(AmxSpec::default_for(&shallow), AmxSpec { block_rows: 2, prefetch: 0 });
    assert_eq!(prefetches(&shallow), 0);
    // Tall, but with a B that stays in L1 from one call to the next.
    let resident = GemmShape::dense(64, 16, 1024);
    assert_eq!(AmxSpec::default_for(&resident), AmxSpec { block_rows: 2, prefetch: 0 });
    let shape = GemmShape::dense(16, 16, 64);
    for (spec, what) in
        [(AmxSpec { block_rows: 3, prefetch: 0 }, "block_rows"), (AmxSpec { block_rows: 4, prefetch: -64 }, "prefetch")]
    {
        let err = assemble_amx_gemm(&shape, &spec).unwrap_err();
        assert!(matches!(err, KernelError::BadShape { what: w, .. } if w == what), "{spec:?}: {err:?}");
    }
    let signed = GemmShape { a_dtype: DType::I8, ..shape };
    let err = assemble_amx_gemm(&signed, &AmxSpec::default_for(&signed)).unwrap_err();
    assert_eq!(err, KernelError::ADType { variant: AMX, found: DType::I8 });
}

/// Empty reductions: a reset writes zeros, an accumulating call leaves C; empty C: nothing.
#[test]
fn the_amx_kernel_handles_empty_shapes() {
    if !skip::has_level(IsaLevel::Amx, "the amx-int8 kernel") {
        return;
    }
    for reset in [false, true] {
        check(GemmShape { reset, ..GemmShape::dense(17, 20, 0) }, 7);
        check(GemmShape { reset, segments: 0, ..GemmShape::dense(17, 20, 64) }, 8);
        check(GemmShape { reset, ..GemmShape::dense(0, 20, 64) }, 9);
    }
}

/// What the tile kernel cannot do is a typed error: A of i8, offsets beyond 32 bits.
#[test]
fn the_amx_kernel_rejects_what_it_cannot_build() {
    let blocking = Blocking::default_for(AMX);
    let signed = GemmShape { a_dtype: DType::I8, ..GemmShape::dense(16, 16, 64) };
    assert_eq!(assemble_gemm(AMX, &signed, blocking), Err(KernelError::ADType { variant: AMX, found: DType::I8 }));
    let far = GemmShape { lda: 1 << 31, ..GemmShape::dense(33, 20, 64) };
    assert!(matches!(assemble_gemm(AMX, &far, blocking), Err(KernelError::OffsetTooLarge { .. })));
    let odd = GemmShape::dense(16, 16, 6);
    assert!(matches!(assemble_gemm(AMX, &odd, blocking), Err(KernelError::BadShape { what: "k", .. })));
}

/// Level `amx` takes the tile kernel for u8 A (exact, so also for a saturating declaration
/// whose inputs cannot saturate), the zmm triple for one that can, and the AVX2 kernels for
/// i8 A; only level `amx` runs the tile kernel.
#[test]
fn level_amx_selects_the_tile_kernel_for_u8_operands() {
    use crate::codegen::intrin::{Int8GemmFacts, select_int8_gemm};
    let facts = |a_signed, never_saturates, b_above_min| Int8GemmFacts { a_signed, never_saturates, b_above_min };
    let amx = IsaLevel::Amx;
    assert_eq!(select_int8_gemm(amx, false, facts(false, false, false)), Some(AMX));
    assert_eq!(select_int8_gemm(amx, true, facts(false, true, true)), Some(AMX));
    assert_eq!(select_int8_gemm(amx, true, facts(false, false, true)), Some(KernelVariant::AVX512_MADDUBS));
    assert_eq!(select_int8_gemm(amx, false, facts(true, false, true)), Some(KernelVariant::AVX2_SIGN));
    assert_eq!(select_int8_gemm(amx, false, facts(true, false, false)), Some(KernelVariant::AVX2_WIDEN));
    assert_eq!(
        select_int8_gemm(IsaLevel::Avx512Vnni, false, facts(false, false, false)),
        Some(KernelVariant::AVX512_VNNI)
    );
    assert_eq!(AMX.min_level(), Some(IsaLevel::Amx));
    assert!(IsaLevel::ALL.iter().all(|&l| AMX.runs_at(l) == (l == IsaLevel::Amx)));
    // Level amx runs the zmm kernels too.
    assert!(KernelVariant::AVX512_VNNI.runs_at(amx) && KernelVariant::AVX512_MADDUBS.runs_at(amx));
    assert!(!KernelVariant::AVX_VNNI.runs_at(amx));
    assert_eq!(amx.name(), "amx");
    assert!(amx.features().contains(&"amx-int8") && amx.features().contains(&"avx512vnni"));
}

/// Calls with tiles mostly idle (a few rows, a short k) take the zmm kernel at level `amx`;
/// a convolution's full row block of a long k takes the tiles.
#[test]
fn the_tile_kernel_is_chosen_where_its_tiles_are_busy() {
    use crate::codegen::intrin::amx_pays_off;
    assert!(!amx_pays_off(&GemmShape::dense(1, 64, 512)), "a GEMV");
    assert!(!amx_pays_off(&GemmShape::dense(4, 32, 8)), "k of 8");
    assert!(!amx_pays_off(&GemmShape::dense(4, 64, 64)), "4 rows, one chunk");
    assert!(amx_pays_off(&GemmShape::dense(32, 64, 576)));
    assert!(amx_pays_off(&GemmShape { segments: 9, lds: 192, ..GemmShape::dense(8, 32, 64) }));
}
