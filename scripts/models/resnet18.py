"""A float ResNet-18 v1 in torchvision's topology, written with onnx.helper (no torch).

conv1 7x7/2 (64) + BatchNormalization + Relu, MaxPool 3x3/2, four stages of two BasicBlocks
(64, 128, 256, 512 channels; the first block of stages 2-4 has stride 2 and a 1x1/2 Conv +
BatchNormalization downsample on its shortcut), GlobalAveragePool, Flatten, Gemm 512 -> classes.
Convolutions have no bias (BatchNormalization follows each), as in torchvision; `--fold-bn`
folds every BatchNormalization into the Conv before it (which then gets a bias).

Weights are random but sensible, drawn from one seeded generator: He (Kaiming normal, fan-out)
convolutions, BatchNormalization statistics near the identity, the classifier uniform in
+-1/sqrt(in features) as torch's Linear initializes it. `--width W` scales every stage's channels
(W, 2W, 4W, 8W; 64 is the real network), `--size S` the input ([1, 3, S, S]; 224 is the real
network). Node and initializer names follow torchvision's modules (`layer2.0.downsample.0`, ...).

Needs numpy and onnx. Commands (from the repository root):

  # the real network, 224x224, 1000 classes, BatchNormalization present:
  python scripts/models/resnet18.py --out resnet18.onnx
  # narrow test model (channels 8, 16, 32, 64 on a 32x32 input):
  python scripts/models/resnet18.py --width 8 --size 32 --out resnet18_w8_s32.onnx
  # BatchNormalization folded into the convolutions:
  python scripts/models/resnet18.py --fold-bn --out resnet18_folded.onnx

`make_models.py` (this directory) builds the whole set, quantized variants included.
"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BN_EPSILON = 1e-5
DEFAULT_OPSET = 17


class Builder:
    """Accumulates nodes and initializers; every weight comes from one seeded generator."""

    def __init__(self, seed, fold_bn):
        self.rng = np.random.default_rng(seed)
        self.fold_bn = fold_bn
        self.nodes = []
        self.initializers = []

    def constant(self, name, array):
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def conv_bn(self, x, name, bn_name, cin, cout, kernel, stride, relu):
        """Conv (no bias) + BatchNormalization (+ Relu); with `fold_bn`, one Conv with a bias."""
        pad = kernel // 2
        fan_out = cout * kernel * kernel
        w = self.rng.normal(0.0, np.sqrt(2.0 / fan_out), (cout, cin, kernel, kernel)).astype(np.float32)
        # Statistics near the identity, so activations keep their scale through the network.
        gamma = self.rng.uniform(0.5, 1.5, cout).astype(np.float32)
        beta = self.rng.normal(0.0, 0.1, cout).astype(np.float32)
        mean = self.rng.normal(0.0, 0.1, cout).astype(np.float32)
        var = self.rng.uniform(0.5, 1.5, cout).astype(np.float32)
        attrs = dict(kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4)
        out = f"{name}.out"
        if self.fold_bn:
            k = gamma / np.sqrt(var + BN_EPSILON)
            w_folded = (w * k[:, None, None, None]).astype(np.float32)
            b_folded = (beta - mean * k).astype(np.float32)
            inputs = [x, self.constant(f"{name}.weight", w_folded), self.constant(f"{name}.bias", b_folded)]
            self.nodes.append(helper.make_node("Conv", inputs, [out], name=name, **attrs))
        else:
            conv_out = f"{name}.conv_out"
            inputs = [x, self.constant(f"{name}.weight", w)]
            self.nodes.append(helper.make_node("Conv", inputs, [conv_out], name=name, **attrs))
            bn_inputs = [conv_out] + [
                self.constant(f"{bn_name}.{p}", a)
                for p, a in [("weight", gamma), ("bias", beta), ("running_mean", mean), ("running_var", var)]
            ]
            self.nodes.append(
                helper.make_node("BatchNormalization", bn_inputs, [out], name=bn_name, epsilon=BN_EPSILON)
            )
        if relu:
            self.nodes.append(helper.make_node("Relu", [out], [f"{name}.relu"], name=f"{name}.relu"))
            return f"{name}.relu"
        return out

    def basic_block(self, x, name, cin, cout, stride):
        """conv3x3(stride)-bn-relu, conv3x3-bn, plus the shortcut (downsampled if the shape
        changes), relu."""
        y = self.conv_bn(x, f"{name}.conv1", f"{name}.bn1", cin, cout, 3, stride, relu=True)
        y = self.conv_bn(y, f"{name}.conv2", f"{name}.bn2", cout, cout, 3, 1, relu=False)
        shortcut = x
        if stride != 1 or cin != cout:
            shortcut = self.conv_bn(
                x, f"{name}.downsample.0", f"{name}.downsample.1", cin, cout, 1, stride, relu=False
            )
        self.nodes.append(helper.make_node("Add", [y, shortcut], [f"{name}.add"], name=f"{name}.add"))
        self.nodes.append(helper.make_node("Relu", [f"{name}.add"], [f"{name}.out"], name=f"{name}.relu"))
        return f"{name}.out"


def build(width=64, size=224, classes=1000, seed=0, fold_bn=False, opset=DEFAULT_OPSET, dynamic_batch=False):
    """The model as an `onnx.ModelProto` (checked by `onnx.checker`)."""
    b = Builder(seed, fold_bn)
    x = b.conv_bn("input", "conv1", "bn1", 3, width, 7, 2, relu=True)
    b.nodes.append(
        helper.make_node("MaxPool", [x], ["maxpool.out"], name="maxpool", kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1])
    )
    x, cin = "maxpool.out", width
    for stage, multiple in enumerate([1, 2, 4, 8], start=1):
        cout = width * multiple
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            x = b.basic_block(x, f"layer{stage}.{block}", cin, cout, stride)
            cin = cout
    b.nodes.append(helper.make_node("GlobalAveragePool", [x], ["avgpool.out"], name="avgpool"))
    b.nodes.append(helper.make_node("Flatten", ["avgpool.out"], ["flatten.out"], name="flatten", axis=1))
    bound = 1.0 / np.sqrt(cin)
    fc_w = b.rng.uniform(-bound, bound, (classes, cin)).astype(np.float32)
    fc_b = b.rng.uniform(-bound, bound, classes).astype(np.float32)
    b.nodes.append(
        helper.make_node("Gemm", ["flatten.out", b.constant("fc.weight", fc_w), b.constant("fc.bias", fc_b)],
                         ["logits"], name="fc", transB=1)
    )
    batch = "N" if dynamic_batch else 1
    graph = helper.make_graph(
        b.nodes,
        f"resnet18_w{width}_s{size}",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])],
        b.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="tensorlift scripts/models/resnet18.py")
    # The IR version that goes with the opset, so that older onnxruntime releases load the file.
    model.ir_version = 8 if opset <= 18 else (9 if opset <= 20 else 10)
    onnx.checker.check_model(model, full_check=True)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the .onnx file to write")
    ap.add_argument("--width", type=int, default=64, help="channels of stage 1 (64: the real network)")
    ap.add_argument("--size", type=int, default=224, help="input height and width (224: the real network)")
    ap.add_argument("--classes", type=int, default=1000, help="outputs of the classifier")
    ap.add_argument("--seed", type=int, default=0, help="seed of the weights")
    ap.add_argument("--fold-bn", action="store_true", help="fold BatchNormalization into the convolutions")
    ap.add_argument("--opset", type=int, default=DEFAULT_OPSET, help="opset of the default domain")
    ap.add_argument("--dynamic-batch", action="store_true", help="a symbolic batch dimension N")
    args = ap.parse_args()
    if args.width < 1 or args.size < 1 or args.classes < 1:
        ap.error("--width, --size and --classes must be positive")
    model = build(args.width, args.size, args.classes, args.seed, args.fold_bn, args.opset, args.dynamic_batch)
    onnx.save(model, args.out)
    print(f"{args.out}: {len(model.graph.node)} nodes, {len(model.graph.initializer)} initializers")


if __name__ == "__main__":
    main()
