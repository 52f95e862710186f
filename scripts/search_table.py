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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tensorlift", default="target/release/tensorlift")
    ap.add_argument("--points", type=int, default=300, help="random points measured per operator")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1000, help="the random search's seed (keep it apart from the suite's)")
    ap.add_argument("--out", required=True, help="a directory for the databases")
    ap.add_argument("--only", nargs="*", default=None, help="short names of the ops to measure")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for short, op, _ in SUITE:
        if a.only and short not in a.only:
            continue
        db = os.path.join(a.out, f"{short}.jsonl")
        if os.path.exists(db):
            os.remove(db)
        start = time.time()
        cmd = [a.tensorlift, "tune", "op", *op, "--trials", str(a.points), "--threads", str(a.threads),
               "--search", "random", "--seed", str(a.seed), "--format", "json", "--db", db]
        out = subprocess.run(cmd, text=True, capture_output=True)
        if out.returncode != 0:
            sys.exit(f"{' '.join(cmd)}: {out.stderr.strip()}")
        print(f"{short}: {a.points} points in {time.time() - start:.0f} s -> {db}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
