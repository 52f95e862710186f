"""Tune one operator with measurements fanned out on a Ray cluster.

The search runs here, centrally: each round asks `tensorlift tune op KIND ... --propose N --db DB`
for N new candidates (the search, trained on every record of this workload already in DB),
splits them into one batch per worker, runs each batch as a Ray task that pipes it through
`tensorlift measure` on a node with the target CPU (the custom resource `--resource`), and
appends the returned records to DB. Everything the search knows is in DB, so resuming after a
crash is running the same command again: records already there count towards `--trials`.

    ray start --head --resources='{"zen1": 2}'                    # on the head node
    ray start --address=HEAD:6379 --resources='{"zen1": 2}'       # on every other node
    python3 python/tensorlift_ray.py --address auto --resource zen1 --workers 4 \
        --trials 256 --db matmul.jsonl -- matmul --m 512 --n 512 --k 512 --dtype f32

Without `--address` it starts a local cluster with `--workers` worker processes.
"""

import argparse
import json
import os
import subprocess
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tensorlift", default=os.environ.get("TENSORLIFT_BIN", "tensorlift"),
                   help="the tensorlift binary on every node (default: $TENSORLIFT_BIN, else on PATH)")
    p.add_argument("--address", default=None, help="a running cluster (`auto`, HOST:PORT); default: a local one")
    p.add_argument("--workers", type=int, default=2, help="Ray tasks (measurement workers) per round")
    p.add_argument("--resource", default=None,
                   help="custom resource naming the target CPU's nodes; each task needs one unit")
    p.add_argument("--trials", type=int, required=True, help="records of this workload in DB to reach")
    p.add_argument("--batch", type=int, default=8, help="candidates per worker per round")
    p.add_argument("--db", required=True, help="the tuning database (JSON lines), read and appended")
    p.add_argument("--isa", default=None, help="ISA level to tune for (default: the best of the workers' CPU)")
    p.add_argument("--threads", type=int, default=None, help="threads a candidate may use")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("op", nargs=argparse.REMAINDER, help="-- KIND and its shape flags, as `tensorlift tune op` takes them")
    args = p.parse_args(argv)
    args.op = [a for a in args.op if a != "--"] if args.op and args.op[0] == "--" else args.op
    if not args.op:
        p.error("the operator is missing: -- KIND --shape-flags ...")
    return args


def tune_op_command(args):
    cmd = [args.tensorlift, "tune", "op"] + args.op + ["--db", args.db, "--trials", str(args.trials)]
    if args.isa:
        cmd += ["--isa", args.isa]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    return cmd


def propose(args, n):
    """Up to N new candidates from the search, as JSON lines (none already in DB; none once DB
    holds `--trials` records of the workload)."""
    out = subprocess.run(tune_op_command(args) + ["--propose", str(n)], text=True, capture_output=True)
    if out.returncode != 0:
        raise RuntimeError(f"tensorlift --propose failed ({out.returncode}): {out.stderr.strip()}")
    return [line for line in out.stdout.splitlines() if line.strip()]


def read_records(path):
    if not os.path.exists(path):
        return []
    records = []
    with open(path) as f:
        for line in f:
            if line.strip():
                records.append(json.loads(line))
    return records


def repair(path):
    """Drops a last line a crash left incomplete (no newline): the candidate is proposed again.
    Returns the bytes dropped."""
    if not os.path.exists(path):
        return 0
    with open(path, "rb+") as f:
        data = f.read()
        if not data or data.endswith(b"\n"):
            return 0
        keep = data.rfind(b"\n") + 1
        f.truncate(keep)
        return len(data) - keep


def append_records(path, lines):
    """Appends whole lines and syncs, so a crash leaves DB with complete records only."""
    with open(path, "a") as f:
        for line in lines:
            f.write(line.rstrip("\n") + "\n")
        f.flush()
        os.fsync(f.fileno())


def candidate_key(candidate):
    return json.dumps({"op": candidate.get("op"), "auto": candidate.get("auto"), "isa": candidate.get("isa")},
                      sort_keys=True)


def run(args):
    import ray

    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(num_cpus=args.workers, include_dashboard=False)
    resources = {args.resource: 1} if args.resource else {}

    @ray.remote(num_cpus=1, resources=resources, max_retries=2)
    def measure(binary, lines):
        """One batch through `tensorlift measure` on this node: the records, as JSON lines."""
        out = subprocess.run([binary, "measure"], input="".join(l + "\n" for l in lines), text=True,
                             capture_output=True)
        if out.returncode != 0:
            raise RuntimeError(f"tensorlift measure failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
        return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "records": [l for l in out.stdout.splitlines() if l.strip()]}

    dropped = repair(args.db)
    if dropped:
        print(f"{args.db}: dropped an incomplete last line ({dropped} bytes) left by a crash", file=sys.stderr)
    start = time.time()
    workload = None
    measured = 0
    pids = set()
    rounds = 0
    while True:
        # `--propose` counts this workload's records in DB against `--trials` and returns
        # nothing once they are reached, so the loop needs no state of its own.
        candidates = propose(args, args.workers * args.batch)
        if not candidates:
            break
        batches = [candidates[i::args.workers] for i in range(args.workers)]
        results = ray.get([measure.remote(args.tensorlift, b) for b in batches if b])
        lines = [line for r in results for line in r["records"]]
        pids.update((r["node"], r["pid"]) for r in results)
        if len(lines) != len(candidates):
            raise RuntimeError(f"{len(candidates)} candidates measured, {len(lines)} records returned")
        append_records(args.db, lines)
        measured += len(lines)
        rounds += 1
        workload = workload or json.loads(lines[0])["workload"]["key"]
    seconds = time.time() - start
    records = [r for r in read_records(args.db) if workload is None or r["workload"]["key"] == workload]
    ok = [r for r in records if r.get("status") == "ok" and r.get("verified") and r.get("median_ns")]
    best = min(ok, key=lambda r: r["median_ns"]) if ok else None
    summary = {
        "workload": workload,
        "rounds": rounds,
        "measured": measured,
        "records": len(records),
        "verified": len(ok),
        "seconds": seconds,
        "rate_per_s": measured / seconds if seconds > 0 else None,
        "worker_processes": len(pids),
        "best_ms": best["median_ns"] / 1e6 if best else None,
        "best_gops": best.get("gops") if best else None,
    }
    ray.shutdown()
    return summary


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    summary = run(args)
    if args.json:
        print(json.dumps(summary))
    else:
        for k, v in summary.items():
            print(f"{k}: {v}")
    return 0 if summary["verified"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
