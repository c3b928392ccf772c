"""The central tabs: one view per task (Data, Model, Training, Importance, Coverage)."""
