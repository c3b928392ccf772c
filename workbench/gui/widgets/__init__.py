"""Reusable widgets: thumbnail grid, heatmap with colour bar, jobs panel, plot export, notices."""
