"""Leave-one-conversation-out selection (bench/locomo_cv.py), on made-up scores."""

from __future__ import annotations

from typing import Any

from bench.locomo_cv import GRID, cross_validate


def _scores(per_config: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    return {name: {s: [(4, v) for v in values] for s, values in per.items()}
            for name, per in per_config.items()}



def test_each_fold_is_chosen_on_the_other_conversations_and_scored_on_its_own() -> None:
    names = list(GRID)
    good_on_a, good_on_b = names[1], names[2]
    made = {name: {"a": [0.5], "b": [0.5], "c": [0.5]} for name in names}
    made[good_on_a] = {"a": [1.0], "b": [0.6], "c": [0.6]}  # best when a is trained on
    made[good_on_b] = {"a": [0.2], "b": [1.0], "c": [0.9]}  # best when a is held out
    cv = cross_validate(_scores(made))
    by_fold = {f["held_out"]: f for f in cv["folds"]}
    assert by_fold["a"]["chosen"] == good_on_b and by_fold["a"]["held_out_recall"] == 0.2
    assert by_fold["b"]["chosen"] == good_on_a and by_fold["b"]["held_out_recall"] == 0.6
    assert cv["cv_worst"] == 0.2
    assert cv["defaults_mean"] == 0.5


def test_a_tie_keeps_the_defaults() -> None:
    made = {name: {"a": [0.5], "b": [0.5]} for name in GRID}
    cv = cross_validate(_scores(made))
    assert {f["chosen"] for f in cv["folds"]} == {"defaults"}
