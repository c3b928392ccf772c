"""Neuron importance: LRP (`lrp/`), the relevance of a layer's neurons summed over a dataset
(`neuron_importance.py`), the inputs that excite a neuron most (`top_inputs.py`, `gallery.py`), the ablation check
of the important neurons (`ablation.py`) and how well relevance is conserved (`conservation.py`)."""
