"""DL Testing Workbench: test deep-learning image classifiers interactively.

`workbench.core` is the headless engine (no Qt); `workbench.gui` is the Qt skin over it;
`workbench.cli` exposes the same core functions on the command line.
"""

__version__ = "0.1.0"
