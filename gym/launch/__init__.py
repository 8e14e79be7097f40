"""Running a gym.toml somewhere else: `gym launch --cloud` turns ``[compute]`` into a SkyPilot task.

Split so the cheap parts stay cheap: :mod:`gym.launch.templates` holds the task templates (also
shipped as ``sky_tasks/*.yaml`` for ``sky launch`` by hand), :mod:`gym.launch.task` maps a config
onto them without importing SkyPilot, and only :mod:`gym.launch.cloud` talks to SkyPilot.
"""
