//! The `tensorlift` binary: verified results on success, a message and a failure status on
//! bad input.

use std::process::Command;

use tensorlift::IsaLevel;

/// Runs the `tensorlift` binary: whether it succeeded, its stdout and its stderr.
pub fn tensorlift(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorlift")).args(args).output().expect("run tensorlift");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn matmul_reports_a_verified_result_for_both_schedules() {
    for schedule in ["naive", "tiled"] {
        let (ok, stdout, stderr) = tensorlift(&[
            "matmul",
            "--m",
            "33",
            "--n",
            "20",
            "--k",
            "17",
            "--schedule",
            schedule,
            "--repeat",
            "2",
            "--print-ir",
        ]);
        assert!(ok, "{schedule}: {stderr}");
        assert!(stdout.contains("func matmul(A: u8[33, 17], B: i8[17, 20], C: i32[33, 20])"), "{stdout}");
        assert!(stdout.contains("matmul 33x20x17: verified true"), "{stdout}");
    }
}

#[test]
fn non_positive_sizes_threads_and_repeats_and_too_many_threads_are_errors_naming_the_flag() {
    for (flag, value) in
        [("--m", "0"), ("--n", "-5"), ("--k", "-1"), ("--threads", "0"), ("--repeat", "0"), ("--threads", "-2")]
    {
        let (ok, stdout, stderr) = tensorlift(&["matmul", flag, value]);
        assert!(!ok, "{flag} {value}");
        assert!(stdout.is_empty(), "{stdout}");
        let upper = flag.trim_start_matches('-').to_uppercase();
        assert!(
            stderr.contains(&format!(
                "error: invalid value '{value}' for '{flag} <{upper}>': must be at least 1, found {value}"
            )),
            "{stderr}"
        );
    }
    for command in ["matmul", "gemm", "resnet18"] {
        let (ok, _, stderr) = tensorlift(&[command, "--threads", "100000"]);
        assert!(!ok);
        assert!(
            stderr.contains(
                "error: invalid value '100000' for '--threads <THREADS>': must be at most 1024, found 100000"
            ),
            "{stderr}"
        );
    }
}

#[test]
fn sizes_the_machine_cannot_hold_fail_before_allocating_with_the_sizes_named() {
    // 10^12 bytes of A twice, of B four times, C and the reference's C at 4 bytes: 1.4·10^13;
    // the exact AVX2 GEMM adds A's i16 copy in the call and widens the packed B.
    let mut sizes = vec![(IsaLevel::Scalar, "12.7 TiB (A 1.8 TiB, B 3.6 TiB, C 3.6 TiB, the reference's C 3.6 TiB)")];
    if IsaLevel::Avx2.is_supported() {
        sizes.push((IsaLevel::Avx2, "16.4 TiB (A 3.6 TiB, B 5.5 TiB, C 3.6 TiB, the reference's C 3.6 TiB)"));
    }
    for (level, needed) in sizes {
        let args = ["gemm", "--m", "1000000", "--n", "1000000", "--k", "1000000", "--isa", level.name()];
        let (ok, stdout, stderr) = tensorlift(&args);
        assert!(!ok);
        assert!(stdout.is_empty(), "{stdout}");
        assert!(stderr.contains("error: gemm --m 1000000 --n 1000000 --k 1000000 "), "{stderr}");
        if cfg!(target_os = "linux") {
            assert!(stderr.contains(&format!(" needs {needed} but ")), "{level}: {stderr}");
            assert!(stderr.contains(" of memory are available (MemAvailable)"), "{stderr}");
        }
    }
    if cfg!(target_os = "linux") {
        let (ok, _, stderr) = tensorlift(&["matmul", "--m", "200000", "--n", "200000", "--k", "4"]);
        assert!(!ok);
        assert!(stderr.contains("error: matmul --m 200000 --n 200000 --k 4 needs "), "{stderr}");
    }
    // Byte counts past 64 bits are reported, not wrapped.
    let (ok, _, stderr) = tensorlift(&["gemm", "--m", "4611686018427387904", "--n", "32", "--k", "4"]);
    assert!(!ok);
    assert!(
        stderr.contains("error: gemm --m 4611686018427387904 --n 32 --k 4: the size of A overflows 64 bits"),
        "{stderr}"
    );
}

#[test]
fn a_large_gemm_and_matmul_are_verified_against_the_compiled_generic_schedule() {
    let (ok, stdout, stderr) = tensorlift(&[
        "gemm",
        "--m",
        "512",
        "--n",
        "512",
        "--k",
        "512",
        "--repeat",
        "1",
        "--threads",
        "1",
        "--format",
        "json",
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("\"verified\":true,"), "{stdout}");
    assert!(stdout.trim_end().ends_with(",\"reference\":\"generic-jit\"}"), "{stdout}");
    let (ok, stdout, stderr) = tensorlift(&["matmul", "--m", "512", "--n", "512", "--k", "512", "--repeat", "1"]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("matmul 512x512x512: verified true, ")
            && stdout.trim_end().ends_with(", reference generic-jit"),
        "{stdout}"
    );
    // Small sizes keep the interpreter, the definition itself.
    let mut args = SMALL_GEMM.to_vec();
    args.extend(["--format", "json"]);
    let (ok, stdout, stderr) = tensorlift(&args);
    assert!(ok, "{stderr}");
    assert!(stdout.trim_end().ends_with(",\"reference\":\"eval_te\"}"), "{stdout}");
}

#[test]
fn a_gemm_knob_out_of_range_is_named_as_the_flag() {
    // (`--mr` and `--nr` above M and N are capped, not errors: `shapes::gemm_caps_tiles_...`.)
    let cases: [(&[&str], &str); 5] = [
        (&["--mr", "0"], "error: invalid value '0' for '--mr <MR>': must be at least 1, found 0"),
        (&["--nr", "512"], "error: --nr 512 must be at most 256 (a row of a tile is one vector of nr lanes)"),
        (&["--nr", "-16"], "error: invalid value '-16' for '--nr <NR>': must be at least 1, found -16"),
        (&["--a-max", "256"], "error: invalid value '256' for '--a-max <A_MAX>': 256 is not in 0..=255"),
        (&["--a-max", "-1"], "error: invalid value '-1' for '--a-max <A_MAX>': -1 is not in 0..=255"),
    ];
    for (knob, message) in cases {
        let mut args = SMALL_GEMM.to_vec();
        args.extend(knob);
        let (ok, stdout, stderr) = tensorlift(&args);
        assert!(!ok, "{knob:?}");
        assert!(stdout.is_empty(), "{stdout}");
        assert!(stderr.contains(message), "{knob:?}: {stderr}");
    }
}

#[test]
fn an_isa_this_cpu_lacks_is_reported_before_any_line_of_output() {
    let lacking: Vec<_> = tensorlift::IsaLevel::ALL.into_iter().filter(|l| !l.is_supported()).collect();
    if lacking.is_empty() {
        crate::skip::skip("", "this CPU has every level: none to refuse");
    }
    for level in lacking {
        let commands: [&[&str]; 3] = [
            &SMALL_GEMM,
            &["gemm", "--m", "1000000", "--n", "1000000", "--k", "1000000"],
            &["resnet18", "--repeat", "1"],
        ];
        for command in commands {
            let mut args = command.to_vec();
            args.extend(["--isa", level.name()]);
            let (ok, stdout, stderr) = tensorlift(&args);
            assert!(!ok, "{args:?}");
            assert!(stdout.is_empty(), "{args:?}: {stdout}");
            assert!(
                stderr.starts_with(&format!("error: target {level} is not supported by this CPU (best available: ")),
                "{stderr}"
            );
        }
    }
}

fn tensorlift_env(args: &[&str], env: (&str, &str)) -> (bool, String, String) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_tensorlift")).args(args).env(env.0, env.1).output().expect("run tensorlift");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const SMALL_GEMM: [&str; 9] = ["gemm", "--m", "20", "--n", "64", "--k", "36", "--repeat", "2"];

#[test]
fn gemm_is_verified_at_every_level_this_cpu_has_and_forcing_another_is_an_error() {
    for level in tensorlift::IsaLevel::ALL {
        let mut args = SMALL_GEMM.to_vec();
        args.extend(["--isa", level.name(), "--format", "json", "--threads", "1"]);
        let (ok, stdout, stderr) = tensorlift(&args);
        if !level.is_supported() {
            assert!(!ok);
            assert!(
                stderr.contains(&format!("error: target {level} is not supported by this CPU (best available: ")),
                "{stderr}"
            );
            continue;
        }
        assert!(ok, "{level}: {stderr}");
        // The exact AVX2 GEMM's i16 panels default to half the columns: the same bytes. 20 rows
        // take 5-row tiles, which divide them.
        let nr = if level == tensorlift::IsaLevel::Avx2 { 16 } else { 32 };
        assert!(
            stdout.starts_with(&format!("{{\"m\":20,\"n\":64,\"k\":36,\"mr\":5,\"nr\":{nr},\"adjusted\":[],")),
            "{stdout}"
        );
        assert!(stdout.contains(&format!("\"isa\":\"{level}\",\"threads\":1,\"verified\":true,")), "{stdout}");
        let kernel = match level {
            tensorlift::IsaLevel::Scalar => "\"kernels\":[]",
            tensorlift::IsaLevel::Avx2 => "\"kernels\":[\"avx2-madd16 kernel for int16_gemm_5x16x36: ",
            tensorlift::IsaLevel::AvxVnni => "\"kernels\":[\"avx-vnni kernel for int8_gemm_5x32x36: ",
            tensorlift::IsaLevel::Avx512Vnni => "\"kernels\":[\"avx512-vnni kernel for int8_gemm_5x32x36: ",
            // 5 rows of k 36 are too small for tiles: zmm VNNI.
            tensorlift::IsaLevel::Amx => "\"kernels\":[\"avx512-vnni kernel for int8_gemm_5x32x36: ",
        };
        assert!(stdout.contains(kernel), "{stdout}");
    }
}

#[test]
fn gemm_prints_a_table_and_with_asm_the_disassembly_of_every_function() {
    let mut args = SMALL_GEMM.to_vec();
    args.push("--asm");
    let (ok, stdout, stderr) = tensorlift(&args);
    assert!(ok, "{stderr}");
    // The level `--isa auto` runs, and what its GEMM looks like: the B panel, the kernel and an
    // instruction of its inner loop.
    let level = tensorlift::Target::Native.level().expect("auto runs");
    let (panel, kernel) = match level {
        IsaLevel::Scalar => ("nr 32), tiles 5x32", None),
        IsaLevel::Avx2 => (
            "nr 16, as i16 pairs; A widened to i16 in the call), tiles 5x16",
            Some(("avx2-madd16 kernel for int16_gemm_5x16x36: ", "vpmaddwd", "ymm")),
        ),
        IsaLevel::AvxVnni => {
            ("nr 32), tiles 5x32", Some(("avx-vnni kernel for int8_gemm_5x32x36: ", "vpdpbusd", "ymm")))
        }
        IsaLevel::Avx512Vnni => {
            ("nr 32), tiles 5x32", Some(("avx512-vnni kernel for int8_gemm_5x32x36: ", "vpdpbusd", "zmm")))
        }
        IsaLevel::Amx => {
            ("nr 32), tiles 5x32", Some(("avx512-vnni kernel for int8_gemm_5x32x36: ", "vpdpbusd", "zmm")))
        }
    };
    let header = format!("gemm 20x64x36 u8 x i8 -> i32, B pre-packed ({panel}, isa {level}, ");
    assert!(stdout.starts_with(&header), "{header}\n{stdout}");
    assert!(stdout.contains("\nverified      true (against eval_te of the plain matmul)\n"), "{stdout}");
    assert!(stdout.contains("\n; gemm (cranelift, "), "{stdout}");
    match kernel {
        Some((kernel, mnemonic, register)) => {
            assert!(stdout.contains("of peak       "), "{stdout}");
            assert!(stdout.contains(&format!("\nkernel        {kernel}")), "{stdout}");
            assert!(stdout.contains(&format!("({kernel}")), "{stdout}");
            // The mnemonic (after any `{vex}`) and its first operand's register class.
            let uses = stdout.lines().any(|line| {
                let mut words = line.split_whitespace().skip_while(|w| *w != mnemonic);
                words.next().is_some() && words.next().is_some_and(|operand| operand.starts_with(register))
            });
            assert!(uses, "no {mnemonic} {register}: {stdout}");
            assert!(stdout.contains("vzeroupper"), "{stdout}");
        }
        None => {
            assert!(
                stdout.contains(&format!("\npeak          none (no hand-assembled kernel at level {level})")),
                "{stdout}"
            );
            assert!(!stdout.contains("\nkernel "), "{stdout}");
        }
    }
}

#[test]
fn the_isa_environment_variable_forces_the_level_of_auto_and_unknown_names_are_errors() {
    if crate::skip::has_level(tensorlift::IsaLevel::Avx2, "TENSORLIFT_ISA=avx2") {
        let (ok, stdout, stderr) = tensorlift_env(&SMALL_GEMM, ("TENSORLIFT_ISA", "avx2"));
        assert!(ok, "{stderr}");
        assert!(stdout.contains(", isa avx2, "), "{stdout}");
    }
    let (ok, _, stderr) = tensorlift_env(&SMALL_GEMM, ("TENSORLIFT_ISA", "sse9"));
    assert!(!ok);
    assert!(
        stderr.contains("error: ISA level: expected one of scalar|avx2|avx-vnni|avx512-vnni|amx, found \"sse9\""),
        "{stderr}"
    );
}

#[test]
fn gemm_rejects_sizes_below_1() {
    let (ok, _, stderr) = tensorlift(&["gemm", "--m", "0", "--n", "16", "--k", "4"]);
    assert!(!ok);
    assert!(stderr.contains("error: invalid value '0' for '--m <M>': must be at least 1, found 0"), "{stderr}");
    let (ok, _, stderr) = tensorlift(&["gemm", "--m", "-3", "--n", "16", "--k", "4"]);
    assert!(!ok);
    assert!(stderr.contains("error: invalid value '-3' for '--m <M>': must be at least 1, found -3"), "{stderr}");
    // Any other size works (`shapes`).
}

#[test]
fn peak_measures_every_method_this_cpu_has() {
    let (ok, stdout, stderr) = tensorlift(&["peak", "--format", "json"]);
    assert!(ok, "{stderr}");
    let peak: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert!(peak["cpu"].as_str().is_some_and(|c| !c.is_empty()), "{peak}");
    let probes = peak["probes"].as_array().expect("probes");
    let names: Vec<&str> = probes.iter().filter_map(|p| p["probe"].as_str()).collect();
    assert_eq!(
        names,
        [
            "vpdpbusd zmm",
            "vpdpbusd ymm",
            "vpmaddubsw+vpmaddwd+vpaddd zmm",
            "vpmaddubsw+vpmaddwd+vpaddd ymm",
            "vpsignb+vpmaddubsw+vpmaddwd+vpaddd ymm",
            "vpmaddwd+vpaddd ymm",
            "tdpbusd tmm"
        ]
    );
    let supported = |p: &serde_json::Value| p["supported"] == true;
    assert_eq!(supported(&probes[0]), tensorlift::IsaLevel::Avx512Vnni.is_supported(), "{peak}");
    // Every AVX2 CPU has the three ymm methods: no level is left without a peak.
    for p in &probes[3..6] {
        assert_eq!(supported(p), tensorlift::IsaLevel::Avx2.is_supported(), "{p}");
    }
    assert_eq!(supported(&probes[6]), tensorlift::IsaLevel::Amx.is_supported(), "{peak}");
    for p in probes.iter().filter(|p| supported(p)) {
        assert!(p["gops"].as_f64().is_some_and(|g| g > 0.0), "{p}");
    }
}

#[test]
fn resnet18_prints_one_verified_json_object_per_layer() {
    // The default knobs: a pre-tuned record of this CPU may pick another kernel family.
    let (ok, stdout, stderr) =
        tensorlift(&["resnet18", "--layer", "R7", "--repeat", "1", "--format", "json", "--no-db"]);
    assert!(ok, "{stderr}");
    let objects: Vec<serde_json::Value> =
        stdout.lines().map(|line| serde_json::from_str(line).expect("a JSON object per line")).collect();
    let [r7] = objects.as_slice() else { panic!("one object for one layer: {stdout}") };
    assert_eq!(r7["layer"], "R7");
    assert_eq!((&r7["verified"], &r7["layout"]), (&true.into(), &"nhwc".into()), "{r7}");
    assert_eq!(r7["ops"], 2 * 256 * 14 * 14 * 128);
    for field in ["compile_ms", "median_ms", "gops"] {
        assert!(r7[field].as_f64().is_some_and(|v| v > 0.0), "{field}: {r7}");
    }
    assert!(r7["isa"].as_str().is_some_and(|isa| tensorlift::IsaLevel::ALL.iter().any(|l| l.name() == isa)), "{r7}");
    assert!(r7["threads"].as_u64().is_some_and(|t| t >= 1), "{r7}");
    assert!(r7["schedule"].is_string() && r7["reference"].is_string(), "{r7}");
    // The data exercises the requantization: few outputs at 0 or 255.
    assert!(r7["saturated_pct"].as_f64().is_some_and(|p| p < 30.0), "{r7}");
    // Every level with a kernel has the peak of that kernel's method.
    let pct = &r7["pct_peak"];
    if tensorlift::IsaLevel::Avx2.is_supported() {
        assert!(pct.as_f64().is_some_and(|p| p > 0.0), "{r7}");
    } else {
        assert!(pct.is_null(), "{r7}");
    }
    assert_eq!(r7["weights"], "full", "{r7}");
    // Full-range weights: VNNI where the level has it, else pre-widened operands.
    let (kernel, probe) = match tensorlift::IsaLevel::detect() {
        Some(tensorlift::IsaLevel::Amx) => ("amx-int8", "tdpbusd tmm"),
        Some(tensorlift::IsaLevel::Avx512Vnni) => ("avx512-vnni", "vpdpbusd zmm"),
        Some(tensorlift::IsaLevel::AvxVnni) => ("avx-vnni", "vpdpbusd ymm"),
        Some(tensorlift::IsaLevel::Avx2) => ("avx2-madd16", "vpmaddwd+vpaddd ymm"),
        _ => {
            crate::skip::skip("its kernel and probe checks", "avx2: this CPU lacks it");
            return;
        }
    };
    assert_eq!((&r7["kernel"], &r7["peak_probe"]), (&kernel.into(), &probe.into()), "{r7}");
}

#[test]
fn resnet18_on_avx2_runs_pre_widened_operands_and_with_7bit_weights_the_proven_triple() {
    if !crate::skip::has_level(tensorlift::IsaLevel::Avx2, "") {
        return;
    }
    // The default knobs (a pre-tuned record may choose byte packing, `x86_conv::Packing`).
    for (weights, kernel, source) in [("full", "avx2-madd16", "i16"), ("7bit", "avx2-maddubs", "u8")] {
        let args = [
            "resnet18",
            "--layer",
            "R8",
            "--repeat",
            "1",
            "--isa",
            "avx2",
            "--weights",
            weights,
            "--format",
            "json",
            "--no-db",
        ];
        let (ok, stdout, stderr) = tensorlift(&args);
        assert!(ok, "{stderr}");
        let r8: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
        assert_eq!(
            (&r8["verified"], &r8["weights"], &r8["kernel"]),
            (&true.into(), &weights.into(), &kernel.into()),
            "{r8}"
        );
        assert_eq!(r8["knobs"]["gemm_source"], source, "{r8}");
        assert!(r8["pct_peak"].as_f64().is_some_and(|p| p > 0.0), "{r8}");
    }
}

#[test]
fn resnet18_runs_the_nchw_layout_verified() {
    let args = ["resnet18", "--layer", "R10", "--repeat", "1", "--layout", "nchw", "--format", "json"];
    let (ok, stdout, stderr) = tensorlift(&args);
    assert!(ok, "{stderr}");
    let r10: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!((&r10["verified"], &r10["layout"]), (&true.into(), &"nchw".into()), "{r10}");
}

#[test]
fn resnet18_runs_fc_on_the_tensorized_path_verified_by_the_graph_reference() {
    let (ok, stdout, stderr) =
        tensorlift(&["resnet18", "--layer", "FC", "--repeat", "1", "--format", "json", "--no-db"]);
    assert!(ok, "{stderr}");
    let fc: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(fc["verified"], true, "{fc}");
    assert_eq!(fc["ops"], 2 * 512 * 1000);
    assert_eq!((&fc["schedule"], &fc["reference"]), (&"x86_dense".into(), &"run_partition".into()), "{fc}");
    // The default knobs: one source row, a 1-row tile; OC 1000 takes 16-wide panels, the last
    // one padded.
    assert_eq!(fc["tuning"], "default");
    assert_eq!((&fc["knobs"]["mr"], &fc["knobs"]["nr"]), (&1.into(), &16.into()), "{fc}");
}

#[test]
fn resnet18_rejects_an_unknown_layer_by_name() {
    let (ok, stdout, stderr) = tensorlift(&["resnet18", "--layer", "R12"]);
    assert!(!ok);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr
            .contains("error: unknown layer \"R12\": expected one of R1, R2, R3, R4, R5, R6, R7, R8, R9, R10, R11, FC"),
        "{stderr}"
    );
}

#[test]
fn export_writes_a_library_and_reports_it_as_json() {
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli_export");
    let out_arg = out.to_str().unwrap();
    let (ok, stdout, stderr) = tensorlift(&[
        "export",
        "matmul",
        "--m",
        "37",
        "--n",
        "45",
        "--k",
        "70",
        "--out",
        out_arg,
        "--name",
        "mm",
        "--isa",
        "scalar,avx2",
        "--format",
        "json",
    ]);
    assert!(ok, "{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(report["name"], "mm");
    assert_eq!(report["isa_levels"], serde_json::json!(["scalar", "avx2"]));
    assert_eq!(report["operators"], 1);
    for file in ["libmm.so", "libmm.a", "mm.h"] {
        assert!(out.join(file).is_file(), "{file}");
    }
    assert!(report["size_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn export_rejects_bad_levels_names_and_sizes_with_messages() {
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli_export_bad");
    let out_arg = out.to_str().unwrap();
    for (args, needle) in [
        (vec!["--isa", "avx3"], "ISA level: expected one of scalar|avx2|avx-vnni|avx512-vnni|amx, found \"avx3\""),
        (vec!["--name", "my lib"], "library name \"my lib\": expected a C identifier"),
        (vec!["--k", "0"], "K: expected a positive size, found 0"),
        (vec!["--threads", "1,2"], "--threads applies to a model"),
    ] {
        let mut all = vec!["export", "matmul", "--m", "8", "--n", "16", "--out", out_arg];
        if args[0] != "--k" {
            all.extend(["--k", "8"]);
        }
        all.extend(args);
        let (ok, _, stderr) = tensorlift(&all);
        assert!(!ok && stderr.contains(needle), "{all:?}: {stderr}");
    }
}
