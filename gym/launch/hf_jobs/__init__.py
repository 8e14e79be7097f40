"""`gym launch --cloud` on Hugging Face Jobs (``[compute] provider = "hf-jobs"``): a GPU with only a Hub token.

The job runs the same stages as a SkyPilot job (train → eval → gates → card → push → Space) in a container
on Hub hardware. What the job needs from the repository (gym.toml, local data, the wheel of a dev build)
is committed to a private dataset repo first and mounted read-only; a Hub Storage Bucket
(``compute.checkpoint_volume``) mounted read-write holds the run's output folder, so a job stopped by its
timeout is resumed by the next launch. Modules: :mod:`.flavors` (hardware and prices), :mod:`.staging`
(the upload), :mod:`.jobs` (spec, launch, status, logs, cancel).
"""
