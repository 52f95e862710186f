//! Statements: parallel loops, scratch buffers, promoted accumulators, branches, targets.

use ir::expr::{BinOp, CmpOp};
use ir::stmt::StmtKind;
use ir::{DType, Expr, ForKind, Func, ScalarType, Stmt, Var};

use super::*;
use crate::error::{CompileError, RuntimeError};
use crate::isa::IsaLevel;
use crate::target::Target;

/// `out[r, c] = a[r, c] * v + w[c % 3] + scratch` over a parallel row loop, with a captured
/// vector, a captured per-lane vector, a per-iteration scratch buffer and a nested parallel loop.
fn parallel_func(rows: i64, cols: i64) -> Func {
    let a = Buffer::new("a", DType::F32, vec![rows, cols]);
    let out = Buffer::new("out", DType::F32, vec![rows, cols]);
    let (r, c, k) = (Var::index("r"), Var::index("c"), Var::index("k"));
    let v = Var::new("v", DType::F32.with_lanes(4));
    let w = Var::new("w", DType::I32.with_lanes(3));
    let scratch = Buffer::new("scratch", DType::F32, vec![cols]);
    let row = |c: Expr| Expr::var(&r) * cols + c;
    let at = |c: &Var| Expr::ramp(row(Expr::var(c) * 4), Expr::index(1), 4);
    let fill = Stmt::for_loop(
        c.clone(),
        cols / 4,
        ForKind::Serial,
        Stmt::store(
            &scratch,
            vec![Expr::ramp(Expr::var(&c) * 4, Expr::index(1), 4)],
            Expr::load(&a, vec![at(&c)]) * Expr::var(&v),
        ),
    );
    let wsum = Expr::vector_reduce(ir::expr::VectorReduceOp::Add, Expr::var(&w), 1).cast(DType::F32);
    let use_it = Stmt::for_loop(
        k.clone(),
        cols / 4,
        ForKind::Parallel,
        Stmt::store(
            &out,
            vec![at(&k)],
            Expr::load(&scratch, vec![Expr::ramp(Expr::var(&k) * 4, Expr::index(1), 4)]) + Expr::broadcast(wsum, 4),
        ),
    );
    let body = Stmt::allocate(scratch, Stmt::seq(vec![fill, use_it]));
    let parallel = Stmt::for_loop(r, rows, ForKind::Parallel, body);
    let w_value = Expr::ramp(Expr::load(&a, vec![Expr::index(1)]).cast(DType::I32), Expr::int(DType::I32, 2), 3);
    let body = Stmt::let_stmt(
        v,
        Expr::broadcast(Expr::load(&a, vec![Expr::index(0)]), 4),
        Stmt::let_stmt(w, w_value, parallel),
    );
    Func { name: "parallel_rows".into(), params: vec![a, out], body }
}

#[test]
fn parallel_loops_match_interp_on_one_and_several_threads() {
    let (rows, cols) = (64, 2048);
    let func = parallel_func(rows, cols);
    let n = (rows * cols) as usize;
    let a = array_of(ScalarType::F32, n, &[1.5, -2.0, 3.25, 0.5, 7.0, -1e3]);
    let args = [Array::from_f64(DType::F32, &[rows, cols], &a.to_f64_vec()), Array::zeros(DType::F32, &[rows, cols])];
    for threads in [1, 2, 3] {
        let options = CompileOptions { threads: Some(threads), ..CompileOptions::default() };
        let compiled = check_with(&func, &args, &options);
        assert!(compiled.clif_text().contains("parallel_rows__par1"), "{}", compiled.clif_text());
        assert_eq!(compiled.threads(), Some(threads));
        if threads == 3 {
            // Iterations really run on more than one worker (retried: a sleeping worker takes a
            // moment to wake).
            let mut tensors: Vec<Tensor> = args.iter().map(Tensor::from_array).collect();
            for _ in 0..200 {
                if crate::runtime::host::workers_seen("tensorlift-3-") >= 2 {
                    break;
                }
                let mut refs: Vec<&mut Tensor> = tensors.iter_mut().collect();
                compiled.call(&mut refs).unwrap();
            }
            assert!(crate::runtime::host::workers_seen("tensorlift-3-") >= 2, "one worker ran every iteration");
        }
    }
}

#[test]
fn small_scratch_buffers_live_on_the_stack_and_large_ones_on_the_heap() {
    // 64 KiB: past the largest stack buffer.
    let n = 16384;
    let a = Buffer::new("a", DType::I32, vec![n]);
    let out = Buffer::new("out", DType::I32, vec![n]);
    let small = Buffer::new("small", DType::I32, vec![64]);
    let big = Buffer::new("big", DType::I32, vec![n]);
    let (i, j, k) = (Var::index("i"), Var::index("j"), Var::index("k"));
    let body = Stmt::seq(vec![
        Stmt::for_loop(
            i.clone(),
            n,
            ForKind::Serial,
            Stmt::store(&big, vec![Expr::var(&i)], Expr::load(&a, vec![Expr::var(&i)]) * Expr::int(DType::I32, 2)),
        ),
        Stmt::for_loop(
            j.clone(),
            64,
            ForKind::Serial,
            Stmt::store(&small, vec![Expr::var(&j)], Expr::load(&big, vec![Expr::var(&j) * 64])),
        ),
        Stmt::for_loop(
            k.clone(),
            n,
            ForKind::Serial,
            Stmt::store(
                &out,
                vec![Expr::var(&k)],
                Expr::load(&big, vec![Expr::index(n - 1) - Expr::var(&k)])
                    + Expr::load(&small, vec![Expr::var(&k) % 64]),
            ),
        ),
    ]);
    let body = Stmt::allocate(big, Stmt::allocate(small, body));
    let func = Func { name: "scratch".into(), params: vec![a, out], body };
    let args = [array_of(ScalarType::I32, n as usize, &[1.0, -7.0, 1e6, 3.0, 5.0]), Array::zeros(DType::I32, &[n])];
    let clif = check(&func, &args).clif_text().to_string();
    assert_eq!(clif.matches("stack_addr").count(), 1, "{clif}");
    assert_eq!(clif.matches("call fn").count(), 2, "one alloc and one free: {clif}");
}

#[test]
fn failed_scratch_allocation_is_a_typed_error() {
    let out = Buffer::new("out", DType::U8, vec![1]);
    // 2^62 bytes: a valid layout that no allocator can satisfy.
    let huge = Buffer::new("huge", DType::U8, vec![1 << 62]);
    let i = Var::index("i");
    let body = Stmt::allocate(
        huge.clone(),
        Stmt::for_loop(
            i.clone(),
            1,
            ForKind::Serial,
            Stmt::seq(vec![
                Stmt::store(&huge, vec![Expr::var(&i)], Expr::int(DType::U8, 7)),
                Stmt::store(&out, vec![Expr::var(&i)], Expr::load(&huge, vec![Expr::var(&i)])),
            ]),
        ),
    );
    let func = Func { name: "huge".into(), params: vec![out], body };
    let compiled = compile(&func, &CompileOptions::default()).unwrap();
    let mut t = Tensor::zeros(DType::U8, &[1]).unwrap();
    let err = compiled.call(&mut [&mut t]).unwrap_err();
    assert_eq!(err, RuntimeError::OutOfMemory);
    assert!(err.to_string().contains("out of memory"), "{err}");
}

/// A 2x8 register-blocked f32 matmul micro-kernel: the accumulator tile is an `Allocate` with
/// constant indices, so it must become SSA values (no stack slot, no memory traffic).
pub(crate) fn blocked_matmul(m: i64, n: i64, k: i64) -> Func {
    let a = Buffer::new("A", DType::F32, vec![m, k]);
    let b = Buffer::new("B", DType::F32, vec![k, n]);
    let c = Buffer::new("C", DType::F32, vec![m, n]);
    let acc = Buffer::new("acc", DType::F32, vec![2, 8]);
    let (io, jo, kk) = (Var::index("io"), Var::index("jo"), Var::index("k"));
    let tile = |r: i64| Expr::ramp(Expr::index(r * 8), Expr::index(1), 8);
    let row = |r: i64| Expr::var(&io) * 2 + r;
    let b_row = Var::new("b_row", DType::F32.with_lanes(8));
    let mut init = Vec::new();
    let mut update = Vec::new();
    let mut write = Vec::new();
    for r in 0..2 {
        init.push(Stmt::store(&acc, vec![tile(r)], Expr::broadcast(Expr::float(DType::F32, 0.0), 8)));
        let a_elem = Expr::load(&a, vec![row(r) * k + Expr::var(&kk)]);
        let sum = Expr::load(&acc, vec![tile(r)]) + Expr::broadcast(a_elem, 8) * Expr::var(&b_row);
        update.push(Stmt::store(&acc, vec![tile(r)], sum));
        let c_at = Expr::ramp(row(r) * n + Expr::var(&jo) * 8, Expr::index(1), 8);
        write.push(Stmt::store(&c, vec![c_at], Expr::load(&acc, vec![tile(r)])));
    }
    let inner = Stmt::seq(vec![
        Stmt::seq(init),
        Stmt::for_loop(
            kk.clone(),
            k,
            ForKind::Serial,
            Stmt::let_stmt(
                b_row,
                Expr::load(&b, vec![Expr::ramp(Expr::var(&kk) * n + Expr::var(&jo) * 8, Expr::index(1), 8)]),
                Stmt::seq(update),
            ),
        ),
        Stmt::seq(write),
    ]);
    let body = Stmt::for_loop(
        io,
        m / 2,
        ForKind::Serial,
        Stmt::for_loop(jo, n / 8, ForKind::Serial, Stmt::allocate(acc, inner)),
    );
    Func { name: "blocked_matmul".into(), params: vec![a, b, c], body }
}

#[test]
fn register_blocked_accumulators_are_promoted_to_registers() {
    let (m, n, k) = (8, 16, 32);
    let func = blocked_matmul(m, n, k);
    let args = [
        Array::from_f64(
            DType::F32,
            &[m, k],
            &array_of(ScalarType::F32, (m * k) as usize, &[0.5, -1.25, 3.0, 0.1, 2.0]).to_f64_vec(),
        ),
        Array::from_f64(
            DType::F32,
            &[k, n],
            &array_of(ScalarType::F32, (k * n) as usize, &[1.5, 0.3, -2.0, 7.0]).to_f64_vec(),
        ),
        Array::zeros(DType::F32, &[m, n]),
    ];
    let clif = check(&func, &args).clif_text().to_string();
    assert!(!clif.contains("stack"), "{clif}");
    // Per k: one A element and two B pieces loaded, no accumulator loads or stores.
    assert_eq!(clif.matches("load.f32x4").count(), 2, "{clif}");
}

#[test]
fn branches_and_lets() {
    let n = 64;
    let a = Buffer::new("a", DType::I16, vec![n]);
    let out = Buffer::new("out", DType::I16, vec![n]);
    let i = Var::index("i");
    let x = Var::new("x", DType::I16);
    let positive = Expr::cmp(CmpOp::Gt, Expr::var(&x), Expr::int(DType::I16, 0));
    let if_else = Stmt::new(StmtKind::If {
        cond: positive,
        then_case: Stmt::store(&out, vec![Expr::var(&i)], Expr::var(&x) * Expr::int(DType::I16, 2)),
        else_case: Some(Stmt::store(&out, vec![Expr::var(&i)], Expr::int(DType::I16, 0) - Expr::var(&x))),
    });
    let small = Expr::cmp(CmpOp::Lt, Expr::var(&i), Expr::index(5));
    let body = Stmt::let_stmt(
        x.clone(),
        Expr::load(&a, vec![Expr::var(&i)]),
        Stmt::seq(vec![
            if_else,
            Stmt::if_then(small, Stmt::store(&out, vec![Expr::var(&i)], Expr::int(DType::I16, 99))),
        ]),
    );
    let func =
        Func { name: "branches".into(), params: vec![a, out], body: Stmt::for_loop(i, n, ForKind::Serial, body) };
    check(
        &func,
        &[array_of(ScalarType::I16, n as usize, &[3.0, -4.0, 0.0, -32768.0, 20000.0]), Array::zeros(DType::I16, &[n])],
    );
}

#[test]
fn every_supported_isa_level_gives_the_same_results() {
    let mix = |x: &[Expr]| {
        let p = x[0].cast(DType::I32) * x[1].cast(DType::I32);
        let lt = Expr::cmp(CmpOp::Lt, x[0].cast(DType::I32), x[1].cast(DType::I32));
        let q = Expr::select(lt, p.clone(), Expr::binary(BinOp::Max, p, x[0].cast(DType::I32)));
        q.saturating_cast(DType::I8).cast(DType::F32) / Expr::broadcast(Expr::float(DType::F32, 3.0), 16)
    };
    let func = elementwise("isa_mix", &[DType::U8, DType::I8], &[(DType::F32, &mix)], 256, 16);
    let (a, b) = (sample_pairs(ScalarType::U8).0, sample_pairs(ScalarType::I8).1);
    let mut args = vec![a, b];
    args.extend(zeros_like(&func, 2));
    let levels = skip::levels_here(IsaLevel::ALL);
    assert!(!levels.is_empty());
    for level in levels {
        check_with(&func, &args, &CompileOptions { target: Target::Level(level), ..CompileOptions::default() });
    }
}

#[test]
fn ir_outside_the_final_form_is_a_typed_error() {
    let out = Buffer::new("out", DType::I32, vec![4, 4]);
    let i = Var::index("i");
    let vectorized = Stmt::for_loop(
        i.clone(),
        4,
        ForKind::Vectorized,
        Stmt::store(&out, vec![Expr::var(&i)], Expr::int(DType::I32, 1)),
    );
    let func = Func { name: "not_final".into(), params: vec![out.clone()], body: vectorized };
    let err = compile(&func, &CompileOptions::default()).err().expect("vectorized loops are rejected");
    assert!(matches!(&err, CompileError::Unsupported { what, .. } if what.contains("Vectorized")), "{err}");

    let two_d = Stmt::store(&out, vec![Expr::index(1), Expr::index(2)], Expr::int(DType::I32, 1));
    let func = Func { name: "not_flat".into(), params: vec![out], body: two_d };
    let err = compile(&func, &CompileOptions::default()).err().expect("multi-dimensional indices are rejected");
    assert!(err.to_string().contains("expected one flat i64 index"), "{err}");
}

/// A load of a buffer the function writes is translated once per stretch without writes:
/// `relu`'s `select(0 < x, x, 0)` reads `x` once (and becomes `maxps`), and the read after
/// the store sees the stored value.
#[test]
fn loads_of_written_buffers_are_reused_until_the_next_write() {
    let n = 64;
    let acc = Buffer::new("acc", DType::I32, vec![n]);
    let relu = Buffer::new("relu", DType::F32, vec![n]);
    let square = Buffer::new("square", DType::I32, vec![n]);
    let i = Var::index("i");
    let at = || vec![Expr::ramp(Expr::var(&i) * 4, Expr::index(1), 4)];
    let x = Expr::load(&acc, at()).cast(DType::F32.with_lanes(4)) * Expr::broadcast(Expr::float(DType::F32, 0.5), 4);
    let zero = Expr::broadcast(Expr::float(DType::F32, 0.0), 4);
    let relu_x = Expr::select(Expr::cmp(CmpOp::Lt, zero.clone(), x.clone()), x, zero);
    let bumped = Expr::load(&acc, at()) + Expr::broadcast(Expr::int(DType::I32, 3), 4);
    let body = Stmt::seq(vec![
        Stmt::store(&relu, at(), relu_x),
        Stmt::store(&acc, at(), bumped),
        Stmt::store(&square, at(), Expr::load(&acc, at()) * Expr::load(&acc, at())),
    ]);
    let func = Func {
        name: "reuse_loads".into(),
        params: vec![acc, relu, square],
        body: Stmt::for_loop(i, n / 4, ForKind::Serial, body),
    };
    let args = [
        array_of(ScalarType::I32, n as usize, &[5.0, -7.0, 0.0, 1000.0, -1.0, 46340.0]),
        Array::zeros(DType::F32, &[n]),
        Array::zeros(DType::I32, &[n]),
    ];
    let clif = check(&func, &args).clif_text().to_string();
    // One load each for relu's two reads, the bump, and the square's two reads after the store
    // (a store ends the stretch, whichever buffer it writes).
    assert_eq!(clif.matches("load.i32x4").count(), 3, "{clif}");
}
