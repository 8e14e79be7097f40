"""Training's refusals, importable without the training stack.

`gym launch` and `gym train` catch these around their whole run. Defining them beside the code that
raises them would make catching them import transformers, which turns a rerun of a finished config
(every stage already done) from a fraction of a second into ten seconds of imports.
"""

from __future__ import annotations


class ResumeError(Exception):
    """``train.resume`` names something that cannot be resumed from."""
