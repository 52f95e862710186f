#!/usr/bin/env bash
# Whole-network latency: tensorlift run, onnxruntime (QOperator and QDQ files) and OpenVINO (QDQ
# file) interleaved round by round on the same CPU, at the given thread counts; one JSON line
# per measurement in OUT. The files come from `scripts/models/make_models.py --full --out-dir DIR`.
#
#   scripts/network_side_by_side.sh DIR OUT [ROUNDS] [THREADS...]
#   scripts/network_side_by_side.sh /tmp/resnet18 /tmp/network.jsonl 3 1 2
#
# PYTHON (default /tmp/peers-venv/bin/python) must have numpy, onnx, onnxruntime and openvino;
# ISA (default auto) is passed to `tensorlift run --isa` (several, space-separated: each one is
# run); REPEAT (default 200) is its `--repeat`; FILES (default "resnet18_qop_u8_pc
# resnet18_qdq_u8_pc") names the models run by tensorlift and onnxruntime, OpenVINO runs the
# QDQ ones among them. OV_CAPS (e.g. AVX512_CORE_VNNI) also runs OpenVINO with oneDNN capped
# to that ISA (`ONEDNN_MAX_CPU_ISA`), reported as peer "ov-<cap>": a control for the kernels'
# instruction set (AMX against VNNI).
set -euo pipefail
dir=$1 out=$2 rounds=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
threads=("${@:-1}")
python=${PYTHON:-/tmp/peers-venv/bin/python}
isa=${ISA:-auto}
cd "$(dirname "$0")/.."
cargo build --release --quiet
: > "$out"
for round in $(seq "$rounds"); do
    for t in "${threads[@]}"; do
        for file in ${FILES:-resnet18_qop_u8_pc resnet18_qdq_u8_pc}; do
            for level in $isa; do
                ./target/release/tensorlift run "$dir/$file.onnx" --threads "$t" --isa "$level" --repeat "${REPEAT:-200}" --format json \
                    | "$python" -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'peer':'tensorlift','model':'$file.onnx','threads':$t,'round':$round,'compile_ms':d['compile_ms'],'median_ms':d['median_ms'],'isa':d['isa'],'probes':d['probes']}))" >> "$out"
            done
            "$python" scripts/peers/network.py --peer ort --model "$dir/$file.onnx" --threads "$t" >> "$out"
            if [[ $file == *qdq* ]]; then
                "$python" scripts/peers/network.py --peer ov --model "$dir/$file.onnx" --threads "$t" >> "$out"
                for cap in ${OV_CAPS:-}; do
                    ONEDNN_MAX_CPU_ISA=$cap "$python" scripts/peers/network.py --peer ov --model "$dir/$file.onnx" --threads "$t" \
                        | "$python" -c "import json,sys; d=json.load(sys.stdin); d['peer']='ov-$cap'; print(json.dumps(d))" >> "$out"
                done
            fi
        done
    done
done
cat "$out"
