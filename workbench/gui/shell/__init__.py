"""The application's shell: start-up (`app.py`), the main window with its actions, menus, status bar and
project panel, the open and distribution dialogs, the bundled demo and the documentation browser."""
