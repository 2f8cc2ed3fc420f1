"""Small built-in models for the demo and the benchmarks (CPU-sized, torch.nn only).

Importing this module imports torch.
"""
import torch
from torch import nn


class BasicBlock(nn.Module):
    """A ResNet basic block: conv-bn-relu-conv-bn plus a (projected) shortcut."""

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + idt)


class TinyResNet(nn.Module):
    """A ResNet-style CNN: stem, three stages of two basic blocks, pooling, classifier."""

    def __init__(self, width=16, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(BasicBlock(width, width), BasicBlock(width, width))
        self.layer2 = nn.Sequential(BasicBlock(width, 2 * width, 2), BasicBlock(2 * width, 2 * width))
        self.layer3 = nn.Sequential(BasicBlock(2 * width, 4 * width, 2),
                                    BasicBlock(4 * width, 4 * width))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class TinyTransformer(nn.Module):
    """A token classifier: embedding, two transformer encoder layers, a linear head."""

    def __init__(self, vocab=1000, d_model=64, nhead=4, layers=2, num_classes=10):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=4 * d_model,
                                           dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1))


def get(name, batch=8):
    """(model, example input) for a built-in model: 'resnet' or 'transformer'."""
    torch.manual_seed(0)
    if name == "resnet":
        return TinyResNet(), torch.randn(batch, 3, 32, 32)
    if name == "transformer":
        return TinyTransformer(), torch.randint(0, 1000, (batch, 32))
    raise ValueError("unknown built-in model %r; choose 'resnet' or 'transformer'" % (name,))
