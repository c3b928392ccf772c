"""Where jobs run: a job's context — progress, cancellation, device (`jobs.py`) —, the worker process that
runs jobs beside the window (`worker_process.py`), and long jobs split into shards (`shard_plan.py`) that run
locally or on a Ray cluster (`sharding.py`, `ray_cluster.py`)."""
