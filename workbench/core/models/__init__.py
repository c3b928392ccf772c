"""Models: the zoo of known architectures (`architectures.py`, RobOT's CIFAR ResNets in `cifar_resnet.py`) and
torchvision's and timm's networks by name (`library_models.py`), reading users' model files (`model_io.py`),
their layers (`layers.py`), forward hooks and captured activations (`hooks.py`, `activations.py`), training and
evaluation (`training.py`, `evaluation.py`)."""
