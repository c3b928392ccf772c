"""Generative models as search spaces for test generation: the protocol (`protocol`), the built-in
kinds (`vae`, `gan`, `diffusion`) and plugins' (`registry`), generator folders (`storage`), what a
card measures (`assessment`) and training as a long job (`training`). See docs/methods/generation.md.
"""
