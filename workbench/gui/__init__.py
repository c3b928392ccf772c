"""The Qt skin over `workbench.core`: a main window, views, widgets and a job runner.

Nothing here computes: long work goes through `gui.session.jobs.JobRunner`, which runs core functions on
worker threads and turns their progress reports into Qt signals.
"""
