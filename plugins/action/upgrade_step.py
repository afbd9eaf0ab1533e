# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""upgrade_step: runs the upgrade executor (module_utils/executor.py) in the controller process for one
bounded slice. The role repeats this one task with `until: <result>.done`; documentation is in
plugins/modules/upgrade_step.py."""

from __future__ import annotations

import json
import os

from ansible.errors import AnsibleActionFail
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import (
    artifacts, autoscaler, drain, drain_policy, etcd, executor, gate, image_facts, kube, lease, node_state, progress, run,
    stop_signals, validate)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import journal as journal_store
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base as provider_base
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import call_rate
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import factory
from ansible_collections.kubenodes.image_upgrade.plugins.plugin_utils import action_base

display = action_base.MaskingDisplay()   # masks the task's secrets in every message

# The runs (module_utils/run.py: their clients, and the SDKs they imported) live as long as the worker process:
# `until` runs every retry of the task in the same process, each with a new action object.
_RUNS = {}
_MAX_SLICE = 60
# This worker's watch for a stop from outside (Ctrl-C, SIGTERM, the playbook's death): installed at the first real
# call, for the worker's life (one task, all its `until` retries).
_STOP = []

# The connection options of the etcd modules (certificates, request timeout), with no endpoints by default (the
# control-plane nodes' are used), whether a delegated task removes the members, and one removal's timeout. With
# `delegated`, `health` is the read the role made through that host (etcd_member_info's member_problems, and when).
ETCD_HEALTH_SPEC = dict(
    problems=dict(type="list", elements="dict", default=[]),
    read_at=dict(type="float", default=0),   # 0: never read (no control-plane heir goes on it)
    # The read's verdict (etcd_member_info's healthy and problems), for the preflight of a call with start.
    healthy=dict(type="bool"),
    messages=dict(type="list", elements="str", default=[]),
)
ETCD_SPEC = etcd.connection_argument_spec(dict(
    delegated=dict(type="bool", default=False),
    endpoints=dict(type="list", elements="str", default=[]),
    timeout=dict(type="int", default=60),
    health=dict(type="dict", options=ETCD_HEALTH_SPEC),
))
JOURNAL_SPEC = dict(journal_store.REFERENCE_SPEC, run=dict(type="str"), events=journal_store.ARGUMENT_SPEC["events"])
# Once per run, before the first slice (run.UpgradeRun.begin): start the journal, pause the autoscaler.
BEGIN_SPEC = dict(
    image=dict(type="str", required=True),
    new_target=dict(type="bool", default=False),
    record=dict(type="dict", default={}),
    autoscaler=dict(type="dict", default={}, options=autoscaler.DEPLOYMENT_SPEC),
)
# Before the run begins (run.UpgradeRun.start): the image, the journal's target, the preflight, etcd and the lock, in
# the first call's worker: the cloud's SDK is imported once, and nothing between them is a task.
START_SPEC = dict(
    image=dict(type="str", required=True),
    new_target=dict(type="bool", default=False),
    preflight=dict(type="bool", default=True),
    quota_preflight=dict(type="bool", default=True),
    etcd_preflight=dict(type="bool", default=True),
    allow_unready_system_pods=dict(type="bool", default=False),
    lock_wait=dict(type="int", default=600),
)
# The health gate after each batch or replacement (gate_after): cluster_health_gate's options (gate.py's spec).
GATE_SPEC = {name: gate.ARGUMENT_SPEC[name] for name in (
    "soak_seconds", "timeout", "namespaces", "poll_interval", "tasks_file", "looks", "look_interval")}
# And after the last: restore the autoscaler, close the journal, write the report, release the run lock.
FINISH_SPEC = dict(
    report_dir=dict(type="path", required=True),
    autoscaler=dict(type="dict", default={}, options=autoscaler.DEPLOYMENT_SPEC),
)


def argument_spec():
    spec = kube.auth_argument_spec(dict(
        image_facts.PLANNER_ARG_SPEC,
        image_resolved=dict(type="bool", default=False),
        taint_to_be_replaced=dict(type="bool", default=True),
        drain=dict(type="dict", default={}, options=drain.DRAIN_ARG_SPEC),
        etcd=dict(type="dict", default={}, options=ETCD_SPEC),
        lock=dict(type="dict", options=lease.RUN_LOCK_SPEC),
        journal=dict(type="dict", options=JOURNAL_SPEC),
        timeout=dict(type="int"),
        started=dict(type="float"),
        slice_seconds=dict(type="int", default=_MAX_SLICE),
        poll_interval=dict(type="float", default=executor.DEFAULT_POLL),
        cloud_calls_per_minute=dict(type="int"),
        passes=dict(type="int", default=0),
        surge_cap=dict(type="int"),
        gate_after=dict(type="str", choices=["none", "batch", "replacement"], default="none"),
        cloud_settings=dict(type="str", choices=["neutralise", "leave"], default="neutralise"),
        allow_unreadable_autoscale=dict(type="bool", default=False),
        gate=dict(type="dict", default={}, options=GATE_SPEC),
        gate_ran=dict(type="dict"),
        reference=dict(type="str"),
        start=dict(type="dict", options=START_SPEC),
        begin=dict(type="dict", options=BEGIN_SPEC),
        finish=dict(type="dict", options=FINISH_SPEC),
        abort=dict(type="str"),
    ))
    spec.update(factory.provider_argument_spec(required=True))
    return spec


def _stop_watch():
    if not _STOP:
        _STOP.append(stop_signals.StopWatch().install())
    return _STOP[0]


def _unless(stop, show):
    """show(text), unless the playbook process is gone: nobody reads this worker's output then, and a pipe that
    nobody reads blocks its writer once full."""
    return lambda text: None if stop.parent_gone() else show(text)


def _refuse_inconsistent(args):
    if not 1 <= args["slice_seconds"] <= _MAX_SLICE:
        raise AnsibleActionFail("slice_seconds must be between 1 and %d, got %d" % (_MAX_SLICE, args["slice_seconds"]))
    if args["lock"] and not args["lock"]["holder"] and not args["start"]:
        raise AnsibleActionFail("lock.holder is not set: give the holder that took the run lock, or start (which "
                                "takes it); nothing was changed")
    if args["start"] and not args["lock"]:
        raise AnsibleActionFail("start takes the run lock, but lock is not set: give lock (its name and namespace "
                                "at least); nothing was changed")
    rate = validate.optional_integer("cloud_calls_per_minute", args["cloud_calls_per_minute"], 1, call_rate.MAX_PER_MINUTE,
                                     hint="leave it unset for the cloud's default (docs/api-limits.md)")
    if rate:
        raise AnsibleActionFail("%s; nothing was changed" % rate)
    ladder = drain_policy.policy_problems((args.get("drain") or {}).get("policies"), "drain.policies")
    if ladder:
        raise AnsibleActionFail("%s; nothing was changed" % "; ".join(ladder))


def _one_call(upgrade, args, check_mode):
    """What one call of a run that started does: begin (once), the gate your tasks file passed, a gate due, or a
    slice (and a gate it made due). Returns (the gate whose tasks file is due or None, the slice's outcome or None)."""
    upgrade.give_etcd_health((args.get("etcd") or {}).get("health"))
    upgrade.begin()
    if args["gate_ran"] and args["gate_ran"].get("id") not in upgrade.gates_passed:
        upgrade.gate_passed(args["gate_ran"])   # your tasks file ran and passed (recorded once: `until` retries)
    gate_ran = upgrade.run_gate() if upgrade.gate_pending and not check_mode else None
    outcome = None
    if gate_ran is None:
        outcome = upgrade.run_slice(args["slice_seconds"])
        if outcome.get("gate_due"):
            gate_ran = upgrade.run_gate()
    return gate_ran, outcome


def _key(args):
    """The executor a call goes on with: the same options, but for what changes from call to call."""
    same = {k: v for k, v in args.items() if k not in ("passes", "surge_cap", "gate_ran", "abort")}
    same["etcd"] = {k: v for k, v in (args.get("etcd") or {}).items() if k != "health"}
    return json.dumps(same, sort_keys=True, default=str)


class ActionModule(action_base.KubenodesActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    display = display

    def options_spec(self):
        return argument_spec()

    def run_action(self, result, task_vars):
        valid, args = self.validate_argument_spec(argument_spec=argument_spec())
        del valid, task_vars
        check_mode = bool(self._task.check_mode or self._play_context.check_mode)
        _refuse_inconsistent(args)
        if args["abort"]:
            return self._abort(result, args, check_mode)
        key = _key(args) + str(check_mode)
        upgrade = self._run = _RUNS.get(key)
        try:
            if upgrade is None:
                stop = stop_signals.NoStop() if check_mode else _stop_watch()
                upgrade = self._run = run.UpgradeRun(args, check_mode, _unless(stop, display.display),
                                                     _unless(stop, display.warning), stop=stop)
                if args["start"]:
                    upgrade.start()
                upgrade.build()
                _RUNS[key] = upgrade
            gate_ran, outcome = _one_call(upgrade, args, check_mode)
        except stop_signals.Stopped as exc:
            _RUNS.pop(key, None)
            # The watch's cause, read now: a SIGTERM behind the SIGHUP of the playbook's death is named (stop_signals).
            return self._stopped(result, upgrade, upgrade.stop.cause or exc.cause)
        except run.EtcdReadDue as exc:
            # Nothing began: the next call (with the read) starts again.
            result.update(changed=False, done=False, etcd_health_due=True, etcd_read=exc.needs, etcd_due=[])
            return self._finish(result, upgrade)
        except executor.StepFailure as exc:
            _RUNS.pop(key, None)
            if upgrade.engine is not None:
                upgrade.flush()
            result.update(failed=True, msg=str(exc), done=False, **exc.details)
            return self._finish(result, upgrade)
        except (provider_base.ProviderError, node_state.PlannerFailure, node_state.NodeWriteError) as exc:
            _RUNS.pop(key, None)
            result.update(failed=True, msg="upgrade step failed: %s" % exc, done=False)
            return self._finish(result, upgrade)
        except kube.ApiException as exc:
            _RUNS.pop(key, None)
            result.update(failed=True, msg="upgrade step: a Kubernetes call failed: %s" % kube.api_error_message(exc),
                          done=False)
            return self._finish(result, upgrade)
        if gate_ran is not None:
            # Your tasks file (gate.tasks_file) is due: the role runs it and gives this back (gate_ran).
            _RUNS.pop(key, None)
            upgrade.flush()
            result.update(changed=True, done=False, gate_tasks_due=gate_ran, etcd_due=[])
            self._set_diff(result, outcome)
            return self._finish(result, upgrade)
        if check_mode:
            return self._check_mode_plan(result, upgrade, outcome)
        return self._slice_result(result, key, upgrade, outcome)

    def _slice_result(self, result, key, upgrade, outcome):
        facts = outcome["facts"]
        upgrade.flush()
        if outcome["done"] and upgrade.args["finish"]:
            try:
                result["report"] = upgrade.finish()
            except executor.StepFailure as exc:
                _RUNS.pop(key, None)
                result.update(failed=True, msg=str(exc), done=False, **exc.details)
                return self._finish(result, upgrade)
            result["ansible_stats"] = dict(data={artifacts.ARTIFACT_KEY: upgrade.artifact(result["report"]["summary"])},
                                           per_host=False, aggregate=False)
        elif upgrade.args.get("lock"):
            try:
                upgrade.renew_lock()
            except run.LockLost as exc:
                raise AnsibleActionFail(str(exc))
        if outcome["done"]:
            _RUNS.pop(key, None)
        result.update(
            changed=bool(outcome["did"]),
            done=bool(outcome["done"]),
            progress_line=outcome["progress"],
            did=outcome["did"],
            finished=outcome["finished"],
            etcd_due=outcome["etcd_due"],
            etcd_waiting=facts.get("etcd_waiting") or [],
            refused=outcome["refused"],
            etcd_health_due=bool(outcome.get("etcd_health_due")),
            problems=facts.get("problems") or [],
            progress=facts["progress"],
            eta=facts["eta"],
            plan=facts["plan"],
            budget=facts["budget"],
            donors=facts["donors"],
            control_plane_endpoints=facts["control_plane_endpoints"],
            timings={k: round(v, 2) for k, v in outcome["timings"].items()},
        )
        self._set_diff(result, outcome)
        return self._finish(result, upgrade)

    def _set_diff(self, result, outcome):
        """With --diff, what the slice changed (progress.slice_diff); none when it changed nothing."""
        diff = progress.slice_diff(outcome["did"], outcome["facts"].get("target_image")) if outcome and self._task.diff else None
        if diff:
            result["diff"] = diff

    def _check_mode_plan(self, result, upgrade, outcome):
        """Check mode: the plan, shown and returned (RV(check_plan)), and published as the job's artifacts."""
        facts = outcome["facts"]
        _RUNS.clear()
        shown, artifact = upgrade.check_mode_plan(facts)
        display.display("plan (check mode, nothing changed):")
        for part in ("progress", "order", "groups", "how", "cloud_settings", "pdbs", "gates"):
            if part in shown:
                display.display("  " + shown[part])
        display.display("  the next pass: %s" % json.dumps(shown["next_pass"], sort_keys=True, default=str))
        result.update(changed=False, done=True, check_plan=shown, plan=facts["plan"], progress=facts["progress"],
                      progress_line=outcome["progress"], did=[], etcd_due=[],
                      ansible_stats=dict(data={artifacts.ARTIFACT_KEY: artifact}, per_host=False, aggregate=False))
        return self._finish(result, upgrade)

    @staticmethod
    def _finish(result, upgrade):
        engine = upgrade.engine
        result["passes"] = engine.passes if engine is not None else upgrade.args["passes"]
        result["surge_cap"] = engine.settings.surge_cap if engine is not None else upgrade.args["surge_cap"]
        return result

    def _stopped(self, result, upgrade, cause):
        """A stop from outside, taken at a safe point: the run ends here as a failed one does (the autoscaler restored,
        the attempt recorded as stopped with the cause, the report so far written, the lock released), since the
        playbook may be gone and no rescue would run."""
        if upgrade.engine is not None:
            upgrade.flush()
        began = bool((upgrade.args.get("journal") or {}).get("run"))
        aborted = upgrade.abort("stopped from outside: %s" % cause, outcome="stopped")
        if upgrade.stop.parent_gone():
            # Nobody is left to take this task's result: the worker ends here, its run ended as above.
            os._exit(1)  # pylint: disable=protected-access
        # An abort asked through the run lock (abort_upgrade.yml) undoes the run next; any other stop leaves it resumable.
        then = ("abort_upgrade.yml takes over and undoes it" if cause.startswith(run.ABORT_ASKED)
                else "is resumable: run the playbook again to go on")
        result.update(failed=True, stopped=True, done=False, report=aborted, etcd_due=[],
                      msg="The upgrade stopped: %s. It stopped at a safe point, between two passes, and %s%s" % (
                          cause, then, "" if began else "; nothing had been changed"))
        return self._finish(result, upgrade)

    @staticmethod
    def _abort(result, args, check_mode):
        """The role's rescue: the run that began stopped (abort is the cause); the report so far and the cause are
        the job's artifacts."""
        upgrade = run.UpgradeRun(args, check_mode, display.display, display.warning)
        aborted = upgrade.abort(args["abort"], args["gate_ran"])
        began = bool((args.get("journal") or {}).get("run")) and not check_mode
        result.update(changed=began, done=False, aborted=True, report=aborted, passes=args["passes"],
                      surge_cap=args["surge_cap"], etcd_due=[], etcd_health_due=False)
        if began:
            artifact = upgrade.artifact((aborted or {}).get("summary") or {}, outcome="failed", cause=args["abort"])
            result["ansible_stats"] = dict(data={artifacts.ARTIFACT_KEY: artifact}, per_host=False, aggregate=False)
        return result

    def run(self, tmp=None, task_vars=None):
        """Every result of a call with `start` says what the run began, a failure's too: the role's rescue releases the
        lock and records the attempt only for a run that began."""
        self._run = None
        try:
            result = super().run(tmp, task_vars)
        except AnsibleActionFail as exc:
            if self._run is None or self._run.started is None:
                raise
            result = dict(exc.result, failed=True, msg=exc.message)
        if self._run is not None and self._run.started is not None:
            result.setdefault("start", self._run.started)
        return result
