"""The champion: the model the ``[hub]`` repository holds now, and the scores its card records.

Scores come from the card's ``model-index`` (what the Hub shows); the settings they were measured with
and their standard errors from the ``eval_results.json`` Gym pushes beside it. Everything is read at
the commit the repository's ``main`` points to, through huggingface_hub, and that commit is recorded so
the promoted card can say which model it replaced.
"""

from __future__ import annotations

from gym.eval.gates import Champion, GateError
from gym.eval.report import EvalReport

ADVICE = "push this run with `gym deploy --force` to replace it, or remove the champion gates from eval.gates.rules"


def read_champion(
    repo: str, token: str | None, token_env: str = "HF_TOKEN", *, endpoint: str | None = None
) -> Champion | None:
    """The champion of ``repo``; None when the repository does not exist yet (a first deployment).

    ``endpoint`` defaults to huggingface_hub's (``HF_ENDPOINT``).

    Raises :class:`GateError` (one sentence, no token) when it exists but its scores cannot be used.
    """
    if not token:
        raise GateError(
            f"champion gates read {repo} with the token in ${token_env}, which is not set; set it, or remove the "
            "champion gates from eval.gates.rules"
        )
    from huggingface_hub import HfApi, ModelCard, hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError

    api = HfApi(token=token, endpoint=endpoint)
    try:
        info = api.model_info(repo)
        if info.sha is None:
            raise GateError(f"the Hub did not say which commit {repo} is at; retry later")
        files = {sibling.rfilename for sibling in info.siblings or []}
        if "README.md" not in files:
            raise GateError(f"no champion to compare: {repo} has no model card with eval results; {ADVICE}")
        card = ModelCard.load(
            hf_hub_download(repo, "README.md", revision=info.sha, token=token, endpoint=endpoint),
            ignore_metadata_errors=True,
        )
        scores = {
            (r.dataset_name or r.task_name, r.metric_type): r.metric_value
            for r in card.data.eval_results or []
        }
        if not scores:
            raise GateError(
                f"no champion to compare: the card of {repo} has no eval results (model-index); {ADVICE}"
            )
        if "eval_results.json" not in files:
            raise GateError(
                f"the card of {repo} has scores but no eval_results.json with the settings they were measured with, "
                f"so no gate can be compared fairly with it; {ADVICE}"
            )
        report = EvalReport.read(
            hf_hub_download(repo, "eval_results.json", revision=info.sha, token=token, endpoint=endpoint)
        )
    except RepositoryNotFoundError:
        return None
    except GateError:
        raise
    except EntryNotFoundError:
        raise GateError(f"no champion to compare: {repo} lost its card while it was read; retry") from None
    except (ValueError, TypeError, KeyError) as error:
        raise GateError(
            f"the champion's eval_results.json in {repo} cannot be read ({type(error).__name__}); {ADVICE}"
        ) from None
    except Exception as error:  # noqa: BLE001 - network and HTTP errors: one sentence, never the token
        status = getattr(getattr(error, "response", None), "status_code", None)
        how = f"HTTP {status}" if status else type(error).__name__
        raise GateError(
            f"cannot read the champion {repo} from the Hub ({how}); nothing was pushed, retry later"
        ) from None
    for row in report.results:  # the card is what the Hub shows: its values are the champion's
        value = scores.get((row.task, row.metric))
        row.value = float(value) if isinstance(value, (int, float)) else None
    return Champion(repo=repo, sha=info.sha, report=report)
