"""Compile time against session creation, interleaved: in each round, for each thread count
and model, `tensorlift run MODEL --format json` (its `compile_ms`, `compile_cpu_ms` and
`phases_ms`) for every binary given, onnxruntime's `InferenceSession(MODEL)` (wall time, and
this process's CPU time over it, every thread; in this process, the library already loaded)
and, with --ov, OpenVINO's `read_model` + `compile_model` (wall time).

Prints one JSON line per measurement, then per model and thread count the median of each
column and the median over rounds of the per-round ratio ours / onnxruntime (< 1: ours
faster), of wall times, then the same for CPU times. Run it with a Python that has onnxruntime (and openvino for --ov), e.g.
/tmp/peers-venv/bin/python.

Usage: compile_time.py MODEL.onnx [MODEL.onnx ...] --binary target/release/tensorlift
       [--binary OTHER] [--threads 1,2] [--rounds 5] [--ov]
"""
import argparse
import json
import statistics as st
import subprocess
import time

from measure import cpu


def ours(binary, model, threads):
    """`tensorlift run`'s compile time, its CPU time and phases (ms) for `model` on `threads`."""
    out = subprocess.run(
        [binary, "run", model, "--format", "json", "--repeat", "1", "--threads", str(threads)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    d = json.loads(out)
    return d["compile_ms"], d.get("compile_cpu_ms"), d.get("phases_ms")


def ort_session(model, threads):
    """onnxruntime's session creation, wall and this process's CPU time (ms), all graph
    optimizations, `threads` intra-op threads."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    start, cpu_start = time.perf_counter(), time.process_time()
    ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    return (time.perf_counter() - start) * 1e3, (time.process_time() - cpu_start) * 1e3


def ov_compile(model, threads):
    """OpenVINO's read + compile (ms), latency hint, `threads` inference threads; `None` for a
    model it does not read (the QOperator files' com.microsoft ops)."""
    import openvino as ov

    core = ov.Core()
    start = time.perf_counter()
    try:
        m = core.read_model(model)
        core.compile_model(m, "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads})
    except RuntimeError:
        return None
    return (time.perf_counter() - start) * 1e3


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("--binary", action="append", required=True, help="a tensorlift binary (repeat for A/B)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--ov", action="store_true", help="also OpenVINO's read + compile")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    rows = []
    for r in range(a.rounds):
        for t in threads:
            for m in a.models:
                row = {"round": r, "threads": t, "model": m}
                for i, b in enumerate(a.binary):
                    row[f"ours{i}"], row[f"ours{i}_cpu"], row[f"phases{i}"] = ours(b, m, t)
                row["ort"], row["ort_cpu"] = ort_session(m, t)
                if a.ov:
                    row["ov"] = ov_compile(m, t)
                print(json.dumps(row), flush=True)
                rows.append(row)
    print(f"# CPU: {cpu()}")
    for suffix, what in [("", "wall"), ("_cpu", "CPU")]:
        ours_cols = [f"ours{i}{suffix}" for i in range(len(a.binary))]
        cols = ours_cols + [f"ort{suffix}"] + (["ov"] if a.ov and not suffix else [])
        print(f"## {what}")
        print("| model | threads | " + " | ".join(f"{c} ms median (range)" for c in cols)
              + " | " + " | ".join(f"{c} / ort{suffix}" for c in ours_cols) + " |")
        for m in a.models:
            for t in threads:
                sel = [x for x in rows if x["model"] == m and x["threads"] == t]
                cells = []
                for c in cols:
                    v = [x[c] for x in sel if x[c] is not None]
                    cells.append(f"{st.median(v):.1f} ({min(v):.0f}–{max(v):.0f})" if v else "-")
                ratios = []
                for c in ours_cols:
                    r = [x[c] / x[f"ort{suffix}"] for x in sel if x[c] is not None and x[f"ort{suffix}"]]
                    ratios.append(f"{st.median(r):.2f}" if r else "-")
                print(f"| {m.split('/')[-1]} | {t} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
