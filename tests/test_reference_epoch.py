"""The reference is said: which epoch's weights every engine is judged against (issue 72, item 4)."""

from precisionflow.modeling.training import kept_epoch_line


def test_the_kept_epoch_is_said_beside_the_best_and_the_last():
    summary = {
        "kept_epoch": 6,
        "epochs_run": 12,
        "val_accuracy": 0.806,
        "best_epoch": 6,
        "best_epoch_val_accuracy": 0.806,
        "last_epoch_val_accuracy": 0.773,
    }
    assert kept_epoch_line(summary) == "kept epoch 6 of 12: validation top-1 0.806 (best epoch 6: 0.806; last epoch 0.773)"


def test_a_summary_without_validation_top1_says_nothing():
    assert kept_epoch_line({"kept_epoch": 3, "map": 0.4}) == ""  # a detector's training: no top-1 to quote
