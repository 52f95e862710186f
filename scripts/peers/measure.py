"""What the peer benchmarks share: the CPU's name, the timing loop, the load of other processes,
the command-line options and the JSON lines they print.

Used by bench_ort.py and bench_ov.py (this directory); it has no command line.
"""
import argparse
import json
import os
import statistics
import sys
import time

import layers

# CPU features that decide which int8 kernels a peer runs.
ISA_FLAGS = ("avx2", "avx_vnni", "avx512f", "avx512_vnni", "amx_int8")


def cpu():
    """The CPU as `tensorlift` names it: brand (vendor, family F model M), and its ISA flags."""
    fields, flags = {}, set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "flags":
                    flags = set(value.split())
                    break
                fields.setdefault(key, value)
    except OSError:
        return "unknown CPU", []
    name = (f"{fields.get('model name', 'unknown CPU')} ({fields.get('vendor_id', '?')}, "
            f"family {fields.get('cpu family', '?')} model {fields.get('model', '?')})")
    return name, [f for f in ISA_FLAGS if f in flags]


class OtherLoad:
    """CPU time other processes used during an interval, in cores (0: nothing else ran).

    From /proc/stat (the machine) and /proc/self/stat (this process); the resolution is one
    clock tick, so it means something over intervals of a fraction of a second or more.
    """

    HZ = os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _machine_busy():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return sum(v) - v[3] - v[4]  # all but idle and iowait

    @staticmethod
    def _self_busy():
        with open("/proc/self/stat") as f:
            v = f.read().rsplit(")", 1)[1].split()
        return int(v[11]) + int(v[12])  # utime + stime

    def __enter__(self):
        try:
            self._t0 = time.perf_counter()
            self._m0, self._s0 = self._machine_busy(), self._self_busy()
        except OSError:
            self._t0 = None
        self.cores = None
        return self

    def __exit__(self, *exc):
        if self._t0 is not None:
            wall = time.perf_counter() - self._t0
            other = (self._machine_busy() - self._m0) - (self._self_busy() - self._s0)
            self.cores = round(max(0.0, other / self.HZ / wall), 2)


def time_calls(call, warmup, min_runs, min_time):
    """Runs `call` `warmup` times, then times single calls until there are at least `min_runs`
    and `min_time` seconds have passed. Returns the median and the minimum in ms, the number of
    timed calls and the other processes' load meanwhile."""
    for _ in range(warmup):
        call()
    times = []
    with OtherLoad() as load:
        end = time.perf_counter() + min_time
        while len(times) < min_runs or time.perf_counter() < end:
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
    return dict(median_ms=statistics.median(times) * 1e3, min_ms=min(times) * 1e3,
                runs=len(times), other_cores=load.cores)


def gops(ops, ms):
    """`ops` operations in `ms` milliseconds, in GOPS (None without a time)."""
    return round(ops / (ms * 1e-3) / 1e9, 2) if ms else None


def arguments(description):
    """The options every benchmark takes."""
    ap = argparse.ArgumentParser(description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", nargs="+", default=layers.ALL, choices=layers.ALL, metavar="LAYER",
                    help="layers of the table (default: all, R1..R11 FC)")
    ap.add_argument("--threads", nargs="+", type=int, default=[1],
                    help="thread counts, one measurement each (default: 1)")
    ap.add_argument("--weights", choices=sorted(layers.WEIGHT_RANGES), default="full",
                    help="weights in [-127, 127] (full) or [-64, 63] (7bit), as tensorlift's --weights")
    ap.add_argument("--min-time", type=float, default=1.0,
                    help="seconds of timed calls per measurement (default: 1)")
    ap.add_argument("--min-runs", type=int, default=50, help="timed calls at least (default: 50)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed calls first (default: 20)")
    ap.add_argument("--profile-runs", type=int, default=100,
                    help="calls of the profiling session (default: 100)")
    return ap


def emit(record):
    """Prints one measurement as a line of JSON (the first fields: peer, cpu, layer)."""
    print(json.dumps(record), flush=True)


def note(text):
    """Progress for a reader, on stderr (stdout holds only JSON lines)."""
    print(text, file=sys.stderr, flush=True)
