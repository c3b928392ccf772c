"""The project folder (`folder.py`), the HDF5 artifact store it keeps results in (`store.py`), and staging:
a job's results written to the project only once the job has finished (`staging.py`)."""
