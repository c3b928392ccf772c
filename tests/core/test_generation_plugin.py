"""A generator kind from a plugin: plugins/example_generator.py is found, listed beside the built-ins,
trained, saved, loaded and measured like them; a plugin may not take a built-in's name silently, and
one whose factory makes no Generator is refused in words."""

from __future__ import annotations

import textwrap

import pytest
import torch

from workbench.core.errors import WorkbenchError
from workbench.core.execution.jobs import JobContext


@pytest.fixture
def example_plugin(isolated_plugins, monkeypatch, tmp_path):
    """The plugins/ folder's plugins loaded, in isolation."""
    monkeypatch.delenv("WORKBENCH_PLUGIN_PATH", raising=False)
    reports = {r.name: r for r in isolated_plugins.load_plugins(force=True)}
    assert reports["example_generator"].ok, reports["example_generator"].error
    assert reports["example_generator"].added == ["generator tiny-cvae"]
    return isolated_plugins


def test_the_example_generator_trains_saves_loads_and_decodes(example_plugin, tmp_path, fashion_tiny, lenet5_fashion):
    from workbench.core.generation.registry import generator_kinds, get_generator_kind
    from workbench.core.generation.storage import load_generator
    from workbench.core.generation.training import train_generator

    kinds = [k.name for k in generator_kinds()]
    assert kinds[:4] == ["vae", "conv-vae", "gan", "diffusion"] and "tiny-cvae" in kinds
    kind = get_generator_kind("tiny-cvae")
    assert kind.plugin and kind.conditional and kind.title == "Tiny conditional VAE" and "small" in kind.presets
    result = train_generator(JobContext("cpu"), "tiny-cvae", fashion_tiny, tmp_path / "cvae", epochs=1,
                             preset="small", classifier=lenet5_fashion, acceptance_samples=50, latent_samples=100)
    card = result.card
    assert card.kind == "tiny-cvae" and card.complete and card.config == {"h_dim": 32, "z_dim": 4}
    assert card.latent_range["source"] == "prior draws" and card.seed_acceptance["n"] == 50
    loaded = load_generator(tmp_path / "cvae")
    assert type(loaded).__name__ == "TinyCVAE" and loaded.kind == "tiny-cvae"
    z = loaded.sample_latent(3, torch.Generator().manual_seed(0))
    assert torch.equal(loaded.decode(z, torch.tensor([1, 2, 3])), result.generator.decode(z, torch.tensor([1, 2, 3])))


def test_a_generator_folder_of_an_absent_plugin_says_so(example_plugin, tmp_path, fashion_tiny, monkeypatch):
    from workbench.core.generation import registry
    from workbench.core.generation.storage import load_generator
    from workbench.core.generation.training import train_generator

    train_generator(JobContext("cpu"), "tiny-cvae", fashion_tiny, tmp_path / "cvae", epochs=1, preset="small",
                    latent_samples=10)
    monkeypatch.setattr(registry, "PLUGIN_GENERATORS", {})
    with pytest.raises(WorkbenchError, match="kind 'tiny-cvae', which this workbench does not have") as raised:
        load_generator(tmp_path / "cvae")
    assert "plugin" in raised.value.hint


def test_plugins_cannot_take_a_built_in_name_or_register_a_non_generator(isolated_plugins, tmp_path, monkeypatch):
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "clash.py").write_text(textwrap.dedent("""
        from workbench.core.generation.vae import VAE
        def register(registry):
            registry.add_generator("vae", VAE)
    """))
    (folder / "junk.py").write_text("def register(registry):\n    registry.add_generator('junk', dict)\n")
    monkeypatch.setenv("WORKBENCH_PLUGIN_PATH", str(folder))
    reports = {r.name: r for r in isolated_plugins.load_plugins(force=True)}
    assert not reports["clash"].ok and "exists already" in reports["clash"].error
    assert reports["junk"].ok
    from workbench.core.generation.registry import create_generator

    with pytest.raises(WorkbenchError, match="plugin generator 'junk'"):
        create_generator("junk", 10)
