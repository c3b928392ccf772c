"""Models: the zoo of known architectures (`architectures.py`), reading users' model files (`model_io.py`),
their layers (`layers.py`), forward hooks and captured activations (`hooks.py`, `activations.py`), training and
evaluation (`training.py`, `evaluation.py`)."""
