"""Checks of scripts/common_timing.py: its pieces on small made-up databases, then (with
--tensorlift BIN) the whole re-measurement on two real searches of a small max pool. Prints
"common timing: ok" and exits 0 when every check holds (tests/it/suite_common.rs runs it)."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common_timing as ct  # noqa: E402

LABEL = "pool 16x16x8 k3 s2"


def record(label, point, phase="search", status="ok", gops=1.0):
    return {"workload": {"summary": f"{label}: f32[..]"}, "schedule": {"auto": point, "phase": phase},
            "status": status, "verified": status == "ok", "median_ns": 1.0 if status == "ok" else None,
            "gops": gops if status == "ok" else None}


def p(n):
    return {"sketch": "rules", "values": [n]}


class Pieces(unittest.TestCase):
    def test_the_trials_are_the_last_search_records_of_the_op(self):
        records = [record("other op", p(9)), record(LABEL, {"sketch": "generic", "values": []}),
                   record(LABEL, p(1)), record(LABEL, p(2), status="mismatch"), record("other op", p(8)),
                   record(LABEL, p(3)), record(LABEL, p(1), phase="validation")]
        trials = ct.search_trials(records, LABEL, 3)
        self.assertEqual(trials, [(p(1), True), (p(2), False), (p(3), True)])
        with self.assertRaises(ValueError):
            ct.search_trials(records, LABEL, 5)

    def test_the_union_is_distinct_successes_of_both(self):
        a = [(p(1), True), (p(2), False), (p(3), True)]
        b = [(p(3), True), (p(4), True), (p(1), True), (p(5), False)]
        self.assertEqual(list(ct.union(a, b).values()), [p(1), p(3), p(4)])

    def test_each_round_measures_every_point_once_in_its_own_order(self):
        keys = [ct.point_key(p(i)) for i in range(12)]
        measured = ct.order(keys, 4, 7)
        self.assertEqual(len(measured), 48)
        rounds = [measured[12 * r:12 * (r + 1)] for r in range(4)]
        for r in rounds:
            self.assertEqual(sorted(r), sorted(keys))
        self.assertGreater(len({tuple(r) for r in rounds}), 1)
        self.assertEqual(measured, ct.order(list(reversed(keys)), 4, 7))
        self.assertNotEqual(measured, ct.order(keys, 4, 8))

    def test_a_points_common_gops_is_the_median_of_its_successful_rounds(self):
        k1, k2, k3 = (ct.point_key(p(i)) for i in (1, 2, 3))
        keys = [k1, k2, k3, k2, k1, k3, k1, k2, k3]
        records = [record(LABEL, None, gops=g) for g in (5.0, 2.0, 1.0, 4.0, 7.0, 1.0, 6.0, 3.0, 1.0)]
        for i in (2, 5, 8):
            records[i] = record(LABEL, None, status="timeout")
        records[1] = record(LABEL, None, status="run_error")
        self.assertEqual(ct.common_gops(keys, records), {k1: 6.0, k2: 3.5, k3: None})

    def test_every_trial_keeps_its_place(self):
        gops = {ct.point_key(p(1)): 2.0, ct.point_key(p(2)): None, ct.point_key(p(3)): 5.0}
        trials = [(p(1), True), (p(4), False), (p(2), True), (p(3), True), (p(1), True)]
        per_trial = ct.trial_gops(trials, gops)
        self.assertEqual(per_trial, [2.0, None, None, 5.0, 2.0])
        self.assertEqual(ct.curve(per_trial), [2.0, 2.0, 2.0, 5.0, 5.0])
        self.assertEqual(ct.curve([None, None, 1.0]), [None, None, 1.0])

    def test_the_counts_follow_the_timings_they_are_given(self):
        # The learned search measured point A at trial 1 in a slow phase (60), the random search
        # met A at trial 8 (100) and B at trial 4 (98). On its own timings the learned search
        # reaches 97 at trial 6 (its point C, 97.5), more than half of random's 4.
        learned_phase = [60.0, 10.0, 20.0, None, 30.0, 97.5, 40.0, 50.0]
        random_phase = [1.0, 2.0, 3.0, 98.0, 4.0, 5.0, 6.0, 100.0]
        c = ct.counts(learned_phase, random_phase, 0.03)
        self.assertEqual((c["random_best"], c["learned_trials"], c["random_trials"]), (100.0, 6, 4))
        self.assertEqual(c["random_expected"], 8 / 2)
        # Timed together: A 99, B 98, C 97.5; target 0.97 * 99 = 96.03: learned at trial 1.
        learned_common = [99.0, 10.0, 20.0, None, 30.0, 97.5, 40.0, 50.0]
        random_common = [1.0, 2.0, 3.0, 98.0, 4.0, 5.0, 6.0, 99.0]
        c = ct.counts(learned_common, random_common, 0.03)
        self.assertEqual((c["random_best"], c["learned_trials"], c["random_trials"]), (99.0, 1, 4))
        self.assertEqual(c["random_expected"], 8 / 2)
        # A random search with no success has no best, and nothing is reached.
        self.assertEqual(ct.counts([1.0], [None, 0.0], 0.03)["learned_trials"], None)

    def test_disagreements_compare_the_points_both_measured(self):
        learned = [(p(1), True), (p(2), True), (p(3), False)]
        rnd = [(p(2), True), (p(1), True), (p(3), True), (p(4), True)]
        self.assertEqual(ct.disagreements(learned, rnd, [100.0, 50.0, 0.0], [51.0, 90.0, 7.0, 8.0], 0.03), (2, 1))


def run_searches(tensorlift, out):
    """Two small searches of a max pool (learned, random) into their own databases."""
    results = {}
    for search in ("evolutionary", "random"):
        db = os.path.join(out, f"{search}.jsonl")
        cmd = [tensorlift, "tune", "op", "pool", "--c", "8", "--h", "16", "--w", "16", "--k", "3", "--stride", "2",
               "--trials", "6", "--threads", "1", "--search", search, "--seed", "3", "--format", "json", "--db", db]
        done = subprocess.run(cmd, text=True, capture_output=True, check=True)
        results[search] = (json.loads(done.stdout.strip().splitlines()[-1]), db)
    return results


def end_to_end(tensorlift):
    with tempfile.TemporaryDirectory() as out:
        results = run_searches(tensorlift, out)
        (ev, ev_db), (rnd, rnd_db) = results["evolutionary"], results["random"]
        assert ev["op"] == LABEL, ev["op"]
        records_out = os.path.join(out, "common.jsonl")
        got = ct.remeasure(tensorlift, ev_db, rnd_db, ev, rnd, LABEL, rounds=3, repeat=3, budget_ms=20.0, seed=1,
                           tolerance=0.03, records_out=records_out)
        ev_trials = ct.search_trials(ct.load(ev_db), LABEL, ev["trials"])
        rnd_trials = ct.search_trials(ct.load(rnd_db), LABEL, rnd["trials"])
        distinct = {ct.point_key(pt) for pt, s in ev_trials + rnd_trials if s}
        re = ct.load(records_out)
        # Every distinct successful point, once per round, each one verified again.
        assert got["points"] == len(distinct) and len(re) == 3 * len(distinct), (got["points"], len(re))
        measured = sorted(ct.point_key(r["schedule"]["auto"]) for r in re)
        assert measured == sorted(k for k in distinct for _ in range(3)), measured
        assert all(ct.ok(r) for r in re), [r["status"] for r in re if not ct.ok(r)]
        # Each trial keeps its place: its point's median of its three rounds, recomputed here.
        for trials, per_trial in ((ev_trials, got["learned_gops"]), (rnd_trials, got["random_gops"])):
            assert len(per_trial) == len(trials) == 6
            for (pt, success), g in zip(trials, per_trial):
                rounds = sorted(r["gops"] for r in re if ct.point_key(r["schedule"]["auto"]) == ct.point_key(pt))
                assert g == (rounds[1] if success else None), (pt, g, rounds)
        # The counts, recomputed by brute force from the per-trial GOPS.
        best = max(g for g in got["random_gops"] if g is not None)
        first = lambda per: next((i + 1 for i in range(len(per))  # noqa: E731
                                  if max((g for g in per[:i + 1] if g is not None), default=0) >= 0.97 * best), None)
        assert (got["learned_trials"], got["random_trials"]) == (first(got["learned_gops"]), first(got["random_gops"]))
        assert got["random_best"] == best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensorlift", help="run the end-to-end check with this binary")
    a = ap.parse_args()
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(Pieces)
    if not unittest.TextTestRunner(verbosity=1).run(suite).wasSuccessful():
        return 1
    if a.tensorlift:
        end_to_end(a.tensorlift)
    print("common timing: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
