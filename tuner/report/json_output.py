"""``tuner report --json``: every verdict with its numbers, under a stable, versioned schema.

Keys are only ever added within a schema version (``"schema": "tuner.report/1"``); floats that are
NaN or infinite become ``null``. Schema::

    {
      "schema": "tuner.report/1",
      "study": str, "storage": str,          # the storage URL, password masked
      "delivered_model": null | {            # the study's model (tuner.report.delivered's rule)
          "delivered": bool,                 # false: a candidate; no full-length round 2+ yet
          "status": str,                     # "delivered model" | "not a delivered model yet (...): ..."
          "rule": str, "why_not": str|null, "next_step": str|null,
          "split": "validation" | "proxy", "unfinished": int,   # its phase's trials still to finish
          ...every "best_trial" key below (its best seed run: "checkpoint", "reproduce", ...),
          "seeds": {"mean", "min", "max", "seeds": int, "trials": [int],     # its point's spread;
                    "runs": [{"phase", "trial"}]},   # runs: every seed run, pooled across rounds
          "val_metrics": null | {            # its best eval's every val/* (metrics.csv at best_step);
              "values": {str: float|null},   # null: no run folder or best step recorded
              "unreadable": null | {"path", "problem"}}},   # why no values could be read
      "phases": [                            # latest first
        {
          "phase": str, "kind": "sweep-lr" | "round" | "other",
          "metric": str, "direction": "minimize" | "maximize",
          "trial_steps": int|null, "max_train_steps": int|null, "searched": bool,
          "counts": {"complete", "stopped", "diverged", "failed", "running", "waiting": int},
          "attempts": int,                   # Optuna trials, retries included (not duplicates)
          "duplicates": int,                 # trials a lock-free claim made twice, yielded: not counted
          "learning": null | {"rule", "learned": bool, "verdicts": [...]},   # null: chance unknown
          "best_step": null | {"rule", "positions": [{"trial", "position"}], "median",
                               "histogram": [10 ints over 0..1], "verdicts": [...]},
          "boundaries": null | {"rule", "top_k", "verdicts": [...]},
          "health": {"counts", "failure_reasons": {reason: n}, "attempts", "rule",
                     "best_so_far": [{"trial", "value", "best"}], "verdicts": [...]},
          "transfer": null | {"source_phase", "points": [{"source_trial", "source_value", "value",
                              "seeds", "source_rank", "rank",
                              "source_noise": [low, high]|null, "noise": [low, high]|null}],
                              "verdicts": [...]},
          "sweep_lr": null | {... tuner sweep-lr --json's "rows", "verdicts", ...},
          "imbalance": null | {"trial", "step", "minority_rule", "classes": [{"split", "class",
                               "examples", "share", "correct", "recall", "minority"}], "verdicts"},
          "best_trial": null | {"phase", "trial", "metric", "direction", "value", "best_step",
                                "max_train_steps", "params", "run_dir", "checkpoint",
                                "checkpoint_on_this_machine", "checkpoint_problem", "reproduce",
                                "attempts", "train_s", "git_commit", "git_dirty"},
          "next_steps": [str],
          "unreadable": [{"path", "problem"}]   # run-folder files the report could not read
        }
      ],
      "suggestions": [{"key", "path", "old", "new", "drop", "reason"}],  # what --write-next applies
      "tune": null | {"schema": "tuner.tune/1", "budget": {"text", "steps", "seconds"},
                      "budget_steps": int, "switches": {...}, "stages": [{"study", "phase",
                      "study_file", "sets", "trials", "planned_steps", "done", ...}],
                      "decisions": [{"kind", "stage", "text", "numbers"}]}  # tuner tune's log
    }

Every verdict is ``{"kind", "level": "warning"|"ok"|"info", "text", "advice", "rule", ...its
numbers}``; the kinds: ``nothing_learned``, ``learned``, ``not_judged_nothing_learned``;
``best_step_early``, ``best_step_worsens``, ``best_step_late``, ``best_step_ok``, ``best_step_too_few``,
``best_step_coarse``, ``best_step_unresolved``; ``range_edge`` (``spearman``, ``p_value``,
``trials``: the trend in the edge's half), ``range_edge_unsure``, ``divergence_frontier``,
``range_edge_at_field_limit``, ``range_ok``, ``ranges_too_few``, ``categorical_never_tried``,
``categorical_never_won``, ``categorical_one_value``; ``failure_rate``, ``divergence_region``,
``diverged_scattered``, ``progress`` (``trend``: improving, slowing, plateaued, too_few);
``rank_correlation`` (``quality``: good, weak, reversed, within_noise, too_few;
``changed_beyond_noise``: pairs that changed order by more than the noise, null if unmeasured),
``source_too_short`` (the source round's best-step verdict *still improving*, quoted: ``late``,
``completed``, ``late_top``, ``top``),
``lr_multiplier``; ``minority_few_examples``, ``minority_counts``, ``train_sample_skew``.
"""

from __future__ import annotations

from typing import Any

from tuner.playbook.verdicts import jsonable
from tuner.report.build import PhaseReport, StudyReport

SCHEMA = "tuner.report/1"


def report_json(report: StudyReport) -> dict[str, Any]:
    """The whole report as the schema above (``tuner report --json``)."""
    return {
        "schema": SCHEMA,
        "study": report.study,
        "storage": report.storage,
        "delivered_model": jsonable(report.tuned_into.delivered if report.tuned_into else report.delivered),
        "tuned_into": report.tuned_into.to_json() if report.tuned_into else None,
        "phases": [_phase(p) for p in report.phases],
        "suggestions": [s.to_json() for s in report.suggestions],
        "tune": report.tune.to_json() if report.tune is not None else None,
    }


def _phase(report: PhaseReport) -> dict[str, Any]:
    data = report.data
    plan = data.plan
    return jsonable(
        {
            "phase": data.phase,
            "kind": data.kind,
            "metric": data.metric,
            "direction": data.direction,
            "trial_steps": data.trial_steps,
            "max_train_steps": plan.max_train_steps if plan is not None else None,
            "searched": data.searched,
            "counts": report.health.counts,
            "attempts": data.attempts,
            "duplicates": data.duplicates,
            "learning": report.learning,
            "best_step": report.best_step,
            "boundaries": report.boundaries,
            "health": report.health,
            "transfer": report.transfer,
            "sweep_lr": report.sweep,
            "imbalance": report.imbalance,
            "best_trial": report.best,
            "next_steps": report.next_steps,
            "unreadable": report.unreadable,
        }
    )
