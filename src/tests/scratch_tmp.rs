//! temp
use super::*;
#[test]
fn scratch_print() {
    let add = |x: &[Expr]| x[0].clone() + x[1].clone();
    let func = elementwise("add_i32x8", &[DType::I32, DType::I32], &[(DType::I32, &add)], 64, 8);
    let f = compile(&func, &CompileOptions::default()).unwrap();
    eprintln!("{}", f.clif_text());
    let func = super::stmts::blocked_matmul(8, 16, 32);
    let f = compile(&func, &CompileOptions::default()).unwrap();
    eprintln!("{}", f.clif_text());
}
