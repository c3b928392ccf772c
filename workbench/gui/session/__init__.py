"""What the window knows and runs: the open project and its loaded models and datasets (`session.py`), the job
runner and its keyed jobs (`jobs.py`, `keyed_jobs.py`), the shared selection, the views' and the application's
remembered settings, the Coverage view's runs and choices, and the UI thread's garbage collection."""
