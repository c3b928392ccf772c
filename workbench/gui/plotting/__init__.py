"""Drawing helpers shared by views and widgets: colours, pyqtgraph's style, and painting a large image or plot
in stages so the window keeps its frame rate."""
