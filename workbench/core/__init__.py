"""The headless core: data, models, jobs, the project store and plugins. Never imports Qt."""
