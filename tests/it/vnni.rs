//! Int8 dot products from a schedule to machine code: vectorizing a reduce axis of extent 4
//! together with 4 columns gives the VPDPBUSD shape (`vectorize_loops`), which code generation
//! emits as the tree Cranelift folds into one `vpdpbusd` on VNNI targets. Every ISA level the
//! host runs must compute exactly what the reference interpreters do, on inputs that put every
//! boundary pair of a u8 and an i8 in every lane position.

use cranelift_codegen::settings::{self, Configurable};
use iced_x86::{EncodingKind, Instruction, Mnemonic};
use ir::expr::VectorReduceOp;
use ir::interp::array::Array;
use ir::schedule::{Schedule, create_schedule};
use ir::te::{Tensor, compute, placeholder, reduce_axis, sum};
use ir::{Buffer, DType, Expr, ForKind, Func, Stmt, Var};
use tensorlift::codegen::cranelift_flags;
use tensorlift::codegen::jit;
use tensorlift::disasm::decode;
use tensorlift::{CompileOptions, IsaLevel, Target, Tensor as RtTensor, build, compile};

const A_GRID: [i64; 6] = [0, 1, 127, 128, 254, 255];
const B_GRID: [i64; 6] = [-128, -127, -1, 0, 1, 127];

/// The decoded machine code of `func` compiled for `level`: by the runtime when the host
/// supports the level, else from its Cranelift flags without running it.
fn machine_code(func: &Func, level: IsaLevel) -> Vec<Instruction> {
    let code = if level.is_supported() {
        let options = CompileOptions { target: Target::Level(level), ..CompileOptions::default() };
        compile(func, &options).expect("compiles").machine_code().to_vec()
    } else {
        let mut builder = cranelift_codegen::isa::lookup(target_lexicon::Triple::host()).expect("x86-64 host");
        for flag in cranelift_flags(level) {
            builder.enable(flag).expect("known flag");
        }
        let isa = builder.finish(settings::Flags::new(settings::builder())).expect("valid flags");
        // No runtime function is called, so none needs an address.
        let (code, translation) = jit::compile(func, isa, IsaLevel::Scalar, |_| std::ptr::null()).expect("compiles");
        code.machine_code(&translation)
    };
    code.iter().flat_map(|f| decode(&f.bytes, f.address)).collect()
}

/// The encodings of every `vpdpbusd` in `code`.
fn vpdpbusd(code: &[Instruction]) -> Vec<EncodingKind> {
    code.iter().filter(|i| i.mnemonic() == Mnemonic::Vpdpbusd).map(|i| i.encoding()).collect()
}

fn has_pmaddubsw(code: &[Instruction]) -> bool {
    code.iter().any(|i| matches!(i.mnemonic(), Mnemonic::Pmaddubsw | Mnemonic::Vpmaddubsw))
}

/// Asserts the machine code for `level` uses VNNI exactly where it should: EVEX `vpdpbusd`
/// with AVX512-VNNI, VEX with AVX-VNNI, none below; never `pmaddubsw`.
fn assert_vpdpbusd(func: &Func, level: IsaLevel) {
    let code = machine_code(func, level);
    let encodings = vpdpbusd(&code);
    match level {
        IsaLevel::Avx512Vnni | IsaLevel::Amx => {
            assert!(!encodings.is_empty() && encodings.iter().all(|e| *e == EncodingKind::EVEX))
        }
        IsaLevel::AvxVnni => assert!(!encodings.is_empty() && encodings.iter().all(|e| *e == EncodingKind::VEX)),
        IsaLevel::Scalar | IsaLevel::Avx2 => assert!(encodings.is_empty(), "{level}: {encodings:?}"),
    }
    assert!(!has_pmaddubsw(&code), "{level}: an exact dot product must not saturate");
}

/// `C[i, j] = Σ_k i32(A[i, k]) · i32(B[k/4, j, k%4])` over `A: u8[m, k]` and `B: i8[k/4, n, 4]`
/// (4 consecutive `k` of a column packed, the `IntrinKind::Int8Gemm` layout). With `saturating`,
/// VPMADDUBSW's variant: adjacent pairs of products summed and saturated to i16 first.
///
/// Scheduled `split(j, 4)`, order `i, j.outer, ko, j.inner, ki` (or the pair index `kp`), and
/// `j.inner` vectorized with the innermost reduce axis: one 16-lane (or 8 pairs) reduction into
/// 4 lanes of `C` per `ko`.
fn gemm(m: i64, n: i64, k: i64, saturating: bool) -> ([Tensor; 3], Schedule) {
    let a = placeholder([m, k], DType::U8, "A").unwrap();
    let b = placeholder([k / 4, n, 4], DType::I8, "B").unwrap();
    let ko = reduce_axis(k / 4, "ko").unwrap();
    let inner = reduce_axis(if saturating { 2 } else { 4 }, if saturating { "kp" } else { "ki" }).unwrap();
    let c = compute(
        [m, n],
        |i| {
            let product = |ki: Expr| {
                a.at([&i[0], &(&ko * 4 + ki.clone())]).cast(DType::I32)
                    * b.at([&ko.to_expr(), &i[1], &ki]).cast(DType::I32)
            };
            if saturating {
                let pair = product(&inner * 2) + product(&inner * 2 + 1);
                sum(DType::I32, &[&ko, &inner], pair.saturating_cast(DType::I16).cast(DType::I32))
            } else {
                sum(DType::I32, &[&ko, &inner], product(inner.to_expr()))
            }
        },
        "C",
    )
    .unwrap();
    let mut s = create_schedule(&[&c]);
    let (jo, ji) = s.split(&c, &c.axis(1), 4).unwrap();
    s.reorder(&c, &[&c.axis(0), &jo, &ko, &ji, &inner]).unwrap();
    s.vectorize(&c, &ji).unwrap();
    s.vectorize(&c, &inner).unwrap();
    ([a, b, c], s)
}

/// Inputs of `gemm(6, 24, 24, _)` holding every pair of `A_GRID` × `B_GRID` in every lane
/// `jl*4 + kl` of the 16-lane dot product of row `i`, columns `jo*4 ..`, group `ko`: that lane
/// multiplies `A_GRID[(i + kl) % 6]` by `B_GRID[(jo + ko + jl + kl) % 6]`. Adjacent products
/// of A's 254 and 255 with B's -128 and -127 overflow i16, so saturation cannot go unnoticed.
fn grid_inputs() -> [Array; 2] {
    let a: Vec<i64> = (0..6 * 24).map(|x| A_GRID[(x / 24 + x % 4) % 6]).collect();
    let b: Vec<i64> = (0..6 * 24 * 4)
        .map(|x| {
            let (ko, j, kl) = (x / 96, x / 4 % 24, x % 4);
            B_GRID[(j / 4 + ko + j % 4 + kl) as usize % 6]
        })
        .collect();
    [Array::from_i64(DType::U8, &[6, 24], &a), Array::from_i64(DType::I8, &[6, 24, 4], &b)]
}

/// Builds `gemm` for every level the host runs and checks it bit for bit against the
/// tensor-expression definition, on the grid inputs and on every uniform pair of the grids;
/// returns the lowered function.
fn check_gemm(saturating: bool) -> Func {
    let ([a, b, c], schedule) = gemm(6, 24, 24, saturating);
    let uniform = A_GRID.iter().flat_map(|&x| B_GRID.iter().map(move |&y| (x, y))).map(|(x, y)| {
        [Array::from_i64(DType::U8, &[6, 24], &[x; 144]), Array::from_i64(DType::I8, &[6, 24, 4], &[y; 576])]
    });
    let inputs: Vec<[Array; 2]> = std::iter::once(grid_inputs()).chain(uniform).collect();
    let mut lowered = None;
    for level in crate::skip::levels_here(IsaLevel::ALL) {
        let options = CompileOptions { target: Target::Level(level), ..CompileOptions::default() };
        let kernel = build(&schedule, &[&a, &b, &c], "gemm", &options).expect("builds");
        for [ad, bd] in &inputs {
            let expected = ir::interp::te_eval::eval_te(&[&c], &[(&a, ad), (&b, bd)]).unwrap().remove(0);
            let mut args =
                [RtTensor::from_array(ad), RtTensor::from_array(bd), RtTensor::zeros(DType::I32, &[6, 24]).unwrap()];
            let [ta, tb, tc] = &mut args;
            kernel.compiled.call(&mut [ta, tb, tc]).unwrap();
            let got = tc.to_array();
            assert!(
                got.bits_eq(&expected),
                "{level}: C differs at {:?}\n{}",
                got.first_difference(&expected),
                kernel.lowered
            );
        }
        lowered = Some(kernel.lowered);
    }
    lowered.expect("the host runs the baseline level")
}

#[test]
fn a_vectorized_reduce_axis_of_4_becomes_vpdpbusd_on_vnni_targets() {
    let lowered = check_gemm(false);
    let text = lowered.to_string();
    assert!(
        text.contains("C[ramp(i*24 + j.outer*4, 1, 4)] = C[ramp(i*24 + j.outer*4, 1, 4)] + vector_reduce_add(i32x16("),
        "{text}"
    );
    for level in IsaLevel::ALL {
        assert_vpdpbusd(&lowered, level);
    }
}

#[test]
fn saturating_pair_sums_become_vpmaddubsw_and_never_vpdpbusd() {
    let lowered = check_gemm(true);
    for level in IsaLevel::ALL {
        let code = machine_code(&lowered, level);
        assert!(has_pmaddubsw(&code) && vpdpbusd(&code).is_empty(), "{level}");
    }
}

/// `for t in 0..36 { C[ramp(t*lanes/4, 1, lanes/4)] = dot(C[..], U[ramp(t*lanes, ..)],
/// S[ramp(t*lanes, ..)]) }` over `U: u8`, `S: i8`, with `U` and `S` holding every pair of the
/// grids in every lane position.
fn dot_func(name: &str, lanes: u16, dot: &dyn Fn(Expr, Expr, Expr) -> Expr) -> (Func, Vec<Array>) {
    let n = 36 * lanes as i64;
    let (u, s, c) = (
        Buffer::new("U", DType::U8, vec![n]),
        Buffer::new("S", DType::I8, vec![n]),
        Buffer::new("C", DType::I32, vec![n / 4]),
    );
    let t = Var::index("t");
    let at =
        |b: &Buffer, width: u16| Expr::load(b, vec![Expr::ramp(t.to_expr() * width as i64, Expr::index(1), width)]);
    let acc = at(&c, lanes / 4);
    let value = dot(acc.clone(), at(&u, lanes), at(&s, lanes));
    let index = Expr::ramp(t.to_expr() * (lanes / 4) as i64, Expr::index(1), lanes / 4);
    let body = Stmt::for_loop(t.clone(), 36, ForKind::Serial, Stmt::store(&c, vec![index], value));
    // Lane `l` of group `t` multiplies `A_GRID[(t + l) % 6]` by `B_GRID[(t / 6 + l) % 6]`: over
    // the 36 groups, every pair reaches every lane.
    let (group, lane) = (|x: i64| x / lanes as i64, |x: i64| x % lanes as i64);
    let uv: Vec<i64> = (0..n).map(|x| A_GRID[((group(x) + lane(x)) % 6) as usize]).collect();
    let sv: Vec<i64> = (0..n).map(|x| B_GRID[((group(x) / 6 + lane(x)) % 6) as usize]).collect();
    let cv: Vec<i64> = (0..n / 4).map(|x| x * 1_000_003 - 7).collect();
    let args = vec![
        Array::from_i64(DType::U8, &[n], &uv),
        Array::from_i64(DType::I8, &[n], &sv),
        Array::from_i64(DType::I32, &[n / 4], &cv),
    ];
    (Func { name: name.into(), params: vec![u, s, c], body }, args)
}

/// Runs `func` at every level the host runs and compares with the loop-IR interpreter.
fn check_exact(func: &Func, args: &[Array]) {
    let mut expected = args.to_vec();
    ir::interp::run_func(func, &mut expected).unwrap();
    for level in crate::skip::levels_here(IsaLevel::ALL) {
        let options = CompileOptions { target: Target::Level(level), ..CompileOptions::default() };
        let compiled = compile(func, &options).unwrap();
        let mut tensors: Vec<RtTensor> = args.iter().map(RtTensor::from_array).collect();
        compiled.call(&mut tensors.iter_mut().collect::<Vec<_>>()).unwrap();
        let got = tensors.last().unwrap().to_array();
        let want = expected.last().unwrap();
        assert!(got.bits_eq(want), "{} at {level}: output differs at {:?}", func.name, got.first_difference(want));
    }
}

#[test]
fn every_exact_spelling_of_the_dot_product_is_one_vpdpbusd_per_piece() {
    let i32 = |e: Expr| e.cast(DType::I32);
    let reduce = |p: Expr| {
        let lanes = p.dtype().lanes / 4;
        Expr::vector_reduce(VectorReduceOp::Add, p, lanes)
    };
    type Dot = Box<dyn Fn(Expr, Expr, Expr) -> Expr>;
    let spellings: [(&str, u16, Dot); 4] = [
        ("acc_plus_u_times_s", 16, Box::new(move |acc, u, s| acc + reduce(i32(u) * i32(s)))),
        ("s_times_u_plus_acc", 16, Box::new(move |acc, u, s| reduce(i32(s) * i32(u)) + acc)),
        ("s_through_i16", 16, Box::new(move |acc, u, s| acc + reduce(i32(u) * i32(s.cast(DType::I16))))),
        ("four_pieces", 64, Box::new(move |acc, u, s| acc + reduce(i32(u) * i32(s)))),
    ];
    for (name, lanes, dot) in spellings {
        let (func, args) = dot_func(name, lanes, &dot);
        check_exact(&func, &args);
        assert_eq!(vpdpbusd(&machine_code(&func, IsaLevel::Avx512Vnni)).len(), lanes as usize / 16, "{name}");
        for level in IsaLevel::ALL {
            assert_vpdpbusd(&func, level);
        }
    }
}

#[test]
fn products_that_are_not_u8_times_i8_stay_exact_without_vnni() {
    let i32 = |e: Expr| e.cast(DType::I32);
    let reduce = |p: Expr| Expr::vector_reduce(VectorReduceOp::Add, p, 4);
    type Dot = Box<dyn Fn(Expr, Expr, Expr) -> Expr>;
    let near_misses: [(&str, Dot); 2] = [
        // Both unsigned: VPDPBUSD would read one operand as signed.
        ("u_times_u", Box::new(move |acc, u, _| acc + reduce(i32(u.clone()) * i32(u)))),
        // `u8(s)` wraps the negative bytes: unsigned too, not the i8 it came from.
        ("s_wrapped_to_u8", Box::new(move |acc, u, s| acc + reduce(i32(u) * i32(s.cast(DType::U8))))),
    ];
    for (name, dot) in near_misses {
        let (func, args) = dot_func(name, 16, &dot);
        check_exact(&func, &args);
        assert!(vpdpbusd(&machine_code(&func, IsaLevel::Avx512Vnni)).is_empty(), "{name}");
    }
}

/// Loads whose lanes are runs of contiguous elements at constant offsets, the shape of a nested
/// reduction's operands (`broadcast(base) + ramp/run*stride + ramp%run`), are loaded a run at a
/// time; exact for every element size, run length and stride, repeated runs included.
#[test]
fn loads_in_runs_of_contiguous_elements_are_exact() {
    let cases = [
        (DType::U8, 16, 4, 0),
        (DType::U8, 32, 8, 11),
        (DType::I8, 16, 16, 5),
        (DType::I16, 16, 2, 7),
        (DType::I32, 8, 4, 9),
        (DType::F32, 8, 4, 0),
        (DType::U8, 16, 2, 3),
    ];
    for (dtype, lanes, run, stride) in cases {
        let n = lanes as i64;
        let len = 3 * 4 + (n / run) * stride + run;
        let (input, out) = (Buffer::new("in", dtype, vec![len]), Buffer::new("out", dtype, vec![4 * n]));
        let t = Var::index("t");
        let lane = || Expr::ramp(Expr::index(0), Expr::index(1), lanes);
        let splat = |v: Expr| Expr::broadcast(v, lanes);
        let index = splat(t.to_expr() * 3)
            + lane() / splat(Expr::index(run)) * splat(Expr::index(stride))
            + lane() % splat(Expr::index(run));
        let store = Stmt::store(
            &out,
            vec![Expr::ramp(t.to_expr() * n, Expr::index(1), lanes)],
            Expr::load(&input, vec![index]),
        );
        let name = format!("runs_{dtype}_x{lanes}_of_{run}_by_{stride}");
        let func = Func { name, params: vec![input, out], body: Stmt::for_loop(t, 4, ForKind::Serial, store) };
        let values: Vec<f64> = (0..len).map(|x| (x * 37 % 251) as f64 - 100.0).collect();
        check_exact(&func, &[Array::from_f64(dtype, &[len], &values), Array::zeros(dtype, &[4 * n])]);
        // Runs of 4 bytes or more are loaded whole; shorter ones lane by lane from the index.
        let clif = compile(&func, &CompileOptions::default()).unwrap().clif_text().to_string();
        let whole_runs = run as usize * dtype.bytes() >= 4;
        assert_eq!(clif.contains("extractlane"), !whole_runs, "{}:\n{clif}", func.name);
    }
}
