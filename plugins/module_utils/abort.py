# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""upgrade_abort's work: stop an upgrade and undo what it made, one step per call (the playbook repeats it until
RV(done)); every call reads the Nodes, the clouds and the journal afresh and acts on abort_plan's decision, so a
call killed at any moment is simply made again.

1. The run lock. A live run that holds it is asked to stop (lease.request_abort: it stops before its next pass,
   as stopped, and releases the lock); the call waits. A lock that is free, expired, or held by a dead local run
   is taken, as upgrade_lock takes it.
2. One step of the undo (abort_plan.decide): the groups pointed back at their recorded image, donors given back,
   instances this upgrade created and never a Node deleted, and its other nodes drained, then their instances
   deleted, then their Nodes once the cloud lists the instance no more.
3. When nothing is left: the run's own end (run.UpgradeRun.abort) puts back the cloud settings, the
   cluster-autoscaler and the taints, records the attempt as aborted, writes the report and releases the lock."""

from __future__ import annotations

import datetime
import time

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import (
    abort_plan, base, drain_api, executor, kube, kube_access, lease, node_state, run, run_lock, validate)
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import cloud_access, etcd_access, facts_views
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import etcd as etcd_store
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import journal as journal_store
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import base as provider_base
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.providers import factory
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.vocabulary import AnnotationKeys

ARGUMENT_SPEC = dict(
    annotation_prefix=dict(validate.ANNOTATION_PREFIX_SPEC),
    journal=dict(type="dict", default={}, options=dict(journal_store.REFERENCE_SPEC)),
    lock=dict(type="dict", default={}, options=dict(
        name=dict(type="str", default="kubenodes-image-upgrade"), namespace=dict(type="str", default="kube-system"),
        holder=dict(type="str"), lease_duration=dict(type="int", default=600))),
    autoscaler=dict(type="dict", options=dict(name=dict(type="str", default="cluster-autoscaler"),
                                              namespace=dict(type="str", default="kube-system"))),
    drain=dict(type="dict", default={}),
    # etcd's TLS files, to remove the member of a control-plane node the upgrade created; none: such nodes are named.
    etcd=dict(type="dict", options=dict(
        endpoints=dict(type="list", elements="str", default=[]), ca_cert=dict(type="path", required=True),
        client_cert=dict(type="path", required=True), client_key=dict(type="path", required=True, no_log=False),
        request_timeout=dict(type="float", default=5), timeout=dict(type="float", default=60))),
    report_dir=dict(type="path", required=True),
)
_PREFIX_RULES = validate.checker(dict(annotation_prefix=validate.annotation_prefix))


def option_problems(params):
    """The module's validate= hook: the annotation prefix's rule and the etcd option's TLS files."""
    return _PREFIX_RULES(params) + etcd_problems(params)


VALIDATE = option_problems


def etcd_problems(params):
    """The etcd option's TLS files this process cannot read, named as etcd.<option> (before anything changes)."""
    if not params.get("etcd"):
        return []
    return etcd_store.certificate_file_problems(params["etcd"], names={o: "etcd.%s" % o for o in etcd_store.CERTIFICATE_OPTIONS})


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _attempt_id(started):
    return "abort-%s" % started


def _scope(journal):
    """The groups this upgrade touched, as its journal names them."""
    groups = set(journal.get("group_images") or {}) | set(journal.get("start_counts") or {})
    groups |= {e.get("group") for e in (journal.get("instances_created") or {}).values() if isinstance(e, dict)}
    groups |= {e.get("group") for e in (journal.get("cloud_settings") or {}).values() if isinstance(e, dict)}
    return sorted(g for g in groups if g)


class Abort:
    """One call of upgrade_abort, for its module (validated params, check_mode, warn)."""

    def __init__(self, module):
        self.module, self.params = module, module.params
        self.keys = AnnotationKeys(self.params["annotation_prefix"])
        self.api_client = kube.build_api_client(self.params)
        self.lock = dict(self.params["lock"], holder=self.params["lock"]["holder"] or run_lock.default_holder())
        self.where = self.params["journal"]
        self.did = []

    def run(self):
        check = self.module.check_mode
        answer = run.take_lock(self.params, self.lock, check)
        if not answer["acquired"]:
            asked = None if check else lease.request_abort(self.api_client, self.lock["name"], self.lock["namespace"], _now())
            return dict(changed=bool(asked), done=check, waiting=True, plan=[], did=[], msg=(
                "%s. %s it to stop at its next safe point (before its next pass, within seconds); this call waits for "
                "it to end as stopped and release the lock" % (answer["msg"], "Would ask" if check else "Asked")))
        journal = journal_store.read_journal(self.api_client, self.where["name"], self.where["namespace"])[1]
        if not journal:
            self._release()
            self.module.fail_json(msg="the journal ConfigMap %s/%s does not exist, so nothing records what an upgrade "
                                  "made: there is nothing to abort and nothing was changed" % (
                                      self.where["namespace"], self.where["name"]), reason="no_journal")
        decision, nodes, cloud = self._decide(journal)
        plan = abort_plan.describe(decision)
        count = abort_plan.left(decision)
        left = count > 0
        if check:
            return dict(changed=left or bool(journal.get("cloud_settings")), done=True, waiting=False, plan=plan, did=[], left=count,
                        msg="would abort the upgrade to %s: %s" % (journal.get("target_image"), "; ".join(plan) or
                                                                   "nothing left but its end"))
        if not (journal.get("abort") or {}).get("started"):
            # The abort is an attempt of its own in the report, after the ones it stopped.
            started = _now()
            self._journal({"abort": {"started": started, "holder": self.lock["holder"]},
                           "attempts": {_attempt_id(started): {"started": started}}})
        for text in (d["reason"] for d in decision["nodes"].values() if d["action"] == abort_plan.HOLD):
            self.module.warn(text)
        if left:
            self._step(decision, nodes, cloud)
            return dict(changed=True, done=False, waiting=False, plan=plan, did=self.did, left=count,
                        msg="aborting: %s" % "; ".join(plan))
        return self._end(journal, plan)

    def _decide(self, journal):
        nodes = {n["metadata"]["name"]: n for n in kube.list_nodes(self.api_client)}
        cloud = cloud_access.CloudAccess(factory.build_provider(self.params))
        groups, instances, errors = cloud.read(_scope(journal))
        if errors:
            self.module.fail_json(msg="the instances of %s could not be listed, so what this upgrade created there is "
                                  "not known: nothing was changed in this call; run the abort again" % "; ".join(
                                      "%s (%s)" % item for item in sorted(errors.items())), reason="cloud_read")
        listed = {i.provider_id: dict(group=i.group_id, state=i.state) for items in instances.values() for i in items}
        decision = abort_plan.decide(nodes, listed, journal, self.keys, drain_api.drain_annotation(self.keys.prefix),
                                     normalize=cloud.normalize, groups={g.id: g.image for g in groups}, now=time.time(),
                                     etcd_reachable=bool(self.params.get("etcd")))
        return decision, nodes, cloud

    def _step(self, decision, nodes, cloud):
        """One step of the undo, in the safe order: no new instance from the new image, capacity back on the donors,
        then the upgrade's own nodes and instances go."""
        for item in decision["groups"]:
            cloud.set_group_image(item["group"], item["image"])
            self.did.append(dict(step="set_group_image", group=item["group"], image=item["image"]))
        kube_nodes = kube_access.KubeAccess(self.api_client, self.keys.prefix, self.params["drain"])
        for name, item in sorted(decision["nodes"].items()):
            if item["action"] == abort_plan.GIVE_BACK:
                if item["write"]:
                    node_state.write_node(self.api_client, nodes[name], item["write"])
                if item["uncordon"]:
                    kube_nodes.uncordon(name)
                self.did.append(dict(step="give_back", name=name, uncordoned=item["uncordon"]))
            elif item["action"] == abort_plan.KEEP and item["write"]:
                node_state.write_node(self.api_client, nodes[name], item["write"])
                self.did.append(dict(step="unpair", name=name))
        removed = {}
        for item in decision["instances"]:
            removed.update({pid: dict(group=item["group"], reason="aborted") for pid in cloud.delete([item["provider_id"]])})
        for name, item in sorted(decision["nodes"].items()):
            if item["action"] not in (abort_plan.REMOVE, abort_plan.FINISH):
                continue
            # Drained while its instance runs; once the instance is going, its pods cannot end any more (its kubelet
            # is gone): what is left is the Node.
            if item["action"] == abort_plan.REMOVE and item["instance"] == abort_plan.RUNNING \
                    and not kube_nodes.drain(name)["drained"]:
                self.did.append(dict(step="drain", name=name))
                continue
            if item.get("control_plane") and not self._etcd_member_gone(name, item, nodes):
                continue
            self._remove(name, nodes[name], item, cloud, kube_nodes, removed)
        if removed:
            self._journal({"instances_removed": removed})

    def _etcd_member_gone(self, name, item, nodes):
        """A control-plane node of the upgrade, drained: its etcd member removed (etcd.MemberRemoval, with the checks
        of etcd_member_remove: health, alarms, learners, quorum) or found gone already. False while etcd refuses for
        now (another member unhealthy, quorum): the next call tries again, and the node stays meanwhile."""
        settings = self.params["etcd"]
        others = [n for other, n in nodes.items() if other != name]
        endpoints = settings["endpoints"] or facts_views.control_plane_endpoints(others)
        members = len(facts_views.control_plane_endpoints(list(nodes.values())))
        remover = etcd_access.EtcdRemover(settings["ca_cert"], settings["client_cert"], settings["client_key"],
                                          request_timeout=settings["request_timeout"], timeout=settings["timeout"],
                                          warn=self.module.warn)
        outcome = remover(dict(name=name, node_ip=item.get("node_ip")), endpoints, members) or {}
        if outcome.get("waiting"):
            self.module.warn("the etcd member of %s is not removed yet: %s" % (name, outcome.get("msg")))
            return False
        if outcome.get("changed"):
            self.did.append(dict(step="etcd_remove", name=name))
        return True

    def _remove(self, name, node, item, cloud, kube_nodes, removed):
        """The instance of a drained node deleted; its Node once the cloud lists the instance no more."""
        if item["instance"] == abort_plan.RUNNING:
            for gone in cloud.delete([item["provider_id"]]):
                removed[gone] = dict(group=item.get("group") or "", reason="aborted")
            self.did.append(dict(step="delete_instance", name=name))
        elif item["instance"] == abort_plan.GONE and kube_nodes.delete_node(node):
            self.did.append(dict(step="delete_node", name=name))

    def _end(self, journal, plan):
        """Nothing left to undo: the run's own end, as a stopped run's (cloud settings, autoscaler, taints, the
        attempt, the report, the lock)."""
        started = (journal.get("abort") or {}).get("started") or _now()
        args = dict(base.given_options(self.params, kube.AUTH_ARG_SPEC), **run.cloud_params(self.params))
        args.update(image=journal.get("target_image") or journal.get("image"), annotation_prefix=self.keys.prefix, passes=0,
                    journal=dict(self.where, events=True, run=_attempt_id(started)), lock=self.lock,
                    finish=dict(report_dir=self.params["report_dir"], autoscaler=self.params["autoscaler"]))
        ending = run.UpgradeRun(args, False, lambda line: None, self.module.warn)
        ending.api_client = self.api_client
        # Recorded before the end writes the report, which then shows it.
        self._journal({"abort": {"ended": _now(), "outcome": "done"}})
        written = ending.abort("aborted (abort_upgrade.yml, started %s)" % started, outcome="aborted")
        said = "; ".join(plan) or "every node, instance and group was as before already"
        return dict(changed=True, done=True, waiting=False, plan=plan, did=self.did, left=0, report=written,
                    msg="the upgrade to %s is aborted: %s" % (journal.get("target_image"), said))

    def _journal(self, record):
        journal_store.merge_record(self.api_client, self.where["name"], self.where["namespace"], None, record,
                                   "the abort", create=False)

    def _release(self):
        if not self.module.check_mode:
            lease.apply_state(base.InProcessModule(lease.ARGUMENT_SPEC, dict(
                base.given_options(self.params, kube.AUTH_ARG_SPEC), state="absent", **self.lock), kube_auth=True,
                validate=lease.VALIDATE), self.api_client)


def apply(module):
    """upgrade_abort's result, or a failure naming what stopped it (with what the call did before)."""
    try:
        return Abort(module).run()
    except executor.StepFailure as exc:
        module.fail_json(msg="the abort stopped: %s. Run it again: it goes on from what it finds" % exc)
    except journal_store.MalformedJournal as exc:
        module.fail_json(msg=str(exc), reason="malformed_journal")
    except (provider_base.ProviderError, node_state.NodeWriteError, lease.LeaseConflict) as exc:
        module.fail_json(msg="the abort stopped: %s. Run it again: it goes on from what it finds" % exc)
    except kube.KubeAuthError as exc:
        module.fail_json(msg="cannot reach Kubernetes: %s" % exc)
    except base.ModuleFailed as exc:   # the run lock, as upgrade_lock's code failed
        module.fail_json(**exc.result)
