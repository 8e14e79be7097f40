"""GitOps in both directions: the git repository is the source of truth for the models on the Hub.

- :mod:`gym.hub.git_source`: which repository, commit, pull request and gym.toml produced a run (asked of git).
- :mod:`gym.hub.lineage`: what a push records of it (Hub commit message, card section, eval_results.json).
- :mod:`gym.gitops.history`: the promotions of a ``[hub]`` repository, read back from its Hub commits.
- :mod:`gym.gitops.rollback`: serve an earlier promotion again (a new Hub commit), and its Space with it.
- :mod:`gym.gitops.pins`: the Hub revisions a gym.toml trains on, pinned, and when they move.

See docs/gitops.md.
"""
