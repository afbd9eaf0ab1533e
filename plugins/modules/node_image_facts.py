#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_image_facts
short_description: Where every node stands in an image upgrade, and the plan for the next pass
version_added: 1.0.0
description:
  - Reads every Node (one LIST) and the cloud's scaling groups (one listing of groups and one listing of
    instances per group, never a call per node), and groups every node into exactly one of outdated, up to
    date, donor, heir, new, obsolete or invalid (with the reason).
  - Computes, per scaling group, the surge budget (heirs, joining instances and new nodes count as in flight)
    and the plan for the next pass - instances to create, pairs to make and pairs to repair, labels to copy,
    donors to drain (only when their heir is Ready), etcd members to remove, Nodes and instances to delete,
    failed joins and orphaned instances to clean up - plus progress, an ETA and RV(done).
  - Control-plane groups come first, one replacement at a time; no worker replacement starts while a
    control-plane node is outdated or a donor.
  - Read-only; it changes nothing. M(kubenodes.image_upgrade.node_pair) writes the pairs and annotations,
    M(kubenodes.image_upgrade.csp_node) creates and deletes instances,
    M(kubenodes.image_upgrade.node_drain) drains and M(kubenodes.image_upgrade.etcd_member_remove) removes
    etcd members.
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
options:
  image:
    description:
      - The image every node should run, in the cloud's format (see the O(gcp), O(azure) and O(aws) options).
      - Compared case-insensitively with the images of nodes and scaling groups.
    type: str
    required: true
  annotation_prefix:
    description:
      - Prefix of the node annotations that hold the upgrade state (C(<prefix>/heir), C(<prefix>/donor),
        C(<prefix>/scaling-group-id), C(<prefix>/node-image), C(<prefix>/obsolete), C(<prefix>/phase),
        C(<prefix>/phase-since), C(<prefix>/started-at)).
      - V(constellation.edgeless.systems) reads the annotations of the Constellation node operator, so an
        upgrade it left half done can be continued.
    type: str
    default: image-upgrade.kubenodes.io
  max_surge:
    description:
      - Extra nodes in flight per worker scaling group, as an integer or a percentage of the group such as
        V(25%) (rounded up). Control-plane groups always use one.
    type: raw
    default: 1
  max_surge_total:
    description:
      - Optional cap on the extra nodes in flight in the whole cluster.
    type: int
  join_timeout:
    description:
      - Seconds a new instance may take to register its Node. After that it is reported for deletion in
        RV(plan.delete_instances).
    type: int
    default: 1800
  scaling_groups:
    description:
      - Only these scaling group IDs. Nodes of other groups are reported invalid and left alone.
      - All the groups the provider discovers when empty.
    type: list
    elements: str
    default: []
  exclude_labels:
    description:
      - Label keys (and, with O(copy_taints), taint keys) never copied from donor to heir, in addition to the
        reserved C(*kubernetes.io/*) and C(*k8s.io/*) keys.
    type: list
    elements: str
    default: []
  copy_taints:
    description:
      - Also plan to copy the donor's taints (except reserved keys) to its heir.
    type: bool
    default: false
  heir_ready_seconds:
    description:
      - Seconds a heir must have been Ready (since its Ready condition last turned true) before its donor is
        planned for draining. Until then the donor is listed in RV(plan.waiting_for_heir).
    type: int
    default: 0
  canary:
    description:
      - Plan a canary in each worker group whose surge limit is above 1 - one heir at a time (the others listed in
        RV(plan.create_blocked) with a reason that starts with C(canary)) until the group holds a finished replacement
        of this upgrade whose node has been Ready for O(canary_soak_seconds).
    type: bool
    default: false
  canary_soak_seconds:
    description: Seconds the canary's node must have been Ready before its group plans its full surge.
    type: int
    default: 0
  lb_drain_seconds:
    description:
      - Seconds a leaving node carries the label C(node.kubernetes.io/exclude-from-external-load-balancers) before
        its etcd member and its instance go, so connections the clouds' load balancers still hold to it can finish.
        Until then the node is listed in RV(plan.waiting_for_lb), and a leaving node without the label (and its
        moment, annotation C(<annotation_prefix>/lb-excluded-since)) in RV(plan.exclude_from_lb).
      - A donor is labelled once its heir is Ready, so the hold runs while the heir's O(heir_ready_seconds) and the
        drain do; a donor whose pair breaks before its drain gets the label off again (RV(plan.lb_release)).
      - V(0) sets no label and holds nothing. The role's default is V(300), the AWS ELB deregistration delay.
    type: int
    default: 0
  max_unavailable:
    description:
      - Worker nodes a scaling group may lack while they are replaced delete-first, an integer or a percentage of
        the group such as V(25%) (rounded down, at least 1 when above 0%). With V(0) (the default) every heir is
        created before its donor is drained.
      - Above 0, an outdated worker is marked obsolete, drained and deleted before its heir is created, as long
        as the group's Ready, schedulable nodes stay at or above its node count at the start (the journal's
        C(start_counts)) minus this limit; the group is then refilled from the new image up to that count.
        Surge heirs (O(max_surge)) and delete-first replacements add up. Control-plane groups always surge.
      - The marks are listed in RV(plan.delete_first).
    type: raw
    default: 0
  no_surge:
    description:
      - No heir beyond the group's node count at the start (the role sets this when its quota preflight finds no
        room for one more instance and O(max_unavailable) is above 0), so only delete-first replacements run.
    type: bool
    default: false
  report_pdbs:
    description:
      - Also list the PodDisruptionBudgets that allow no disruption now (one more LIST call), in
        RV(blocking_pdbs). They will block the drain of any node that runs their pods.
    type: bool
    default: false
  report_system_pods:
    description:
      - Also list the pods of C(kube-system) that are not Running and Ready (one more LIST call, of that namespace
        only), in RV(unready_system_pods). Finished pods (C(Succeeded) or C(Failed), such as a Job's pod or an
        evicted pod) and pods being deleted are left out. The rolling_upgrade role's preflight refuses to start while
        there are any, unless told otherwise.
    type: bool
    default: false
  report_quota:
    description:
      - Also read how many more instances the clouds allow for the scaling groups that still have nodes to
        replace, and compare it with the surge the plan wants, in RV(quota).
      - GCP reads the quotas of each group's region (C(INSTANCES), C(CPUS) or the machine family's CPU metric
        such as C(N2_CPUS)) against the template's machine type; Azure the compute usage of each scale set's
        location (C(cores), the VM family's cores, C(virtualMachines)) against the VM size; AWS each group's
        C(MaxSize) against its desired capacity, and the EC2 quota C(L-1216C47A) (running on-demand Standard
        instances, in vCPUs, through Service Quotas) against the vCPUs of the running on-demand instances.
      - A quota the credentials may not read is listed in C(unknown) of RV(quota) with the reason; it never fails
        the module.
    type: bool
    default: false
extends_documentation_fragment:
  - kubenodes.image_upgrade.kube_auth
  - kubenodes.image_upgrade.journal_record
  - kubenodes.image_upgrade.cloud_provider
  - kubenodes.image_upgrade.gcp
  - kubenodes.image_upgrade.azure
  - kubenodes.image_upgrade.aws
attributes:
  check_mode:
    support: full
    description:
      - The module only reads; it runs the same in check mode.
  diff_mode:
    support: none
    description:
      - Nothing changes, so there is no difference to show.
requirements:
  - kubernetes (the Python client)
  - the SDK of the chosen cloud
notes:
  - O(report_quota) needs read access to quotas - GCP C(compute.regions.get) and C(compute.machineTypes.get);
    Azure C(Microsoft.Compute/locations/usages/read) and C(Microsoft.Compute/skus/read); AWS
    C(servicequotas:GetServiceQuota) and C(ec2:DescribeInstanceTypes).
  - A node already on the image that carries no cached annotations yet, in a scaling group that still has
    outdated nodes, is taken for a new node and paired with one of them, which it then replaces; such a group
    ends the upgrade with as many nodes as it had, not one more per such node.
  - Cost per call - one LIST of Nodes, one listing of scaling groups, one listing of instances per scaling
    group and one image lookup, independent of the number of nodes.
seealso:
  - module: kubenodes.image_upgrade.node_pair
  - module: kubenodes.image_upgrade.csp_node
"""

EXAMPLES = r"""
- name: Where does the upgrade stand?
  kubenodes.image_upgrade.node_image_facts:
    image: projects/my-project/global/images/node-v2
    provider: gcp
    gcp:
      project: my-project
    max_surge: 25%
  register: upgrade

- name: Create the heirs the plan asks for
  kubenodes.image_upgrade.csp_node:
    provider: gcp
    gcp:
      project: my-project
    group: "{{ item.group }}"
    count: "{{ item.count }}"
  loop: "{{ upgrade.plan.create }}"

- name: Report progress
  ansible.builtin.debug:
    msg: "{{ upgrade.progress.percent }}% done, ETA {{ upgrade.eta.finish | default('unknown') }}"
"""

RETURN = r"""
target_image:
  description: The image compared against (the provider's canonical form of O(image)).
  returned: always
  type: str
  sample: projects/my-project/global/images/node-v2
annotation_prefix:
  description: The annotation prefix used.
  returned: always
  type: str
  sample: image-upgrade.kubenodes.io
nodes:
  description:
    - Node names per group; every node is in exactly one. Pairs and repairs the plan makes are not applied yet,
      except that nodes whose pair is broken already show where they go; a joined node being paired by this plan
      is in C(new).
  returned: always
  type: dict
  contains:
    outdated:
      description: Nodes on another image, not paired yet.
      type: list
      elements: str
    up_to_date:
      description: Nodes on the image with nothing left to do.
      type: list
      elements: str
    donor:
      description: Old nodes paired with a heir that replaces them.
      type: list
      elements: str
    heir:
      description: New nodes paired with the donor they replace.
      type: list
      elements: str
    new:
      description: Joined new nodes not paired yet (this plan pairs them, or marks them obsolete).
      type: list
      elements: str
    obsolete:
      description: Surplus new nodes to remove.
      type: list
      elements: str
    invalid:
      description:
        - Nodes the upgrade cannot handle, each with C(name), C(reason) and C(out_of_scope) (true when the node is
          left alone only because O(scaling_groups) leaves its group out).
      type: list
      elements: dict
  sample: {outdated: [w-1], up_to_date: [], donor: [w-0], heir: [w-5], new: [], obsolete: [], invalid: []}
joining:
  description: Instances without a Node yet that are within their join deadline; they count as in flight.
  returned: always
  type: list
  elements: dict
  sample: [{provider_id: "gce://my-project/us-central1-a/w-7", node_name: w-7, group: g, state: creating, deadline: "2026-11-30T04:00:00Z"}]
leaving_instances:
  description: Instances without a Node that the cloud is deleting already.
  returned: always
  type: list
  elements: dict
  sample: []
scaling_groups:
  description:
    - Per scaling group - its role, image, node counts per group, joining instances, surge limit, extra nodes in
      flight and instances to create now.
    - C(kind) is what the cloud calls the group (V(GCE managed instance group (zonal\)), V(GCE managed instance
      group (regional\)), V(Azure VM scale set (Uniform orchestration\)), V(Azure VM scale set (Flexible
      orchestration\)), V(AWS auto scaling group)); null without a cloud read.
    - C(leaving) counts instances whose deletion was requested and that the cloud still lists; they count in
      C(in_flight) until the cloud no longer lists them. C(held) names nodes this collection created as heirs
      that are left alone for a problem; they keep their place in C(in_flight).
    - C(unclaimed), only when there are such - instances a kill left unrecorded that cannot be told apart from
      instances the cloud made by itself in the same moment; C(count) of those in C(among) (providerIDs) are this
      upgrade's. None becomes a heir; they keep C(count) places in C(in_flight).
    - With O(max_unavailable) above 0, a worker group also has C(start_count), C(unavailable_limit),
      C(unavailable_in_use) (nodes missing or leaving against the start, with this plan's marks), C(ready_serving)
      and C(delete_first) (the names of the nodes being removed delete-first).
  returned: always
  type: list
  elements: dict
  sample: [{id: g, name: g, kind: AWS auto scaling group, role: worker, image: img, image_current: true, listed: true, nodes: 3, outdated: 1,
            up_to_date: 1, donor: 1, heir: 1, new: 0, obsolete: 0, joining: 0, leaving: 0, held: [], surge_limit: 1,
            in_flight: 1, to_create: 0}]
budget:
  description:
    - The surge settings, the extra nodes in flight, how many instances the plan creates, and whether workers
      wait for the control plane.
    - C(max_unavailable) and C(no_surge) are the options; C(unavailable) sums the groups' C(unavailable_in_use).
  returned: always
  type: dict
  sample: {max_surge: 1, max_surge_total: null, in_flight: 1, to_create: 0, control_plane_first: false,
           max_unavailable: 0, no_surge: false, unavailable: 0}
plan:
  description: What the next pass does, as data the other modules take directly.
  returned: always
  type: dict
  contains:
    annotate:
      description: Cached annotations to write (C(name), C(annotations)), done by node_pair.
      type: list
      elements: dict
    repairs:
      description:
        - Pair repairs (C(name), C(action) one of complete, unpair, promote, clear, swap), done by node_pair. An
          C(unpair) of a heir says why in C(reason) when its instance is not running or this upgrade did not create
          it. A C(swap) gives heir C(name) to C(donor) instead of C(instead_of), whose etcd removal the unhealthy
          member of C(donor) would block (C(reason)).
      type: list
      elements: dict
    pairs:
      description:
        - New pairs (C(heir), C(donor), C(group)), written by node_pair, with C(reason), why that donor was chosen
          (it is not Ready, its etcd member is unhealthy, or it is the oldest outdated node of its group).
      type: list
      elements: dict
    obsolete:
      description: Surplus new nodes node_pair marks obsolete.
      type: list
      elements: str
    label_copies:
      description: Labels (and taints) node_pair copies from C(donor) to C(heir).
      type: list
      elements: dict
    set_group_image:
      description: Scaling groups (C(group), C(image)) whose new instances do not use the image yet.
      type: list
      elements: dict
    create:
      description: Instances to create now (C(group), C(count), C(role)), for csp_node with C(state=present).
      type: list
      elements: dict
    create_blocked:
      description: Groups that need heirs but get none now (C(group), C(reason), C(outdated)).
      type: list
      elements: dict
    drain:
      description:
        - Nodes to drain now (C(name), C(reason) donor or obsolete, C(heir), C(heir_ready)), for node_drain.
        - Each also carries what follows the drain (C(control_plane), C(node_ip), C(provider_id), C(group)), so a
          drain that finishes at once can go on to etcd_member_remove and the deletion in the same pass.
      type: list
      elements: dict
    waiting_for_heir:
      description:
        - Donors whose heir is not Ready yet, or whose pair is written in this pass. C(overdue) is true when the
          heir has not been Ready for longer than O(join_timeout) since the pairing.
      type: list
      elements: dict
    exclude_from_lb:
      description: Leaving nodes to label out of the load balancers (with the moment) once their heir is Ready and by
        their drain at the latest, or, when drained without it, before their deletion (O(lb_drain_seconds)).
      type: list
      elements: str
    waiting_for_lb:
      description: Drained nodes out of the load balancers for less than O(lb_drain_seconds) (C(name), C(since),
        C(until)); their etcd member and their instance stay until C(until).
      type: list
      elements: dict
    etcd_remove:
      description: Drained control-plane nodes whose etcd member goes next (C(name), C(node_ip)), for
        etcd_member_remove, with C(provider_id) and C(group) for the deletion that follows.
      type: list
      elements: dict
    delete_nodes:
      description: Nodes to delete in the cloud (by C(provider_id)) and in Kubernetes (by C(name)).
      type: list
      elements: dict
    delete_instances:
      description: Instances without a Node to delete (C(provider_id), C(group), C(reason)) - failed joins,
        joins past the deadline and orphans of an interrupted run.
      type: list
      elements: dict
    uncordon:
      description: Outdated nodes this collection drained whose pair broke; uncordon them.
      type: list
      elements: str
    lb_release:
      description: Outdated nodes this collection labelled out of the load balancers whose pair broke before their
        drain; take the label off.
      type: list
      elements: str
    surplus:
      description:
        - Nodes the journal (O(journal)) records as created by this upgrade that no donor needs, each with
          C(name), C(provider_id), C(group), C(created), C(nodes) (the group's nodes now), C(start_count) and
          C(action) - V(obsolete) (marked for removal, listed in RV(plan.obsolete)) or V(kept) - with the C(reason).
      type: list
      elements: dict
    delete_first:
      description:
        - Outdated workers marked now for removal before their heir exists (O(max_unavailable)), each with
          C(name), C(group) and C(provider_id). They are also in RV(plan.obsolete); the next pass drains them.
      type: list
      elements: dict
    record_start_counts:
      description:
        - Group node counts to record in the journal as the start (C(start_counts)) before the marks in
          RV(plan.delete_first) are written, when the journal records none yet.
      type: dict
    record_removed_first:
      description:
        - The copyable labels (and, with O(copy_taints), taints) of the workers in RV(plan.delete_first), per name
          (C(group), C(labels), C(taints)), to record in the journal (C(removed_first)) before they are marked;
          the refill that replaces such a worker gets them.
      type: dict
    record_refills:
      description:
        - Which worker removed delete-first each node in RV(plan.refilled) replaces, to record in the journal
          (C(refills)) before its labels are copied.
      type: dict
    record_created:
      description:
        - Instances a create intent of this upgrade accounts for whose record a killed run never wrote
          (C(create_intents) in the journal), by providerID (C(group), C(created), C(intent)); the step engine records
          them in the journal's C(instances_created).
      type: dict
    record_intents:
      description:
        - What the plan found of open create intents, to record in the journal's C(create_intents) and keep from
          then on - C(grown), how many instances the group grew by for the intent, and, where the intent's window
          holds more instances than it accounts for, C(unclaimed) (C(open), C(recorded), C(among)).
      type: dict
    refilled:
      description:
        - Nodes this upgrade created to refill a group after a delete-first removal that found no outdated node
          to pair with; they get the labels of the worker they replace (C(replaces)) and are recorded as replaced
          (C(name), C(group), C(created), C(replaces)).
      type: list
      elements: dict
  sample:
    annotate: []
    repairs: []
    pairs: [{heir: w-5, donor: w-1, group: g}]
    obsolete: []
    label_copies: [{heir: w-5, donor: w-1, labels: {team: a}, taints: []}]
    set_group_image: []
    create: [{group: g, count: 1, role: worker}]
    create_blocked: []
    drain: [{name: w-0, reason: donor, heir: w-4, heir_ready: true}]
    waiting_for_heir: []
    exclude_from_lb: []
    waiting_for_lb: []
    etcd_remove: []
    delete_nodes: []
    delete_instances: []
    uncordon: []
    lb_release: []
    delete_first: []
    record_start_counts: {}
    record_removed_first: {}
    record_refills: {}
    record_created: {}
    record_intents: {}
    refilled: []
foreign:
  description:
    - Nodes on the target image, in a group that still has outdated nodes, that the journal (O(journal)) does not
      record as created by this upgrade (C(name), C(group), C(provider_id)). They are capacity and never become heirs,
      surplus or donors. Empty without O(journal), where the older rule applies (a fresh node may become a heir).
  returned: always
  type: list
  elements: dict
  sample:
    - name: workers-0-pz96
      group: projects/my-project/zones/us-central1-a/instanceGroupManagers/workers-0
      provider_id: gce://my-project/us-central1-a/workers-0-pz96
progress:
  description: Replacements in total, done, in flight (donors) and remaining, and the percentage done.
  returned: always
  type: dict
  sample: {total: 10, done: 4, in_flight: 2, remaining: 6, percent: 40.0}
eta:
  description:
    - Estimated seconds to finish and finishing time, from the throughput of the replacements of this image
      completed so far (C(samples)); null values until two have completed.
  returned: always
  type: dict
  sample: {samples: 4, seconds: 1800, finish: "2026-11-30T05:00:00Z", mean_replacement_seconds: 620.5}
done:
  description:
    - Every node runs the image, every scaling group uses it, and nothing is left to pair, drain, delete or
      clean up. Invalid nodes do not count; they are listed in RV(nodes.invalid) and in a warning.
  returned: always
  type: bool
  sample: false
problems:
  description:
    - What the cross-checks found inconsistent between the cluster and the cloud, each with C(node), C(step)
      (the destructive step it would have been, or null), a stable C(code), a C(message) that starts with
      C(node <name>) and a colon, and C(action) - V(left alone) (the node, and its partner, are in RV(nodes.invalid) and
      nothing is done to them), V(corrected) (a cached annotation disagreed with the cloud; the cloud wins) or
      V(kept) (code C(unproven_surplus) - a settled group holds more nodes than at the start and the journal records
      none of the extra ones as created by this upgrade, as after a run killed between creating a heir and
      recording it; the newest unrecorded nodes, as many as the excess, are named and kept, never removed).
  returned: always
  type: list
  elements: dict
  sample: [{node: w-1, step: null, code: garbage_heir, action: left alone,
            message: "node w-1: heir annotation holds 'garbage!!', which is not a node name"}]
stop:
  description: Null, or why the upgrade cannot go on by itself (nodes left alone hold a scaling group's whole
    surge budget); the role stops with this message.
  returned: always
  type: str
  sample: null
donors:
  description:
    - Every donor with where its replacement stands - C(name), C(heir), C(heir_ready), C(group), C(role)
      (control-plane or worker), C(phase) and C(phase_since) (RFC 3339), and the heir's journey (RFC 3339, or
      null when not known) - C(heir_created) (when the cloud created its instance, where the cloud read says),
      C(heir_joined) (when its Node registered) and C(heir_ready_since).
  returned: always
  type: list
  elements: dict
donors_gone:
  description:
    - Donors whose Node is gone while their heir still names them (the heir is promoted to C(replaced) in this
      plan), each with C(name), C(heir), C(group), C(role) and C(paired_at) (the heir's started-at, or null).
      The journal records them as replaced, so a run killed after deleting a donor and before recording it
      still reports that replacement.
  returned: always
  type: list
  elements: dict
not_ready:
  description: Names of the nodes whose Ready condition is not true.
  returned: always
  type: list
  elements: str
control_plane_endpoints:
  description:
    - C(https://<InternalIP>:2379) of every control-plane node, Ready ones first, where a stacked etcd member
      listens; the endpoints M(kubenodes.image_upgrade.etcd_member_remove) can use.
  returned: always
  type: list
  elements: str
replacement_order:
  description:
    - The nodes still to replace in the order the plan replaces them (control plane first), each with
      C(name), C(group), C(role) and C(in_flight) (already paired).
  returned: always
  type: list
  elements: dict
blocking_pdbs:
  description:
    - With O(report_pdbs), the PodDisruptionBudgets that allow no disruption now, each with C(namespace),
      C(name), C(min_available), C(max_unavailable), C(current_healthy), C(desired_healthy) and C(expected_pods).
      Empty otherwise.
  returned: always
  type: list
  elements: dict
unready_system_pods:
  description:
    - With O(report_system_pods), the pods of C(kube-system) that are not Running and Ready, by name, each with
      C(namespace), C(name), C(node) (null while not scheduled), C(phase), C(why) (the pod's reason, the first
      container that waits, ended or is not ready and why, or why it is not scheduled) and a C(description) for
      people. Empty otherwise.
  returned: always
  type: list
  elements: dict
  sample:
    - namespace: kube-system
      name: coredns-5d78c9869d-x7k2p
      node: worker-1
      phase: Running
      why: container coredns CrashLoopBackOff
      description: "kube-system/coredns-5d78c9869d-x7k2p on worker-1 (Running: container coredns CrashLoopBackOff)"
searched:
  description:
    - Where the scaling groups were looked for, in the words of the options that set it (the GCP project, the Azure
      subscription and resource group, the AWS region); empty without O(provider). A node whose instance is in none of
      the groups found may run in another.
  returned: always
  type: str
  sample: AWS region eu-west-1 (aws.region or AWS_REGION)
quota:
  description:
    - With O(report_quota), what the cloud quota means for the surge; null otherwise.
    - C(status) is V(ok) (the quota allows the surge, or nothing is left to replace), V(lower) (fewer new
      instances fit than the surge wants, but at least one), V(none) (not one new instance fits where one is
      needed) or V(unknown) (the limits read allow the surge, but some could not be read).
    - C(surge_wanted) is the most replacements the surge budget keeps in flight at once for the nodes left
      (O(max_surge) per group, O(max_surge_total), the control plane alone and one at a time); C(surge_allowed)
      the most the quota lets be in flight at once (instances in flight now already count in the usage).
    - C(limits) has every limit read, each with C(name), C(scope), C(known), C(unit) (instances or vCPUs),
      C(limit), C(usage), C(groups) it constrains, C(units_per_instance) and C(headroom) (new instances of
      each group that fit) per group, C(reason) when unknown, and a C(description) for people. C(limiting)
      lists the limits that cut the surge, C(unknown) the limits that could not be read, C(phases) the wanted
      and allowed surge of the control-plane and worker phases.
  returned: always
  type: dict
  sample:
    status: lower
    surge_wanted: 2
    surge_allowed: 1
    phases: [{name: workers, wanted: 2, allowed: 1}]
    limiting: [{name: INSTANCES, scope: "region us-central1 (project p)", known: true, unit: instances, limit: 24,
                usage: 23, groups: [g], units_per_instance: {g: 1}, headroom: {g: 1}, reason: null,
                description: "INSTANCES of region us-central1 (project p): limit 24, usage 23 instances
                (room for 1 new instance(s))"}]
    unknown: []
    limits: []
"""

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import image_facts
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils.base import KubenodesModule


def main():
    # The options and work are image_facts.py's: the upgrade_step action runs them too.
    module = KubenodesModule(argument_spec=image_facts.argument_spec(), supports_check_mode=True)
    module.require("kubernetes")
    module.exit_json(**image_facts.facts(module))


if __name__ == "__main__":
    main()
