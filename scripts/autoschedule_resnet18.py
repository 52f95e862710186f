"""The resnet-18 int8 layers auto-scheduled from the rules alone (no `x86_conv` template) beside
the template with its pre-tuned records, layer by layer in one sitting.

Equal work: the auto-scheduler runs `tensorlift tune op conv2d ... --requantize` at each layer's
geometry (the catalog's NHWC u8 × s8 convolution, its i32 accumulator requantized to u8 by the
layers' own stage in onnxruntime's order, as the table's layers compute: compensation with
the bias folded in, per-channel scale, round half to even, zero point, saturate; the FC as
`matmul --m 1 --n 1000 --k 512 --dtype u8 --requantize`); the template runs
`tensorlift resnet18 --layer L` (NHWC, the same requantization). Both prepare the weights once,
untimed (the rules' `tensorize` sketches pack them by a prepare function). What still differs:
the template computes the compensation from the weights when it prepares them, where the
catalog's definition binds it as an input (both read it per channel in the call); the padding
of the source is each schedule's own (zero point or zeros, no change in work). `--no-requantize` measures the
catalog's i32 convolution instead (unequal work: no requantization).

  python3 scripts/autoschedule_resnet18.py --tensorlift target/release/tensorlift --trials 48 --threads 1
"""

import argparse
import json
import subprocess

LAYERS = [("R1", 3, 64, 224, 7, 2, 3), ("R2", 64, 64, 56, 3, 1, 1), ("R3", 64, 128, 56, 3, 2, 1),
          ("R4", 64, 128, 56, 1, 2, 0), ("R5", 128, 128, 28, 3, 1, 1), ("R6", 128, 256, 28, 3, 2, 1),
          ("R7", 128, 256, 28, 1, 2, 0), ("R8", 256, 256, 14, 3, 1, 1), ("R9", 256, 512, 14, 3, 2, 1),
          ("R10", 256, 512, 14, 1, 2, 0), ("R11", 512, 512, 7, 3, 1, 1)]


def run(cmd):
    out = subprocess.run(cmd, text=True, capture_output=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tensorlift", default="target/release/tensorlift")
    ap.add_argument("--trials", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layers", nargs="*", default=None)
    ap.add_argument("--no-requantize", action="store_true", help="the i32 definitions (unequal work)")
    a = ap.parse_args()
    requantize = [] if a.no_requantize else ["--requantize"]
    ops = [(name, ["conv2d", "--ic", str(ic), "--oc", str(oc), "--h", str(hw), "--w", str(hw), "--kh", str(k),
                   "--kw", str(k), "--stride", str(s), "--pad", str(p), *requantize]) for name, ic, oc, hw, k, s, p in LAYERS]
    ops.append(("FC", ["matmul", "--m", "1", "--n", "1000", "--k", "512", "--dtype", "u8", *requantize]))
    print("| layer | template GOPS (pre-tuned) | % probe | auto GOPS (rules alone) | auto / template | auto sketch |")
    print("|---|---|---|---|---|---|")
    ratios = []
    for name, op in ops:
        if a.layers and name not in a.layers:
            continue
        template = run([a.tensorlift, "resnet18", "--layer", name, "--threads", str(a.threads), "--format", "json"])
        auto = run([a.tensorlift, "tune", "op", *op, "--trials", str(a.trials), "--threads", str(a.threads),
                    "--format", "json"])
        ratio = auto["tuned_gops"] / template["gops"] if auto["tuned_gops"] and template["gops"] else None
        ratios.append((name, ratio))
        sketch = (auto.get("best") or {}).get("sketch")
        pct = template.get("pct_peak")
        print(f"| {name} | {template['gops']:.2f} | {pct:.0f} | {auto['tuned_gops']:.2f} | "
              f"{ratio:.2f} | {sketch} |", flush=True)
    below = [n for n, r in ratios if r is None or r < 0.85]
    print(f"\nlayers below 85% of the template: {len(below)} of {len(ratios)} {below}")


if __name__ == "__main__":
    main()
