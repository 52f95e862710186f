"""Compile time against session creation, interleaved: in each round, for each thread count
and model, `tensorlift run MODEL --format json` (its `compile_ms` and `phases_ms`) for every
binary given, onnxruntime's `InferenceSession(MODEL)` (wall time, in this process, the library
already loaded) and, with --ov, OpenVINO's `read_model` + `compile_model` (wall time).

Prints one JSON line per measurement, then per model and thread count the median of each
column and the median over rounds of the per-round ratio ours / onnxruntime (< 1: ours
faster). Run it with a Python that has onnxruntime (and openvino for --ov), e.g.
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
    """`tensorlift run`'s compile time and phases (ms) for `model` on `threads`."""
    out = subprocess.run(
        [binary, "run", model, "--format", "json", "--repeat", "1", "--threads", str(threads)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    d = json.loads(out)
    return d["compile_ms"], d.get("phases_ms")


def ort_session(model, threads):
    """onnxruntime's session creation (ms), all graph optimizations, `threads` intra-op threads."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    start = time.perf_counter()
    ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    return (time.perf_counter() - start) * 1e3


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
                    row[f"ours{i}"], row[f"phases{i}"] = ours(b, m, t)
                row["ort"] = ort_session(m, t)
                if a.ov:
                    row["ov"] = ov_compile(m, t)
                print(json.dumps(row), flush=True)
                rows.append(row)
    print(f"# CPU: {cpu()}")
    cols = [f"ours{i}" for i in range(len(a.binary))] + ["ort"] + (["ov"] if a.ov else [])
    print("| model | threads | " + " | ".join(f"{c} ms median (range)" for c in cols)
          + " | " + " | ".join(f"ours{i} / ort" for i in range(len(a.binary))) + " |")
    for m in a.models:
        for t in threads:
            sel = [x for x in rows if x["model"] == m and x["threads"] == t]
            cells = []
            for c in cols:
                v = [x[c] for x in sel if x[c] is not None]
                cells.append(f"{st.median(v):.1f} ({min(v):.0f}–{max(v):.0f})" if v else "-")
            ratios = [f"{st.median(x[f'ours{i}'] / x['ort'] for x in sel):.2f}" for i in range(len(a.binary))]
            print(f"| {m.split('/')[-1]} | {t} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
