"""LLM-as-judge evaluation (``[eval.judge]``): win rates against the base and the champion, rubric scores.

- :mod:`~gym.eval.judge.items`: the prompts file, checked line by line;
- :mod:`~gym.eval.judge.prompts`: Gym's versioned judge prompts (``prompts/*.txt``) and their registry;
- :mod:`~gym.eval.judge.answers`: the candidates' answers through Gym's serving app, ``judge_answers.jsonl``;
- :mod:`~gym.eval.judge.client`: the judge endpoint (``openai`` client), its cache and cost caps;
- :mod:`~gym.eval.judge.scoring`: verdicts read, win rates with Wilson intervals, rubric means;
- :mod:`~gym.eval.judge.run`: the comparisons, and the rows and section they add to the report;
- :mod:`~gym.eval.judge.render`: the judge's lines in the card and the pull-request comment, and the plan's.

Importing this package is cheap: the ``openai`` client and the model stack load when a judgment runs.
"""

from __future__ import annotations

from gym.eval.judge.answers import ANSWERS_FILE
from gym.eval.judge.client import CACHE_FILE
from gym.eval.judge.render import judge_markdown, plan_note
from gym.eval.judge.run import judge_champion, judge_run

__all__ = ["ANSWERS_FILE", "CACHE_FILE", "judge_champion", "judge_markdown", "judge_run", "plan_note"]
