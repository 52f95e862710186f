//! Exported libraries (`tensorlift::export`): loaded from C, Rust and Python, bit for bit equal
//! to the JIT, every bad argument an error code and message, dispatch forced to each level.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use ir::DType;
use ir::interp::array::Array;
use tensorlift::export::dlpack::{DL_CPU, DL_UINT, DLDataType, DLDevice, DLTensor};
use tensorlift::export::load::ArgSpec;
use tensorlift::export::{ErrorCode, ExportOptions, Library, LoadError, LoadedLibrary, Operator, export, operators};
use tensorlift::{CompileOptions, IsaLevel, Target, Tensor};

/// Matmul sizes: 5-row tiles (`GemmInt8Knobs::for_shape`: 8 does not divide 50), 16-wide panels
/// (`shapes` exports odd sizes, ragged tiles included).
const M: i64 = 50;
const N: i64 = 48;
const K: i64 = 36;

fn out_dir(test: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("export").join(test)
}

/// Deterministic operands covering the extremes: A in 0..=255, B in -128..=127.
fn operands() -> (Array, Array) {
    let a: Vec<i64> = (0..M * K).map(|i| (i * 7 + 3) % 256).collect();
    let b: Vec<i64> = (0..K * N).map(|i| (i * 13 + 5) % 256 - 128).collect();
    (Array::from_i64(DType::U8, &[M, K], &a), Array::from_i64(DType::I8, &[K, N], &b))
}

/// `A · B` by the JIT of the same operator's function.
fn jit_matmul(op: &Operator) -> Array {
    let func = &op.funcs[&IsaLevel::Scalar];
    let compiled = tensorlift::compile(func, &CompileOptions::default()).expect("JIT compile");
    let (a, b) = operands();
    let (mut ta, mut tb) = (Tensor::from_array(&a), Tensor::from_array(&b));
    let mut tc = Tensor::zeros(DType::I32, &[M, N]).unwrap();
    compiled.call(&mut [&mut ta, &mut tb, &mut tc]).expect("JIT call");
    tc.to_array()
}

fn matmul_op() -> Operator {
    operators::matmul(M, N, K, &IsaLevel::ALL).expect("matmul operator")
}

/// The matmul library, exported once for every test here (all four levels).
fn matmul_library() -> &'static Library {
    static LIB: OnceLock<Library> = OnceLock::new();
    LIB.get_or_init(|| export(&[matmul_op()], &ExportOptions::new("tlmm"), &out_dir("matmul")).expect("export"))
}

fn run(command: &mut Command) -> (bool, String, String) {
    let out = command.output().expect("run command");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The C test program: computes the matmul on the same operands, writes C's bytes to argv[1],
/// then prints one line per bad call: `<case> <code> <message>`.
const C_PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tlmm.h"

enum { M = 50, N = 48, K = 36 };

int main(int argc, char **argv) {
    static uint8_t a[M * K];
    static int8_t b[K * N];
    static int32_t c[M * N];
    for (int i = 0; i < M * K; i++) a[i] = (uint8_t)((i * 7 + 3) % 256);
    for (int i = 0; i < K * N; i++) b[i] = (int8_t)((i * 13 + 5) % 256 - 128);
    int64_t sa[2] = {M, K}, sb[2] = {K, N}, sc[2] = {M, N};
    DLTensor ta = {a, {kDLCPU, 0}, 2, {kDLUInt, 8, 1}, sa, NULL, 0};
    DLTensor tb = {b, {kDLCPU, 0}, 2, {kDLInt, 8, 1}, sb, NULL, 0};
    DLTensor tc = {c, {kDLCPU, 0}, 2, {kDLInt, 32, 1}, sc, NULL, 0};
    DLTensor *args[3] = {&ta, &tb, &tc};
    int rc = tlmm_matmul(args, 3);
    if (rc != TLMM_OK) {
        fprintf(stderr, "matmul failed: %d %s\n", rc, tlmm_last_error());
        return 2;
    }
    FILE *f = fopen(argv[1], "wb");
    fwrite(c, sizeof c, 1, f);
    fclose(f);
    printf("manifest %s\n", tlmm_manifest());

    printf("nargs %d %s\n", tlmm_matmul(args, 2), tlmm_last_error());
    DLTensor bad = ta;
    bad.dtype.bits = 16;
    DLTensor *bad_args[3] = {&bad, &tb, &tc};
    printf("dtype %d %s\n", tlmm_matmul(bad_args, 3), tlmm_last_error());
    bad = ta;
    int64_t wrong[2] = {M, K + 4};
    bad.shape = wrong;
    printf("shape %d %s\n", tlmm_matmul(bad_args, 3), tlmm_last_error());
    bad = ta;
    bad.ndim = 1;
    printf("ndim %d %s\n", tlmm_matmul(bad_args, 3), tlmm_last_error());
    bad = ta;
    bad.data = NULL;
    printf("null %d %s\n", tlmm_matmul(bad_args, 3), tlmm_last_error());
    bad = ta;
    int64_t strides[2] = {1, M};
    bad.strides = strides;
    printf("strides %d %s\n", tlmm_matmul(bad_args, 3), tlmm_last_error());
    bad = ta;
    bad.device.device_type = kDLCUDA;
    printf("device %d %s\n", tlmm_matmul(bad_args, 3), tlmm_last_error());
    DLTensor out = tc;
    out.data = a;
    out.dtype = tc.dtype;
    int64_t small[2] = {1, 1};
    out.shape = small;
    DLTensor *overlap_args[3] = {&ta, &tb, &out};
    int64_t real_shape[2] = {M, N};
    out.shape = real_shape;
    printf("overlap %d %s\n", tlmm_matmul(overlap_args, 3), tlmm_last_error());
    int64_t compact[2] = {K, 1};
    bad = ta;
    bad.strides = compact;
    printf("compact %d %s\n", tlmm_matmul(bad_args, 3), tlmm_last_error());
    return 0;
}
"#;

/// Builds the C program against the library (once).
fn c_program() -> &'static PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let lib = matmul_library();
        let dir = lib.shared.parent().unwrap().to_path_buf();
        let source = dir.join("call_matmul.c");
        std::fs::write(&source, C_PROGRAM).unwrap();
        let exe = dir.join("call_matmul");
        let (ok, _, stderr) = run(Command::new("cc")
            .args(["-std=c11", "-Wall", "-Werror", "-o"])
            .arg(&exe)
            .arg(&source)
            .arg("-I")
            .arg(&dir)
            .arg("-L")
            .arg(&dir)
            .args(["-ltlmm", "-Wl,-rpath,$ORIGIN"]));
        assert!(ok, "cc: {stderr}");
        exe
    })
}

fn i32_bytes(a: &Array) -> Vec<u8> {
    a.to_i64_vec().iter().flat_map(|&v| (v as i32).to_le_bytes()).collect()
}

#[test]
fn c_program_gets_the_jit_result_at_every_level_this_cpu_has() {
    let expected = i32_bytes(&jit_matmul(&matmul_op()));
    let exe = c_program();
    let best = IsaLevel::detect().unwrap();
    let mut forced: Vec<Option<IsaLevel>> = vec![None];
    forced.extend(crate::skip::levels_here(IsaLevel::ALL).into_iter().map(Some));
    for level in forced {
        let result = exe.with_extension(format!("{}.bin", level.map_or("auto", IsaLevel::name)));
        let mut command = Command::new(exe);
        command.arg(&result).env_remove("TENSORLIFT_ISA");
        if let Some(level) = level {
            command.env("TENSORLIFT_ISA", level.name());
        }
        let (ok, stdout, stderr) = run(&mut command);
        assert!(ok, "{level:?}: {stderr}");
        assert_eq!(std::fs::read(&result).unwrap(), expected, "{level:?}: C result differs from the JIT");
        let selected = level.unwrap_or(best).name();
        assert!(stdout.contains(&format!("\"selected_isa\":\"{selected}\"")), "{stdout}");
        let code = |case: &str| -> (i32, String) {
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&format!("{case} ")))
                .unwrap_or_else(|| panic!("{case}: {stdout}"));
            let mut parts = line.splitn(3, ' ');
            parts.next();
            (parts.next().unwrap().parse().unwrap(), parts.next().unwrap_or("").to_string())
        };
        for (case, error, needle) in [
            ("nargs", ErrorCode::Nargs, "expected 3 arguments, found 2"),
            ("dtype", ErrorCode::Dtype, "argument 0 (A): expected dtype uint8, found code 1 bits 16"),
            ("shape", ErrorCode::Shape, "expected shape [50, 36], found [50, 40]"),
            ("ndim", ErrorCode::Ndim, "expected ndim 2, found 1"),
            ("null", ErrorCode::NullPointer, "argument 0 (A): data is NULL"),
            ("strides", ErrorCode::Strides, "expected compact row-major strides (or NULL), found [1, 50]"),
            ("device", ErrorCode::Device, "expected device kDLCPU (1), found 2"),
            ("overlap", ErrorCode::Overlap, "argument 2 (C), which the function writes, overlaps argument 0 (A)"),
            ("compact", ErrorCode::Ok, ""),
        ] {
            let (found, message) = code(case);
            assert_eq!(found, error as i32, "{case}: {message}");
            assert!(message.contains(needle), "{case}: {message}");
        }
    }
    // A level the library has but the CPU lacks, and a name that is no level.
    for (value, needle) in [("avx512-vnni", "this CPU does not support it"), ("sse9", "expected one of")] {
        if value == "avx512-vnni" && IsaLevel::Avx512Vnni.is_supported() {
            crate::skip::skip("refusing avx512-vnni", "this CPU has avx512-vnni");
            continue;
        }
        let (ok, _, stderr) = run(Command::new(exe).arg(exe.with_extension("x.bin")).env("TENSORLIFT_ISA", value));
        assert!(!ok && stderr.contains(&format!("matmul failed: {}", ErrorCode::UnsupportedCpu as i32)), "{stderr}");
        assert!(stderr.contains(needle), "{stderr}");
    }
}

/// Calls the library runtime's parallel loop directly (linked from the static archive). Per loop of `n` iterations it prints `n status fewest most failed` (the fewest and
/// most runs of any one iteration, the runs of the failing one), first for loops of 0 to 199
/// iterations, then with iteration n/3 failing (status 9); last, for a loop of 100000 whose
/// first iteration fails, `ran status count`.
const POOL_PROGRAM: &str = r#"#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
int32_t tensorlift_parallel_for(int32_t (*body)(const void *, int64_t), const void *closure, int64_t n);
static atomic_int runs[100000];
static int32_t count(const void *closure, int64_t i) {
    atomic_fetch_add(&runs[i], 1);
    return i == *(const int64_t *)closure ? 9 : 0;
}
static void loop(int64_t n, int64_t fail_at) {
    for (int64_t i = 0; i < n; i++) atomic_store(&runs[i], 0);
    int32_t status = tensorlift_parallel_for(count, &fail_at, n);
    int fewest = 1, most = 1;
    for (int64_t i = 0; i < n; i++) {
        int r = atomic_load(&runs[i]);
        if (r < fewest) fewest = r;
        if (r > most) most = r;
    }
    int failed = fail_at >= 0 ? atomic_load(&runs[fail_at]) : 1;
    printf("%lld %d %d %d %d\n", (long long)n, status, fewest, most, failed);
}
int main(void) {
    for (int64_t n = 0; n < 200; n++) loop(n, -1);
    for (int64_t n = 1; n < 200; n++) loop(n, n / 3);
    int64_t first = 0;
    for (int64_t i = 0; i < 100000; i++) atomic_store(&runs[i], 0);
    int32_t status = tensorlift_parallel_for(count, &first, 100000);
    int ran = 0, next = 100000;
    for (int64_t i = 0; i < 100000; i++) ran += atomic_load(&runs[i]) > 0;
    for (int64_t i = 1; i < 100000 && next == 100000; i++) if (atomic_load(&runs[i]) > 0) next = (int)i;
    printf("ran %d %d %d\n", status, ran, next);
    return 0;
}
"#;

#[test]
fn the_library_pool_runs_every_iteration_once_and_stops_at_a_failure() {
    let lib = matmul_library();
    let dir = lib.shared.parent().unwrap();
    let source = dir.join("call_pool.c");
    std::fs::write(&source, POOL_PROGRAM).unwrap();
    // The export makes the runtime's symbols local; a copy of the archive exports this one.
    let archive = dir.join("libpool.a");
    let (ok, _, stderr) =
        run(Command::new("objcopy").arg("--globalize-symbol=tensorlift_parallel_for").arg(&lib.archive).arg(&archive));
    assert!(ok, "objcopy: {stderr}");
    let exe = dir.join("call_pool");
    let (ok, _, stderr) = run(Command::new("cc")
        .args(["-std=c11", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&source)
        .arg(&archive)
        .arg("-lpthread"));
    assert!(ok, "cc: {stderr}");
    for threads in 1..=4 {
        let (ok, stdout, stderr) = run(Command::new(&exe).env("TENSORLIFT_NUM_THREADS", threads.to_string()));
        assert!(ok, "{threads} threads: {stderr}");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 200 + 199 + 1, "{threads} threads: {stdout}");
        for (k, line) in lines[..399].iter().enumerate() {
            let fields: Vec<i64> = line.split(' ').map(|f| f.parse().unwrap()).collect();
            if k < 200 {
                assert_eq!(fields, [k as i64, 0, 1, 1, 1], "{threads} threads");
            } else {
                // The failing iteration ran once and none twice; one thread skips every later one.
                let n = k as i64 - 199;
                let skipped = if threads == 1 && n > 1 { 0 } else { fields[2] };
                assert_eq!(fields, [n, 9, skipped, 1, 1], "{threads} threads");
            }
        }
        let last: Vec<&str> = lines[399].split(' ').collect();
        assert_eq!(last[..2], ["ran", "9"], "{threads} threads");
        // The failing thread stops: the rest of the caller's first chunk (the front half of its
        // share, 100000 / (2 · threads), which others take only from the back) does not
        // run; alone, the caller runs nothing else. How much the workers run before they see
        // the failure is up to the scheduler: not checked.
        let (ran, next): (usize, usize) = (last[2].parse().unwrap(), last[3].parse().unwrap());
        assert!(next >= 100_000 / (2 * threads), "{threads} threads: iteration {next} ran after the first failed");
        assert!(ran >= 1 && ran <= 100_000 - (100_000 / (2 * threads) - 1), "{threads} threads: {ran} ran");
        if threads == 1 {
            assert_eq!((ran, next), (1, 100_000), "a lone caller stops at the failure");
        }
    }
}

#[test]
fn rust_loader_calls_the_library_and_reports_its_errors() {
    let lib = LoadedLibrary::open(&matmul_library().shared).expect("load");
    assert_eq!(lib.operators(), ["matmul"]);
    assert_eq!(lib.selected_isa(), IsaLevel::detect().unwrap().name());
    let manifest = lib.manifest();
    assert_eq!(manifest["abi_version"], 1);
    assert_eq!(manifest["dlpack_version"], "1.0");
    assert_eq!(manifest["isa_levels"], serde_json::json!(["scalar", "avx2", "avx-vnni", "avx512-vnni", "amx"]));
    let args = &manifest["operators"][0]["args"];
    assert_eq!(args[0], serde_json::json!({"name": "A", "dtype": "uint8", "shape": [M, K], "role": "input"}));
    assert_eq!(args[2]["role"], "output");

    let (a, b) = operands();
    let (mut ta, mut tb) = (Tensor::from_array(&a), Tensor::from_array(&b));
    let mut tc = Tensor::zeros(DType::I32, &[M, N]).unwrap();
    lib.call("matmul", &mut [&mut ta, &mut tb, &mut tc]).expect("call");
    assert!(tc.to_array().bits_eq(&jit_matmul(&matmul_op())));

    // Wrong dtype and shape through the typed API, a wrong count and a NULL through raw DLTensors.
    let mut wrong = Tensor::zeros(DType::I32, &[M, K]).unwrap();
    let err = lib.call("matmul", &mut [&mut wrong, &mut tb, &mut tc]).unwrap_err();
    assert!(matches!(err, LoadError::Call { code: Some(ErrorCode::Dtype), .. }), "{err}");
    let mut short = Tensor::zeros(DType::U8, &[M, K - 4]).unwrap();
    let err = lib.call("matmul", &mut [&mut short, &mut tb, &mut tc]).unwrap_err();
    assert!(err.to_string().contains("expected shape [50, 36], found [50, 32]"), "{err}");
    let err = lib.call("matmul", &mut [&mut ta, &mut tb]).unwrap_err();
    assert!(matches!(err, LoadError::Call { code: Some(ErrorCode::Nargs), .. }), "{err}");
    let mut shape = [M, N];
    let mut t = DLTensor {
        data: std::ptr::null_mut(),
        device: DLDevice { device_type: DL_CPU, device_id: 0 },
        ndim: 2,
        dtype: DLDataType { code: DL_UINT, bits: 8, lanes: 1 },
        shape: shape.as_mut_ptr(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };
    let mut raw = [&mut t as *mut DLTensor, std::ptr::null_mut(), std::ptr::null_mut()];
    // SAFETY: the tensor's shape holds `ndim` elements; the library rejects the NULLs.
    let err = unsafe { lib.call_raw("matmul", &mut raw, 3) }.unwrap_err();
    assert!(matches!(err, LoadError::Call { code: Some(ErrorCode::Shape | ErrorCode::NullPointer), .. }), "{err}");
    t.shape = [M, K].as_mut_ptr();
    let mut raw = [&mut t as *mut DLTensor, std::ptr::null_mut(), std::ptr::null_mut()];
    // SAFETY: as above.
    let err = unsafe { lib.call_raw("matmul", &mut raw, 3) }.unwrap_err();
    assert!(err.to_string().contains("argument 0 (A): data is NULL"), "{err}");
    let err = unsafe { lib.call_raw("nope", &mut raw, 3) }.unwrap_err();
    assert!(matches!(err, LoadError::NoOperator { .. }), "{err}");
    // The library still works after every failure.
    lib.call("matmul", &mut [&mut ta, &mut tb, &mut tc]).expect("call after errors");
}

fn tool(program: &str, args: &[&str], file: &Path) -> String {
    let (ok, stdout, stderr) = run(Command::new(program).args(args).arg(file));
    assert!(ok, "{program}: {stderr}");
    stdout
}

#[test]
fn the_library_exports_only_its_prefix_needs_only_libc_and_maps_nothing_writable_and_executable() {
    let lib = matmul_library();
    let symbols = tool("nm", &["-D", "--defined-only"], &lib.shared);
    let names: Vec<&str> = symbols.lines().filter_map(|l| l.split_whitespace().nth(2)).collect();
    assert_eq!(names.len(), 3, "{symbols}");
    assert!(names.iter().all(|n| n.starts_with("tlmm_")), "{symbols}");
    // The archive's only global definitions are the same functions.
    let archive = tool("nm", &["--defined-only", "-g"], &lib.archive);
    let globals: Vec<&str> = archive.lines().filter_map(|l| l.split_whitespace().nth(2)).collect();
    assert!(!globals.is_empty() && globals.iter().all(|n| n.starts_with("tlmm_")), "{archive}");

    let dynamic = tool("readelf", &["-dW"], &lib.shared);
    for line in dynamic.lines().filter(|l| l.contains("(NEEDED)")) {
        // glibc: libc, libpthread, and its dynamic loader (thread-local storage in a loaded library).
        assert!(["[libc.so", "[libpthread.so", "[ld-linux-x86-64.so"].iter().any(|l| line.contains(l)), "{line}");
    }
    assert!(!dynamic.contains("TEXTREL"), "{dynamic}");
    let segments = tool("readelf", &["-lW"], &lib.shared);
    let mut stack = false;
    for line in segments.lines().map(str::trim).filter(|l| l.starts_with("LOAD") || l.starts_with("GNU_STACK")) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // Flags are the letters before the alignment: `R`, `W`, `E`.
        let flags: String = fields[fields.len() - 2..].concat();
        assert!(!(flags.contains('W') && flags.contains('E')), "writable and executable: {line}");
        if line.starts_with("GNU_STACK") {
            stack = true;
            assert!(!flags.contains('E'), "executable stack: {line}");
        }
    }
    assert!(stack, "{segments}");
}

#[test]
fn the_same_operators_build_byte_identical_libraries() {
    let first = matmul_library();
    let second = export(&[matmul_op()], &ExportOptions::new("tlmm"), &out_dir("matmul_again")).expect("export");
    for (a, b) in [(&first.shared, &second.shared), (&first.archive, &second.archive), (&first.header, &second.header)]
    {
        assert_eq!(
            std::fs::read(a).unwrap(),
            std::fs::read(b).unwrap(),
            "{} differs from {}",
            a.display(),
            b.display()
        );
    }
}

#[test]
fn half_conversions_in_the_library_match_the_jit_on_every_f16_and_bf16() {
    use ir::te::{compute, placeholder};
    // Every 16-bit pattern as f16 and as bf16, widened to f32 and narrowed back from a perturbed f32.
    let (x, y) = (placeholder([65536], DType::F16, "x").unwrap(), placeholder([65536], DType::BF16, "y").unwrap());
    let widen = |src: &ir::Tensor, name: &str| compute([65536], |i| src.at([&i[0]]).cast(DType::F32), name).unwrap();
    let (h, bh) = (widen(&x, "h"), widen(&y, "bh"));
    let back = |src: &ir::Tensor, dtype: DType, name: &str| {
        compute([65536], |i| (src.at([&i[0]]) * ir::Expr::float(DType::F32, 1.0009765)).cast(dtype), name).unwrap()
    };
    let (h2, bh2) = (back(&h, DType::F16, "h2"), back(&bh, DType::BF16, "bh2"));
    let s = ir::schedule::create_schedule(&[&h, &bh, &h2, &bh2]);
    let func = ir::lower::lower(&s, &[&x, &y, &h, &bh, &h2, &bh2], "halves").unwrap();
    let op = Operator::portable("halves", &func, &[IsaLevel::Scalar]);
    let options = ExportOptions { levels: vec![IsaLevel::Scalar], ..ExportOptions::new("tlhalf") };
    let lib = export(&[op], &options, &out_dir("half")).expect("export");
    let loaded = LoadedLibrary::open(&lib.shared).expect("load");
    let bits: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
    let run = |call: &dyn Fn(&mut [&mut Tensor])| {
        let mut ts = vec![
            Tensor::from_le_bytes(DType::F16, &[65536], &bits).unwrap(),
            Tensor::from_le_bytes(DType::BF16, &[65536], &bits).unwrap(),
        ];
        ts.extend([DType::F32, DType::F32, DType::F16, DType::BF16].map(|d| Tensor::zeros(d, &[65536]).unwrap()));
        call(&mut ts.iter_mut().collect::<Vec<_>>());
        ts.iter().skip(2).map(|t| t.as_bytes().to_vec()).collect::<Vec<_>>()
    };
    let jit =
        tensorlift::compile(&func, &CompileOptions { target: Target::Level(IsaLevel::Scalar), ..Default::default() })
            .unwrap();
    let expected = run(&|ts| jit.call(ts).unwrap());
    let found = run(&|ts| loaded.call("halves", ts).unwrap());
    for (k, name) in ["f16->f32", "bf16->f32", "f32->f16", "f32->bf16"].iter().enumerate() {
        assert!(expected[k] == found[k], "{name}: the library's conversion differs from the JIT's");
    }
}

#[test]
fn export_rejects_bad_names_and_missing_levels() {
    let op = matmul_op();
    let dir = out_dir("bad");
    let err = export(std::slice::from_ref(&op), &ExportOptions::new("my-lib"), &dir).unwrap_err();
    assert!(err.to_string().contains("library name \"my-lib\": expected a C identifier"), "{err}");
    let mut renamed = op.clone();
    renamed.name = "1x".into();
    let err = export(&[renamed], &ExportOptions::new("ok"), &dir).unwrap_err();
    assert!(err.to_string().contains("operator name \"1x\""), "{err}");
    let err = export(&[op.clone(), op.clone()], &ExportOptions::new("ok"), &dir).unwrap_err();
    assert!(err.to_string().contains("exported twice"), "{err}");
    let scalar_only = Operator::portable("matmul", &op.funcs[&IsaLevel::Scalar], &[IsaLevel::Scalar]);
    let err = export(&[scalar_only], &ExportOptions::new("ok"), &dir).unwrap_err();
    assert!(err.to_string().contains("no function for level avx2"), "{err}");
    let err = operators::matmul(8, 0, 16, &IsaLevel::ALL).unwrap_err();
    assert!(err.to_string().contains("N: expected a positive size, found 0"), "{err}");
}

#[test]
fn python_loader_gets_the_jit_result_and_the_library_errors() {
    let Some(python) = crate::python::python_with(&["numpy"]) else { return };
    let lib = matmul_library();
    let expected = lib.shared.with_file_name("expected_for_python.bin");
    std::fs::write(&expected, i32_bytes(&jit_matmul(&matmul_op()))).unwrap();
    let loader_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let (ok, stdout, stderr) = run(Command::new(python)
        .arg(loader_dir.join("test_loader.py"))
        .arg(&lib.shared)
        .arg(&expected)
        .env("PYTHONPATH", &loader_dir));
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("python loader ok: tlmm"), "{stdout}");
}

/// A resnet-18 layer (R8: 3×3, 256 channels, padded; its weight preparation too) from C and
/// from Rust through the library, against the JIT of the same functions, with every level this
/// CPU has forced.
#[test]
fn a_resnet18_layer_from_c_and_rust_equals_the_jit_at_every_level() {
    use schedules::resnet18::{self, WeightBits, uniform};
    let layer = resnet18::layer("R8").unwrap();
    let levels = crate::skip::levels_here(IsaLevel::ALL);
    let ops = operators::resnet18_layer(layer, &levels, WeightBits::Eight, None).expect("layer");
    let dir = out_dir("r8");
    let options = ExportOptions { levels: levels.clone(), ..ExportOptions::new("tlr8") };
    let lib = export(&ops, &options, &dir).expect("export");
    let loaded = LoadedLibrary::open(&lib.shared).expect("load");
    assert_eq!(loaded.operators(), ["r8_prepare", "r8"]);
    let (prep_spec, run_spec) = (loaded.args("r8_prepare").unwrap().to_vec(), loaded.args("r8").unwrap().to_vec());

    // Inputs: u8 source, s8 weights in [-127, 127], small f32 bias and multipliers.
    let fill = |a: &ArgSpec, seed: u64| -> Tensor {
        let n = a.shape.iter().product::<i64>() as usize;
        match a.dtype {
            DType::U8 => Tensor::from_array(&Array::from_i64(DType::U8, &a.shape, &uniform(n, seed, 0, 255))),
            DType::I8 => Tensor::from_array(&Array::from_i64(DType::I8, &a.shape, &uniform(n, seed, -127, 127))),
            _ => {
                let v: Vec<f64> = uniform(n, seed, 1, 1000).iter().map(|&x| x as f64 * 2e-6).collect();
                Tensor::from_array(&Array::from_f64(DType::F32, &a.shape, &v))
            }
        }
    };
    let input =
        |a: &ArgSpec, seed: u64| if a.output { Tensor::zeros(a.dtype, &a.shape).unwrap() } else { fill(a, seed) };
    let prep_inputs: Vec<Tensor> = prep_spec.iter().enumerate().map(|(i, a)| input(a, 7 + i as u64)).collect();
    let run_inputs: Vec<Tensor> = run_spec.iter().enumerate().map(|(i, a)| input(a, 100 + i as u64)).collect();
    for (prefix, tensors) in [("prep", &prep_inputs), ("run", &run_inputs)] {
        for (i, t) in tensors.iter().enumerate() {
            std::fs::write(dir.join(format!("{prefix}{i}.bin")), t.as_bytes()).unwrap();
        }
    }
    // Preparation then layer, through `call` (JIT or library); returns the output bytes.
    let layer_output = |call: &dyn Fn(&str, &mut [&mut Tensor])| -> Vec<u8> {
        let mut prep = prep_inputs.clone();
        call("r8_prepare", &mut prep.iter_mut().collect::<Vec<_>>());
        let mut args = run_inputs.clone();
        args[1] = prep[1].clone();
        args[2] = prep[2].clone();
        call("r8", &mut args.iter_mut().collect::<Vec<_>>());
        args.last().unwrap().as_bytes().to_vec()
    };
    let jit_at = |level: IsaLevel| {
        let compiled: Vec<_> = ops
            .iter()
            .map(|op| {
                let options = CompileOptions { target: Target::Level(level), ..CompileOptions::default() };
                tensorlift::compile(&op.funcs[&level], &options).expect("JIT")
            })
            .collect();
        layer_output(&|op, ts| compiled[usize::from(op == "r8")].call(ts).expect("JIT call"))
    };
    let expected = jit_at(levels[0]);
    let distinct: std::collections::BTreeSet<u8> = expected.iter().copied().collect();
    assert!(distinct.len() > 100, "the output exercises the u8 range: {} values", distinct.len());
    for &level in &levels[1..] {
        assert!(jit_at(level) == expected, "the JIT at {level} differs from {}", levels[0]);
    }
    let from_rust = layer_output(&|op, ts| loaded.call(op, ts).expect("library call"));
    assert!(from_rust == expected, "library (selected {}) from Rust differs from the JIT", loaded.selected_isa());

    // Without VNNI the byte weights run sign transfer, which relies on no weight being -128: a
    // -128 (first, in the vector body, or last, in the scalar tail of the range check) is the
    // library's typed error, not a wrong result. With VNNI any weight is exact: the call runs
    // and equals the JIT of that level on the same weights.
    let selected = levels.iter().copied().find(|l| l.name() == loaded.selected_isa()).expect("a compiled level");
    let mut prep = prep_inputs.clone();
    loaded.call("r8_prepare", &mut prep.iter_mut().collect::<Vec<_>>()).unwrap();
    let packed = prep[1].as_bytes().to_vec();
    let jit_r8 = tensorlift::compile(
        &ops[1].funcs[&selected],
        &CompileOptions { target: Target::Level(selected), ..CompileOptions::default() },
    )
    .expect("JIT");
    for position in [0, 200, packed.len() - 1] {
        let mut bad = packed.clone();
        bad[position] = 0x80;
        let mut args = run_inputs.clone();
        args[1] = Tensor::from_le_bytes(DType::I8, &run_spec[1].shape, &bad).unwrap();
        args[2] = prep[2].clone();
        let result = loaded.call("r8", &mut args.iter_mut().collect::<Vec<_>>());
        if selected.has_vnni() {
            result.expect("any weight is exact on VNNI");
            let mut jit_args = run_inputs.clone();
            jit_args[1] = args[1].clone();
            jit_args[2] = prep[2].clone();
            jit_r8.call(&mut jit_args.iter_mut().collect::<Vec<_>>()).expect("JIT call");
            assert!(jit_args.last().unwrap().as_bytes() == args.last().unwrap().as_bytes(), "-128 at {position}");
        } else {
            let err = result.unwrap_err();
            assert!(matches!(err, LoadError::Call { code: Some(ErrorCode::ValueRange), .. }), "{err}");
            let needle = format!("element {position} is -128, expected a value in the declared range -127..=127");
            assert!(err.to_string().contains(&needle), "{err}");
        }
    }

    let source = dir.join("call_r8.c");
    std::fs::write(&source, tensorlift::export::harness::layer_program("tlr8", "r8", &prep_spec, &run_spec, 0))
        .unwrap();
    let exe = dir.join("call_r8");
    let (ok, _, stderr) = run(Command::new("cc")
        .args(["-std=c11", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&source)
        .arg("-I")
        .arg(&dir)
        .arg(&lib.archive)
        .arg("-lpthread"));
    assert!(ok, "cc (static archive): {stderr}");
    // Every level, on pools of 1 and 3 threads (more workers than this machine's cores).
    for level in &levels {
        for threads in ["1", "3"] {
            let _ = std::fs::remove_file(dir.join("out.bin"));
            let (ok, _, stderr) = run(Command::new(&exe)
                .arg(&dir)
                .env("TENSORLIFT_ISA", level.name())
                .env("TENSORLIFT_NUM_THREADS", threads));
            assert!(ok, "{level}, {threads} threads: {stderr}");
            let out = std::fs::read(dir.join("out.bin")).unwrap();
            assert!(out == expected, "C at {level} on {threads} threads differs from the JIT");
        }
    }
    // A -128 weight from C at every level: refused where the code relies on its absence (sign
    // transfer, below VNNI), computed where it does not.
    let weights = std::fs::read(dir.join("prep0.bin")).unwrap();
    let mut bad = weights.clone();
    bad[0] = 0x80;
    std::fs::write(dir.join("prep0.bin"), &bad).unwrap();
    for level in &levels {
        let (ok, _, stderr) = run(Command::new(&exe).arg(&dir).env("TENSORLIFT_ISA", level.name()));
        if level.has_vnni() {
            assert!(ok, "{level}: {stderr}");
        } else {
            assert!(
                !ok && stderr.contains("is -128, expected a value in the declared range -127..=127"),
                "{level}: {stderr}"
            );
        }
    }
    std::fs::write(dir.join("prep0.bin"), &weights).unwrap();
    // Callers on several threads at once: one gets the pool, the others run their loops inline.
    std::thread::scope(|s| {
        let calls: Vec<_> =
            (0..3).map(|_| s.spawn(|| layer_output(&|op, ts| loaded.call(op, ts).expect("concurrent call")))).collect();
        for call in calls {
            assert!(call.join().unwrap() == expected, "a concurrent call differs from the JIT");
        }
    });
}

/// The header compiles as C and C++, included twice, and coexists with `dlpack/dlpack.h` in
/// either order (a stand-in here: its include guard and a `DLTensor` of its own, which would
/// clash if both definitions were compiled).
#[test]
fn the_header_compiles_as_c_and_cpp_and_coexists_with_dlpack_h() {
    let lib = matmul_library();
    let dir = lib.header.parent().unwrap();
    std::fs::create_dir_all(dir.join("dlpack")).unwrap();
    std::fs::write(
        dir.join("dlpack/dlpack.h"),
        "#ifndef DLPACK_DLPACK_H_\n#define DLPACK_DLPACK_H_\n#include <stdint.h>\n\
         typedef enum { kDLCPU = 1, kDLCUDA = 2 } DLDeviceType;\n\
         typedef struct { DLDeviceType device_type; int32_t device_id; } DLDevice;\n\
         typedef enum { kDLInt = 0U, kDLUInt = 1U, kDLFloat = 2U } DLDataTypeCode;\n\
         typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;\n\
         typedef struct { void *data; DLDevice device; int32_t ndim; DLDataType dtype; int64_t *shape;\n\
         int64_t *strides; uint64_t byte_offset; } DLTensor;\n#endif\n",
    )
    .unwrap();
    let body = "int check(DLTensor **args) { return tlmm_matmul(args, 3) == TLMM_OK && tlmm_manifest() != 0; }\n";
    for (compiler, language, includes) in [
        ("cc", "c", "#include \"tlmm.h\"\n#include \"tlmm.h\"\n"),
        ("cc", "c", "#include \"dlpack/dlpack.h\"\n#include \"tlmm.h\"\n"),
        ("cc", "c", "#include \"tlmm.h\"\n#include \"dlpack/dlpack.h\"\n"),
        ("c++", "c++", "#include \"tlmm.h\"\n#include \"dlpack/dlpack.h\"\n"),
    ] {
        let source = dir.join(format!("header_check.{}", if language == "c" { "c" } else { "cc" }));
        std::fs::write(&source, format!("{includes}{body}")).unwrap();
        let (ok, _, stderr) = run(Command::new(compiler)
            .args(["-fsyntax-only", "-Wall", "-Werror", "-x", language, "-I"])
            .arg(dir)
            .arg(&source));
        assert!(ok, "{compiler} with {includes:?}: {stderr}");
    }
}

/// A gather whose indices come from data: an index outside its tensor is the library's typed
/// error naming the tensor (as `RuntimeError::IndexOutOfBounds` in the JIT), and in-range
/// indices give the JIT's values.
#[test]
fn a_gather_out_of_bounds_in_the_library_is_an_error_naming_the_tensor() {
    use ir::te::{compute, placeholder};
    let a = placeholder([4], DType::I32, "A").unwrap();
    let idx = placeholder([6], DType::I64, "Idx").unwrap();
    let out = compute([6], |i| a.at([&idx.at([&i[0]])]) * 2, "P").unwrap();
    let s = ir::schedule::create_schedule(&[&out]);
    let func = ir::lower::lower(&s, &[&a, &idx, &out], "gather").unwrap();
    let levels = [IsaLevel::Scalar];
    let options = ExportOptions { levels: levels.to_vec(), ..ExportOptions::new("tlgather") };
    let lib = export(&[Operator::portable("gather", &func, &levels)], &options, &out_dir("gather")).expect("export");
    let loaded = LoadedLibrary::open(&lib.shared).expect("load");
    let mut ta = Tensor::from_slice(&[4], &[10i32, 20, 30, 40]).unwrap();
    let mut tp = Tensor::zeros(DType::I32, &[6]).unwrap();
    let mut good = Tensor::from_slice(&[6], &[3i64, 0, 1, 2, 3, 0]).unwrap();
    loaded.call("gather", &mut [&mut ta, &mut good, &mut tp]).unwrap();
    assert_eq!(tp.to_vec::<i32>().unwrap(), [80, 20, 40, 60, 80, 20]);
    for bad in [[0i64, 1, 2, 4, 0, 0], [0, -1, 0, 0, 0, 0]] {
        let mut bad = Tensor::from_slice(&[6], &bad).unwrap();
        let err = loaded.call("gather", &mut [&mut ta, &mut bad, &mut tp]).unwrap_err();
        assert!(matches!(err, LoadError::Call { code: Some(ErrorCode::IndexOutOfBounds), .. }), "{err}");
        assert!(err.to_string().contains("out-of-bounds read of A"), "{err}");
        let jit = tensorlift::compile(&func, &CompileOptions::default()).unwrap();
        let jit_err = jit.call(&mut [&mut ta, &mut bad, &mut tp]).unwrap_err();
        assert!(jit_err.to_string().contains("out-of-bounds read of A"), "{jit_err}");
    }
}

/// With a tuning record, a layer's operators take its knobs (the packing's panel width is
/// its `nr`) and the manifest carries the record.
#[test]
fn an_exported_layer_takes_the_knobs_of_its_tuning_record_and_the_manifest_carries_it() {
    use schedules::resnet18::{self, WeightBits};
    let layer = resnet18::layer("R10").unwrap();
    use tensorlift::record::{CpuRef, Phase, RECORD_VERSION, Record, RecordSchedule, Status, TargetRef};
    let mut knobs = tensorlift::tune::space::Space::new(layer, 1).default_knobs();
    knobs.nr = 16;
    let record = Record {
        version: RECORD_VERSION,
        workload: tensorlift::tune::workload(layer),
        target: TargetRef {
            isa: "avx2".into(),
            cpu: CpuRef { vendor: "v".into(), family: 1, model: 2, name: "n".into() },
            features: vec![],
            threads: 1,
        },
        schedule: RecordSchedule {
            knobs: Some(knobs),
            auto: None,
            weights: WeightBits::Eight,
            phase: Phase::Validation,
            trace: None,
        },
        status: Status::Ok,
        median_ns: Some(1.0),
        gops: Some(1.0),
        compile_ms: Some(1.0),
        verified: true,
        measured_at: tensorlift::record::now_rfc3339(),
        error: None,
        peak_gops: None,
        peak_probe: None,
        point_features: None,
    };
    let levels = [IsaLevel::Scalar];
    let ops = operators::resnet18_layer(layer, &levels, WeightBits::Eight, Some(&record)).unwrap();
    let options = ExportOptions { levels: levels.to_vec(), ..ExportOptions::new("tltuned") };
    let lib = export(&ops, &options, &out_dir("tuned")).expect("export");
    let loaded = LoadedLibrary::open(&lib.shared).unwrap();
    // R10 has 512 output channels: 32 panels of 16.
    assert_eq!(loaded.args("r10").unwrap()[1].shape[0], 32);
    let manifest = loaded.manifest();
    for op in 0..2 {
        assert_eq!(manifest["operators"][op]["tuning"]["workload"]["key"], serde_json::json!(record.workload.key));
        assert_eq!(manifest["operators"][op]["tuning"]["schedule"]["knobs"]["nr"], 16);
    }
}
