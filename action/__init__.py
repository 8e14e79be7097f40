"""The Gym GitHub Action: a gym.toml committed to a repository is validated, planned and launched.

Kept outside ``gym`` because it is glue for one CI system: it reads the GitHub event, talks to the
GitHub API through PyGithub and renders the pull-request comment, while everything about the run
itself (config, SkyPilot plan, stages, results table) is Gym's own code, imported from ``gym``.
``python -m action`` is the entrypoint ``action.yml`` runs.
"""
