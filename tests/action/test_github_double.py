"""The GitHub double refuses what GitHub refuses, and the action copes with what GitHub really answers.

Driven by PyGithub, as the action is: a wrong or missing token is a 401 on every route, lists come
30 per page with a ``Link`` header (so the sticky comment can sit on page 2 of a busy pull request),
and a custom repository role answers its base permission.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.action.conftest import EVENTS, GITHUB_TOKEN, RecordingLauncher


def _client(github, token: str | None):
    from github import Auth, Github

    auth = Auth.Token(token) if token else None
    return Github(
        base_url=github.base, auth=auth, retry=None, seconds_between_requests=0, seconds_between_writes=0
    )


@pytest.mark.parametrize(
    ("token", "message"), [("ghs_" + "X" * 36, "Bad credentials"), (None, "Requires authentication")]
)
def test_every_route_checks_the_token(github, token, message) -> None:
    from github import GithubException

    github.pulls[7] = {"head_repo": "acme/models"}
    with pytest.raises(GithubException) as refused:
        _client(github, token).get_repo("acme/models")
    assert refused.value.status == 401 and refused.value.data["message"] == message
    assert github.requests[-1].authorized is False
    repo = _client(github, GITHUB_TOKEN).get_repo("acme/models")
    assert repo.get_pull(7).number == 7 and github.requests[-1].authorized


def test_lists_come_thirty_per_page_with_a_link_header(github) -> None:
    github.pulls[7] = {"head_repo": "acme/models"}
    for n in range(65):
        github.add_comment(7, f"comment {n}", "someone")
    request = urllib.request.Request(f"{github.base}/repos/acme/models/issues/7/comments",
                                     headers={"Authorization": f"token {GITHUB_TOKEN}"})  # fmt: skip
    with urllib.request.urlopen(request) as answer:
        first, link = json.loads(answer.read()), answer.headers["Link"]
    assert [c["body"] for c in first] == [f"comment {n}" for n in range(30)]
    assert 'page=2>; rel="next"' in link and 'page=3>; rel="last"' in link
    bodies = [
        c.body for c in _client(github, GITHUB_TOKEN).get_repo("acme/models").get_issue(7).get_comments()
    ]
    assert bodies == [f"comment {n}" for n in range(65)]  # PyGithub follows the Link header
    pages = [r.query for r in github.calls("GET", r"/issues/7/comments$")]
    assert len(pages) == 4 and "page=2" in pages[2] and "page=3" in pages[3]


def test_sticky_comment_on_page_two_is_edited_not_duplicated(github, run_action) -> None:
    github.pulls[7] = {"head_repo": "acme/models"}
    github.files[7] = [("gym.toml", "modified")]
    first = run_action("pr_same_repo.json", "pull_request", RecordingLauncher())
    assert first.rc == 0, first.stdout
    (own,) = github.comments[7]
    for n in range(40):  # a busy review: the action's comment is now first of 41, then moved to page 2
        github.add_comment(7, f"review remark {n}", "reviewer")
    github.comments[7] = github.comments[7][1:36] + [own] + github.comments[7][36:]
    event = json.loads((EVENTS / "pr_same_repo.json").read_text())
    event["pull_request"]["head"]["sha"] = "c" * 40  # a new push: the comment must be edited
    again = run_action("pr_same_repo.json", "pull_request", RecordingLauncher(), event_data=event)
    assert again.rc == 0, again.stdout
    assert len(github.comments[7]) == 41 and len(github.calls("POST", r"/issues/7/comments$")) == 1
    assert len(github.calls("PATCH", rf"/issues/comments/{own['id']}$")) == 1
    assert any("page=2" in r.query for r in github.calls("GET", r"/issues/7/comments$"))
    assert "cccccccccccc" in own["body"]


def test_a_wrong_token_is_one_sentence_and_nothing_is_written(github, run_action) -> None:
    github.pulls[7] = {"head_repo": "acme/models"}
    github.files[7] = [("gym.toml", "modified")]
    github.token = "ghs_" + "Z" * 36  # the API accepts another token than the one the action holds
    result = run_action("pr_same_repo.json", "pull_request", RecordingLauncher())
    assert result.rc != 0
    assert github.comments.get(7, []) == [] and not any(r.authorized for r in github.requests)
    assert "Traceback" not in result.stdout and GITHUB_TOKEN not in result.stdout
    assert result.stdout == (
        "::error::GitHub refused the token of the github-token input (HTTP 401, bad credentials): check the "
        "secret it comes from (the default is the workflow's github.token)\n"
    )
