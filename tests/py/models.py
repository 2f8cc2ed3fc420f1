"""Small test models for the Python tests (CPU-sized, torch.nn only, deterministic weights).

TinyCNN is ResNet-shaped (stem, a `layer1` Sequential of BasicBlocks, pooling, classifier) so
that qualified module names such as `layer1.0.conv1` and `layer1.1.downsample.0` appear.
Encoder wraps one nn.TransformerEncoderLayer (batch_first=True) plus a linear head.
"""
import torch
from torch import nn


class BasicBlock(nn.Module):
    """conv-bn-relu-conv-bn plus a shortcut (projected when the width changes)."""

    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + idt)


class TinyCNN(nn.Module):
    """stem (conv1, bn1, relu), layer1 = two BasicBlocks, avgpool (a MaxPool2d in a
    Sequential with an AdaptiveAvgPool2d), fc (a Linear)."""

    def __init__(self, width=4, num_classes=3):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.layer1 = nn.Sequential(BasicBlock(width, width), BasicBlock(width, 2 * width))
        self.pool = nn.Sequential(nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.pool(self.layer1(x))
        return self.fc(torch.flatten(x, 1))


class Encoder(nn.Module):
    """One transformer encoder layer (batch_first) and a linear head on the mean token."""

    def __init__(self, d_model=16, nhead=2, num_classes=3):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=32, dropout=0.0,
                                                batch_first=True)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, x):
        return self.head(self.layer(x).mean(dim=1))


# The module forwards one call of each model runs, in call order, by qualified name.
CNN_MODULE_CALLS = [
    "conv1", "bn1", "relu", "layer1",
    "layer1.0", "layer1.0.conv1", "layer1.0.bn1", "layer1.0.relu", "layer1.0.conv2",
    "layer1.0.bn2", "layer1.0.relu",
    "layer1.1", "layer1.1.downsample", "layer1.1.downsample.0", "layer1.1.downsample.1",
    "layer1.1.conv1", "layer1.1.bn1", "layer1.1.relu", "layer1.1.conv2", "layer1.1.bn2",
    "layer1.1.relu",
    "pool", "pool.0", "pool.1", "fc",
]
# Train mode keeps TransformerEncoderLayer off its fused fast path; MultiheadAttention uses
# out_proj's weights directly, so layer.self_attn.out_proj never runs a forward.
ENCODER_MODULE_CALLS = [
    "layer", "layer.self_attn", "layer.dropout1", "layer.norm1", "layer.linear1",
    "layer.dropout", "layer.linear2", "layer.dropout2", "layer.norm2", "head",
]


class Add(nn.Module):
    """The smallest model: one aten::add."""

    def forward(self, a, b):
        return torch.add(a, b)


class Raises(nn.Module):
    """Runs one op, then raises RuntimeError("boom") from its forward."""

    def forward(self, x):
        torch.neg(x)
        raise RuntimeError("boom")


class StepInForward(nn.Module):
    """Calls prof.step() from inside its own forward (which xsp must refuse)."""

    def __init__(self, prof):
        super().__init__()
        self.prof = prof

    def forward(self, x):
        self.prof.step()
        return x


def cnn():
    """(TinyCNN in train mode, input batch), deterministic."""
    torch.manual_seed(0)
    return TinyCNN().train(), torch.randn(2, 3, 8, 8)


def encoder():
    """(Encoder in train mode, input batch), deterministic.  Train mode keeps the encoder
    layer off its fused fast path, so its submodules' forwards (self_attn, linear1, ...) run
    and are recorded."""
    torch.manual_seed(0)
    return Encoder().train(), torch.randn(2, 5, 16)


def fwd(model, x):
    """One forward."""
    return model(x)


def fwd_bwd(model, x):
    """One forward and backward of sum(output)."""
    model(x).sum().backward()
