"""The pull-request report of a run: the sticky comment (outcome, render, sticky) and the commit status.

The GitHub Action writes it when it plans or launches a config; a cloud job launched without waiting
updates the same comment itself when it ends (:mod:`gym.launch.report.job`). Both sides render through
the same code, so the Action imports it from here rather than the job importing the Action.
"""
