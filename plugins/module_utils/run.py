# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""One upgrade run's life cycle, in the controller process (the upgrade_step action holds one per worker):

- start: resolve the image and the journal's target, read the nodes and the clouds, judge them (preflight.py),
  read etcd, take the run lock;
- begin: this attempt's journal record, the cluster-autoscaler paused;
- slices: the executor (executor.py), its journal records written as they come;
- finish: the autoscaler restored, the journal closed, the report written, the lock released;
- abort: a run that began and then failed, or was stopped from outside (stop_signals.py), restores the autoscaler,
  records its attempt as failed or stopped with the cause, writes the report so far and releases the lock, so the
  next run starts at once.

Every step runs a module's own code (its argument spec, rules and messages) in this process, through
base.InProcessModule: nothing here has rules of its own about the journal, the Lease or the autoscaler."""

from __future__ import annotations

import copy
import datetime
import json
import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import (
    artifacts, autoscaler, base, cloud_settings, core, etcd, etcd_access, executor, gate, group_image, hold_points,
    image_facts, kube, lease, leaving_marks, node_state, preflight, progress, report, stop_signals)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import journal as journal_store
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import cloud_access, kube_access
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base as provider_base
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import call_rate
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import factory

LOCK_LOOK_SECONDS = 10
ETCD_LOOK_SECONDS = 5
ABORT_LOOK_SECONDS = 5
ABORT_ASKED = "an abort of this upgrade was asked"   # how a stop for an abort begins its cause


class LockLost(Exception):
    """The run lock could not be renewed: the run must stop before another run takes over."""


class EtcdReadDue(Exception):
    """The preflight needs an etcd read that only a control-plane host can make (etcd.delegated): the role makes
    it (etcd_member_info with `needs`: endpoints, expected_member_count) and calls again with it (etcd.health)."""

    def __init__(self, needs):
        super().__init__("an etcd read through the control-plane host is due")
        self.needs = needs


class ReadFailed(Exception):
    """A read before the run (the image, the journal's target, the preflight's read, etcd) failed, as its module's
    result says; `doing` names the read."""

    def __init__(self, doing, result):
        super().__init__(result.get("msg"))
        self.doing, self.result = doing, result


def _fail_if_injected(point):
    """A failure test's injected failure at one of the run's own moments (hold_points.RUN_POINTS)."""
    injected = hold_points.failure_due(point)
    if injected:
        raise executor.StepFailure(injected)


def _now():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)


def _stamp(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def auth_params(args):
    return base.given_options(args, kube.AUTH_ARG_SPEC)


def cloud_params(args):
    return base.given_options(args, factory.provider_argument_spec(required=False))


def _read(doing, module, action):
    try:
        return module.run(action, doing)
    except base.ModuleFailed as exc:
        raise ReadFailed(doing, exc.result) from None


def _reader(doing, *args, **kwargs):
    """The InProcessModule of a read; options it refuses (a certificate file that does not exist) fail the read as
    ReadFailed. ModuleFailed is a BaseException: let out of the start, it killed the worker with no message."""
    try:
        return base.InProcessModule(*args, **kwargs)
    except base.ModuleFailed as exc:
        raise ReadFailed(doing, exc.result) from None


# -- the reads before a run, each as its module makes it -------------------------------------------------------
def prepare(args, check_mode):
    """The image, the journal's target and the preflight's read, each as its module does it: `resolved` as
    csp_scaling_group (check mode, no group), `target` as upgrade_journal (check mode), `preflight` as
    node_image_facts on the target image (None when args["preflight"] is None); and `provider`, the one provider
    these reads built and used, for the engine: one set of clients, and what its reads keep (GCE's templates while the
    groups name them) is not read again by the first pass."""
    reads = {}
    doing = "resolve the image"
    module = _reader(doing, dict(group_image.ARGUMENT_SPEC), dict(cloud_params(args), image=args["image"], group=[]),
                     cloud=base.CLOUD_REQUIRED, check_mode=True)
    built = []

    def resolve(module):
        built.append(factory.build_provider(module.params))   # inside the read: its failure is the read's, as before
        return group_image.apply_image(module, built[0])
    reads["resolved"] = _read(doing, module, lambda: resolve(module))
    reads["provider"] = built[0]
    where = args["journal"] or {}
    doing = "the upgrade's target image"
    module = _reader(doing, journal_store.ARGUMENT_SPEC, dict(
        auth_params(args), name=where.get("name"), namespace=where.get("namespace"), image=args["image"],
        target_image=reads["resolved"]["image"], new_target=args["new_target"]),
        kube_auth=True, validate=journal_store.VALIDATE, check_mode=True)
    reads["target"] = _read(doing, module, lambda: journal_store.apply_state(module, kube.build_api_client(module.params)))
    reads["preflight"] = None
    if args["preflight"] is not None:
        params = dict(auth_params(args), **cloud_params(args))
        params.update(args["preflight"], image=reads["target"]["target_image"])
        doing = "read the nodes and the clouds"
        module = _reader(doing, image_facts.argument_spec(), params, check_mode=check_mode)
        reads["preflight"] = _read(doing, module, lambda: image_facts.facts(module, reads["provider"]))
    return reads


def read_etcd(params):
    """The preflight's etcd read as etcd_member_info does it (its options, rules and result), in this process."""
    doing = "read the control-plane etcd members"
    module = _reader(doing, etcd.INFO_ARGUMENT_SPEC, dict(params), validate=etcd.validate_info, check_mode=True)
    # An etcd error fails as the module's fail_from_exception() words it (InProcessModule.run).
    return _read(doing, module, lambda: etcd.inspect_from_params(module.params))


def take_lock(args, lock, check_mode):
    """upgrade_lock state=present fail_when_held=false, once (the caller repeats it while the Lease is held)."""
    module = base.InProcessModule(lease.ARGUMENT_SPEC, dict(
        auth_params(args), name=lock.get("name"), namespace=lock.get("namespace"), holder=lock.get("holder"),
        lease_duration=lock.get("lease_duration"), fail_when_held=False),
        kube_auth=True, validate=lease.VALIDATE, check_mode=check_mode)
    return module.run(lambda: lease.apply_state(module, kube.build_api_client(module.params)),
                      "Lease %s/%s" % (module.params["namespace"], module.params["name"]))


class AbortWatch:
    """The run's stop from outside (stop_signals) and an abort asked on its run lock's Lease, which `look` raises as
    Stopped: looked at before a pass, at most every ABORT_LOOK_SECONDS (one Lease read), so a live run stops for an
    abort within seconds, at the same safe point as for a signal."""

    def __init__(self, stop, look, clock=time.monotonic):
        self.stop, self.look, self.clock = stop, look, clock
        self.looked = None

    @property
    def cause(self):
        return self.stop.cause

    def parent_gone(self):
        return self.stop.parent_gone()

    def check(self):
        self.stop.check()
        now = self.clock()
        if self.looked is None or now - self.looked >= ABORT_LOOK_SECONDS:
            self.looked = now
            self.look()

    def interruptible(self):
        return self.stop.interruptible()


class UpgradeRun:
    """One run, for upgrade_step's validated arguments `args` (their `start`, `begin` and `finish` say which
    parts of the life cycle this run does itself). `say` and `warn` show a line and a warning. `started` says
    what start began (the role's RV(start)), set as soon as the target is known, a failure's too."""

    def __init__(self, args, check_mode, say, warn, sleep=time.sleep, stop=None):
        self.args, self.check_mode = args, check_mode
        self.say, self.warn, self.sleep = say, warn, sleep
        self.stop = stop or stop_signals.NoStop()   # a stop asked from outside, taken at a safe point
        self.started = None
        self.engine = None
        self.begun = False
        self.pending_journal, self.pending_events = {}, []
        self.api_client = None
        self.preflight_read = None   # start's read of the nodes and the clouds (check mode plans on it)
        self.provider = None         # the provider start's reads built, for the engine (prepare)
        # Health gates (gate_after): the workloads running before the batch, and whether a gate is due now.
        self.gate_baseline, self.gate_pending = None, False
        self.gates_passed = set()

    # -- start -------------------------------------------------------------------------------------------
    def start(self):
        """Resolve the image and the journal's target, read the nodes and the clouds, judge them, read etcd and
        take the run lock (waiting up to start.lock_wait while another live run holds it). From then on
        self.args are the arguments of the upgrade that began (its exact image, surge cap, lock holder and start
        time). A refusal changes nothing."""
        args, start = self.args, self.args["start"]
        try:
            reads = prepare(dict(args, image=start["image"], new_target=start["new_target"],
                                 preflight=self._preflight_options() if start["preflight"] else None), self.check_mode)
        except ReadFailed as exc:
            raise executor.StepFailure(exc.result.get("msg") or exc.doing, failed_step=exc.doing, reason="preflight")
        for step in ("resolved", "target", "preflight"):
            for warning in (reads.get(step) or {}).pop("warnings", None) or ():
                self.warn(warning)
        target = reads["target"]
        self.started = dict(target=target, started=None, started_epoch=None, lock=None, surge_cap=args["surge_cap"],
                            etcd_health=None)
        self._say_target(start["image"], target)
        self.preflight_read = reads["preflight"]
        self.provider = reads["provider"]
        if reads["preflight"] is not None:
            verdict = preflight.verdict(reads["preflight"], args["max_unavailable"], start["etcd_preflight"],
                                        args["etcd"]["endpoints"], start["allow_unready_system_pods"], self.check_mode)
            for line in verdict.said:
                self.say(line)
            if verdict.refusal:
                raise executor.StepFailure(verdict.refusal, reason="preflight")
            if verdict.control_plane_left and not args["etcd"]["delegated"]:
                # Needed by the first control-plane member removal, after its heir was created: checked now.
                unreadable = etcd.certificate_file_problems(args["etcd"], preflight.ETCD_FILE_VARIABLES)
                if unreadable:
                    raise executor.StepFailure(preflight.etcd_files_refusal(unreadable), reason="preflight")
            if verdict.surge_cap is not None:
                self.started["surge_cap"] = verdict.surge_cap
            if verdict.etcd is not None and args["etcd"]["delegated"]:
                self._delegated_etcd_preflight(verdict.etcd)
            elif verdict.etcd is not None:
                self.started["etcd_health"] = self._etcd_preflight(verdict.etcd)
            for line in verdict.said_after:
                self.say(line)
        # Check mode takes no lock: it changes nothing that another run could trip over.
        lock = None if self.check_mode else dict(args["lock"], holder=self._take_lock(start["lock_wait"])["holder"])
        now = _now()
        started = _stamp(now)
        self.started.update(started=started, started_epoch=int(now.timestamp()), lock=lock)
        began = copy.deepcopy(args)
        began.update(image=target["target_image"], image_resolved=True, surge_cap=self.started["surge_cap"],
                     started=float(self.started["started_epoch"]), lock=self.started["lock"])
        began["drain"]["not_before"] = started
        if began.get("journal"):
            began["journal"]["run"] = started
        if began.get("begin"):
            began["begin"]["record"] = dict(started=started, attempts={started: dict(started=started, passes=0)})
        self.args = began

    def _preflight_options(self):
        """node_image_facts' options for the preflight's read: this run's planner options, and what the preflight
        judges besides (PodDisruptionBudgets, the pods of kube-system, the quota)."""
        args = self.args
        options = {key: args[key] for key in image_facts.PLANNER_ARG_SPEC if key != "image"}
        where = args.get("journal")
        options.update(journal=dict(name=where["name"], namespace=where["namespace"]) if where else None,
                       report_pdbs=True, report_system_pods=True, report_quota=args["start"]["quota_preflight"])
        return options

    def _say_target(self, image, target):
        """The image every heir gets, and a reference that moved since the upgrade started."""
        exact = target["target_image"]
        self.say("Target image %s%s%s" % (
            exact, " (%s)" % image if image != exact else "",
            ", the upgrade started %s goes on" % (target.get("journal") or {}).get("started") if target.get("resumed") else ""))
        if target.get("moved") is not None:
            self.say("WARNING: %s now names %s, but this upgrade keeps %s, the image it started with, for every "
                     "heir; to move on to %s, finish this upgrade and run again, or set rolling_upgrade_new_target: "
                     "true" % (image, target["moved"], exact, target["moved"]))

    def _etcd_preflight(self, needs):
        """The preflight's etcd read and check, as etcd_member_info does it: a control-plane heir of a stopped run
        may be joining (no leader between its member's add and its first start), so an unsure count looks again
        every 5 s, 24 times; a real fault outlasts that."""
        etcd_args = self.args["etcd"]
        params = dict(endpoints=needs["endpoints"], ca_cert=etcd_args["ca_cert"], client_cert=etcd_args["client_cert"],
                      client_key=etcd_args["client_key"])
        if needs["expected_member_count"] is not None:
            params["expected_member_count"] = needs["expected_member_count"]
        looks = needs["retries"] + 1
        for look in range(1, looks + 1):
            try:
                health = read_etcd(params)
                refusal = preflight.etcd_refusal(health)
            except ReadFailed as exc:
                health, refusal = exc.result, exc.result.get("msg") or exc.doing
            if refusal is None:
                return health
            if look < looks:
                self.say("control-plane etcd is not healthy yet (%s); looking again in %d s (%d of %d)"
                         % (refusal, ETCD_LOOK_SECONDS, look, looks))
                self.sleep(ETCD_LOOK_SECONDS)
        raise executor.StepFailure(refusal, reason="preflight", etcd_health=health)

    def _delegated_etcd_preflight(self, needs):
        """The preflight's etcd check on the read the role made through the control-plane host (etcd.health, with
        its verdict), or EtcdReadDue when there is none this fresh: a read made for an earlier call does not
        stand for this one's preflight."""
        given = self.args["etcd"].get("health") or {}
        fresh = given.get("read_at") and time.time() - given["read_at"] <= etcd_access.DelegatedEtcdHealth.FRESH_SECONDS
        if not fresh or given.get("healthy") is None:
            raise EtcdReadDue(dict(endpoints=needs["endpoints"], expected_member_count=needs["expected_member_count"]))
        refusal = preflight.etcd_refusal(dict(healthy=given["healthy"], problems=given.get("messages") or []))
        if refusal is not None:
            raise executor.StepFailure(refusal, reason="preflight", etcd_health=given)

    def _take_lock(self, lock_wait):
        """upgrade_lock's code, looking again every 10 s while another live run holds the Lease, for up to
        lock_wait seconds."""
        looks = max(lock_wait, 0) // LOCK_LOOK_SECONDS + 1
        for look in range(1, looks + 1):
            try:
                answer = take_lock(self.args, self.args["lock"] or {}, self.check_mode)
            except base.ModuleFailed as exc:
                raise executor.StepFailure(exc.result.get("msg") or "the run lock", reason="lock")
            if answer["acquired"]:
                return answer
            if look < looks:
                self.say("%s; looking again in %d s (rolling_upgrade_lock_wait, %d of %d)"
                         % (answer["msg"], LOCK_LOOK_SECONDS, look, looks))
                with self.stop.interruptible():
                    self.sleep(LOCK_LOOK_SECONDS)
        raise executor.StepFailure(answer["msg"], reason="lock_held", held_by=answer["held_by"])

    # -- the executor, built once per run ------------------------------------------------------------------
    def build(self):
        args = self.args
        options = node_state.planner_options(args)
        options.validate()
        if args["gate_after"] != "none" and core.unavailable_limit(options.max_unavailable, 1) > 0:
            # Delete-first refills follow their donor's removal: a gate held after it would wait on a missing node.
            raise executor.StepFailure("gate_after %s (rolling_upgrade_gate_after) does not work with max_unavailable %s "
                                       "(rolling_upgrade_max_unavailable) yet: set one of them to its default (none, 0) "
                                       "and run again; nothing was changed" % (args["gate_after"], options.max_unavailable),
                                       reason="invalid")
        try:
            self.api_client = kube.build_api_client(args)
        except kube.KubeAuthError as exc:
            raise executor.StepFailure("cannot reach Kubernetes: %s" % exc)
        # An API server or cloud that does not answer is named on the progress line while the run waits for it.
        kube.on_waiting(self.api_client, self._waiting)
        try:
            provider = self.provider if self.provider is not None else factory.build_provider(args)
            canonical = None
            if not args["image_resolved"]:
                canonical = provider.validate_image(options.image.strip())   # retried inside the provider
        except provider_base.NotFoundError as exc:
            raise executor.StepFailure("image %r does not exist: %s" % (options.image, exc))
        except provider_base.ProviderError as exc:
            raise executor.StepFailure("cannot use the %s provider with image %r: %s" % (args["provider"], options.image, exc))
        if canonical:
            options.image = canonical
        provider.waiting_listener = self._waiting
        provider.call_rate = self._call_rate(provider)
        etcd_args = args["etcd"]
        remover, health = None, etcd_access.DelegatedEtcdHealth()
        if not etcd_args["delegated"]:
            remover = etcd_access.EtcdRemover(etcd_args["ca_cert"], etcd_args["client_cert"], etcd_args["client_key"],
                                              request_timeout=etcd_args["request_timeout"], timeout=etcd_args["timeout"],
                                              warn=self.warn)
            health = etcd_access.EtcdHealth(etcd_args["ca_cert"], etcd_args["client_cert"], etcd_args["client_key"],
                                            request_timeout=etcd_args["request_timeout"])
        settings = executor.Settings(options, scaling_groups=args["scaling_groups"], timeout=args["timeout"],
                                     started=args["started"], poll=args["poll_interval"],
                                     etcd_endpoints=etcd_args["endpoints"], check_mode=self.check_mode,
                                     surge_cap=args["surge_cap"], journal_run=(args.get("journal") or {}).get("run"),
                                     gate_after=None if args["gate_after"] == "none" else args["gate_after"],
                                     taint_to_be_replaced=args["taint_to_be_replaced"])
        engine = executor.Executor(settings, kube_access.KubeAccess(self.api_client, options.annotation_prefix, args["drain"]),
                                   cloud_access.CloudAccess(provider), etcd=remover, say=self.say, etcd_health=health,
                                   stop=AbortWatch(self.stop, self.check_abort_requested))
        engine.passes = args["passes"]
        settings.leave_cloud_settings = args["cloud_settings"] == "leave"
        settings.allow_unreadable = args["allow_unreadable_autoscale"]
        if not etcd_args["delegated"] and not args["passes"] and not (args.get("start") or {}).get("preflight"):
            # Without the start's preflight: the etcd files are checked on the first pass's plan, before any change.
            engine.before_first_change = self._etcd_files_first
        if args.get("journal"):
            self._connect_journal(engine)
        engine.flush_journal = self.flush
        self.engine = engine

    def _call_rate(self, provider):
        """The limit on the provider's calls: rolling_upgrade_cloud_calls_per_minute or the cloud's default; a throttling
        answer is tried again until the run's own deadline (rolling_upgrade_timeout from its start)."""
        args = self.args
        given = args.get("cloud_calls_per_minute")
        deadline = None
        if args.get("timeout") and args.get("started"):
            deadline = float(args["started"]) + float(args["timeout"])
        return call_rate.CallRate(given or call_rate.default_rate(provider.name), deadline=deadline,
                                  source="rolling_upgrade_cloud_calls_per_minute" if given else "default")

    def _etcd_files_first(self, facts):
        """Before the first change of a run that began without its preflight: a control-plane node to be replaced
        needs the etcd client files to remove its member, so unreadable ones refuse the run now, not after its heir."""
        if facts["budget"]["control_plane_first"]:
            unreadable = etcd.certificate_file_problems(self.args["etcd"], preflight.ETCD_FILE_VARIABLES)
            if unreadable:
                raise executor.StepFailure(preflight.etcd_files_refusal(unreadable), reason="preflight")

    def _waiting(self, line):
        """A call waits for the API server or the cloud: the last pass's progress line, with what it waits for."""
        last = getattr(self.engine, "last_progress", "") if self.engine is not None else ""
        self.say("%s; %s" % (last, line) if last else line)

    def _connect_journal(self, engine):
        """The journal's records of this upgrade (created instances, start counts, delete-first, intents) for the
        executor's settings, and its writers."""
        settings, where = engine.settings, self.args["journal"]
        try:
            recorded = journal_store.read_journal(self.api_client, where["name"], where["namespace"])[1]
            settings.created, settings.start_counts = journal_store.created_record(recorded)
            settings.removed_first, settings.refills = journal_store.delete_first_record(recorded)
            settings.intents = journal_store.intents_record(recorded)
            settings.cloud_settings = dict((recorded or {}).get("cloud_settings") or {})
        except journal_store.MalformedJournal as exc:
            raise executor.StepFailure("journal: %s" % exc, reason="malformed_journal")
        if self.check_mode:
            return
        self.gate_baseline = (recorded or {}).get("gate_baseline")
        self.gate_pending = bool((recorded or {}).get("gate_due"))
        # A gate a killed run owed (a batch part-finished): held for, as that run would have.
        engine.gate_owed = bool(settings.gate_after) and journal_store.gate_owed(recorded)
        engine.record_gate_owed = self._record_gate_owed
        engine.journal = lambda record: (self.pending_events.extend(record.get("events") or ()),
                                         report.merge(self.pending_journal, record))
        # Created instances are recorded at once, not with the slice's journal: a run killed right after still
        # knows they are its own.
        engine.record_created = self._record_created
        # Donors found gone are journaled at once too: the same pass promotes their heirs, which forgets their
        # names, so a kill before the slice's journal would leave them out of the report.
        engine.record_donors_gone = self._record_donors_gone
        engine.record_settings = self._record_settings
        engine.record_group_images = self._record_group_images

    # -- begin, slices, finish -----------------------------------------------------------------------------
    def begin(self):
        """This attempt's journal record and the cluster-autoscaler paused, once per run (a real run with begin)."""
        begin = self.args["begin"]
        if not begin or self.check_mode or self.begun:
            return
        recorded = self._journal(begin["record"], image=begin["image"], new_target=begin["new_target"]).get("journal") or {}
        self._autoscaler(begin["autoscaler"], "paused")
        if self.args["gate_after"] != "none":
            # The first gate's baseline is the workloads running before the first batch; a run stopped at a gate
            # (the journal says it is due) runs that gate first.
            self.gate_pending = bool(recorded.get("gate_due"))
            self.gate_baseline = recorded.get("gate_baseline")
            if self.gate_baseline is None:
                self.gate_baseline = self._module(gate, self._gate_options(state="snapshot"),
                                                  "the workloads running before the first batch")["snapshot"]
                self._journal(dict(gate_baseline=self.gate_baseline))
        self.begun = True
        _fail_if_injected("begin")

    def give_etcd_health(self, health):
        """The etcd read the role made through a control-plane host (etcd.health), for the next control-plane heir."""
        if health and health["read_at"] and isinstance(self.engine.etcd_health, etcd_access.DelegatedEtcdHealth):
            self.engine.etcd_health.give(health["problems"], health["read_at"])

    def run_slice(self, seconds):
        return self.engine.run_slice(seconds=seconds)

    def check_abort_requested(self):
        """An abort asked of this run (abort_upgrade.yml annotates the run lock's Lease): raise Stopped, which the
        executor takes before a pass (AbortWatch) as a stop from outside; the abort then takes the lock and undoes the
        upgrade. A Lease that cannot be read is looked at again at the next look."""
        lock = self.args.get("lock") or {}
        if not lock.get("holder") or self.check_mode or self.api_client is None:
            return
        try:
            held = lease.read_lease(self.api_client, lock["name"], lock["namespace"])
        except kube.ApiException:
            return
        asked = lease.abort_requested(held)
        if asked and (lease.lease_spec_dict(held) or {}).get("holderIdentity") == lock["holder"]:
            raise stop_signals.Stopped("%s at %s (abort_upgrade.yml on Lease %s/%s)"
                                       % (ABORT_ASKED, asked, lock["namespace"], lock["name"]))

    def finish(self):
        """The upgrade is done: restore the autoscaler, close the journal, write the report and release the run
        lock. Returns the report (summary, files)."""
        finish = self.args["finish"]
        self.restore_cloud_settings()
        self._autoscaler(finish["autoscaler"], "restored")
        self._taints_off_as_far_as_it_goes()
        now = _stamp(_now())
        run = (self.args.get("journal") or {}).get("run")
        record = dict(finished=now, passes=self.engine.passes)
        if run:
            record["attempts"] = {run: dict(passes=self.engine.passes, outcome="done", ended=now)}
        self._journal(record)
        _fail_if_injected("finish")
        written = self._journal({}, state="report", report_dir=finish["report_dir"])
        if self.args.get("lock"):
            self._lock("absent")
        summary = written["summary"]
        self.say("%s node(s) replaced in %ss over %s pass(es) in %d attempt(s) (%s in this one); %s pod(s) evicted. "
                 "Report: %s" % (summary["nodes_replaced"], summary["wall_seconds"], summary["passes"],
                                 len(summary["attempts"]), self.engine.passes, summary["pods_evicted"],
                                 ", ".join(written["files"])))
        return dict(summary=summary, files=written["files"])

    def artifact(self, summary, outcome="done", cause=None):
        """The job's artifacts (AWX; docs/awx.md) for a report summary."""
        return artifacts.report_artifact(summary, outcome=outcome, cause=cause, image=self.args.get("reference"),
                                         target_image=self.args["image"], provider=self.args.get("provider"))

    def abort(self, cause, gate_ran=None, outcome="failed"):
        """A run that began ended before the upgrade was done (`cause`; `outcome` failed, or stopped from outside):
        restore the autoscaler, record the attempt's outcome and cause (and the gate whose tasks file failed,
        `gate_ran`), write the report so far and release the run lock, each as far as it goes (the cause matters
        more than any of these). Returns the report, or None."""
        run = (self.args.get("journal") or {}).get("run")
        if not run or self.check_mode:
            return None
        passes = self.engine.passes if self.engine is not None else self.args["passes"]
        ended = _stamp(_now())
        record = dict(passes=passes, attempts={run: dict(passes=passes, outcome=outcome, ended=ended, cause=cause)})
        if gate_ran:
            failed = dict(outcome="failed", ended=ended, failure=cause, seconds=dict(gate_ran.get("seconds") or {}))
            record["gates"] = {gate_ran["id"]: failed}
        finish = self.args.get("finish") or {}
        self._as_far_as_it_goes("the cloud settings this run changed could not be restored (they are in the journal's "
                                "cloud_settings; the next run's end restores them)", self.restore_cloud_settings)
        if finish.get("autoscaler"):
            # What begin paused comes back whatever ended the run: restoring a Deployment that was never paused
            # changes nothing, and the next run pauses it again.
            self._as_far_as_it_goes("the cluster-autoscaler could not be restored (its replicas before the run are in "
                                    "the annotation %s/paused-replicas of its Deployment)" % self.args["annotation_prefix"],
                                    self._autoscaler, finish["autoscaler"], "restored")
        self._taints_off_as_far_as_it_goes()
        self._as_far_as_it_goes("the %s attempt could not be recorded in the journal" % outcome, self._record_end, record)
        written = None
        if finish:
            written = self._as_far_as_it_goes("the report of the unfinished run could not be written", self._journal, {},
                                              state="report", report_dir=finish["report_dir"])
        if self.args.get("lock") and self.args["lock"].get("holder"):
            self._as_far_as_it_goes("the run lock could not be released (it expires on its own)", self._lock, "absent")
        return dict(summary=written["summary"], files=written["files"]) if written else None

    def _taints_off_as_far_as_it_goes(self):
        # A taint left behind only makes the scheduler prefer other nodes; the next run takes it off (warned, not failed).
        self._as_far_as_it_goes("the taint %s could not be taken off every node (the next run takes it off the nodes it "
                                "does not replace)" % core.AnnotationKeys(self.args["annotation_prefix"]).to_be_replaced,
                                self.take_replacing_taints_off)

    def take_replacing_taints_off(self):
        """The PreferNoSchedule taint of the nodes to be replaced (leaving_marks) off every node that carries it, as the
        run ends (done, failed or stopped): every node stays until a run taints again those it will replace."""
        keys = core.AnnotationKeys(self.args["annotation_prefix"])
        record, moment = {}, _stamp(_now())
        try:
            # The role's rescue calls abort in a run of its own, which built no client yet.
            api_client = self.api_client or kube.build_api_client(self.args)
            for node in kube.list_nodes(api_client):
                if leaving_marks.has_replacing_taint(node, keys):
                    status = node_state.write_node(api_client, node, leaving_marks.untaint_entry(keys))[0]
                    if status == "changed":
                        record[node["metadata"]["name"]] = {"removed": moment}
        except (kube.ApiException, kube.KubeAuthError, node_state.NodeWriteError) as exc:
            raise executor.StepFailure(kube.api_error_message(exc) if isinstance(exc, kube.ApiException) else str(exc))
        if record and self.args.get("journal"):
            self._journal({"replacing_taints": record})

    def _record_end(self, record):
        _fail_if_injected("abort")
        return self._journal(record)

    def _as_far_as_it_goes(self, what, call, *args, **kwargs):
        """call(...)'s answer, or None with a warning that says `what` did not happen and why."""
        try:
            return call(*args, **kwargs)
        except executor.StepFailure as exc:
            self.warn("%s: %s" % (what, exc))
            return None

    # -- health gates (gate_after): the built-in checks here, the user's tasks file by the role ----------------------
    def _gate_options(self, **own):
        settings = self.args["gate"]
        return dict(soak_seconds=settings["soak_seconds"], timeout=settings["timeout"], namespaces=settings["namespaces"],
                    poll_interval=settings["poll_interval"], after=self.args["gate_after"],
                    tasks_file=settings["tasks_file"], looks=settings["looks"], look_interval=settings["look_interval"],
                    **own)

    def run_gate(self):
        """One health gate: recorded as due first (a run stopped here runs it first when resumed), then
        cluster_health_gate's checks. Without a tasks file it passes here; with one, returns what the role gives
        back (gate_ran) once your tasks ran. A failed check fails the run, naming it, recorded as failed."""
        gate_id = _stamp(_now())
        self._journal(dict(gate_due=True, gates={gate_id: dict(after=self.args["gate_after"], started=gate_id)}))
        self.gate_pending = True
        try:
            with self.stop.interruptible():   # the gate only reads and waits
                checked = self._module(gate, self._gate_options(baseline=self.gate_baseline), "health gate %s" % gate_id)
                _fail_if_injected("gate")
        except executor.StepFailure as exc:
            self._journal(dict(gates={gate_id: dict(outcome="failed", ended=_stamp(_now()), failure=str(exc),
                                                    seconds=exc.details.get("seconds") or {})}))
            raise
        ran = dict(id=gate_id, seconds=checked["seconds"], snapshot=checked["snapshot"])
        if self.args["gate"]["tasks_file"]:
            return dict(ran, tasks_started=time.time())
        self.gate_passed(ran)
        return None

    def gate_passed(self, ran):
        """Record that the gate `ran` passed (with your tasks' time, when it had a tasks file): no gate due or owed,
        and the workloads running now are the next gate's baseline."""
        seconds = dict(ran.get("seconds") or {})
        if ran.get("tasks_started"):
            seconds["user_tasks"] = round(time.time() - float(ran["tasks_started"]), 1)
        self._journal(dict(gate_due=False, gate_owed=False, gate_baseline=ran["snapshot"],
                           gates={ran["id"]: dict(outcome="passed", ended=_stamp(_now()), seconds=seconds)}))
        self.gate_baseline, self.gate_pending = ran["snapshot"], False
        self.gates_passed.add(ran["id"])
        if self.engine is not None:
            self.engine.gate_owed = False

    # -- check mode: the plan, as a real run would start it ---------------------------------------------------------
    def check_mode_plan(self, facts):
        """What check mode shows (each part a line or, for the next pass, a mapping): the preflight's read when there
        was one and the quota did not lower the surge, else the slice's read."""
        args = self.args
        read = self.preflight_read if self.preflight_read is not None and args["surge_cap"] is None else facts
        order = read.get("replacement_order") or []
        plan = read.get("plan") or {}
        groups = "; ".join("%s (%s, %s): %s node(s), %s" % (
            g["name"], g.get("kind") or "scaling group", g.get("role") or "role unknown", g["nodes"],
            "on the image" if g.get("image_current") else "to be pointed at the image")
            for g in read.get("scaling_groups") or []) or "no scaling group was read"
        shown = dict(
            progress=progress.progress_line(read, 0),
            order="%d node(s) to replace, in this order (control plane first, one at a time; then worker groups in "
                  "parallel, up to %s per group): %s" % (len(order), args["max_surge"],
                                                         ", ".join("%s in %s" % (n["name"], n["group"]) for n in order)),
            groups=groups,
            how=self._how_replacements_go(plan),
            next_pass={key: plan.get(key) for key in (
                "set_group_image", "create", "create_blocked", "delete_first", "pairs", "drain", "etcd_remove",
                "delete_nodes", "delete_instances")},
        )
        if self.engine is not None:
            judged = self.engine.settings_judged(facts)
            if args["cloud_settings"] == "leave":
                shown["cloud_settings"] = "Cloud settings: left as they are (rolling_upgrade_cloud_settings leave), so the " \
                    "cloud may act on its own through: %s" % ("; ".join(
                        [cloud_settings.describe(c) for c in judged["changes"]] + judged["refusals"]) or "none")
            else:
                shown["cloud_settings"] = "Cloud settings the run changes until it ends: %s" % (
                    "; ".join("would set %s" % cloud_settings.describe(c) for c in judged["changes"]) or "none")
            if judged["refusals"] and args["cloud_settings"] != "leave":
                shown["cloud_settings"] += ". The run would refuse: %s" % "; ".join(judged["refusals"])
            if judged["unread"]:
                shown["cloud_settings"] += ". The run would go on without reading: %s" % "; ".join(
                    u["text"] for u in judged["unread"])
        pdbs = read.get("blocking_pdbs") or []
        if pdbs:
            shown["pdbs"] = "PodDisruptionBudgets allowing no disruption now: %s" % ", ".join(
                "%s/%s" % (p["namespace"], p["name"]) for p in pdbs)
        if args["gate_after"] != "none":
            looked = self._module(gate, self._gate_options(), "the health gates, and how they stand now", check_mode=True)
            now = "; ".join(c["detail"] for c in looked["checks"])
            shown["gates"] = "%s. Now: %s" % ("; ".join(looked["gates"]), now)
        return shown, artifacts.plan_artifact(read, image=args.get("reference"), provider=args.get("provider"))

    def _how_replacements_go(self, plan):
        args = self.args
        total = args["max_surge_total"]
        text = "Surge: up to %s new instance(s) at a time per worker group%s, one at a time for the control plane. " % (
            args["max_surge"], ", at most %s in all" % total if total is not None else "")
        if core.unavailable_limit(args["max_unavailable"], 1) > 0:
            text += ("max_unavailable %s: workers may be drained and deleted before their heir exists, Ready nodes per "
                     "worker group never below the start minus %s (marked now: %s); the control plane always surges. "
                     % (args["max_unavailable"], args["max_unavailable"],
                        ", ".join(d["name"] for d in plan.get("delete_first") or []) or "none"))
        else:
            text += "max_unavailable 0: no node is drained before its heir is Ready. "
        gates = "after each %s (the health gates below)" % args["gate_after"] if args["gate_after"] != "none" else "none"
        text += "Health gates: %s. " % gates
        events = (args.get("journal") or {}).get("events")
        return text + "Kubernetes Events on the Nodes: %s." % (
            "on (namespace default, source kubenodes-image-upgrade)" if events else "off (rolling_upgrade_events is false)")

    def renew_lock(self):
        lock = self.args["lock"]
        try:
            self._lock("present")
        except executor.StepFailure as exc:
            raise LockLost("renewing the run lock %s/%s failed: %s" % (lock["namespace"], lock["name"], exc))

    def flush(self):
        """Write what the passes journaled so far (and the slice's warnings as Events); a failure is a warning and
        the record waits for the next slice."""
        if not self.pending_journal or not self.args.get("journal"):
            return
        record, self.pending_journal = self.pending_journal, {}
        record["events"], self.pending_events = self.pending_events, []
        # args["image"] is the upgrade's exact target: given as target_image too, a finished journal of the same
        # upgrade (a rerun) is kept, not started afresh (which would drop its record of the instances created).
        try:
            self._journal(record)
        except executor.StepFailure as exc:
            self.warn("the journal could not be written (the next slice tries again): %s" % exc)
            report.merge(record, self.pending_journal)
            self.pending_journal = record
            self.pending_events = record.pop("events") + self.pending_events

    # -- the journal's writers the executor calls --------------------------------------------------------------
    def _record_gate_owed(self):
        """Record in the journal that a health gate is owed; a failure is a warning (this process still holds new
        heirs until the gate ran; only a run killed before the gate is recorded as due would not know it owes one)."""
        where = self.args["journal"]
        try:
            journal_store.record_gate_owed(self.api_client, where["name"], where["namespace"], self.args["image"])
        except (kube.ApiException, journal_store.JournalConflict, journal_store.MalformedJournal) as exc:
            self.warn("that a health gate is owed (rolling_upgrade_gate_after) could not be recorded in the journal "
                      "ConfigMap %s/%s: %s. This run still runs the gate before it creates more heirs; a run killed "
                      "before the gate starts would not" % (where["namespace"], where["name"], exc))

    def _record_created(self, record):
        """Write the record of instances just created into the journal; a failure is a warning (this process keeps
        the record in memory; a later run without it leaves those instances alone rather than removing them). The
        delete-first record, written before any worker is marked, is not: without it a run resumed after a kill
        would not know its groups' start counts nor the labels of the workers it removed, so the pass stops first."""
        where = self.args["journal"]
        try:
            journal_store.record_created(self.api_client, where["name"], where["namespace"], self.args["image"],
                                         record.get("instances_created"), record.get("start_counts"), delete_first=record)
        except (kube.ApiException, journal_store.JournalConflict, journal_store.MalformedJournal) as exc:
            if record.get("create_intents") and not record.get("instances_created"):
                # Before the create call: without it, a kill right after the create leaves instances nothing proves
                # ours (they are then left alone, never removed), so the run goes on with a warning.
                self.warn("the creation about to be made could not be recorded in the journal ConfigMap %s/%s: %s. "
                          "If this run is killed before the instances are recorded, a later run leaves them alone"
                          % (where["namespace"], where["name"], exc))
                return
            if not record.get("instances_created") and (record.get("removed_first") or record.get("start_counts")):
                raise executor.StepFailure(
                    "the delete-first record (start counts %s, workers to remove first %s) could not be written to the "
                    "journal ConfigMap %s/%s: %s. No worker was marked for removal: rolling_upgrade_max_unavailable needs "
                    "the journal; make it writable for the run's identity (rbac.yml) and run again" % (
                        json.dumps(record.get("start_counts") or {}, sort_keys=True),
                        ", ".join(sorted(record.get("removed_first") or {})) or "none", where["namespace"],
                        where["name"], exc), reason="journal_unwritable")
            self.warn("the instances just created (%s) could not be recorded in the journal ConfigMap %s/%s as this "
                      "upgrade's own: %s. A later run will not remove them as surplus" % (
                          ", ".join(sorted(record.get("instances_created") or {})), where["namespace"], where["name"], exc))

    def _record_settings(self, record):
        """Write the cloud settings about to change, with the values found, into the journal before they change: a
        run killed right after still puts them back. Without that record nothing is changed."""
        self._record_first(record, "the cloud settings about to change", "the cloud settings this run must change (%s)"
                           % ", ".join(sorted(record["cloud_settings"])), "Nothing was changed in the cloud")

    def _record_group_images(self, record):
        """Write the image each group has before it is pointed at the new one into the journal first: an abort after
        a kill points it back. Without that record no group is pointed at the new image."""
        self._record_first(record, "the groups' images before the run", "the image of each group before this run (%s)"
                           % ", ".join("%s: %s" % (g, e["before"]) for g, e in sorted(record["group_images"].items())),
                           "No group was pointed at the new image")

    def _record_first(self, record, what, named, unchanged):
        """Merge `record` into the journal before the change it describes; StepFailure (saying that `unchanged`) when
        it cannot be written."""
        where = self.args["journal"]
        try:
            journal_store.merge_record(self.api_client, where["name"], where["namespace"], self.args["image"], record, what)
        except (kube.ApiException, journal_store.JournalConflict, journal_store.MalformedJournal) as exc:
            raise executor.StepFailure(
                "%s could not be recorded in the journal ConfigMap %s/%s first: %s. %s; make the journal writable for "
                "the run's identity (rbac.yml) and run again" % (named, where["namespace"], where["name"], exc, unchanged),
                reason="journal_unwritable")

    def restore_cloud_settings(self):
        """Put back the cloud settings this upgrade changed (the journal's cloud_settings, or this run's own without
        a journal), each as far as it goes: one changed by someone else since is left as they set it; one whose
        restoring would make the cloud act on the group at once (provider.restore_problem), or that the cloud
        refuses, stays as the run set it, named in a warning and in the journal, for a later run's end. Returns
        the entries restored."""
        where = self.args.get("journal")
        if where:
            recorded = (self._journal({}).get("journal") or {}).get("cloud_settings")
        else:
            recorded = self.engine.settings.cloud_settings if self.engine is not None else {}
        entries = cloud_settings.to_restore(recorded)
        if not entries:
            return []
        provider = self.engine.cloud.provider if self.engine is not None else None
        restored = []
        for entry in entries:
            try:
                provider = provider or factory.build_provider(self.args)
                problem = provider.restore_problem(entry["group"], entry["name"], entry["original"])
                if problem is None:
                    current = provider.list_groups([entry["group"]])[0].settings.get(entry["name"])
                    if current == entry["neutral"]:
                        provider.set_run_setting(entry["group"], entry["name"], entry["original"])
                        self.say("restored %s of %s to %s" % (entry["name"], entry["group"], entry["original"]))
                    else:
                        self.say("%s of %s is %s now, not the %s this run set: left as it is" % (
                            entry["name"], entry["group"], current, entry["neutral"]))
            except provider_base.ProviderError as exc:
                problem = "the cloud refused: %s" % exc
            if problem is None:
                record = cloud_settings.restored_record(entry, _stamp(_now()))
                restored.append(entry)
            else:
                record = cloud_settings.held_record(entry, problem)
                self.warn("%s of %s stays %s, as this run set it, not %s as before: %s. The next run's end tries again"
                          % (entry["name"], entry["group"], entry["neutral"], entry["original"], problem))
            if where:
                self._journal(record)
            else:
                cloud_settings.merge({"cloud_settings": self.engine.settings.cloud_settings}, record)
        return restored

    def _record_donors_gone(self, record):
        """Write progress.donors_gone_record's record into the journal at once; a failure is a warning and the
        record goes with the slice's journal instead (only a kill before that loses it)."""
        where = self.args["journal"]
        try:
            journal_store.merge_record(self.api_client, where["name"], where["namespace"], self.args["image"], record,
                                       "the donors gone")
        except (kube.ApiException, journal_store.JournalConflict, journal_store.MalformedJournal) as exc:
            self.warn("the nodes found replaced (%s) could not be recorded in the journal ConfigMap %s/%s at once: "
                      "%s. They are recorded with this slice's journal" % (
                          ", ".join(sorted(record.get("nodes") or {})), where["namespace"], where["name"], exc))
            report.merge(self.pending_journal, record)

    # -- journal, lock and autoscaler: the modules' own code, in this process -----------------------------------
    def _module(self, backend, own, doing, check_mode=False):
        """A module's own code (its backend's ARGUMENT_SPEC, VALIDATE and apply_state) in this process, with own
        options `own`: its result, or StepFailure with its message (and its reason and seconds); its warnings are
        shown as its own task would show them."""
        try:
            call = base.InProcessModule(backend.ARGUMENT_SPEC, dict(auth_params(self.args), **own), kube_auth=True,
                                        validate=backend.VALIDATE, check_mode=check_mode)
            answer = call.run(lambda: backend.apply_state(call, kube.build_api_client(call.params)), doing)
        except base.ModuleFailed as exc:
            raise executor.StepFailure(exc.result.get("msg") or doing,
                                       **{k: v for k, v in exc.result.items() if k in ("reason", "seconds")})
        for warning in answer.pop("warnings", None) or ():
            self.warn(warning)
        return answer

    def _journal(self, record, image=None, **own):
        journal = self.args["journal"]
        own = dict(name=journal["name"], namespace=journal["namespace"], image=image or self.args["image"],
                   target_image=self.args["image"], record=record, events=journal["events"], **own)
        return self._module(journal_store, own, "journal ConfigMap %s/%s" % (journal["namespace"], journal["name"]))

    def _autoscaler(self, where, state):
        own = dict(name=where["name"], namespace=where["namespace"], state=state,
                   annotation_prefix=self.args["annotation_prefix"])
        return self._module(autoscaler, own, "Deployment %s/%s" % (where["namespace"], where["name"]))

    def _lock(self, state):
        lock = self.args["lock"]
        own = dict(holder=lock["holder"], name=lock["name"], namespace=lock["namespace"],
                   lease_duration=lock["lease_duration"], state=state)
        return self._module(lease, own, "Lease %s/%s" % (lock["namespace"], lock["name"]))
