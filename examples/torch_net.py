"""The fusion network of CN114419081B in plain PyTorch (no refseg), as a candidate for
``refseg golden check --part net``.

Written from a golden bundle alone: the layers, their settings and the conventions come from
``manifest.json`` (``network.layers``, ``network.conventions``, the entries' ``params``), the
weights from the bundle's ``weights.npz`` (``refseg golden write --with-weights``), checked
against the manifest's hash. It computes, in float64 from the float32 weights:

- ``net/input``: the feature maps of ``net/pre_resize`` resized as the manifest's
  ``params.resize`` says (separable antialiased triangle filter, float32 between the passes);
- the ten backbone taps and every decoder layer, by walking the layer table;
- the loss, its gradients with respect to the decoder's kernels and biases (torch autograd),
  and three steps of ``torch.optim.Adam`` (the manifest's "torch form").

Usage: python examples/torch_net.py BUNDLE_DIR candidate.npz
"""
import hashlib
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def weights_sha256(weights):
    """The manifest's hash_rule for the weights: sorted keys, each key, dtype string and
    shape, NUL-separated, then the little-endian C-order bytes."""
    digest = hashlib.sha256()
    for key in sorted(weights):
        a = np.ascontiguousarray(weights[key], dtype=weights[key].dtype.newbyteorder("<"))
        digest.update(key.encode() + b"\0" + a.dtype.str.encode() + b"\0"
                      + ",".join(str(n) for n in a.shape).encode() + b"\0" + a.tobytes())
    return digest.hexdigest()


def resize_matrix(n_in, n_out):
    """(n_out, n_in) weights of one pass of the manifest's resize rule."""
    scale = n_in / n_out
    width = max(scale, 1.0)
    m = torch.zeros(n_out, n_in)
    for i in range(n_out):
        centre = (i + 0.5) * scale
        lo = max(int(centre - width + 0.5), 0)
        hi = min(int(centre + width + 0.5), n_in)
        j = torch.arange(lo, hi, dtype=torch.float64)
        w = torch.clamp(1 - torch.abs((j + 0.5 - centre) / width), min=0)
        m[i, lo:hi] = w / w.sum()
    return m


def network_input(pre, hw):
    """(N, M, N') float32 0/1 maps -> (N, H, W, 3) float32 in [-1, 1]."""
    h, w = hw
    x = torch.from_numpy(pre.astype(np.float64))
    across = (x @ resize_matrix(x.shape[2], w).T).to(torch.float32).double()
    r = (resize_matrix(x.shape[1], h) @ across).to(torch.float32)
    r = torch.clamp(r * 2 - 1, -1, 1)
    return r[..., None].repeat(1, 1, 1, 3)


def same_pads(n, k, s):
    out = -(-n // s)
    total = max((out - 1) * s + k - n, 0)
    return total // 2, total - total // 2


def conv(x, kernel, bias, layer, depthwise=False):
    """Keras Conv2D / DepthwiseConv2D on NCHW x; kernel in Keras layout."""
    kh, kw = layer["kernel"]
    sh, sw = layer["strides"]
    if layer["padding"] == "same":
        top, bottom = same_pads(x.shape[2], kh, sh)
        left, right = same_pads(x.shape[3], kw, sw)
        x = F.pad(x, (left, right, top, bottom))
    if depthwise:
        weight = kernel.permute(2, 3, 0, 1)  # (kh, kw, C, 1) -> (C, 1, kh, kw)
        y = F.conv2d(x, weight, stride=(sh, sw), groups=x.shape[1])
    else:
        y = F.conv2d(x, kernel.permute(3, 2, 0, 1), stride=(sh, sw))
    return y if bias is None else y + bias[None, :, None, None]


def conv_transpose(x, kernel, bias, layer):
    """Keras Conv2DTranspose, padding 'same': the full transposed convolution cropped from
    max(k - s, 0) // 2 to n * s outputs per axis (zero-padded at the end if shorter)."""
    kh, kw = layer["kernel"]
    sh, sw = layer["strides"]
    full = F.conv_transpose2d(x, kernel.permute(3, 2, 0, 1), stride=(sh, sw))
    out = []
    for axis, (n, k, s) in enumerate(((x.shape[2], kh, sh), (x.shape[3], kw, sw))):
        start = max(k - s, 0) // 2
        out.append((start, n * s))
    (r0, rn), (c0, cn) = out
    y = full[:, :, r0:r0 + rn, c0:c0 + cn]
    y = F.pad(y, (0, cn - y.shape[3], 0, rn - y.shape[2]))
    return y + bias[None, :, None, None]


def activate(y, name):
    if name is None:
        return y
    if name == "relu":
        return torch.relu(y)
    if name == "softmax":
        return torch.softmax(y, dim=1)
    raise ValueError(f"activation {name}")


def run(layers, params, x, wanted, start=None):
    """Walk the layer table from the given values (``{"input_layer": x}`` or the taps), keeping
    the outputs named in ``wanted``."""
    values = dict(start or {"input_layer": x})
    for layer in layers:
        if layer["name"] in values or not all(i in values for i in layer["inputs"]):
            continue
        a = [values[i] for i in layer["inputs"]]
        op, name = layer["op"], layer["name"]
        p = {k.split("/", 1)[1]: params[k] for k in layer["weights"]}
        if op == "ZeroPadding2D":
            (t, b), (l, r) = layer["padding"]
            y = F.pad(a[0], (l, r, t, b))
        elif op == "Conv2D":
            y = activate(conv(a[0], p["kernel"], p.get("bias"), layer), layer["activation"])
        elif op == "DepthwiseConv2D":
            y = activate(conv(a[0], p["kernel"], p.get("bias"), layer, depthwise=True),
                         layer["activation"])
        elif op == "Conv2DTranspose":
            y = activate(conv_transpose(a[0], p["kernel"], p["bias"], layer),
                         layer["activation"])
        elif op == "BatchNormalization":
            shape = (1, -1, 1, 1)
            y = ((a[0] - p["moving_mean"].view(shape))
                 / torch.sqrt(p["moving_variance"].view(shape) + layer["epsilon"])
                 * p["gamma"].view(shape) + p["beta"].view(shape))
        elif op in ("Activation", "ReLU"):
            y = torch.relu(a[0]) if layer["max_value"] is None else torch.clamp(
                a[0], 0, layer["max_value"])
        elif op == "MaxPooling2D":
            y = F.max_pool2d(a[0], layer["pool_size"], layer["strides"])
        elif op == "Add":
            y = a[0] + a[1]
        else:
            raise ValueError(f"{name}: op {op} not known")
        values[name] = y
    return {k: values[k] for k in wanted}


def nhwc(t):
    return t.detach().permute(0, 2, 3, 1).numpy().astype(np.float32)


def candidate_arrays(bundle):
    """The network arrays of the bundle's manifest, as this plain PyTorch network computes them."""
    manifest = json.load(open(f"{bundle}/manifest.json", encoding="utf-8"))
    net, entries = manifest["network"], manifest["arrays"]
    with np.load(f"{bundle}/weights.npz", allow_pickle=False) as npz:
        weights = {k: npz[k] for k in npz.files}
    if weights_sha256(weights) != net["weights_sha256"]:
        sys.exit(f"{bundle}/weights.npz: does not hash to network.weights_sha256")
    with np.load(f"{bundle}/arrays.npz", allow_pickle=False) as npz:
        pre, labels = npz["net/pre_resize"], npz["net/labels"]
    out = {}
    x = network_input(pre, net["input_hw"])
    out["net/input"] = x.numpy()

    layers = net["layers"]
    decoder = [layer for layer in layers if layer["part"] == "decoder"]
    backbone = [layer for layer in layers if layer["part"] != "decoder"]
    trained = [k for layer in decoder for k in layer["weights"]]
    params = {k: torch.tensor(v.astype(np.float64), requires_grad=k in trained)
              for k, v in weights.items()}
    taps = [n.split("/", 2)[2] for n in entries if n.startswith("net/tap/")]
    with torch.no_grad():
        tap_values = run(backbone, params, x.double().permute(0, 3, 1, 2), taps)
    out.update({f"net/tap/{k}": nhwc(v) for k, v in tap_values.items()})
    names = [layer["name"] for layer in decoder]

    def forward():
        return run(decoder, params, None, names, start=dict(tap_values))

    y = torch.from_numpy(labels.astype(np.int64))

    def loss_of(prediction):
        p = torch.clamp(prediction, 1e-7, 1 - 1e-7)
        return -torch.log(torch.gather(p, 1, y[:, None])).mean()

    with torch.no_grad():
        layer_values = forward()
    out.update({f"net/layer/{k}": nhwc(v) for k, v in layer_values.items()})
    out["net/prediction"] = out["net/layer/prediction"]

    hyper = entries[next(n for n in entries if n.startswith("net/adam") and "/param/" in n)]
    hyper = hyper["params"]
    leaves = [params[k] for k in trained]
    optimizer = torch.optim.Adam(leaves, lr=hyper["learning_rate"],
                                 betas=(hyper["beta_1"], hyper["beta_2"]), eps=hyper["epsilon"])
    steps = sorted({int(n.split("/")[1][4:]) for n in entries
                    if n.startswith("net/adam") and n.split("/")[1][4:].isdigit()})
    losses = []
    for step in range(1, max(steps) + 1):
        optimizer.zero_grad()
        loss = loss_of(forward()["prediction"])
        losses.append(float(loss.detach()))
        loss.backward()
        if step == 1:
            out["net/loss"] = np.float32(loss.item())
            for k in trained:
                out[f"net/grad/{k}"] = params[k].grad.numpy().astype(np.float32)
        optimizer.step()
        if step in steps:
            for k in trained:
                state = optimizer.state[params[k]]
                for key, value in (("param", params[k]), ("m", state["exp_avg"]),
                                   ("v", state["exp_avg_sq"])):
                    out[f"net/adam{step}/{key}/{k}"] = value.detach().numpy().astype(
                        np.float32)
    out["net/adam/losses"] = np.array(losses, dtype=np.float32)
    for name, value in out.items():
        want = np.dtype(entries[name]["dtype"])
        assert np.asarray(value).dtype == want, (name, np.asarray(value).dtype, want)
    return out


def main(bundle, candidate):
    out = candidate_arrays(bundle)
    np.savez(candidate, **out)
    print(f"{candidate}: {len(out)} network arrays")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python examples/torch_net.py BUNDLE_DIR candidate.npz")
    main(*sys.argv[1:3])
