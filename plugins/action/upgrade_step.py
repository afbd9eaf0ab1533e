# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""upgrade_step: runs the upgrade executor (module_utils/executor.py) in the controller process for one
bounded slice. The role repeats this one task with `until: <result>.done`; documentation is in
plugins/modules/upgrade_step.py."""

from __future__ import annotations

import copy
import datetime
import json
import time

from ansible.errors import AnsibleActionFail
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import (
    autoscaler, base, core, drain, etcd, executor, image_facts, kube, lease, node_state, preflight, report)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import journal as journal_store
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import cloud_access, etcd_access, kube_access
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base as provider_base
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import factory
from ansible_collections.kubenodes.image_upgrade.plugins.plugin_utils import action_base
from ansible_collections.kubenodes.image_upgrade.plugins.plugin_utils import start as start_reads

display = action_base.MaskingDisplay()   # masks the task's secrets in every message

# The clients (and the SDKs they imported) live as long as the worker process: `until` runs every retry
# of the task in the same process, each with a new action object.
_ENGINES = {}
_MAX_SLICE = 60

# The connection options of the etcd modules (certificates, request timeout), with no endpoints by default (the
# control-plane nodes' are used), whether a delegated task removes the members, and one removal's timeout. With
# `delegated`, `health` is the read the role made through that host (etcd_member_info's member_problems, and when).
ETCD_HEALTH_SPEC = dict(
    problems=dict(type="list", elements="dict", default=[]),
    read_at=dict(type="float", default=0),   # 0: never read (no control-plane heir goes on it)
)
ETCD_SPEC = etcd.connection_argument_spec(dict(
    delegated=dict(type="bool", default=False),
    endpoints=dict(type="list", elements="str", default=[]),
    timeout=dict(type="int", default=60),
    health=dict(type="dict", options=ETCD_HEALTH_SPEC),
))
JOURNAL_SPEC = dict(journal_store.REFERENCE_SPEC, run=dict(type="str"), events=journal_store.ARGUMENT_SPEC["events"])
# What the role did in tasks of their own before the first slice (run.yml): start the journal, pause the autoscaler.
BEGIN_SPEC = dict(
    image=dict(type="str", required=True),
    new_target=dict(type="bool", default=False),
    record=dict(type="dict", default={}),
    autoscaler=dict(type="dict", default={}, options=autoscaler.DEPLOYMENT_SPEC),
)
# What the role did in tasks of their own before the run began (target.yml, preflight.yml, run.yml's lock), for
# the first slice to do in its own worker: the cloud's SDK is imported once, and nothing between them is a task.
START_SPEC = dict(
    image=dict(type="str", required=True),
    new_target=dict(type="bool", default=False),
    preflight=dict(type="dict"),
    etcd_preflight=dict(type="bool", default=True),
    allow_unready_system_pods=dict(type="bool", default=False),
    lock_wait=dict(type="int", default=600),
)
LOCK_LOOK_SECONDS = 10
ETCD_LOOK_SECONDS = 5
# And after the last: restore the autoscaler, close the journal, write the report, release the run lock.
FINISH_SPEC = dict(
    report_dir=dict(type="path", required=True),
    autoscaler=dict(type="dict", default={}, options=autoscaler.DEPLOYMENT_SPEC),
)


def argument_spec():
    spec = kube.auth_argument_spec(dict(
        image_facts.PLANNER_ARG_SPEC,
        image_resolved=dict(type="bool", default=False),
        drain=dict(type="dict", default={}, options=drain.DRAIN_ARG_SPEC),
        etcd=dict(type="dict", default={}, options=ETCD_SPEC),
        lock=dict(type="dict", options=lease.RUN_LOCK_SPEC),
        journal=dict(type="dict", options=JOURNAL_SPEC),
        timeout=dict(type="int"),
        started=dict(type="float"),
        slice_seconds=dict(type="int", default=_MAX_SLICE),
        poll_interval=dict(type="float", default=executor.DEFAULT_POLL),
        passes=dict(type="int", default=0),
        surge_cap=dict(type="int"),
        gate_after=dict(type="str", choices=["none", "batch", "replacement"], default="none"),
        start=dict(type="dict", options=START_SPEC),
        begin=dict(type="dict", options=BEGIN_SPEC),
        finish=dict(type="dict", options=FINISH_SPEC),
    ))
    spec.update(factory.provider_argument_spec(required=True))
    return spec


def _key(args):
    """The executor a call goes on with: the same options, but for what changes from call to call."""
    same = {k: v for k, v in args.items() if k not in ("passes", "surge_cap")}
    same["etcd"] = {k: v for k, v in (args.get("etcd") or {}).items() if k != "health"}
    return json.dumps(same, sort_keys=True, default=str)


def _record_gate_owed(api_client, where, image):
    """Record in the journal that a health gate is owed; a failure is a warning (this process still holds new heirs
    until the gate ran; only a run killed before the gate is recorded as due would not know it owes one)."""
    try:
        journal_store.record_gate_owed(api_client, where["name"], where["namespace"], image)
    except (kube.ApiException, journal_store.JournalConflict, journal_store.MalformedJournal) as exc:
        display.warning("that a health gate is owed (rolling_upgrade_gate_after) could not be recorded in the journal "
                        "ConfigMap %s/%s: %s. This run still runs the gate before it creates more heirs; a run killed "
                        "before the gate starts would not" % (where["namespace"], where["name"], exc))


def _record_created(api_client, where, image, record):
    """Write the record of instances just created into the journal; a failure is a warning (this process keeps
    the record in memory; a later run without it leaves those instances alone rather than removing them). The
    delete-first record, written before any worker is marked, is not: without it a run resumed after a kill
    would not know its groups' start counts nor the labels of the workers it removed, so the pass stops first."""
    try:
        journal_store.record_created(api_client, where["name"], where["namespace"], image,
                                     record.get("instances_created"), record.get("start_counts"), delete_first=record)
    except (kube.ApiException, journal_store.JournalConflict, journal_store.MalformedJournal) as exc:
        if record.get("create_intents") and not record.get("instances_created"):
            # Before the create call: without it, a kill right after the create leaves instances nothing proves
            # ours (they are then left alone, never removed), so the run goes on with a warning.
            display.warning("the creation about to be made could not be recorded in the journal ConfigMap %s/%s: %s. "
                            "If this run is killed before the instances are recorded, a later run leaves them alone"
                            % (where["namespace"], where["name"], exc))
            return
        if not record.get("instances_created") and (record.get("removed_first") or record.get("start_counts")):
            raise executor.StepFailure(
                "the delete-first record (start counts %s, workers to remove first %s) could not be written to the "
                "journal ConfigMap %s/%s: %s. No worker was marked for removal: rolling_upgrade_max_unavailable needs "
                "the journal; make it writable for the run's identity (rbac.yml) and run again" % (
                    json.dumps(record.get("start_counts") or {}, sort_keys=True),
                    ", ".join(sorted(record.get("removed_first") or {})) or "none", where["namespace"], where["name"],
                    exc), reason="journal_unwritable")
        display.warning("the instances just created (%s) could not be recorded in the journal ConfigMap %s/%s as this "
                        "upgrade's own: %s. A later run will not remove them as surplus"
                        % (", ".join(sorted(record.get("instances_created") or {})), where["namespace"], where["name"], exc))


def _record_donors_gone(api_client, where, image, record, engine):
    """Write progress.donors_gone_record's record into the journal at once; a failure is a warning and the record
    goes with the slice's journal instead (only a kill before that loses it)."""
    try:
        journal_store.merge_record(api_client, where["name"], where["namespace"], image, record, "the donors gone")
    except (kube.ApiException, journal_store.JournalConflict, journal_store.MalformedJournal) as exc:
        display.warning("the nodes found replaced (%s) could not be recorded in the journal ConfigMap %s/%s at once: "
                        "%s. They are recorded with this slice's journal" % (
                            ", ".join(sorted(record.get("nodes") or {})), where["namespace"], where["name"], exc))
        report.merge(engine.pending_journal, record)


class ActionModule(action_base.KubenodesActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    display = display

    def options_spec(self):
        return argument_spec()

    def run_action(self, result, task_vars):
        valid, args = self.validate_argument_spec(argument_spec=argument_spec())
        del valid
        check_mode = bool(self._task.check_mode or self._play_context.check_mode)
        if not 1 <= args["slice_seconds"] <= _MAX_SLICE:
            raise AnsibleActionFail("slice_seconds must be between 1 and %d, got %d" % (_MAX_SLICE, args["slice_seconds"]))
        if args["lock"] and not args["lock"]["holder"] and not args["start"]:
            raise AnsibleActionFail("lock.holder is not set: give the holder that took the run lock, or start (which "
                                    "takes it); nothing was changed")
        if args["start"] and not args["lock"]:
            raise AnsibleActionFail("start takes the run lock, but lock is not set: give lock (its name and namespace "
                                    "at least); nothing was changed")
        key = _key(args) + str(check_mode)
        engine = _ENGINES.get(key)
        given_health = (args.get("etcd") or {}).get("health")
        try:
            if engine is None:
                started_args = None
                if args["start"]:
                    args = started_args = self._start(args, check_mode)
                engine = self._build(args, check_mode)
                engine.started_args, engine.started = started_args, self._started
                _ENGINES[key] = engine
            elif engine.started_args is not None:
                args, self._started = engine.started_args, engine.started
            if given_health and given_health["read_at"] and isinstance(engine.etcd_health, etcd_access.DelegatedEtcdHealth):
                engine.etcd_health.give(given_health["problems"], given_health["read_at"])
            if args["begin"] and not check_mode and not engine.begun:
                self._begin(args)
                engine.begun = True
            engine.flush_journal = lambda: self._flush(args, engine, task_vars)
            outcome = engine.run_slice(seconds=args["slice_seconds"])
        except executor.StepFailure as exc:
            _ENGINES.pop(key, None)
            self._flush(args, engine, task_vars)
            result.update(failed=True, msg=str(exc), done=False, **exc.details)
            return self._finish(result, engine, args)
        except (provider_base.ProviderError, node_state.PlannerFailure, node_state.NodeWriteError) as exc:
            _ENGINES.pop(key, None)
            result.update(failed=True, msg="upgrade step failed: %s" % exc, done=False)
            return self._finish(result, engine, args)
        except kube.ApiException as exc:
            _ENGINES.pop(key, None)
            result.update(failed=True, msg="upgrade step: a Kubernetes call failed: %s" % kube.api_error_message(exc),
                          done=False)
            return self._finish(result, engine, args)
        facts = outcome["facts"]
        if check_mode:
            self._show_plan(facts)
        self._flush(args, engine, task_vars)
        finishing = bool(outcome["done"] and args["finish"] and not check_mode)
        if finishing:
            try:
                result["report"] = self._finish_run(args, engine)
            except executor.StepFailure as exc:
                _ENGINES.pop(key, None)
                result.update(failed=True, msg=str(exc), done=False, **exc.details)
                return self._finish(result, engine, args)
        elif not check_mode and args.get("lock"):
            self._renew_lock(args, task_vars)
        if outcome["done"] or check_mode:
            _ENGINES.pop(key, None)
        result.update(
            changed=bool(outcome["did"]),
            done=bool(outcome["done"]) or check_mode,
            progress_line=outcome["progress"],
            did=outcome["did"],
            finished=outcome["finished"],
            etcd_due=outcome["etcd_due"],
            etcd_waiting=facts.get("etcd_waiting") or [],
            refused=outcome["refused"],
            gate_due=bool(outcome.get("gate_due")),
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
        return self._finish(result, engine, args)

    @staticmethod
    def _finish(result, engine, args):
        result["passes"] = engine.passes if engine is not None else args["passes"]
        result["surge_cap"] = engine.settings.surge_cap if engine is not None else args["surge_cap"]
        return result

    def run(self, tmp=None, task_vars=None):
        """Every result of a call with `start` says what the run began, a failure's too: the role's rescue releases the
        lock and records the attempt only for a run that began."""
        self._started = None
        try:
            result = super().run(tmp, task_vars)
        except AnsibleActionFail as exc:
            if self._started is None:
                raise
            result = dict(exc.result, failed=True, msg=exc.message)
        if self._started is not None:
            result.setdefault("start", self._started)
        return result

    # -- the start (START_SPEC): the reads, the preflight's verdict, the etcd read and the run lock ---------
    def _start(self, args, check_mode):
        """What target.yml, preflight.yml and run.yml's lock did, in this worker: resolve the image and the journal's
        target, read the nodes and the clouds, judge them (module_utils/preflight.py), read etcd, take the run lock
        (waiting up to start.lock_wait while another live run holds it). Returns the arguments of the upgrade that
        began (its exact image, surge cap, lock holder and start time); self._started says what was done, for the
        role (RV(start)), a failure's rescue included. A refusal changes nothing."""
        start = args["start"]
        try:
            reads = start_reads.prepare(dict(args, image=start["image"], new_target=start["new_target"],
                                             preflight=start["preflight"]), check_mode)
        except start_reads.StepFailed as exc:
            raise executor.StepFailure(exc.result.get("msg") or exc.doing, failed_step=exc.doing, reason="preflight")
        for step in ("resolved", "target", "preflight"):
            for warning in (reads.get(step) or {}).pop("warnings", None) or ():
                display.warning(warning)
        target = reads["target"]
        self._started = dict(target=target, started=None, started_epoch=None, lock=None, surge_cap=args["surge_cap"])
        self._say_target(start["image"], target)
        if reads["preflight"] is not None:
            verdict = preflight.verdict(reads["preflight"], args["max_unavailable"], start["etcd_preflight"],
                                        args["etcd"]["endpoints"], start["allow_unready_system_pods"])
            for line in verdict.said:
                display.display(line)
            if verdict.refusal:
                raise executor.StepFailure(verdict.refusal, reason="preflight")
            if verdict.surge_cap is not None:
                self._started["surge_cap"] = verdict.surge_cap
            if verdict.etcd is not None:
                self._etcd_preflight(args["etcd"], verdict.etcd)
            for line in verdict.said_after:
                display.display(line)
        lock = self._take_lock(args, start["lock_wait"], check_mode)
        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        started = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        self._started.update(started=started, started_epoch=int(now.timestamp()),
                             lock=dict(args["lock"], holder=lock["holder"]))
        began = copy.deepcopy(args)
        began.update(image=target["target_image"], image_resolved=True, surge_cap=self._started["surge_cap"],
                     started=float(self._started["started_epoch"]), lock=self._started["lock"])
        began["drain"]["not_before"] = started
        if began.get("journal"):
            began["journal"]["run"] = started
        if began.get("begin"):
            began["begin"]["record"] = dict(started=started, attempts={started: dict(started=started, passes=0)})
        return began

    @staticmethod
    def _say_target(image, target):
        """target.yml's lines: the image every heir gets, and a reference that moved since the upgrade started."""
        exact = target["target_image"]
        display.display("Target image %s%s%s" % (
            exact, " (%s)" % image if image != exact else "",
            ", the upgrade started %s goes on" % (target.get("journal") or {}).get("started") if target.get("resumed") else ""))
        if target.get("moved") is not None:
            display.display("WARNING: %s now names %s, but this upgrade keeps %s, the image it started with, for every "
                            "heir; to move on to %s, finish this upgrade and run again, or set rolling_upgrade_new_target: "
                            "true" % (image, target["moved"], exact, target["moved"]))

    @staticmethod
    def _etcd_preflight(etcd_args, needs):
        """preflight.yml's etcd read and check, as etcd_member_info does it: a control-plane heir of a stopped run
        may be joining (no leader between its member's add and its first start), so an unsure count looks again
        every 5 s, 24 times; a real fault outlasts that."""
        params = dict(endpoints=needs["endpoints"], ca_cert=etcd_args["ca_cert"], client_cert=etcd_args["client_cert"],
                      client_key=etcd_args["client_key"])
        if needs["expected_member_count"] is not None:
            params["expected_member_count"] = needs["expected_member_count"]
        looks = needs["retries"] + 1
        for look in range(1, looks + 1):
            try:
                health = start_reads.read_etcd(params)
                refusal = preflight.etcd_refusal(health)
            except start_reads.StepFailed as exc:
                health, refusal = exc.result, exc.result.get("msg") or exc.doing
            if refusal is None:
                return health
            if look < looks:
                display.display("control-plane etcd is not healthy yet (%s); looking again in %d s (%d of %d)"
                                % (refusal, ETCD_LOOK_SECONDS, look, looks))
                time.sleep(ETCD_LOOK_SECONDS)
        raise executor.StepFailure(refusal, reason="preflight", etcd_health=health)

    @staticmethod
    def _take_lock(args, lock_wait, check_mode):
        """run.yml's lock task: upgrade_lock's code, looking again every 10 s while another live run holds the
        Lease, for up to lock_wait seconds."""
        looks = max(lock_wait, 0) // LOCK_LOOK_SECONDS + 1
        for look in range(1, looks + 1):
            try:
                answer = start_reads.take_lock(args, args["lock"] or {}, check_mode)
            except base.ModuleFailed as exc:
                raise executor.StepFailure(exc.result.get("msg") or "the run lock", reason="lock")
            if answer["acquired"]:
                return answer
            if look < looks:
                display.display("%s; looking again in %d s (rolling_upgrade_lock_wait, %d of %d)"
                                % (answer["msg"], LOCK_LOOK_SECONDS, look, looks))
                time.sleep(LOCK_LOOK_SECONDS)
        raise executor.StepFailure(answer["msg"], reason="lock_held", held_by=answer["held_by"])

    # -- building the executor once per process ---------------------------------------------------------
    def _build(self, args, check_mode):
        options = node_state.planner_options(args)
        options.validate()
        if args["gate_after"] != "none" and core.unavailable_limit(options.max_unavailable, 1) > 0:
            # Delete-first refills follow their donor's removal: a gate held after it would wait on a missing node.
            raise executor.StepFailure("gate_after %s (rolling_upgrade_gate_after) does not work with max_unavailable %s "
                                       "(rolling_upgrade_max_unavailable) yet: set one of them to its default (none, 0) "
                                       "and run again; nothing was changed" % (args["gate_after"], options.max_unavailable),
                                       reason="invalid")
        try:
            api_client = kube.build_api_client(args)
        except kube.KubeAuthError as exc:
            raise executor.StepFailure("cannot reach Kubernetes: %s" % exc)
        try:
            provider = factory.build_provider(args)
            canonical = None
            if not args["image_resolved"]:
                canonical = provider.validate_image(options.image.strip())   # retried inside the provider
        except provider_base.NotFoundError as exc:
            raise executor.StepFailure("image %r does not exist: %s" % (options.image, exc))
        except provider_base.ProviderError as exc:
            raise executor.StepFailure("cannot use the %s provider with image %r: %s" % (args["provider"], options.image, exc))
        if canonical:
            options.image = canonical
        etcd_args = args["etcd"]
        remover, health = None, etcd_access.DelegatedEtcdHealth()
        if not etcd_args["delegated"]:
            remover = etcd_access.EtcdRemover(etcd_args["ca_cert"], etcd_args["client_cert"], etcd_args["client_key"],
                                              request_timeout=etcd_args["request_timeout"], timeout=etcd_args["timeout"],
                                              warn=display.warning)
            health = etcd_access.EtcdHealth(etcd_args["ca_cert"], etcd_args["client_cert"], etcd_args["client_key"],
                                            request_timeout=etcd_args["request_timeout"])
        settings = executor.Settings(options, scaling_groups=args["scaling_groups"], timeout=args["timeout"],
                                     started=args["started"], poll=args["poll_interval"],
                                     etcd_endpoints=etcd_args["endpoints"], check_mode=check_mode,
                                     surge_cap=args["surge_cap"], journal_run=(args.get("journal") or {}).get("run"),
                                     gate_after=None if args["gate_after"] == "none" else args["gate_after"])
        engine = executor.Executor(settings, kube_access.KubeAccess(api_client, options.annotation_prefix, args["drain"]),
                                   cloud_access.CloudAccess(provider), etcd=remover, say=display.display, etcd_health=health)
        engine.passes = args["passes"]
        engine.begun = False
        engine.pending_journal, engine.pending_events = {}, []
        if args.get("journal"):
            where = args["journal"]
            try:
                recorded = journal_store.read_journal(api_client, where["name"], where["namespace"])[1]
                settings.created, settings.start_counts = journal_store.created_record(recorded)
                settings.removed_first, settings.refills = journal_store.delete_first_record(recorded)
                settings.intents = journal_store.intents_record(recorded)
            except journal_store.MalformedJournal as exc:
                raise executor.StepFailure("journal: %s" % exc, reason="malformed_journal")
            if not check_mode:
                # A gate a killed run owed (a batch part-finished): held for, as that run would have.
                engine.gate_owed = bool(settings.gate_after) and journal_store.gate_owed(recorded)
                engine.record_gate_owed = lambda: _record_gate_owed(api_client, where, args["image"])
                engine.journal = lambda record: (engine.pending_events.extend(record.get("events") or ()),
                                                 report.merge(engine.pending_journal, record))
                # Created instances are recorded at once, not with the slice's journal: a run killed right after
                # still knows they are its own.
                engine.record_created = lambda record: _record_created(api_client, where, args["image"], record)
                # Donors found gone are journaled at once too: the same pass promotes their heirs, which forgets
                # their names, so a kill before the slice's journal would leave them out of the report.
                engine.record_donors_gone = lambda record: _record_donors_gone(api_client, where, args["image"],
                                                                               record, engine)
        return engine

    # -- journal, lock and autoscaler: the modules' own code, in this process --------------------------
    def _auth(self, args):
        return base.given_options(args, kube.AUTH_ARG_SPEC)

    def _module(self, args, backend, own, doing):
        """A module's own code (its backend's ARGUMENT_SPEC, VALIDATE and apply_state) in this process, with own
        options `own`: its result, or StepFailure with its message; its warnings are shown as its own task would
        show them."""
        try:
            call = base.InProcessModule(backend.ARGUMENT_SPEC, dict(self._auth(args), **own), kube_auth=True,
                                        validate=backend.VALIDATE)
            answer = call.run(lambda: backend.apply_state(call, kube.build_api_client(call.params)), doing)
        except base.ModuleFailed as exc:
            raise executor.StepFailure(exc.result.get("msg") or doing,
                                       **{k: v for k, v in exc.result.items() if k == "reason"})
        for warning in answer.pop("warnings", None) or ():
            display.warning(warning)
        return answer

    def _journal(self, args, record, image=None, **own):
        journal = args["journal"]
        own = dict(name=journal["name"], namespace=journal["namespace"], image=image or args["image"],
                   target_image=args["image"], record=record, events=journal["events"], **own)
        return self._module(args, journal_store, own, "journal ConfigMap %s/%s" % (journal["namespace"], journal["name"]))

    def _autoscaler(self, args, where, state):
        own = dict(name=where["name"], namespace=where["namespace"], state=state,
                   annotation_prefix=args["annotation_prefix"])
        return self._module(args, autoscaler, own, "Deployment %s/%s" % (where["namespace"], where["name"]))

    def _lock(self, args, state):
        lock = args["lock"]
        own = dict(holder=lock["holder"], name=lock["name"], namespace=lock["namespace"],
                   lease_duration=lock["lease_duration"], state=state)
        return self._module(args, lease, own, "Lease %s/%s" % (lock["namespace"], lock["name"]))

    def _begin(self, args):
        """Start the journal (this attempt's record) and pause the cluster-autoscaler, as run.yml's tasks did."""
        begin = args["begin"]
        self._journal(args, begin["record"], image=begin["image"], new_target=begin["new_target"])
        self._autoscaler(args, begin["autoscaler"], "paused")

    def _finish_run(self, args, engine):
        """The upgrade is done: restore the autoscaler, close the journal, write the report and release the
        run lock, as run.yml's tasks did. Returns the report (summary, files)."""
        finish = args["finish"]
        self._autoscaler(args, finish["autoscaler"], "restored")
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        run = (args.get("journal") or {}).get("run")
        record = dict(finished=now, passes=engine.passes)
        if run:
            record["attempts"] = {run: dict(passes=engine.passes, outcome="done", ended=now)}
        self._journal(args, record)
        written = self._journal(args, {}, state="report", report_dir=finish["report_dir"])
        if args.get("lock"):
            self._lock(args, "absent")
        return dict(summary=written["summary"], files=written["files"])

    def _flush(self, args, engine, task_vars):
        del task_vars
        if engine is None or not getattr(engine, "pending_journal", None) or not args.get("journal"):
            return
        record, engine.pending_journal = engine.pending_journal, {}
        # The slice's warnings, written as Events by upgrade_journal (report.merge keeps no events).
        record["events"], engine.pending_events = engine.pending_events, []
        # args["image"] is the upgrade's exact target: given as target_image too, a finished journal of the same
        # upgrade (a rerun) is kept, not started afresh (which would drop its record of the instances created).
        try:
            self._journal(args, record)
        except executor.StepFailure as exc:
            display.warning("the journal could not be written (the next slice tries again): %s" % exc)
            report.merge(record, engine.pending_journal)
            engine.pending_journal = record
            engine.pending_events = record.pop("events") + engine.pending_events

    def _renew_lock(self, args, task_vars):
        del task_vars
        lock = args["lock"]
        try:
            self._lock(args, "present")
        except executor.StepFailure as exc:
            raise AnsibleActionFail("renewing the run lock %s/%s failed: %s" % (lock["namespace"], lock["name"], exc))

    @staticmethod
    def _show_plan(facts):
        plan = facts["plan"]
        display.display("plan (check mode, nothing changed):")
        for key in ("set_group_image", "create", "create_blocked", "pairs", "repairs", "label_copies", "uncordon",
                    "drain", "waiting_for_heir", "etcd_remove", "delete_nodes", "delete_instances"):
            if plan.get(key):
                display.display("  %s: %s" % (key, json.dumps(plan[key], sort_keys=True, default=str)))
