#!/usr/bin/python
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: upgrade_journal
short_description: Keep the journal of an upgrade run in the cluster and write its report
version_added: 1.0.0
description:
  - Keeps what an upgrade observed (per replaced node its group, heir, role, when each phase was first seen,
    the pods evicted, waits and retries) in a ConfigMap, so that a run resumed after an interruption still
    reports on the whole upgrade.
  - Recording is idempotent (earliest phase times are kept, evicted pods form a set, counters keep the highest
    total seen), so a retried pass never double-counts.
  - With O(state=report), writes the report as JSON, Markdown and an SVG timeline with one bar per replaced node,
    covering every attempt of the upgrade (each run of the playbook, how it ended, its passes).
  - The journal is plain JSON under the ConfigMap key C(journal.json) while it is under 512 KiB. A larger one
    (a ConfigMap holds at most 1 MiB) keeps only the counts of pods evicted and retries of finished replacements,
    and one still larger is stored gzipped under the C(binaryData) key C(journal.json.gz).
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
options:
  name:
    description:
      - Name of the journal ConfigMap.
    type: str
    default: kubenodes-image-upgrade-journal
  namespace:
    description:
      - Its namespace.
    type: str
    default: kube-system
  state:
    description:
      - V(present) merges O(record) into the journal (creating it when needed).
      - V(report) reads the journal and writes the report files to O(report_dir).
      - V(absent) deletes the journal.
    type: str
    choices: [present, report, absent]
    default: present
  image:
    description:
      - The image the run upgrades to, as asked for (an image family reference stays a family reference here).
      - A finished journal of another image belongs to an earlier upgrade and is started afresh. An unfinished
        one of another image is refused unless O(new_target) is set.
    type: str
  target_image:
    description:
      - The exact image this run resolved O(image) to. The journal records the exact image of an upgrade once, at
        its start, and returns it as RV(target_image) to every later call and every resumed run of the same
        upgrade, so all its heirs get that image even when an image family has moved on since.
    type: str
  new_target:
    description:
      - Start a new upgrade to O(image) / O(target_image) although the journal holds an unfinished upgrade to
        another image (nodes already on the old target are then replaced again). Without it such a call fails,
        naming this option and changing nothing.
    type: bool
    default: false
  record:
    description:
      - The observation to merge. Keys C(started), C(finished), C(passes), and C(nodes), a dictionary from the
        replaced node's name to C(group), C(heir), C(role), C(phases) (phase name to ISO 8601 time),
        C(evicted) (list of C(namespace/pod)), C(waits) and C(retries) (name to a count so far, or to a list of
        distinct attempt IDs whose number is the count), C(error); C(instances_removed), a dictionary from
        a providerID to the C(group) and C(reason) of an instance deleted without ever becoming a node; and
        C(attempts), a dictionary from an attempt ID (one run of the playbook) to its C(started) time, its
        C(passes) so far, and at its end its C(outcome) (V(done) or V(failed)) and C(ended) time. An attempt
        that never recorded its end counts as killed in the report, which sums the passes of every attempt.
      - C(events), a list of Events to write (not kept in the journal) with C(node), C(reason), C(message),
        C(type) (V(Normal) or V(Warning)) and C(time) - the problems and blocked drains a pass found.
    type: dict
    default: {}
  events:
    description:
      - Write a Kubernetes Event on the Node for every phase a replacement enters for the first time in the journal
        (C(UpgradeHeirJoined), C(UpgradePaired), C(UpgradeHeirReady), C(UpgradeCordoned), C(UpgradeDrainStarted),
        C(UpgradeDrained), C(UpgradeEtcdMemberRemoved), C(UpgradeNodeDeleted)), for every health gate whose outcome
        it records for the first time (C(UpgradeGatePassed) with the seconds of each check, or the Warning
        C(UpgradeGateFailed) with what failed, on each heir of the batch the gate followed) and for the C(events) of
        O(record) (C(UpgradeProblem), C(UpgradeDrainBlocked) naming the PodDisruptionBudget), in the C(default)
        namespace as the kubelet does, so C(kubectl describe node) and C(kubectl get events) show the upgrade.
      - Bounded as Kubernetes' own recorder is - one Event per node, reason and message, whose C(count) goes up when
        it happens again; at most 50 per call. An Event that cannot be written is a warning, never a failure.
      - Needs C(create), C(get) and C(patch) on C(events) in the C(default) namespace (the shipped RBAC grants them).
    type: bool
    default: true
  intend:
    description:
      - Creations about to be made (C(group), C(count)), as the plan's RV(kubenodes.image_upgrade.node_image_facts#module:plan.create),
        to record before the create call under C(create_intents) (the group, the moment and the count). A run killed
        after the cloud's create and before O(created) is recorded still knows those instances as its own (the
        planner takes an instance of that group that the cloud created after the intent, and that no record claims).
      - The keys are returned in RV(intents), for O(created.intents).
    type: list
    elements: dict
    default: []
  created:
    description:
      - Instances this upgrade just created, to record at once as its own (under C(instances_created), by providerID
        with their group and creation time, the first record kept). Only recorded instances are ever removed as
        surplus (M(kubenodes.image_upgrade.node_image_facts) O(kubenodes.image_upgrade.node_image_facts#module:journal)).
    type: dict
    suboptions:
      instances:
        description: The instances, as M(kubenodes.image_upgrade.csp_node) returns them in RV(kubenodes.image_upgrade.csp_node#module:instances).
        type: list
        elements: dict
        default: []
      scaling_groups:
        description:
          - The planner's scaling group reports of the pass that created them (RV(kubenodes.image_upgrade.node_image_facts#module:scaling_groups)),
            read before the creation. Their C(nodes_serving) is recorded, per group the first time only, as
            C(start_counts) - how many nodes the group had before this upgrade created any.
        type: list
        elements: dict
        default: []
      intents:
        description:
          - The create intents these creations settle, by scaling group ID (the keys of C(create_intents) recorded
            with O(record) before the create call). Each instance is recorded with its group's intent, and each
            intent is settled with how many instances its group got, so that no other instance is taken for it.
        type: dict
        default: {}
  report_dir:
    description:
      - Directory (on the host running the module) for C(image-upgrade-report.json), C(.md) and C(.svg).
      - Required with O(state=report).
    type: path
extends_documentation_fragment:
  - kubenodes.image_upgrade.kube_auth
attributes:
  check_mode:
    support: full
    description: Reports whether the journal or report files would change; writes nothing.
  diff_mode:
    support: full
    description:
      - Shows the journal before and after a record (O(state=present)) or its deletion (O(state=absent)), and each
        report file that changes (O(state=report)), before and after. No diff when nothing changes; the Events a
        record writes are counted in RV(events_written).
"""

EXAMPLES = r"""
- name: Record what this pass saw
  kubenodes.image_upgrade.upgrade_journal:
    image: projects/my-project/global/images/node-v2
    record:
      passes: 3
      nodes:
        worker-a-0:
          group: projects/my-project/zones/us-central1-a/instanceGroupManagers/workers
          heir: worker-a-7x2k
          phases:
            paired: "2026-11-30T10:00:05Z"
            draining: "2026-11-30T10:01:10Z"

- name: Write the report
  kubenodes.image_upgrade.upgrade_journal:
    state: report
    report_dir: ./reports
"""

RETURN = r"""
journal:
  description: The journal after the call.
  returned: always
  type: dict
target_image:
  description: The exact image every heir of this upgrade gets (recorded at its start, or O(target_image) for a
    new upgrade); null when neither it nor O(target_image) is known.
  returned: when state is present
  type: str
  sample: projects/my-project/global/images/node-v2-20261201
resumed:
  description: Whether the call goes on with an unfinished upgrade of the journal.
  returned: when state is present
  type: bool
moved:
  description: The image O(image) resolves to now when it differs from the upgrade's recorded target (an image
    family published into since the upgrade started), else null. The recorded target is kept.
  returned: when state is present
  type: str
intents:
  description: The create intents recorded for O(intend), by scaling group ID (empty without O(intend)).
  returned: when state is present
  type: dict
  sample:
    {"projects/my-project/zones/us-central1-a/instanceGroupManagers/workers":
       "projects/my-project/zones/us-central1-a/instanceGroupManagers/workers@2026-12-04T18:00:00Z#3f2a1c"}
events_written:
  description: How many Events (new or aggregated into one already there) were written on Nodes (O(events)).
  returned: with O(state=present) and O(events), when not in check mode
  type: int
  sample: 2
summary:
  description:
    - Totals, wall time, and per node the phase durations in seconds (with O(state=report)).
    - C(nodes_replaced) counts the donors replaced by their heirs and the workers removed delete-first;
      C(surplus_removed) the new nodes no donor needed that the run removed (each node's C(kind) says which).
  returned: when state is report
  type: dict
files:
  description: Paths of the report files written (with O(state=report)).
  returned: when state is report
  type: list
  elements: str
"""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import journal
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import KubenodesModule


def main():
    # The options, rules and work are journal.py's: the upgrade_step action runs them too.
    module = KubenodesModule(argument_spec=journal.ARGUMENT_SPEC, kube_auth=True, supports_check_mode=True,
                             required_if=[("state", "report", ["report_dir"])], validate=journal.VALIDATE)
    module.run(lambda: journal.apply_state(module, module.kube_client()),
               "journal ConfigMap %s/%s" % (module.params["namespace"], module.params["name"]))


if __name__ == "__main__":
    main()
