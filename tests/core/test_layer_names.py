"""Layer names users can rely on: a module's path, and for a module a forward pass calls again (torchvision's
ResNet blocks call their one `relu` twice) the path with `#2`; the same names in the catalogue, in activation
capture, in LRP and in every process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torchvision

from workbench.core.importance.lrp.explainer import LRP
from workbench.core.models.activations import forward_values
from workbench.core.models.hooks import call_name, layer_call
from workbench.core.models.layers import layer_catalogue


@pytest.fixture(scope="module")
def resnet():
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=4).eval()


def test_names_and_calls_go_both_ways():
    assert layer_call("layer1.0.relu#2") == ("layer1.0.relu", 2) and call_name("layer1.0.relu", 2) == "layer1.0.relu#2"
    assert layer_call("fc") == ("fc", 1) and call_name("fc", 1) == "fc"
    assert layer_call("odd#name") == ("odd#name", 1) and layer_call("x#0") == ("x#0", 1)


def test_a_module_called_twice_is_two_layers_with_their_own_values(resnet):
    names = [layer.name for layer in layer_catalogue(resnet, (3, 32, 32))]
    assert len(names) == len(set(names)) == 60 + 15  # 60 calls of modules, 15 blocks (8 residual, 4 stages, 3 shortcuts)
    assert names[4:11] == ["layer1.0.conv1", "layer1.0.bn1", "layer1.0.relu", "layer1.0.conv2", "layer1.0.bn2",
                           "layer1.0.relu#2", "layer1.0"]
    assert names[-4:] == ["layer4.1", "layer4", "avgpool", "fc"]
    x = torch.rand(3, 3, 32, 32)
    with torch.no_grad():
        stem = resnet.maxpool(resnet.relu(resnet.bn1(resnet.conv1(x))))
        block = resnet.layer1[0]
        first = block.relu(block.bn1(block.conv1(stem)))
        output = block(stem)  # the second ReLU: after the residual sum
    assert torch.allclose(forward_values(resnet, "layer1.0.relu", x, "element"), first.flatten(1).double())
    assert torch.allclose(forward_values(resnet, "layer1.0.relu#2", x, "element"), output.flatten(1).double())


def test_lrp_reads_relevance_at_each_call_at_residual_sums_and_at_blocks(resnet):
    lrp = LRP(resnet, "epsilon")
    names = lrp.layer_names
    assert {"layer1.0.relu", "layer1.0.relu#2", "layer4.1.relu#2", "layer3.1.add", "layer3"} <= set(names)
    assert names[names.index("layer1.0.bn2"):names.index("layer1.1.conv1")] == [
        "layer1.0.bn2", "layer1.0.add", "layer1.0.relu#2", "layer1.0"]  # a block's name follows its last layer
    assert set(names) - {"input", "flatten"} - {n for n in names if n.endswith(".add")} == \
        {layer.name for layer in layer_catalogue(resnet, (3, 32, 32))}
    x = torch.rand(2, 3, 32, 32)
    relevance = lrp.explain(x, layers=["layer1.0.relu", "layer1.0.relu#2", "layer3", "layer3.1.relu#2"],
                            to_input=False)
    assert relevance.layers["layer1.0.relu#2"].shape == (2, 64, 8, 8)
    assert torch.equal(relevance.layers["layer3"], relevance.layers["layer3.1.relu#2"])  # the block's output


def test_a_block_is_a_layer_whose_values_are_its_output(resnet):
    x = torch.rand(3, 3, 32, 32)
    with torch.no_grad():
        stem = resnet.maxpool(resnet.relu(resnet.bn1(resnet.conv1(x))))
        stage3 = resnet.layer3(resnet.layer2(resnet.layer1(stem)))
    assert torch.allclose(forward_values(resnet, "layer3", x, "channel-mean"), stage3.mean(dim=(2, 3)).double())


def test_the_names_are_the_same_in_another_process(resnet):
    script = ("import json, torch, torchvision\n"
              "from workbench.core.models.layers import layer_catalogue\n"
              "from workbench.core.importance.lrp.explainer import LRP\n"
              "m = torchvision.models.resnet18(num_classes=4).eval()\n"
              "print(json.dumps([[l.name for l in layer_catalogue(m, (3, 32, 32))], LRP(m, 'epsilon').layer_names]))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    catalogue, lrp = json.loads(done.stdout)
    assert catalogue == [layer.name for layer in layer_catalogue(resnet, (3, 32, 32))]
    assert lrp == LRP(resnet, "epsilon").layer_names



def test_a_jobs_hook_on_a_block_does_not_reach_the_trace(resnet):
    """A job that captures a block's values hooks it on its own thread, and may build LRP's plan while the
    hook is there: the trace must not run that hook on its proxies (it did, and the plan met a `detach` it
    has no rule for)."""
    from workbench.core.models.hooks import hook_layer

    seen = []
    handle = hook_layer(resnet, "layer3", lambda module, inputs, output: seen.append(output.detach().shape))
    try:
        names = LRP(resnet, "epsilon").layer_names
    finally:
        handle.remove()
    assert "layer3" in names and "detach" not in " ".join(names) and seen == []
