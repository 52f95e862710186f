"""Measures the table the offline search replay reads (`examples/search_replay.rs`): for each
operator of the auto-scheduler's suite (scripts/autoschedule_suite.py), `tensorlift tune op`
with the random search for --points trials, every record in <out>/<short>.jsonl. Each point is
measured once, verified, in a worker process, as in a real search.

  python3 scripts/search_table.py --tensorlift target/release/tensorlift --points 300 \\
      --threads 1 --out /tmp/search_table
  cargo run --release --example search_replay -- --table /tmp/search_table --seeds 20
"""

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from autoschedule_suite import SUITE  # noqa: E402

# The shipped prior's operators (`--set prior`, tuning/prior.jsonl): the suite's kinds at OTHER
# shapes, never the suite's own (a test checks that no prior workload is a suite workload).
PRIOR = [
    ("depthwise-56x64", ["conv2d", "--ic", "64", "--oc", "64", "--h", "56", "--w", "56", "--kh", "3", "--kw", "3",
                         "--pad", "1", "--groups", "64"]),
    ("batch-matmul-8x96x128x64", ["batch-matmul", "--b", "8", "--m", "96", "--n", "128", "--k", "64"]),
    ("conv1x1-28-128-256", ["conv2d", "--ic", "128", "--oc", "256", "--h", "28", "--w", "28", "--kh", "1",
                            "--kw", "1"]),
    ("conv3x3-28-64-64", ["conv2d", "--ic", "64", "--oc", "64", "--h", "28", "--w", "28", "--kh", "3", "--kw", "3",
                          "--pad", "1"]),
    ("matmul-f32-256", ["matmul", "--m", "256", "--n", "256", "--k", "256", "--dtype", "f32"]),
    ("softmax-2048x256", ["softmax", "--rows", "2048", "--cols", "256"]),
    ("layernorm-256x1024", ["layernorm", "--rows", "256", "--cols", "1024"]),
    ("maxpool-56x64", ["pool", "--c", "64", "--h", "56", "--w", "56", "--k", "3", "--stride", "2"]),
    ("depthwise-28x128", ["conv2d", "--ic", "128", "--oc", "128", "--h", "28", "--w", "28", "--kh", "3", "--kw", "3",
                          "--pad", "1", "--groups", "128"]),
    ("batch-matmul-4x256x64x96", ["batch-matmul", "--b", "4", "--m", "256", "--n", "64", "--k", "96"]),
    ("matmul-f32-384x512x256", ["matmul", "--m", "384", "--n", "512", "--k", "256", "--dtype", "f32"]),
    ("softmax-512x2048", ["softmax", "--rows", "512", "--cols", "2048"]),
    ("layernorm-1024x512", ["layernorm", "--rows", "1024", "--cols", "512"]),
    ("maxpool-112x32", ["pool", "--c", "32", "--h", "112", "--w", "112", "--k", "3", "--stride", "2"]),
    ("conv3x3-14-256-256", ["conv2d", "--ic", "256", "--oc", "256", "--h", "14", "--w", "14", "--kh", "3",
                            "--kw", "3", "--pad", "1"]),
    ("conv1x1-14-256-1024", ["conv2d", "--ic", "256", "--oc", "1024", "--h", "14", "--w", "14", "--kh", "1",
                             "--kw", "1"]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tensorlift", default="target/release/tensorlift")
    ap.add_argument("--points", type=int, default=300, help="random points measured per operator")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1000, help="the random search's seed (keep it apart from the suite's)")
    ap.add_argument("--out", required=True, help="a directory for the databases")
    ap.add_argument("--only", nargs="*", default=None, help="short names of the ops to measure")
    ap.add_argument("--search-budget-ms", type=float, default=None,
                    help="tune op's --search-budget-ms (0: every point timed --repeat times; default: tune op's)")
    ap.add_argument("--set", choices=["suite", "prior"], default="suite",
                    help="the suite's operators, or the prior's (other shapes of the same kinds)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ops = [(short, op) for short, op, _ in SUITE] if a.set == "suite" else PRIOR
    for short, op in ops:
        if a.only and short not in a.only:
            continue
        db = os.path.join(a.out, f"{short}.jsonl")
        if os.path.exists(db):
            os.remove(db)
        start = time.time()
        cmd = [a.tensorlift, "tune", "op", *op, "--trials", str(a.points), "--threads", str(a.threads),
               "--search", "random", "--seed", str(a.seed), "--format", "json", "--db", db]
        if a.search_budget_ms is not None:
            cmd += ["--search-budget-ms", str(a.search_budget_ms)]
        out = subprocess.run(cmd, text=True, capture_output=True)
        if out.returncode != 0:
            sys.exit(f"{' '.join(cmd)}: {out.stderr.strip()}")
        print(f"{short}: {a.points} points in {time.time() - start:.0f} s -> {db}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
