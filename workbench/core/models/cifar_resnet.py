"""The CIFAR ResNets of He et al. (2016, section 4.2) that RobOT trains: ResNet-20, -32 and -56.

6n + 2 weighted layers: a 3×3 convolution to 16 channels, three stages of n basic blocks at 16, 32 and
64 channels (the first block of the second and third stage halves the resolution), global average
pooling and a dense layer. A basic block is conv3×3–BN–ReLU–conv3×3–BN, added to its shortcut, then
ReLU. As in the Keras ResNet v1 that RobOT's models were trained with, a block that changes the shape
takes a 1×1 convolution with stride 2 as its shortcut (no batch norm), the others the identity, and
every convolution has a bias.

Every ReLU is a module of its own, so each layer has one name (`layer2.0.relu1`), and the residual sum
is a plain `+` that LRP splits by contribution (docs/methods/importance.md).
"""

from __future__ import annotations

from torch import nn

DEPTHS = {"resnet20": 3, "resnet32": 5, "resnet56": 9}  # blocks per stage, n = (depth − 2) / 6


class BasicBlock(nn.Module):
    def __init__(self, in_channels: int, channels: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride=stride, padding=1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut = (nn.Conv2d(in_channels, channels, 1, stride=stride)
                         if stride != 1 or in_channels != channels else nn.Identity())
        self.relu2 = nn.ReLU()

    def forward(self, x):
        y = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        return self.relu2(y + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, blocks: int, num_classes: int = 10, in_channels: int = 3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu1 = nn.ReLU()
        stages, channels = [], 16
        for stage, width in enumerate((16, 32, 64)):
            stage_blocks = []
            for i in range(blocks):
                stage_blocks.append(BasicBlock(channels, width, 2 if stage > 0 and i == 0 else 1))
                channels = width
            stages.append(nn.Sequential(*stage_blocks))
        self.layer1, self.layer2, self.layer3 = stages
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(64, num_classes)
        for module in self.modules():  # He initialisation, as the paper and the Keras example
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_in", nonlinearity="relu")
                nn.init.zeros_(module.bias)

    def forward(self, x):
        x = self.relu1(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(self.flatten(self.pool(x)))


def cifar_resnet(name: str, num_classes: int = 10, in_channels: int = 3) -> CifarResNet:
    return CifarResNet(DEPTHS[name], num_classes, in_channels)
