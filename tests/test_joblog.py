from tests import joblog


def _log(*entries):
    lines = []
    for kind, job, rule in entries:
        if kind == "start":
            lines += [
                "[Mon Nov 30 06:07:01 2026]",
                f"localrule {rule}:",
                "    input: x",
                f"    jobid: {job}",
                "    wildcards: node=n",
            ]
        else:
            lines += ["[Mon Nov 30 06:07:02 2026]", f"Finished jobid: {job} (Rule: {rule})", "3 of 9 steps (33%) done"]
    return "\n".join(lines)


def test_a_timing_job_alone_has_no_overlap():
    text = _log(
        ("start", "1", "train_model"),
        ("finish", "1", "train_model"),
        ("start", "2", "evaluate_engine"),
        ("finish", "2", "evaluate_engine"),
        ("start", "3", "report"),
        ("finish", "3", "report"),
    )
    assert joblog.overlaps(joblog.events(text)) == []


def test_a_job_started_during_timing_is_found():
    text = _log(
        ("start", "2", "evaluate_engine"),
        ("start", "4", "build_engine"),
        ("finish", "4", "build_engine"),
        ("finish", "2", "evaluate_engine"),
    )
    assert joblog.overlaps(joblog.events(text)) == ["build_engine#4 started while evaluate_engine#2 ran"]


def test_timing_started_while_another_job_runs_is_found():
    text = _log(
        ("start", "5", "calibrate"),
        ("start", "6", "compare_speed"),
        ("finish", "5", "calibrate"),
        ("finish", "6", "compare_speed"),
    )
    assert joblog.overlaps(joblog.events(text)) == ["compare_speed#6 started while calibrate#5 ran"]
    assert joblog.max_concurrency(joblog.events(text)) == 2
