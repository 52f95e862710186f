//! Any M, N, K on the GEMM paths, at every ISA level this CPU has: odd shapes through the library
//! API (`schedule_gemm_int8` compiled by `build`), the `gemm` and `matmul` commands (each checks
//! itself against the interpreter and says so) and an exported `matmul` library, every result of
//! the first and last bit for bit against a plain triple loop here.

use std::path::Path;
use std::process::Command;

use ir::DType;
use ir::te::placeholder;
use schedules::nn::{gemm_source, matmul_packed, pack_b_i16, pack_b_vnni};
use schedules::x86::{GemmInt8Knobs, schedule_gemm_int8, schedule_gemm_source};
use tensorlift::export::{ExportOptions, Operator, export, operators};
use tensorlift::{CompileOptions, IsaLevel, Target, Tensor, build};

/// (M, N, K): one element; the reported 1×16×4, 7×48×12 and 37×45×70; K = 1; N = 1; sizes
/// around a tile; and an M and an N that no default tile divides (67 rows: 8 tiles and 3 rows
/// of loops; 257 columns: 16 panels and 1 column of loops).
const SHAPES: [(i64, i64, i64); 9] =
    [(1, 1, 1), (1, 16, 4), (7, 48, 12), (37, 45, 70), (3, 17, 1), (17, 1, 7), (45, 3, 37), (70, 7, 3), (67, 257, 13)];

/// `A: u8[m, k]` and `B: i8[k, n]`, row-major, starting at 255 and -128 and running through every
/// value (the C driver below computes the same formulas).
fn operands(m: i64, n: i64, k: i64) -> (Vec<u8>, Vec<i8>) {
    let a = (0..m * k).map(|i| ((i * 7 + 255) % 256) as u8).collect();
    let b = (0..k * n).map(|i| ((i * 13) % 256 - 128) as i8).collect();
    (a, b)
}

/// `C = A · B` in i32, the plain way.
fn triple_loop(a: &[u8], b: &[i8], (m, n, k): (i64, i64, i64)) -> Vec<i32> {
    let (m, n, k) = (m as usize, n as usize, k as usize);
    let mut c = vec![0i32; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| i32::from(a[i * k + p]) * i32::from(b[p * n + j])).sum();
        }
    }
    c
}

fn i32_bytes(c: &[i32]) -> Vec<u8> {
    c.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `A · B` through `pack_b_vnni` (or `pack_b_i16` with an i16 `A`, `pairs`), both inside the
/// call, and `schedule_gemm_int8` with `knobs`, compiled for `level`; returns C and whether a
/// hand-assembled kernel is part of the function.
fn library_gemm(shape: (i64, i64, i64), knobs: GemmInt8Knobs, pairs: bool, level: IsaLevel) -> (Vec<i32>, bool) {
    let (m, n, k) = shape;
    let a = placeholder([m, k], DType::U8, "A").unwrap();
    let b = placeholder([k, n], DType::I8, "B").unwrap();
    let (pack, source_dtype) = if pairs { (2, DType::I16) } else { (4, DType::U8) };
    let bp = if pairs { pack_b_i16(&b, knobs.nr, "Bp") } else { pack_b_vnni(&b, knobs.nr, "Bp") }.unwrap();
    let source = gemm_source(&a, pack, source_dtype, "A'").unwrap();
    let c = matmul_packed(source.as_ref().unwrap_or(&a), &bp, n, DType::I32, "C").unwrap();
    let mut s = ir::schedule::create_schedule(&[&c]);
    schedule_gemm_int8(&mut s, &c, knobs).unwrap();
    if let Some(source) = &source {
        schedule_gemm_source(&mut s, source, knobs.parallel).unwrap();
    }
    let options = CompileOptions { target: Target::Level(level), ..CompileOptions::default() };
    let kernel = build(&s, &[&a, &b, &c], "gemm", &options).unwrap();
    let (a_values, b_values) = operands(m, n, k);
    let mut ta = Tensor::from_slice(&[m, k], &a_values).unwrap();
    let mut tb = Tensor::from_slice(&[k, n], &b_values).unwrap();
    // C starts non-zero: every element must be written.
    let mut tc = Tensor::from_slice(&[m, n], &vec![-7i32; (m * n) as usize]).unwrap();
    kernel.compiled.call(&mut [&mut ta, &mut tb, &mut tc]).unwrap();
    let has_kernel = kernel.compiled.machine_code().iter().any(|code| code.kernel.is_some());
    (tc.to_vec::<i32>().unwrap(), has_kernel)
}

#[test]
fn the_library_gemm_is_exact_on_odd_shapes_at_every_level() {
    for level in crate::skip::levels_here_for(IsaLevel::ALL, "the library GEMM") {
        for shape in SHAPES {
            let (m, n, k) = shape;
            let (a, b) = operands(m, n, k);
            let expected = triple_loop(&a, &b, shape);
            // The default 8 × 32 tiles (capped at C, tails in loops), and the tiles of the
            // commands for bytes and for i16 pairs.
            let cases = [
                (GemmInt8Knobs::default(), false),
                (GemmInt8Knobs::for_shape(m, n, false), false),
                (GemmInt8Knobs { parallel: false, ..GemmInt8Knobs::for_shape(m, n, true) }, true),
            ];
            for (knobs, pairs) in cases {
                let (c, has_kernel) = library_gemm(shape, knobs, pairs, level);
                let what = format!("{level} {m}x{n}x{k} {knobs:?} pairs {pairs}");
                assert!(c == expected, "{what}: differs from the triple loop");
                // Every level with kernels runs one: the loops alone are not what passed.
                assert_eq!(has_kernel, level >= IsaLevel::Avx2, "{what}");
            }
        }
    }
}

fn tensorlift(args: &[&str], isa: Option<IsaLevel>) -> (bool, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tensorlift"));
    command.args(args).env_remove("TENSORLIFT_ISA");
    if let Some(level) = isa {
        command.env("TENSORLIFT_ISA", level.name());
    }
    let out = command.output().expect("run tensorlift");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_gemm_and_matmul_commands_verify_odd_shapes_at_every_level() {
    for level in crate::skip::levels_here_for(IsaLevel::ALL, "the gemm and matmul commands") {
        // The exact AVX2 GEMM packs B as i16 pairs.
        let pairs = level == IsaLevel::Avx2;
        for (m, n, k) in SHAPES {
            let sizes = [m, n, k].map(|v| v.to_string());
            let [ms, ns, ks] = [&sizes[0], &sizes[1], &sizes[2]].map(String::as_str);
            let size_args = ["--m", ms, "--n", ns, "--k", ks, "--repeat", "1"];
            let mut args = vec!["gemm"];
            args.extend(size_args);
            args.extend(["--isa", level.name(), "--threads", "1", "--format", "json"]);
            let (ok, stdout, stderr) = tensorlift(&args, None);
            assert!(ok, "{args:?}: {stderr}");
            let json: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
            let knobs = GemmInt8Knobs::for_shape(m, n, pairs);
            assert_eq!((&json["mr"], &json["nr"]), (&knobs.mr.into(), &knobs.nr.into()), "{json}");
            assert_eq!((&json["isa"], &json["verified"]), (&level.name().into(), &true.into()), "{json}");
            assert_eq!((&json["adjusted"], &json["reference"]), (&serde_json::json!([]), &"eval_te".into()), "{json}");
            let mut args = vec!["matmul"];
            args.extend(size_args);
            let (ok, stdout, stderr) = tensorlift(&args, Some(level));
            assert!(ok, "{level} {args:?}: {stderr}");
            assert!(stdout.starts_with(&format!("matmul {m}x{n}x{k}: verified true, ")), "{stdout}");
        }
    }
}

#[test]
fn gemm_caps_tiles_larger_than_c_and_says_so() {
    let (ok, stdout, stderr) =
        tensorlift(&["gemm", "--m", "7", "--n", "45", "--k", "70", "--mr", "8", "--nr", "64", "--repeat", "1"], None);
    assert!(ok, "{stderr}");
    assert!(stdout.contains(", tiles 7x45, "), "{stdout}");
    assert!(stdout.contains("\nadjusted      --mr 8 capped at M = 7, --nr 64 capped at N = 45\n"), "{stdout}");
    assert!(stdout.contains("\nverified      true "), "{stdout}");
    let args = ["gemm", "--m", "3", "--n", "16", "--k", "4", "--mr", "9223372036854775807", "--repeat", "1"];
    let (ok, stdout, stderr) = tensorlift(&[&args[..], &["--format", "json"]].concat(), None);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains(",\"mr\":3,\"nr\":16,\"adjusted\":[\"--mr 9223372036854775807 capped at M = 3\"],"),
        "{stdout}"
    );
    assert!(stdout.contains(",\"verified\":true,"), "{stdout}");
}

/// The C driver of the exported library: per operator, the operands of `operands`, the call,
/// and C's bytes written to `<dir>/<operator>.bin`; the manifest on stdout.
fn c_driver(library: &str, ops: &[(String, (i64, i64, i64))]) -> String {
    let table: Vec<String> =
        ops.iter().map(|(op, (m, n, k))| format!("    {{\"{op}\", {library}_{op}, {m}, {n}, {k}}},")).collect();
    let upper = library.to_uppercase();
    format!(
        r#"#include <stdio.h>
#include <stdlib.h>
#include "{library}.h"

struct op {{ const char *name; int32_t (*call)(DLTensor *const *, int32_t); int64_t m, n, k; }};
static const struct op ops[] = {{
{}
}};

int main(int argc, char **argv) {{
    (void)argc;
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {{
        int64_t m = ops[o].m, n = ops[o].n, k = ops[o].k;
        uint8_t *a = malloc(m * k);
        int8_t *b = malloc(k * n);
        int32_t *c = malloc(m * n * sizeof *c);
        for (int64_t i = 0; i < m * k; i++) a[i] = (uint8_t)((i * 7 + 255) % 256);
        for (int64_t i = 0; i < k * n; i++) b[i] = (int8_t)((i * 13) % 256 - 128);
        for (int64_t i = 0; i < m * n; i++) c[i] = -7;
        int64_t sa[2] = {{m, k}}, sb[2] = {{k, n}}, sc[2] = {{m, n}};
        DLTensor ta = {{a, {{kDLCPU, 0}}, 2, {{kDLUInt, 8, 1}}, sa, NULL, 0}};
        DLTensor tb = {{b, {{kDLCPU, 0}}, 2, {{kDLInt, 8, 1}}, sb, NULL, 0}};
        DLTensor tc = {{c, {{kDLCPU, 0}}, 2, {{kDLInt, 32, 1}}, sc, NULL, 0}};
        DLTensor *args[3] = {{&ta, &tb, &tc}};
        int rc = ops[o].call(args, 3);
        if (rc != {upper}_OK) {{
            fprintf(stderr, "%s: %d %s\n", ops[o].name, rc, {library}_last_error());
            return 2;
        }}
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.bin", argv[1], ops[o].name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(c, sizeof *c, m * n, f) != (size_t)(m * n) || fclose(f) != 0) {{
            fprintf(stderr, "cannot write %s\n", path);
            return 3;
        }}
        free(a);
        free(b);
        free(c);
    }}
    printf("%s\n", {library}_manifest());
    return 0;
}}
"#,
        table.join("\n")
    )
}

#[test]
fn an_exported_matmul_library_is_exact_on_odd_shapes_at_every_level() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("export").join("odd_shapes");
    // One library of every shape (each link costs time), compiled for every level.
    let ops: Vec<(String, (i64, i64, i64))> =
        SHAPES.iter().map(|&(m, n, k)| (format!("mm_{m}x{n}x{k}"), (m, n, k))).collect();
    let library: Vec<Operator> = ops
        .iter()
        .map(|(name, (m, n, k))| Operator {
            name: name.clone(),
            ..operators::matmul(*m, *n, *k, &IsaLevel::ALL).unwrap()
        })
        .collect();
    let lib = export(&library, &ExportOptions::new("tlshapes"), &dir).expect("export");
    let source = dir.join("call_shapes.c");
    std::fs::write(&source, c_driver("tlshapes", &ops)).unwrap();
    let exe = dir.join("call_shapes");
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&source)
        .arg("-I")
        .arg(&dir)
        .arg("-L")
        .arg(&dir)
        .args(["-ltlshapes", "-Wl,-rpath,$ORIGIN"])
        .output()
        .expect("run cc");
    assert!(out.status.success(), "cc: {}", String::from_utf8_lossy(&out.stderr));
    assert!(lib.shared.is_file());
    for level in crate::skip::levels_here_for(IsaLevel::ALL, "the exported matmul library") {
        let results = dir.join(level.name());
        std::fs::create_dir_all(&results).unwrap();
        let out = Command::new(&exe).arg(&results).env("TENSORLIFT_ISA", level.name()).output().expect("run driver");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{level}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains(&format!("\"selected_isa\":\"{level}\"")), "{stdout}");
        for (name, shape) in &ops {
            let (a, b) = operands(shape.0, shape.1, shape.2);
            let found = std::fs::read(results.join(format!("{name}.bin"))).unwrap();
            assert!(found == i32_bytes(&triple_loop(&a, &b, *shape)), "{level} {name}: differs from the triple loop");
        }
    }
}
