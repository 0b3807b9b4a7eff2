"""int8_mixed's search record read with typed fields: the figures of the graph that was built are
the chosen trial's, or the joined mix's where that was kept -- never a trial picked by the final
count of float ops, which joining changes (MLflow once logged the selection split's drop from
trials[str(kept)], another mix's trial or none)."""

from precisionflow.quant.mixed_record import DROP, JOINED, SearchRecord
from precisionflow.reporting.engine_models import selection_figures

CLASSIFIER = {
    "trial_key": "drop",
    "unit": "points",
    "split": "val",
    "budget_met": True,
    "trials": {
        "0": {"drop": 5.0, "low": 2.0, "high": 8.0},
        "3": {"drop": 1.0, "low": -1.0, "high": 2.5, "conditions": {"dim": {"drop": 2.0, "low": 0.0, "high": 4.0}}},
        "5": {"drop": 0.5, "low": -1.5, "high": 2.0},
    },
    "chosen_trial": 3,
    "kept": 5,  # after joining isolated int8 ops: 5 ops float, which is not trial "5"
}


def test_the_built_graph_is_the_chosen_trial_not_the_trial_of_the_final_float_count():
    search = SearchRecord.read(CLASSIFIER)
    assert search.int8_itself.value == 5.0 and search.int8_itself.figure == DROP
    assert search.built.kept == 3 and search.built.conditions["dim"]["high"] == 4.0
    assert selection_figures(search) == {"val": {"drop_points": 1.0, "drop_low": -1.0, "drop_high": 2.5}}


def test_where_the_joined_mix_was_kept_its_own_figure_is_the_built_one():
    record = dict(CLASSIFIER, fastest=JOINED, joined={"kept": 5, "drop": 0.75, "interval": [-0.25, 2.25]})
    built = SearchRecord.read(record).built
    assert (built.kept, built.value, built.low, built.high) == (None, 0.75, -0.25, 2.25)
    assert selection_figures(SearchRecord.read(record))["val"]["drop_points"] == 0.75


def test_a_detectors_selection_figure_is_named_as_spurious_boxes_not_a_drop():
    record = {
        "trial_key": "spurious_per_image",
        "unit": "spurious boxes per image",
        "split": "val",
        "budget_met": True,
        "trials": {
            "0": {"spurious_per_image": 0.4, "low": 0.3, "high": 0.5},
            "2": {"spurious_per_image": 0.05, "low": 0.0, "high": 0.1},
        },
        "chosen_trial": 2,
    }
    assert selection_figures(SearchRecord.read(record)) == {
        "val": {"spurious_per_image": 0.05, "spurious_low": 0.0, "spurious_high": 0.1}
    }


def test_the_console_words_the_built_joined_mix_as_it_words_the_chosen_one():
    from precisionflow.reporting.condition_context import trial_words

    built = SearchRecord.read(dict(CLASSIFIER, fastest=JOINED, joined={"kept": 5, "drop": 0.75, "interval": [-0.25, 2.25]})).built
    assert trial_words(built, "points") == "-0.75 [-2.25, +0.25] points"
