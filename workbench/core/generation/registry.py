"""Generator kinds by name: the built-ins (vae, conv-vae, gan, diffusion, stable-diffusion) and those plugins add with
`PluginRegistry.add_generator(name, cls)`.

A kind's factory is usually its `Generator` subclass; it is called as
`factory(num_classes=…, image_shape=…, **config)` and must return a `Generator`. What a menu or
`--generator` offers comes from here, so a plugin's kind appears beside the built-ins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workbench.core.errors import WorkbenchError
from workbench.core.generation.conv_vae import ConvVAE
from workbench.core.generation.diffusion import ConditionalDiffusion
from workbench.core.generation.gan import ConditionalGAN
from workbench.core.generation.protocol import IMAGE_SHAPE, Generator
from workbench.core.generation.stable_diffusion import StableDiffusion
from workbench.core.generation.vae import VAE

BUILTIN: dict[str, type] = {cls.kind: cls for cls in (VAE, ConvVAE, ConditionalGAN, ConditionalDiffusion,
                                                      StableDiffusion)}
PLUGIN_GENERATORS: dict[str, Any] = {}


@dataclass(frozen=True)
class GeneratorKind:
    """What a menu and `--generator` say about a kind, and how to make one."""

    name: str
    title: str
    factory: Any
    presets: dict = field(default_factory=dict)
    training_defaults: dict = field(default_factory=dict)
    conditional: bool = True
    can_encode: bool = False
    trainable: bool = True
    plugin: bool = False
    help: str = ""


def add_plugin_generator(name: str, factory) -> None:
    PLUGIN_GENERATORS[name] = factory


def _first_line(text: str | None) -> str:
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def _kind(name: str, factory, plugin: bool) -> GeneratorKind:
    presets = getattr(factory, "presets", None)
    defaults = getattr(factory, "training_defaults", None)
    return GeneratorKind(
        name, str(getattr(factory, "title", "") or name), factory,
        dict(presets) if isinstance(presets, dict) and presets else {"default": {}},
        dict(defaults) if isinstance(defaults, dict) else dict(Generator.training_defaults),
        bool(getattr(factory, "conditional", True)), bool(getattr(factory, "can_encode", False)),
        bool(getattr(factory, "trainable", True)), plugin,
        _first_line(getattr(factory, "__doc__", "")) if plugin else "")


def generator_kinds() -> list[GeneratorKind]:
    """Every kind: the built-ins, then the plugins' (a plugin may replace a built-in with override=True)."""
    kinds = {name: _kind(name, cls, False) for name, cls in BUILTIN.items()}
    for name, factory in list(PLUGIN_GENERATORS.items()):
        kinds[name] = _kind(name, factory, True)
    return list(kinds.values())


def get_generator_kind(name: str) -> GeneratorKind:
    for kind in generator_kinds():
        if kind.name == name:
            return kind
    raise WorkbenchError(f"Unknown generator kind {name!r}.",
                         f"Known kinds: {', '.join(k.name for k in generator_kinds())} (plugins add more).")


def create_generator(kind: str, num_classes: int, image_shape=IMAGE_SHAPE, preset: str = "default",
                     seed: int | None = 0, **config) -> Generator:
    """A new, untrained generator of `kind`: `preset`'s sizes with `config` over them, its weights
    initialised from `seed` (the global random state is left as it was). `seed=None` leaves the
    random state alone altogether, for weights that are about to be read from a folder: forking it
    would rewind it under any other thread drawing from it."""
    import torch

    entry = get_generator_kind(kind)
    if preset not in entry.presets:
        raise WorkbenchError(f"The {entry.title} generator has no preset {preset!r}.",
                             f"Its presets: {', '.join(entry.presets)}.")
    settings = {**entry.presets[preset], **config}
    with torch.random.fork_rng(devices=[], enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        try:
            generator = entry.factory(num_classes=num_classes, image_shape=tuple(image_shape), **settings)
        except WorkbenchError:
            raise
        except Exception as exc:
            where = f"the plugin generator {kind!r}" if entry.plugin else f"the {entry.title} generator"
            raise WorkbenchError(f"Could not build {where}: {type(exc).__name__}: {exc}",
                                 "Fix the plugin." if entry.plugin else "Check the generator's settings.",
                                 details=repr(exc)) from exc
    if not isinstance(generator, Generator):
        raise WorkbenchError(f"The plugin generator {kind!r} made a {type(generator).__name__}, not a Generator.",
                             "A generator plugin registers a subclass of "
                             "workbench.core.generation.protocol.Generator.")
    generator.kind = kind  # the name it is stored under, whatever the class calls itself
    return generator
