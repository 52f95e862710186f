"""End-to-end test of the Ray driver on a local cluster with two worker processes: tunes a small
matmul, checks every record is verified and both workers measured, then resumes from the
database after a simulated crash (an incomplete last line) and reaches a larger total.

    python3 python/test_ray.py --tensorlift target/debug/tensorlift
"""

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensorlift_ray  # noqa: E402

OP = ["matmul", "--m", "16", "--n", "16", "--k", "16", "--dtype", "u8"]


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tensorlift", required=True)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "db.jsonl")
        common = ["--tensorlift", a.tensorlift, "--workers", "2", "--batch", "3", "--db", db, "--threads", "1", "--json"]
        first = tensorlift_ray.run(tensorlift_ray.parse_args(common + ["--trials", "6", "--", *OP]))
        assert first["measured"] == 6, first
        assert first["worker_processes"] == 2, f"expected two Ray worker processes, found {first}"
        rs = records(db)
        assert len(rs) == 6, len(rs)
        keys = {r["workload"]["key"] for r in rs}
        assert keys == {first["workload"]}, keys
        ok = [r for r in rs if r["status"] == "ok"]
        assert ok and all(r["verified"] for r in ok), rs
        points = [json.dumps(r["schedule"].get("auto"), sort_keys=True) for r in rs]
        assert len(set(points)) == len(points), "a point was measured twice"

        # A crash while appending leaves half a record: the driver drops it and goes on.
        with open(db, "a") as f:
            f.write('{"version": 1, "workload": {"ke')
        second = tensorlift_ray.run(tensorlift_ray.parse_args(common + ["--trials", "10", "--", *OP]))
        rs = records(db)
        assert len(rs) == 10, len(rs)
        assert second["measured"] == 4, second
        points = [json.dumps(r["schedule"].get("auto"), sort_keys=True) for r in rs]
        assert len(set(points)) == len(points), "a point was measured twice after resuming"
        print("ray driver: ok", json.dumps(second))


if __name__ == "__main__":
    main()
