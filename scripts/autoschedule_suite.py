"""The auto-scheduler's operator suite side by side: for each operator of
`schedules::catalog::OpSpec::suite`, `tensorlift tune op` with the learned search and with the
random search (same trials, same seed, interleaved op by op), then onnxruntime's node on the
same op (scripts/peers/ort_ops.py) in the same sitting. Prints a Markdown table and writes every
JSON result to --out. With --shared-db, the learned searches append to one database in suite
order, so each operator's cost model starts from the earlier operators' search records (their
points' features and times: `SearchOptions::prior`, transfer across operators); the random
searches keep one database each.

Columns: generic and tuned GOPS (validated medians, probe-corrected as `tune op` reports them),
the speedup, the tuned point's % of the peak probe measured beside it (int8 kernels), the
trials the learned search needed to reach the random search's best (within --tolerance) and
the random search's own (both searches measure the generic point first as the baseline, the
generic column, and neither counts it: trial 1 is the learned search's top-scored point and
the random search's first draw; both are counted from the `curve` that `tune op` reports), the
random search's expected trials to that level (its trials over the draws that reached it,
from `trial_gops`: where the random search's first hit is one draw of a random wait, this is
the wait's mean), the seconds until the learned search first reached 95% of its final
speed (trial index × the run's seconds per trial), the model's held-out Spearman, and
onnxruntime's GOPS.

The trials to random's best and random's expected trials are given twice: from each search's
own search-phase timings (as `tune op` reports them), and from common timings
(scripts/common_timing.py: after both searches of an operator, every distinct point either
measured successfully is timed again in one process, interleaved over --common-rounds rounds,
and each trial counts its point's median; every trial keeps its place, the tolerance is the
same). Unless --no-common. Each row also goes to OUT/suite.jsonl.

  python3 scripts/autoschedule_suite.py --tensorlift target/release/tensorlift --trials 64 \\
      --threads 1 --python /tmp/peers-venv/bin/python --out /tmp/suite
"""

import argparse
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common_timing  # noqa: E402

SUITE = [
    ("depthwise", ["conv2d", "--ic", "32", "--oc", "32", "--h", "112", "--w", "112", "--kh", "3", "--kw", "3",
                   "--pad", "1", "--groups", "32"], "conv2d 112x112 32->32 3x3 s1 p1 g32"),
    ("batch-matmul", ["batch-matmul", "--b", "12", "--m", "128", "--n", "64", "--k", "128"],
     "batch-matmul 12x128x64x128"),
    ("conv1x1", ["conv2d", "--ic", "256", "--oc", "64", "--h", "56", "--w", "56", "--kh", "1", "--kw", "1"],
     "conv2d 56x56 256->64 1x1 s1 p0 g1"),
    ("conv3x3", ["conv2d", "--ic", "128", "--oc", "128", "--h", "28", "--w", "28", "--kh", "3", "--kw", "3",
                 "--pad", "1"], "conv2d 28x28 128->128 3x3 s1 p1 g1"),
    ("matmul-f32", ["matmul", "--m", "512", "--n", "512", "--k", "512", "--dtype", "f32"], "matmul 512x512x512 f32"),
    ("softmax", ["softmax", "--rows", "1024", "--cols", "1024"], "softmax 1024x1024"),
    ("layernorm", ["layernorm", "--rows", "512", "--cols", "768"], "layernorm 512x768"),
    ("maxpool", ["pool", "--c", "64", "--h", "112", "--w", "112", "--k", "3", "--stride", "2"],
     "pool 112x112x64 k3 s2"),
]


def tune(args, op, search, db):
    cmd = [args.tensorlift, "tune", "op", *op, "--trials", str(args.trials), "--threads", str(args.threads),
           "--search", search, "--seed", str(args.seed), "--format", "json", "--db", db]
    out = subprocess.run(cmd, text=True, capture_output=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def best_pct(db, point, label):
    """% of the probe of the tuned point's validation records of op `label` (median), where they
    have one."""
    pcts = []
    with open(db) as f:
        for line in f:
            r = json.loads(line)
            s = r["schedule"]
            if not r["workload"]["summary"].startswith(label + ":"):
                continue
            if s.get("auto") == point and s.get("phase") == "validation" and r.get("gops") and r.get("peak_gops"):
                pcts.append(100 * r["gops"] / r["peak_gops"])
    pcts.sort()
    return pcts[len(pcts) // 2] if pcts else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tensorlift", default="target/release/tensorlift")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tolerance", type=float, default=0.03, help="reaching a best means within this fraction")
    ap.add_argument("--python", default=sys.executable, help="an interpreter with onnxruntime (for the peer)")
    ap.add_argument("--out", required=True, help="a directory for the databases and JSON results")
    ap.add_argument("--only", nargs="*", default=None, help="short names of the ops to run")
    ap.add_argument("--shared-db", action="store_true",
                    help="the learned searches share one database (each starts from the earlier ops' records)")
    ap.add_argument("--no-common", action="store_true", help="skip the common-timing count")
    ap.add_argument("--common-rounds", type=int, default=5, help="rounds of the common timing")
    ap.add_argument("--common-budget-ms", type=float, default=20.0,
                    help="time per common measurement (a verification call, then timed calls, at most 10)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if os.path.exists(os.path.join(a.out, "suite.jsonl")):
        os.remove(os.path.join(a.out, "suite.jsonl"))
    shared = os.path.join(a.out, "learned.shared.jsonl")
    if a.shared_db and os.path.exists(shared):
        os.remove(shared)
    rows = []
    for short, op, label in SUITE:
        if a.only and short not in a.only:
            continue
        res = {}
        for search in ("evolutionary", "random"):
            if a.shared_db and search == "evolutionary":
                db = shared
            else:
                db = os.path.join(a.out, f"{short}.{search}.jsonl")
                if os.path.exists(db):
                    os.remove(db)
            res[search] = tune(a, op, search, db)
            res[search]["pct_probe"] = best_pct(db, res[search]["best"], label)
            print(f"{short} {search}: {res[search]['tuned_gops']} GOPS", file=sys.stderr, flush=True)
        peer = subprocess.run([a.python, os.path.join(os.path.dirname(__file__), "peers", "ort_ops.py"), "--threads",
                               str(a.threads), "--ops", label], text=True, capture_output=True)
        ort = [json.loads(l) for l in peer.stdout.splitlines() if l.strip()]
        res["onnxruntime"] = ort[0] if ort else {"error": peer.stderr.strip()[-500:]}
        ev, rnd = res["evolutionary"], res["random"]
        if not a.no_common:
            learned_db = shared if a.shared_db else os.path.join(a.out, f"{short}.evolutionary.jsonl")
            res["common"] = common_timing.remeasure(
                a.tensorlift, learned_db, os.path.join(a.out, f"{short}.random.jsonl"), ev, rnd, label,
                rounds=a.common_rounds, repeat=10, budget_ms=a.common_budget_ms, seed=a.seed,
                tolerance=a.tolerance, records_out=os.path.join(a.out, f"{short}.common.jsonl"))
            print(f"{short} common timing: learned {res['common']['learned_trials']} / random "
                  f"{res['common']['random_trials']} trials", file=sys.stderr, flush=True)
        common = res.get("common") or {}
        # The search-phase count: the trials' GOPS as `tune op` reports them (0: failed).
        phase = common_timing.counts(ev["trial_gops"], rnd["trial_gops"], a.tolerance)
        final = max(v for v in ev["curve"] if v is not None)
        per_trial = ev["seconds"] / max(ev["trials"], 1)
        t95 = common_timing.trials_to(ev["curve"], 0.95 * final)
        row = dict(op=label, default_gops=ev["default_gops"], tuned_gops=ev["tuned_gops"], speedup=ev["speedup"],
                   pct_probe=ev["pct_probe"], learned_trials=phase["learned_trials"],
                   random_trials=phase["random_trials"], random_expected=phase["random_expected"],
                   random_tuned_gops=rnd["tuned_gops"],
                   s_to_95=t95 * per_trial if t95 else None, seconds=ev["seconds"], spearman=ev["model_spearman"],
                   ort_gops=res["onnxruntime"].get("gops"),
                   common_learned_trials=common.get("learned_trials"), common_random_trials=common.get("random_trials"),
                   common_random_expected=common.get("random_expected"), common_points=common.get("points"),
                   shared_points=common.get("shared_points"), shared_apart=common.get("shared_apart"))
        rows.append(row)
        with open(os.path.join(a.out, f"{short}.json"), "w") as f:
            json.dump(res, f)
        with open(os.path.join(a.out, "suite.jsonl"), "a") as f:
            f.write(json.dumps(dict(row, short=short, seed=a.seed)) + "\n")
    fmt = lambda v, p=1: "-" if v is None else (f"{v:.{p}f}" if isinstance(v, float) else str(v))  # noqa: E731
    print("| op | generic GOPS | tuned GOPS | speedup | % probe | trials to random's best: learned / random | "
          "random's expected trials | common timing: learned / random | common: random's expected | "
          "points both measured: apart / all | s to 95% | tune s | Spearman | random-search GOPS | onnxruntime GOPS |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['op']} | {fmt(r['default_gops'], 2)} | {fmt(r['tuned_gops'], 2)} | {fmt(r['speedup'])}x | "
              f"{fmt(r['pct_probe'], 0)} | {fmt(r['learned_trials'])} / {fmt(r['random_trials'])} | "
              f"{fmt(r['random_expected'])} | {fmt(r['common_learned_trials'])} / {fmt(r['common_random_trials'])} | "
              f"{fmt(r['common_random_expected'])} | {fmt(r['shared_apart'])} / {fmt(r['shared_points'])} | "
              f"{fmt(r['s_to_95'])} | {fmt(r['seconds'])} | {fmt(r['spearman'], 2)} | "
              f"{fmt(r['random_tuned_gops'], 2)} | {fmt(r['ort_gops'], 2)} |")
    speedups = [r["speedup"] for r in rows if r["speedup"]]
    if speedups:
        print(f"\ngeometric mean speedup over the generic schedule: "
              f"{math.exp(sum(map(math.log, speedups)) / len(speedups)):.1f}x over {len(speedups)} ops")
    for timing, prefix in (("search-phase timings", ""), ("common timings", "common_")):
        if prefix and a.no_common:
            continue
        halves = sum(1 for r in rows if half(r[prefix + "learned_trials"], r[prefix + "random_trials"]))
        expected = sum(1 for r in rows if half(r[prefix + "learned_trials"], r[prefix + "random_expected"]))
        print(f"{timing}: learned search reached the random search's best in at most half its trials on {halves} "
              f"of {len(rows)} ops; in at most half the random search's expected trials on {expected} of {len(rows)}")


def half(learned, random_):
    """Whether the learned search took at most half the random search's trials (both reached)."""
    return bool(learned and random_ and learned <= random_ / 2)


if __name__ == "__main__":
    main()
