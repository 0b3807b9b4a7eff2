"""precisionflow command line. Imports neither TensorFlow nor ONNX Runtime (stages do).

  precisionflow run [-m] [-n] [--cores N] [overrides ...] [-- snakemake args]
  precisionflow plan [-m] [overrides ...]       list the planned nodes without running anything
  precisionflow config [overrides ...]          print the composed configuration
  precisionflow check [-m] [overrides ...]      each finished engine's verdict against its budget (exit 1 on a breach)
  precisionflow doctor [overrides ...]          backends, devices, versions, and what each target would use
  precisionflow status [--results DIR]          engines under results/ and whether this machine can still run them
  precisionflow compare [--sweep S] [--where F]  the comparison table from MLflow (several sweeps, several machines)
  precisionflow ui [--port P]                   MLflow's UI on the project's store
  precisionflow init DIR                        a starter configuration folder for --config-dir
  precisionflow flow                            the stage graph (which stage feeds which)

Every command that composes a configuration takes --config-dir DIR (or PRECISIONFLOW_CONFIG_DIR):
the user's own groups (dataset/, model/, experiment/, ...) beside and over the built-in ones.
"""

import argparse
import json
import os
import shlex
import subprocess
import time
import sys
from pathlib import Path
from typing import Dict, List

from precisionflow.errors import ConfigError, PrecisionflowError
from precisionflow.nodeio import NODE_FILE


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-m", "--multirun", action="store_true", help="expand sweep overrides (a=1,2) into several configurations"
    )
    parser.add_argument(
        "--config-dir",
        type=Path,
        help="your configuration folder: its groups (dataset/, model/, "
        "experiment/, ...) are added to the built-in ones and override those of the same name",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. train.epochs=4 'precisions=[fp32,fp16]'")


def _add_store_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--uri", help="tracking URI (default: the SQLite store in --results)")
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--experiment", default="precisionflow")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="precisionflow", description="Measure what each precision costs in accuracy and buys in speed."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="plan with Hydra and run one Snakemake DAG over the unique nodes")
    _add_config_args(run)
    run.add_argument("-n", "--dry-run", action="store_true", help="show which jobs would run and why; run nothing")
    run.add_argument("--cores", default="all", help="cores Snakemake may use (default: all; on SLURM: per job group)")
    run.add_argument("--profile", default="local", help="Snakemake profile: local (default), slurm, or a folder")
    run.add_argument(
        "--verbose", action="store_true", help="Snakemake's full output and TensorFlow's own messages on the console"
    )
    plan = commands.add_parser("plan", help="list the content-addressed nodes of a (swept) configuration")
    _add_config_args(plan)
    plan.add_argument("--why", action="store_true", help="for every node that would run, the key, file or version that changed")
    config = commands.add_parser("config", help="print the composed configuration(s) as JSON")
    _add_config_args(config)
    doctor = commands.add_parser("doctor", help="which backends, devices and versions this machine has, per target")
    _add_config_args(doctor)
    check = commands.add_parser(
        "check", help="each finished engine's verdict against its budget; exit 1 on a breach (runs nothing)"
    )
    _add_config_args(check)
    compare = commands.add_parser("compare", help="the comparison table from MLflow: runs of several sweeps and machines")
    _add_store_args(compare)
    compare.add_argument("--sweep", action="append", default=[], help="a sweep id (tag precisionflow.sweep.<id>); repeatable")
    compare.add_argument("--where", help="an MLflow filter, e.g. \"tags.precision = 'int8'\"")
    compare.add_argument("--format", default="markdown", choices=["markdown", "csv"])
    compare.add_argument("--all-columns", action="store_true", help="every column (the table otherwise fits 120 columns)")
    compare.add_argument("--models", nargs="?", const="test:top1", help="logged models ranked on DATASET:METRIC")
    report = commands.add_parser(
        "report", help="Snakemake's self-contained report of a finished run (report items: table, page, figures)"
    )
    _add_config_args(report)
    report.add_argument("--out", type=Path, help="the HTML file to write (default: <results>/snakemake-report.html)")
    ui = commands.add_parser("ui", help="start the MLflow UI on the project's store and print its URL")
    _add_store_args(ui)
    ui.add_argument("--port", type=int, default=5000)
    ship = commands.add_parser(
        "ship", help="pack what a GPU target's engine nodes read, to run them on a GPU machine (precisionflow.pipeline.remote)"
    )
    ship.add_argument("--target", required=True, help="the GPU target whose engine nodes run there, e.g. h200")
    ship.add_argument("--to", dest="bundle", type=Path, required=True, help="a new folder to pack into")
    _add_config_args(ship)
    land = commands.add_parser("land", help="bring node folders collected on a GPU machine into results/ (never overwriting)")
    land.add_argument("--from", dest="collected", type=Path, required=True, help="node folders collected there")
    _add_config_args(land)
    status = commands.add_parser("status", help="list built engines and which are stale for the installed runtime")
    status.add_argument("--results", type=Path, default=Path("results"))
    commands.add_parser(
        "flow", help="the stage graph: each stage, what it does, which stages feed it (src/precisionflow/pipeline/flow.py)"
    )
    init = commands.add_parser("init", help="write a starter configuration folder (a data set, a model, an experiment preset)")
    init.add_argument("folder", type=Path, help="a new folder, e.g. precisionflow-config")
    return parser


def _split_passthrough(argv: List[str]):
    """Arguments after a lone '--' go to Snakemake unchanged."""
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, []


def node_mtimes(plan: Dict) -> Dict[str, float]:
    results = Path(plan["results_dir"])
    found = {}
    for key in plan["nodes"]:
        marker = results / key / NODE_FILE
        if marker.exists():
            found[key] = marker.stat().st_mtime
    return found


def profile_dir(name: str) -> Path:
    """A packaged profile by name (local: this machine; slurm: a SLURM cluster), or a folder's path."""
    from precisionflow.assets import profiles_dir

    folder = profiles_dir() / name if "/" not in name else Path(name)
    if not (folder / "config.yaml").is_file():
        choices = sorted(p.name for p in profiles_dir().iterdir() if (p / "config.yaml").is_file())
        raise ConfigError(f"--profile: expected one of {choices} or a folder with a config.yaml, found '{name}'.")
    return folder


SCHEDULER_COMMANDS = {"slurm": ("sbatch", "squeue", "scancel")}  # what the executor plugin calls (status: squeue)


def check_scheduler(profile: str) -> None:
    """A profile whose executor is a scheduler needs that scheduler's commands here, before anything
    runs (without them every job failed after 16 s with "No such file or directory: 'sacct'")."""
    import shutil

    config = (profile_dir(profile) / "config.yaml").read_text()
    executor = next((line.split(":", 1)[1].strip() for line in config.splitlines() if line.startswith("executor:")), "")
    missing = [command for command in SCHEDULER_COMMANDS.get(executor, ()) if shutil.which(command) is None]
    if missing:
        raise ConfigError(
            f"--profile {profile}: its executor is {executor}, but {', '.join(missing)} is not on PATH here. "
            f"Run from a host of the {executor} cluster (a login node), install its client commands "
            "(Debian: slurm-client), or run without --profile to use this machine."
        )


def snakemake_dir(results: Path) -> Path:
    """Where Snakemake runs (its .snakemake: locks, logs, metadata): the results folder itself, so
    sibling folders (results_dir=/data/a and /data/b) run at the same time without sharing a lock."""
    results.mkdir(parents=True, exist_ok=True)
    return results


def snakemake_command(plan_file: Path, cores: str, dry_run: bool, extra: List[str], profile: str = "local") -> List[str]:
    from precisionflow.assets import snakefile

    command = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(snakefile()),
        "--workflow-profile",
        str(profile_dir(profile)),
        "--cores",
        str(cores),
        "--config",
        f"plan={plan_file}",
    ]
    if profile == "local":  # one GPU job per GPU the run may use: the runner gives each its own (gpuslots.py)
        from precisionflow.pipeline.gpuslots import allowed_devices

        gpus = len(allowed_devices())
        # given here, --resources replaces the profile's list: host_share (timing jobs' exclusivity) goes too
        command += ["--resources", "host_share=1000", f"gpu={gpus}"] if gpus else []
    return command + (["--dry-run"] if dry_run else []) + extra


def check_targets_buildable_here(plan: Dict) -> None:
    """A local run builds every engine on this machine: a target it cannot serve (another GPU, another
    runtime version) is refused before anything runs, with the ways that do work."""
    from precisionflow.backends import check_buildable_here

    results, seen = Path(plan["results_dir"]), set()
    for key, spec in plan["nodes"].items():
        params = spec["params"]
        if spec["stage"] != "build_engine" or params["target"] in seen or (results / key / NODE_FILE).is_file():
            continue  # built already (e.g. landed from the GPU machine): nothing to build here
        seen.add(params["target"])
        try:
            check_buildable_here(params)
        except (PrecisionflowError, ImportError) as err:
            raise ConfigError(
                f"target {params['target']}: its engines cannot be built on this machine ({err}). Run on such a "
                f"machine: --profile slurm (jobs land where the target's resources say), or `precisionflow run ... -- "
                f"--omit-from build_engine` here then `precisionflow ship --target {params['target']}`; or choose "
                "targets=[local]."
            ) from err


VERBOSE_ENV = "PRECISIONFLOW_VERBOSE"  # modeling/tfenv.py reads it: TensorFlow's messages stay on


def nothing_to_run(plan: Dict) -> bool:
    """True when Snakemake would find nothing to do: every planned node is finished (its node.json is
    published only when the node is whole: nodeio) and none is older than an input -- the mtime rule
    Snakemake reruns by; ids already cover params and code. A no-op rerun then skips starting
    Snakemake, which was about half of its cost (benchmarks/noop_rerun.py)."""
    results = Path(plan["results_dir"])
    stamps = {}
    for key in plan["nodes"]:
        marker = results / key / NODE_FILE
        if not marker.is_file():
            return False
        stamps[key] = marker.stat().st_mtime
    return all(
        stamps[key] >= stamps[source]
        for key, spec in plan["nodes"].items()
        for source in spec["inputs"].values()
        if source in stamps
    )


def run_exclusively(plan: Dict, plan_file: Path, args, extra: List[str]) -> int:
    """Snakemake under precisionflow's run lock: a second run on this results folder fails at once,
    and what a run that died left (its lock, staging folders, half-made outputs) is cleared first."""
    from precisionflow.pipeline import runlock
    from precisionflow.pipeline.plan import missing_under_finished

    results = Path(plan["results_dir"])
    with runlock.exclusive_run(results):
        for note in runlock.recover(results, snakemake_dir(results)):
            print(f"precisionflow: {note}.")
        missing = missing_under_finished(plan)
        if missing:
            print(
                f"precisionflow: {', '.join(missing)} missing (deleted?) while nodes built from them are finished: "
                "recomputing them and everything built from them."
            )
        if not missing and not extra and nothing_to_run(plan):
            print(
                f"precisionflow: all {len(plan['nodes'])} planned nodes are finished, none older than its inputs: nothing to run."
            )
            return 0
        force = ["--forcerun", *[str(results / key / NODE_FILE) for key in missing]] if missing else []
        command = snakemake_command(plan_file, args.cores, False, [*force, "--rerun-incomplete", *extra], args.profile)
        env = runlock.run_environment(results)
        with runlock.stopping_jobs_on_signal(results):
            if getattr(args, "verbose", False):
                return subprocess.call(command, cwd=snakemake_dir(results), env={**env, VERBOSE_ENV: "1"})
            from precisionflow.pipeline.console import run_quietly

            log = results / "logs" / f"run-{time.strftime('%Y%m%d-%H%M%S')}.log"
            return run_quietly(command, snakemake_dir(results), env, log)


def cmd_run(args, extra: List[str]) -> int:
    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan, default_results_dir, recheck_finished, write_plan

    check_scheduler(args.profile)
    points = expand(args.overrides, multirun=args.multirun)
    plan = build_plan(points, default_results_dir(points), args.overrides)
    recheck_finished(plan)  # finished nodes: files as written, thresholds held; before anything runs
    if not args.dry_run and args.profile == "local" and not {"--omit-from", "--until"} & set(extra):
        check_targets_buildable_here(plan)
    plan_file = write_plan(plan)  # only a plan that passed every check is written
    before = node_mtimes(plan)
    if args.dry_run:
        code = subprocess.call(
            snakemake_command(plan_file, args.cores, True, extra, args.profile), cwd=snakemake_dir(Path(plan["results_dir"]))
        )
        print_why(plan)
        return code
    code = run_exclusively(plan, plan_file, args, extra)
    remember_run(Path(plan["results_dir"]), args)
    after = node_mtimes(plan)
    executed = sum(1 for key, mtime in after.items() if before.get(key) != mtime)
    if code != 0:
        failed = print_failures(plan)
        unfinished = len(plan["nodes"]) - len(after)
        print(
            f"\nprecisionflow: the run FAILED ({', '.join(failed) or 'Snakemake stopped before a job ran; see its output above'}); "
            f"{executed} jobs finished in this run, {unfinished} of {len(plan['nodes'])} planned nodes are not done.",
            file=sys.stderr,
        )
        return code
    unfinished = len(plan["nodes"]) - len(after)
    if unfinished:  # e.g. `-- --omit-from build_engine` before shipping a GPU target's nodes
        print(
            f"\nprecisionflow: {executed} jobs executed; {unfinished} of {len(plan['nodes'])} planned nodes are not done "
            "(left out of this run), so there is no report yet."
        )
        return 0
    print(f"\nprecisionflow: {executed} of {len(plan['nodes'])} planned jobs executed (the rest were up to date).")
    print_summary(plan)
    return print_verdicts(plan)


RUNS_FILE = "runs.jsonl"  # one line per `precisionflow run` on a results folder: what `check` needs to find it again


def remember_run(results: Path, args) -> None:
    """The overrides of this run, so that `check` without them can say which to give."""
    if not results.is_dir():  # the run stopped before it made its folder
        return
    line = {"at": time.strftime("%Y-%m-%dT%H:%M:%S"), "overrides": list(args.overrides), "multirun": bool(args.multirun)}
    with open(results / RUNS_FILE, "a") as handle:
        handle.write(json.dumps(line) + "\n")


def earlier_runs(results: Path, most: int = 3) -> List[str]:
    """The `precisionflow check ...` lines of the last distinct runs on this folder, newest first."""
    path = results / RUNS_FILE
    if not path.is_file():
        return []
    commands: List[str] = []
    for text in reversed(path.read_text().splitlines()):
        try:
            found = json.loads(text)
        except ValueError:
            continue
        words = ["precisionflow check"] + (["-m"] if found.get("multirun") else []) + [shlex.quote(o) for o in found["overrides"]]
        if " ".join(words) not in commands:
            commands.append(" ".join(words))
    return commands[:most]


def print_verdicts(plan: Dict) -> int:
    """Each engine's verdict against its budget; 1 when any engine breaks it (so CI can gate on it)."""
    from precisionflow.reporting.budget import gate_fails, verdicts
    from precisionflow.reporting.verdict_lines import format_verdicts

    found = verdicts(plan)
    if not found:
        runs = earlier_runs(Path(plan["results_dir"]))
        hint = (
            " Runs on this folder were made with other overrides; check one of them with the same ones: " + "; ".join(runs)
            if runs
            else " Run it first (precisionflow run ...)."
        )
        print(
            f"precisionflow check: no finished evaluations (with their fp32 baseline) under {plan['results_dir']} "
            f"for this configuration.{hint}",
            file=sys.stderr,
        )
        return 2
    failed = [entry for entry in found if entry["verdict"] == "FAIL"]
    undecided = [entry for entry in found if entry["verdict"] == "UNDECIDED"]
    unbudgeted = [entry for entry in found if entry["verdict"] == "no budget"]
    references = [entry for entry in found if entry["verdict"] == "reference"]
    passed = len(found) - len(failed) - len(undecided) - len(unbudgeted) - len(references)
    print(
        "\nBudgets (evaluate.budget / evaluate.budgets.<precision>; [..] = 95% interval from the paired test images):\n"
        + format_verdicts(found)
    )
    print(
        f"\n{passed} of {len(found) - len(references)} engines within budget"
        + (f" ({len(references)} fp32 reference(s) beside them)" if references else "")
        + (f"; {len(failed)} broke it" if failed else "")
        + (f"; {len(unbudgeted)} held to no budget (nothing judged)" if unbudgeted else "")
        + (
            f"; {len(undecided)} undecided (the test split cannot tell"
            + (
                "; accepted: evaluate.accept_undecided=true)"
                if all(e["accept_undecided"] for e in undecided)
                else "; a gate never passes what it cannot tell: more test images, or evaluate.accept_undecided=true)"
            )
            if undecided
            else ""
        )
        + "."
    )
    for key, why in not_built(plan):
        print(f"NOT BUILT {key.split('/', 1)[1].rsplit('-', 1)[0]}: {why}")
    return 1 if any(gate_fails(entry) for entry in found) else 0


def not_built(plan: Dict) -> List[tuple]:
    """(evaluation node, why) for each engine the workflow declined to build (nodeio.declined)."""
    from precisionflow.nodeio import declined

    results = Path(plan["results_dir"])
    found = []
    for key, spec in sorted(plan["nodes"].items()):
        why = spec["stage"] == "evaluate_engine" and declined(results / key)
        found += [(key, why)] if why else []
    return found


def print_failures(plan: Dict) -> List[str]:
    """The end of each failed job's log, so the cause is on screen, not three files away; returns
    "<node> (log: <path>)" for each."""
    results = Path(plan["results_dir"])
    failed = []
    for key in plan["nodes"]:
        log = results / "logs" / f"{key}.log"
        if not (results / key / NODE_FILE).exists() and log.exists():
            tail = log.read_text(errors="replace").strip().splitlines()[-12:]
            print(f"\n--- {key} failed; end of {log}:\n" + "\n".join(tail), file=sys.stderr)
            failed.append(f"{key} (log: {log})")
    return failed


def print_summary(plan: Dict) -> None:
    results = Path(plan["results_dir"])
    report_dir = results / plan["report"]
    print("\n" + (report_dir / "summary.txt").read_text())
    print(f"Summary table:  {report_dir / 'summary.csv'}")
    print(f"Report page:    {report_dir / 'report.html'} (pictures in {report_dir / 'figures'})")
    print(f"Per-engine:     {results / 'evaluate_engine'}/<node>/metrics.json and flipped.csv")
    tracked = [key for key in plan["final"] if key.startswith("track_mlflow/")]
    for key in tracked:
        from precisionflow.nodeio import read_json
        from precisionflow.reporting.tracking import ui_links

        summary = read_json(results / key / NODE_FILE)["summary"]
        uri = plan["nodes"][key]["params"]["uri"]
        base = uri if uri and uri.startswith("http") else "http://127.0.0.1:5000"
        links = ui_links(base, summary["experiment_id"])
        start = "" if uri and uri.startswith("http") else f"  (after: precisionflow ui --results {results})"
        print(f"MLflow runs:    {links['runs']}{start}")
        print(f"MLflow chart:   {links['trade_off']}  (accuracy change against speed ratio)")


def print_why(plan: Dict) -> None:
    from precisionflow.pipeline.why import explain_changes

    lines = explain_changes(plan)
    nodes = sum(1 for line in lines if not line.startswith(" "))  # a node's line, then its reasons indented
    print(f"\nprecisionflow: {nodes} of {len(plan['nodes'])} planned nodes would run" + (":" if lines else "."))
    for line in lines:
        print(f"  {line}")


def cmd_plan(args) -> int:
    from collections import Counter

    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan, default_results_dir

    points = expand(args.overrides, args.multirun)
    plan = build_plan(points, default_results_dir(points), args.overrides)
    print(f"{len(points)} configuration(s) -> {len(plan['nodes'])} unique nodes")
    for stage, count in Counter(node["stage"] for node in plan["nodes"].values()).items():
        print(f"  {stage:<16} {count}")
    if args.why:
        print_why(plan)
        return 0
    for key in plan["nodes"]:
        print(key)
    return 0


def cmd_check(args) -> int:
    from precisionflow.config.compose import expand
    from precisionflow.pipeline.plan import build_plan, default_results_dir

    points = expand(args.overrides, args.multirun)
    return print_verdicts(build_plan(points, default_results_dir(points), args.overrides))


def cmd_report(args) -> int:
    from precisionflow.nodeio import read_json
    from precisionflow.pipeline.plan import plan_from_overrides

    plan_file = plan_from_overrides(args.overrides, args.multirun)
    plan = read_json(plan_file)
    if not (Path(plan["results_dir"]) / plan["report"] / NODE_FILE).is_file():
        print(
            f"precisionflow report: the report of this configuration has not been made yet ({plan['report']}); "
            "run it first (precisionflow run ...).",
            file=sys.stderr,
        )
        return 2
    out = (args.out or Path(plan["results_dir"]) / "snakemake-report.html").resolve()
    code = subprocess.call(
        snakemake_command(plan_file, "1", False, ["--report", str(out)]), cwd=snakemake_dir(Path(plan["results_dir"]))
    )
    if code == 0:
        print(f"Snakemake report: {out}")
    return code


def cmd_compare(args) -> int:
    from precisionflow.reporting.mlflow_compare import compare, default_uri

    uri = args.uri or default_uri(args.results)
    print(compare(uri, args.experiment, args.sweep, args.where, args.format, args.all_columns, args.models), end="")
    return 0


def cmd_ui(args) -> int:
    from precisionflow.reporting.mlflow_compare import default_uri, ui

    return ui(args.uri or default_uri(args.results), args.port)


def cmd_config(args) -> int:
    from precisionflow.config.compose import expand

    print(json.dumps(expand(args.overrides, args.multirun), indent=2))
    return 0


def cmd_doctor(args) -> int:
    from precisionflow.config.compose import expand
    from precisionflow.doctor import doctor

    print(doctor(expand(args.overrides, args.multirun)[0]))
    return 0


def cmd_status(args) -> int:
    from precisionflow.doctor import engine_status

    rows = engine_status(args.results)
    for row in rows:
        print(f"{row['engine']:<40} {row['backend']:<22} {row['device'][:40]:<40} {row['state']}")
    if not rows:
        print(f"No engines under {args.results}/build_engine.")
    return 1 if any(row["state"].startswith("STALE") for row in rows) else 0


def cmd_ship(args) -> int:
    from precisionflow.pipeline import remote
    from precisionflow.nodeio import read_json
    from precisionflow.pipeline.plan import plan_from_overrides

    manifest = remote.pack(read_json(plan_from_overrides(args.overrides, args.multirun)), args.target, args.bundle)
    print(
        f"{len(manifest['nodes'])} {args.target} nodes and {len(manifest['upstream_files'])} upstream files packed in {args.bundle}.\n"
        f"There: python -m precisionflow.pipeline.remote run {args.bundle.name}; then collect the node folders and "
        "`precisionflow land --from <folder> [same overrides]` here."
    )
    return 0


def cmd_land(args) -> int:
    from precisionflow.pipeline import remote
    from precisionflow.nodeio import read_json
    from precisionflow.pipeline.plan import plan_from_overrides

    landed = remote.land(args.collected, read_json(plan_from_overrides(args.overrides, args.multirun)))
    print(f"{len(landed)} node folders landed in results: " + ", ".join(landed))
    return 0


def main(argv=None) -> int:
    own, extra = _split_passthrough(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(own)
    if getattr(args, "config_dir", None):  # in the environment: Snakemake and its jobs see the same folders
        from precisionflow.assets import USER_CONFIG_ENV

        os.environ[USER_CONFIG_ENV] = str(args.config_dir.expanduser().resolve())
    try:
        if args.command == "flow":
            from precisionflow.pipeline import flow

            print(flow.describe())
            return 0
        if args.command == "init":
            from precisionflow.starter import write_starter

            return write_starter(args.folder)
        if args.command == "run":
            return cmd_run(args, extra)
        commands = {
            "plan": cmd_plan,
            "config": cmd_config,
            "doctor": cmd_doctor,
            "status": cmd_status,
            "check": cmd_check,
            "compare": cmd_compare,
            "ui": cmd_ui,
            "report": cmd_report,
            "ship": cmd_ship,
            "land": cmd_land,
        }
        return commands[args.command](args)
    except PrecisionflowError as err:
        print(f"precisionflow: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
