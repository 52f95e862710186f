"""Both searches of one operator counted again on common timings (scripts/autoschedule_suite.py).

Each search's curve in `tune op`'s JSON is built from timings taken during that search, so the
same point measured by both searches can count differently in each: the searches run at
different moments of a shared host. Here the union of the distinct points the two searches
measured successfully (their databases' search records) is timed again in one `tensorlift
measure` process, interleaved: `rounds` rounds, each measuring every point once in its own
shuffled order (seeded), each measurement as `tune op`'s search times a point (a verification
call, then as many timed calls as fit in `budget_ms`, at most `repeat`). A point's common
GOPS is the median of its rounds' GOPS (as measured, not probe-corrected: the points of one
operator may run different probes). Each search keeps its trials in its own order, every trial
counted: a trial's common GOPS is its point's (`None` where the trial failed in its search or
every re-measurement of it failed), and the curves, random's best, the trials to reach it within
the tolerance and random's expected trials are computed from them as from the search-phase
timings.

  python3 scripts/common_timing.py --tensorlift target/release/tensorlift --suite-out DIR --op softmax
"""

import argparse
import json
import os
import random
import subprocess
import sys


def point_key(point):
    """A point's identity: its JSON with sorted keys."""
    return json.dumps(point, sort_keys=True)


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def ok(record):
    """As `Record::ok`: measured, verified and timed."""
    return record.get("status") == "ok" and bool(record.get("verified")) and record.get("median_ns") is not None


def search_trials(records, label, trials):
    """The trials of the search of op `label` in `records` (a database's, in order): the last
    `trials` search-phase records of that op (its baseline, and any records of earlier runs,
    precede them), each as (point, ok)."""
    mine = [r for r in records if r["workload"]["summary"].startswith(label + ":")
            and r["schedule"].get("auto") is not None and r["schedule"].get("phase", "search") != "validation"]
    if len(mine) < trials:
        raise ValueError(f"{label}: the database holds {len(mine)} search records, expected at least {trials}")
    return [(r["schedule"]["auto"], ok(r)) for r in mine[len(mine) - trials:]] if trials else []


def union(*searches):
    """The distinct points the searches measured successfully, in the order first seen."""
    points = {}
    for trials in searches:
        for point, success in trials:
            if success:
                points.setdefault(point_key(point), point)
    return points


def order(keys, rounds, seed):
    """The measuring order: `rounds` rounds, each every key once, shuffled per round (seeded)."""
    out = []
    for r in range(rounds):
        keys_r = sorted(keys)
        random.Random(seed * 7919 + r).shuffle(keys_r)
        out.extend(keys_r)
    return out


def candidate(spec, isa, threads, point, repeat, budget_ms):
    """A `tensorlift measure` candidate timing `point` of operator `spec`."""
    c = {"op": spec, "isa": isa, "max_threads": threads, "auto": point, "repeat": repeat, "phase": "validation"}
    if budget_ms and budget_ms > 0:
        c["budget_ms"] = budget_ms
    return c


def measure(tensorlift, candidates):
    """Measures `candidates` in one `tensorlift measure` process, in order: one record each."""
    lines = "".join(json.dumps(c) + "\n" for c in candidates)
    out = subprocess.run([tensorlift, "measure"], input=lines, text=True, capture_output=True)
    records = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or len(records) != len(candidates):
        raise RuntimeError(f"{tensorlift} measure answered {len(records)} of {len(candidates)} candidates "
                           f"(exit {out.returncode}): {out.stderr.strip()[-500:]}")
    return records


def median(values):
    values = sorted(values)
    n = len(values)
    if not n:
        return None
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def common_gops(keys, records):
    """Per point key, the median GOPS of its successful re-measurements (`keys[i]` measured by
    `records[i]`); `None` where none succeeded."""
    runs = {}
    for key, r in zip(keys, records, strict=True):
        runs.setdefault(key, [])
        if ok(r) and r.get("gops"):
            runs[key].append(r["gops"])
    return {key: median(gops) for key, gops in runs.items()}


def trial_gops(trials, gops):
    """Each trial's common GOPS: its point's, `None` where the trial failed in its search."""
    return [gops.get(point_key(point)) if success else None for point, success in trials]


def curve(per_trial):
    """The best GOPS after each trial (`None` until one succeeded)."""
    best, out = None, []
    for g in per_trial:
        if g is not None and (best is None or g > best):
            best = g
        out.append(best)
    return out


def trials_to(curve_, target):
    """The first trial (from 1) whose curve reaches `target`, or `None`."""
    for i, v in enumerate(curve_):
        if v is not None and v >= target:
            return i + 1
    return None


def expected_trials(per_trial, target):
    """The random search's expected trials to reach `target`: its trials over the trials that
    reached it, or `None` when none did."""
    hits = sum(1 for g in per_trial if g is not None and g >= target)
    return len(per_trial) / hits if hits else None


def counts(learned, rnd, tolerance):
    """The suite's counts from per-trial GOPS of the learned and the random search: the trials
    each needed to come within `tolerance` of the random search's best, and the random
    search's expected trials to that level."""
    best = max((g for g in rnd if g is not None), default=None)
    if not best:
        return dict(random_best=None, learned_trials=None, random_trials=None, random_expected=None)
    target = best * (1 - tolerance)
    return dict(random_best=best, learned_trials=trials_to(curve(learned), target),
                random_trials=trials_to(curve(rnd), target), random_expected=expected_trials(rnd, target))


def disagreements(learned, rnd, learned_gops, random_gops, tolerance):
    """Of the points both searches measured successfully, how many, and on how many their two
    search-phase GOPS differ by more than `tolerance` (of the larger)."""
    mine = {point_key(p): g for (p, success), g in zip(learned, learned_gops, strict=True) if success and g}
    theirs = {point_key(p): g for (p, success), g in zip(rnd, random_gops, strict=True) if success and g}
    both = [k for k in mine if k in theirs]
    apart = sum(1 for k in both if abs(mine[k] - theirs[k]) > tolerance * max(mine[k], theirs[k]))
    return len(both), apart


def remeasure(tensorlift, learned_db, random_db, learned, rnd, label, *, rounds, repeat, budget_ms, seed,
              tolerance, records_out=None):
    """The common-timing counts of one operator: `learned` and `rnd` are the two `tune op` JSON
    results, `learned_db` and `random_db` their databases. `records_out`: where to write the
    re-measurement records (JSON lines, in measuring order)."""
    ev_trials = search_trials(load(learned_db), label, learned["trials"])
    rnd_trials = search_trials(load(random_db), label, rnd["trials"])
    for name, trials, result in (("learned", ev_trials, learned), ("random", rnd_trials, rnd)):
        if [s for _, s in trials] != [bool(g) for g in result["trial_gops"]]:
            raise ValueError(f"{label}: the {name} search's records do not match its trials' successes")
    points = union(ev_trials, rnd_trials)
    keys = order(points.keys(), rounds, seed)
    cands = [candidate(learned["spec"], learned["isa"], learned["threads"], points[k], repeat, budget_ms) for k in keys]
    records = measure(tensorlift, cands)
    if records_out:
        with open(records_out, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    gops = common_gops(keys, records)
    ev, rn = trial_gops(ev_trials, gops), trial_gops(rnd_trials, gops)
    both, apart = disagreements(ev_trials, rnd_trials, learned["trial_gops"], rnd["trial_gops"], tolerance)
    out = counts(ev, rn, tolerance)
    out.update(points=len(points), rounds=rounds, unmeasured=sum(1 for g in gops.values() if g is None),
               shared_points=both, shared_apart=apart, learned_gops=ev, random_gops=rn)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tensorlift", default="target/release/tensorlift")
    ap.add_argument("--suite-out", required=True, help="an autoschedule_suite.py --out directory")
    ap.add_argument("--op", required=True, help="the short name of one of its ops")
    ap.add_argument("--shared-db", action="store_true", help="the suite ran with --shared-db")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--budget-ms", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tolerance", type=float, default=0.03)
    a = ap.parse_args()
    with open(os.path.join(a.suite_out, f"{a.op}.json")) as f:
        res = json.load(f)
    ev, rnd = res["evolutionary"], res["random"]
    learned_db = os.path.join(a.suite_out, "learned.shared.jsonl" if a.shared_db else f"{a.op}.evolutionary.jsonl")
    out = remeasure(a.tensorlift, learned_db, os.path.join(a.suite_out, f"{a.op}.random.jsonl"), ev, rnd, ev["op"],
                    rounds=a.rounds, repeat=a.repeat, budget_ms=a.budget_ms, seed=a.seed, tolerance=a.tolerance)
    json.dump(out, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
