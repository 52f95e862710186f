//! C programs that drive an exported library, for tests and benchmarks: a layer's weight
//! preparation, then the layer (`layer_program`), or a whole network (`network_program`), on
//! inputs read from files, optionally timed.

use super::dlpack::dl_dtype;
use super::load::ArgSpec;

fn bytes(a: &ArgSpec) -> usize {
    a.shape.iter().product::<i64>() as usize * a.dtype.bytes()
}

/// Declares `DLTensor <var>` over `data` with `a`'s shape and dtype.
fn tensor(c: &mut String, var: &str, a: &ArgSpec, data: &str) {
    let dt = dl_dtype(a.dtype);
    let dims: Vec<String> = a.shape.iter().map(i64::to_string).collect();
    c.push_str(&format!(
        "  int64_t {var}_shape[] = {{{}}};\n  DLTensor {var} = {{{data}, {{kDLCPU, 0}}, {}, {{{}, {}, 1}}, {var}_shape, NULL, 0}};\n",
        dims.join(", "),
        a.shape.len(),
        dt.code,
        dt.bits
    ));
}

/// A C program for library `lib`'s operators `<op>_prepare` (arguments `prep`) and `<op>`
/// (`run`, whose arguments 1 and 2 are the preparation's outputs 1 and 2): `prog DIR` reads
/// every other input from `DIR/prep<i>.bin` / `DIR/run<i>.bin`, runs both, and writes the
/// layer's output (its last argument) to `DIR/out.bin`. With `repeat > 0` it then calls the
/// layer `repeat` more times and prints the median wall time of one call in nanoseconds.
pub fn layer_program(lib: &str, op: &str, prep: &[ArgSpec], run: &[ArgSpec], repeat: usize) -> String {
    let mut c = prelude(lib);
    for (i, a) in prep.iter().enumerate() {
        let data =
            if a.output { format!("zeros({})", bytes(a)) } else { format!("load(dir, \"prep{i}.bin\", {})", bytes(a)) };
        tensor(&mut c, &format!("p{i}"), a, &data);
    }
    let refs: Vec<String> = (0..prep.len()).map(|i| format!("&p{i}")).collect();
    c.push_str(&format!(
        "  DLTensor *pargs[] = {{{}}};\n  int rc = {lib}_{op}_prepare(pargs, {});\n\
         \x20 if (rc) {{ fprintf(stderr, \"prepare: %d %s\\n\", rc, {lib}_last_error()); return 2; }}\n",
        refs.join(", "),
        prep.len()
    ));
    for (i, a) in run.iter().enumerate() {
        let data = match i {
            1 | 2 => format!("p{i}.data"),
            _ if a.output => format!("zeros({})", bytes(a)),
            _ => format!("load(dir, \"run{i}.bin\", {})", bytes(a)),
        };
        tensor(&mut c, &format!("r{i}"), a, &data);
    }
    let refs: Vec<String> = (0..run.len()).map(|i| format!("&r{i}")).collect();
    let last = run.len() - 1;
    c.push_str(&format!(
        "  DLTensor *rargs[] = {{{}}};\n  rc = {lib}_{op}(rargs, {});\n\
         \x20 if (rc) {{ fprintf(stderr, \"run: %d %s\\n\", rc, {lib}_last_error()); return 2; }}\n\
         \x20 char path[4096];\n  snprintf(path, sizeof path, \"%s/out.bin\", dir);\n\
         \x20 FILE *f = fopen(path, \"wb\");\n  fwrite(r{last}.data, 1, {}, f);\n  fclose(f);\n",
        refs.join(", "),
        run.len(),
        bytes(&run[last]),
    ));
    c.push_str(&timing(&format!("{lib}_{op}(rargs, {})", run.len()), repeat));
    c.push_str("  return 0;\n}\n");
    c
}

/// The program's start: includes, the helpers `zeros`, `load`, `by_value`, and `main` up to
/// the directory argument `dir`.
fn prelude(lib: &str) -> String {
    format!(
        "#define _POSIX_C_SOURCE 200112L\n#define _ISOC11_SOURCE\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <time.h>\n#include \"{lib}.h\"\n\
         /* Cache-line aligned, as `Tensor`s are: vector loads then never straddle two lines. */\n\
         static void *zeros(size_t bytes) {{\n\
         \x20 size_t size = (bytes + 63) / 64 * 64;\n  void *p = aligned_alloc(64, size ? size : 64);\n\
         \x20 memset(p, 0, size ? size : 64);\n  return p;\n}}\n\
         static void *load(const char *dir, const char *name, size_t bytes) {{\n\
         \x20 char path[4096];\n  snprintf(path, sizeof path, \"%s/%s\", dir, name);\n\
         \x20 void *p = zeros(bytes);\n  FILE *f = fopen(path, \"rb\");\n\
         \x20 if (!f || fread(p, 1, bytes, f) != bytes) {{ fprintf(stderr, \"cannot read %s\\n\", path); exit(3); }}\n\
         \x20 fclose(f);\n  return p;\n}}\n\
         static int by_value(const void *a, const void *b) {{\n\
         \x20 double x = *(const double *)a, y = *(const double *)b;\n  return (x > y) - (x < y);\n}}\n\
         int main(int argc, char **argv) {{\n  if (argc < 2) return 4;\n  const char *dir = argv[1];\n"
    )
}

/// `REPEAT` more calls of `call` (a C expression returning the status), timed: prints the
/// median wall time of one call in nanoseconds.
fn timing(call: &str, repeat: usize) -> String {
    format!(
        "  enum {{ REPEAT = {repeat} }};\n\
         \x20 if (REPEAT > 0) {{\n\
         \x20   static double ns[REPEAT > 0 ? REPEAT : 1];\n\
         \x20   for (int i = 0; i < REPEAT; i++) {{\n\
         \x20     struct timespec t0, t1;\n\
         \x20     clock_gettime(CLOCK_MONOTONIC, &t0);\n\
         \x20     int status = {call};\n\
         \x20     clock_gettime(CLOCK_MONOTONIC, &t1);\n\
         \x20     if (status) return 2;\n\
         \x20     ns[i] = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);\n\
         \x20   }}\n\
         \x20   qsort(ns, REPEAT, sizeof ns[0], by_value);\n\
         \x20   printf(\"%.0f\\n\", ns[REPEAT / 2]);\n\
         \x20 }}\n"
    )
}

/// A C program for a network library `lib` (`tensorlift export MODEL.onnx`), whose `run` takes
/// `args` (inputs, then outputs): `prog DIR` reads input `i` from `DIR/in<i>.bin`, runs the
/// network once and writes output `j` to `DIR/out<j>.bin`; with `repeat > 0` it then calls it
/// `repeat` more times and prints the median wall time of one call in nanoseconds. A rejected
/// call prints the code and `NAME_last_error()` and exits with 2.
pub fn network_program(lib: &str, args: &[ArgSpec], repeat: usize) -> String {
    let mut c = prelude(lib);
    let (mut inputs, mut outputs) = (0, 0);
    let mut writes = String::new();
    for (i, a) in args.iter().enumerate() {
        let data = if a.output {
            writes.push_str(&format!(
                "  {{ char path[4096];\n    snprintf(path, sizeof path, \"%s/out{outputs}.bin\", dir);\n    \
                 FILE *f = fopen(path, \"wb\");\n    if (!f || fwrite(a{i}.data, 1, {}, f) != {}) return 3;\n    \
                 fclose(f);\n  }}\n",
                bytes(a),
                bytes(a)
            ));
            outputs += 1;
            format!("zeros({})", bytes(a))
        } else {
            inputs += 1;
            format!("load(dir, \"in{}.bin\", {})", inputs - 1, bytes(a))
        };
        tensor(&mut c, &format!("a{i}"), a, &data);
    }
    let refs: Vec<String> = (0..args.len()).map(|i| format!("&a{i}")).collect();
    c.push_str(&format!(
        "  DLTensor *args[] = {{{}}};\n  int rc = {lib}_run(args, {});\n\
         \x20 if (rc) {{ fprintf(stderr, \"run: %d %s\\n\", rc, {lib}_last_error()); return 2; }}\n{writes}",
        refs.join(", "),
        args.len()
    ));
    c.push_str(&timing(&format!("{lib}_run(args, {})", args.len()), repeat));
    c.push_str("  return 0;\n}\n");
    c
}
