#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)

# The action plugin plugins/action/upgrade_step.py does the work in the controller process; this file
# holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
module: upgrade_step
short_description: Run the image upgrade for one bounded slice, in the controller process
version_added: 1.0.0
description:
  - Reads the nodes and the clouds, plans (as M(kubenodes.image_upgrade.node_image_facts) does) and carries
    the plan out in the safe order, pass after pass, for at most O(slice_seconds) - point the scaling groups at
    the image, cache annotations and pair new nodes with donors, copy labels, create heirs within the surge
    budget, uncordon nodes whose pair broke, drain donors whose heir is Ready, remove the etcd members of
    drained control-plane donors, delete the replaced instances and Node objects, and clean up instances that
    never joined, failed or were orphaned.
  - It returns when the upgrade is done, when a delegated etcd removal or read is due (RV(etcd_due),
    RV(etcd_health_due)), when a health gate's tasks file is due (RV(gate_tasks_due)), or after
    O(slice_seconds). A finished replacement is written to the journal at once, and the slice goes on. Repeat it
    with C(until) on RV(done); every retry of the task runs in the same worker process and keeps its clients and
    imported SDKs.
  - After a pass that changed something it looks again at once. While everything waits (a heir joining, a
    PodDisruptionBudget, a deletion) it watches the Nodes, and the next pass begins as soon as one changes in
    what the plan reads (a heir registered or Ready, a cordon, a label or annotation), at the moment a heir's
    O(heir_ready_seconds) run out, every 0.5 s while evicted pods are still terminating, and at the latest
    after O(poll_interval) seconds (the cloud's side has no watch). Where the watch is refused, it polls.
  - Prints one progress line per pass while it runs.
  - A stop from outside is obeyed at a safe point - between two passes, or while it only waits - within seconds
    - SIGINT (Ctrl-C), SIGTERM or SIGHUP to ansible-playbook (which passes them on to this task's worker) or to the
    worker, and the death of ansible-playbook (a SIGKILL of its process group, as ansible-runner does when AWX
    cancels a job; Linux tells the worker at once, elsewhere it sees it at the next pass). The run then ends as a
    failed one does (see O(abort)), with its attempt recorded as V(stopped) and the cause, and fails with
    RV(stopped); a second SIGINT to the worker ends it at once. When ansible-playbook is gone the worker
    exits after that, as nobody is left to take its result.
  - An action plugin; it runs on the controller and ignores C(delegate_to). The modules it replaces in a
    pass stay available for playbooks that compose the steps themselves.
author:
  - kubenodes.image_upgrade maintainers (!UNKNOWN)
options:
  image:
    description:
      - The image every node should run, in the cloud's format.
    type: str
    required: true
  image_resolved:
    description:
      - V(true) when O(image) is already the exact image the cloud names (as M(kubenodes.image_upgrade.csp_scaling_group)
        in check mode or M(kubenodes.image_upgrade.node_image_facts) returns it) and known to exist; the step then
        does not validate it with the cloud again. The rolling_upgrade role sets it once the first call (O(start)) resolved it.
      - V(false) validates O(image) first and uses its canonical form (an image family names its newest image).
    type: bool
    default: false
  annotation_prefix:
    description:
      - Prefix of the node annotations that hold the upgrade state.
    type: str
    default: image-upgrade.kubenodes.io
  max_surge:
    description:
      - Extra nodes in flight per worker scaling group, an integer or a percentage such as V(25%).
    type: raw
    default: 1
  max_surge_total:
    description:
      - Optional cap on the extra nodes in flight in the whole cluster.
    type: int
  join_timeout:
    description:
      - Seconds a new instance may take to register its Node before it is deleted.
    type: int
    default: 1800
  heir_ready_seconds:
    description:
      - Seconds a heir must have been Ready before its donor is drained.
    type: int
    default: 0
  canary:
    description:
      - A worker group whose surge limit is above 1 first replaces one node alone, and goes to its full surge only
        once that replacement is done (its donor gone, so a health gate, when one is set, ran after it) and its heir
        has been Ready for O(canary_soak_seconds). At a surge of 1 every replacement goes alone anyway.
      - The role's default is V(true) (C(rolling_upgrade_canary)).
    type: bool
    default: false
  canary_soak_seconds:
    description:
      - How long the canary's heir must have been Ready (the role passes C(rolling_upgrade_soak_seconds)).
    type: int
    default: 0
  lb_drain_seconds:
    description:
      - Seconds a leaving node carries the label C(node.kubernetes.io/exclude-from-external-load-balancers) before
        its etcd member and its instance go, so connections the clouds' load balancers still hold to it can finish.
        The label and the moment it was set (annotation C(<annotation_prefix>/lb-excluded-since)) are written before
        its drain cordons it, so the wait runs during the drain and a resumed run does not wait again from zero.
      - V(0) sets no label and holds nothing. The role's default is V(300), the AWS ELB deregistration delay.
    type: int
    default: 0
  taint_to_be_replaced:
    description:
      - Put the C(PreferNoSchedule) taint C(<annotation_prefix>/to-be-replaced) on every node this run will replace,
        from its first pass, so a pod evicted from one donor is placed on a node that stays rather than on another
        outdated node that would evict it again. It comes off every node that stays (no longer to be replaced, and
        every node when the run finishes, fails or is stopped; a later run takes off what a killed one left). Each
        change is recorded in the journal (C(replacing_taints)).
      - V(false) sets none and takes off any the collection left.
    type: bool
    default: true
  max_unavailable:
    description:
      - Worker nodes a scaling group may lack while they are replaced delete-first (drained and deleted before
        their heir is created), an integer or a percentage such as V(25%); V(0) never does so. See
        M(kubenodes.image_upgrade.node_image_facts). A O(surge_cap) of V(0) then means no surge heir at all.
    type: raw
    default: 0
  scaling_groups:
    description:
      - Only these scaling group IDs; all the groups the provider discovers when empty.
    type: list
    elements: str
    default: []
  cloud_settings:
    description:
      - What the run does with the settings with which a cloud acts on a scaling group by itself (docs/cloud-settings.md).
      - V(neutralise) - before its first change to a group, set each such setting of the group to what the run needs
        (a regional MIG's updatePolicy.instanceRedistributionType to V(NONE), a MIG's autoscaler's
        autoscalingPolicy.mode to V(OFF), an Azure scale set's autoscale setting's enabled, overprovision and
        automaticRepairsPolicy.enabled to V(false), an ASG's
        C(AZRebalance), C(AlarmNotification), C(ScheduledActions) and C(ReplaceUnhealthy) processes suspended and
        its C(MinSize) lowered as far as delete-first needs, a scale set's upgradePolicy.mode V(Automatic) to
        V(Manual)), recording the values found in the journal first; put them back when the
        upgrade is done (O(finish)), when it stops (O(abort)), or at the end of the run after a killed one. A setting
        that cannot be changed safely (upgradePolicy.mode V(Rolling)), or whose state cannot be read (autoscale settings
        without the permission to read them), stops the run before anything changes.
      - V(leave) - change none of them; each one that would act is named in a warning once per run.
    type: str
    choices: [neutralise, leave]
    default: neutralise
  allow_unreadable_autoscale:
    description:
      - Go on when the identity may not read an Azure scale set's autoscale settings
        (C(Microsoft.Insights/autoscalesettings/read) answered 403) instead of stopping before anything changes. Each
        such scale set is named in a warning once per run and in the report (C(cloud_settings_unread)); an enabled
        autoscale setting on it can then change its capacity during the run, deleting VMs without a drain.
    type: bool
    default: false
  exclude_labels:
    description:
      - Label (and taint) keys never copied from donor to heir.
    type: list
    elements: str
    default: []
  copy_taints:
    description:
      - Also copy the donor's taints to its heir.
    type: bool
    default: false
  drain:
    description:
      - How donors are drained, as the like-named options of M(kubenodes.image_upgrade.node_drain).
        Each pass runs one eviction round per donor (node_drain with C(wait=false)).
    type: dict
    default: {}
    suboptions:
      ignore_daemonsets:
        description: Leave DaemonSet pods on the node.
        type: bool
        default: true
      delete_emptydir_data:
        description: Evict pods with emptyDir volumes (their data is lost).
        type: bool
        default: false
      force:
        description: Also delete pods that no controller manages.
        type: bool
        default: false
      terminate_grace_period:
        description: Grace period for evicted pods, in seconds; the pod's own when unset.
        type: int
      eviction_concurrency:
        description: Evictions sent at once.
        type: int
        default: 10
      wait_timeout:
        description: Seconds a drain may take from when it began (or from O(drain.not_before)).
        type: int
        default: 600
      on_timeout:
        description: What to do with a drain past its timeout.
        type: str
        choices: [fail, force, continue]
        default: fail
      not_before:
        description: RFC 3339 UTC time; a drain that began earlier gets its full timeout from then.
        type: str
      policies:
        description:
          - The drain ladder, as M(kubenodes.image_upgrade.node_drain)'s O(kubenodes.image_upgrade.node_drain#module:policies)
            (rules with name, namespaces, match_labels, delete_after, force_after). Checked before anything changes.
        type: list
        elements: dict
        default: []
  etcd:
    description:
      - How the etcd member of a drained control-plane donor is removed.
    type: dict
    default: {}
    suboptions:
      delegated:
        description:
          - V(true) when etcd is reached through a control-plane host. The step then removes no member itself; it
            returns the removals due in RV(etcd_due) for a delegated M(kubenodes.image_upgrade.etcd_member_remove)
            task, and the next call deletes the node once its phase says C(etcd-removed).
          - V(false) removes the member from the controller, with the checks of M(kubenodes.image_upgrade.etcd_member_remove).
        type: bool
        default: false
      endpoints:
        description: etcd client URLs; the control-plane nodes' C(https://<InternalIP>:2379) when empty.
        type: list
        elements: str
        default: []
      ca_cert:
        description: CA certificate file of the etcd server certificates.
        type: path
        default: /etc/kubernetes/pki/etcd/ca.crt
      client_cert:
        description: Client certificate file signed by the etcd CA.
        type: path
        default: /etc/kubernetes/pki/etcd/healthcheck-client.crt
      client_key:
        description: Key of O(etcd.client_cert).
        type: path
        default: /etc/kubernetes/pki/etcd/healthcheck-client.key
      request_timeout:
        description: Seconds for one etcd request.
        type: float
        default: 5
      timeout:
        description: Seconds one removal may take, checks and leader move included.
        type: int
        default: 60
      health:
        description:
          - With O(etcd.delegated), the control plane's etcd as a delegated M(kubenodes.image_upgrade.etcd_member_info)
            task read it, after a call that returned RV(etcd_health_due). No control-plane heir is created without a
            read at most 30 seconds old, nor while the read names a problem.
        type: dict
        suboptions:
          problems:
            description: The read's RV(kubenodes.image_upgrade.etcd_member_info#module:member_problems); empty when etcd is healthy.
            type: list
            elements: dict
            default: []
          read_at:
            description: When it was read, in seconds since the epoch; V(0) is never.
            type: float
            default: 0
          healthy:
            description:
              - The read's RV(kubenodes.image_upgrade.etcd_member_info#module:healthy), made with the
                C(expected_member_count) of RV(etcd_read). The preflight of a call with O(start) judges it; without it,
                that call returns RV(etcd_health_due) and RV(etcd_read) and begins nothing.
            type: bool
          messages:
            description: The read's RV(kubenodes.image_upgrade.etcd_member_info#module:problems), named when the preflight refuses.
            type: list
            elements: str
            default: []
  lock:
    description:
      - The run lock to renew once per slice (M(kubenodes.image_upgrade.upgrade_lock)). Not renewed when unset.
      - With O(start), the lock the first call takes.
    type: dict
    suboptions:
      holder:
        description:
          - The holder that took the lock. Required unless O(start) takes the lock; then the holder to take it as
            (C(rolling_upgrade_run_id)), or when unset the host, process and start time of the playbook, as
            M(kubenodes.image_upgrade.upgrade_lock) chooses it.
        type: str
      name:
        description: Name of the Lease.
        type: str
        default: kubenodes-image-upgrade
      namespace:
        description: Namespace of the Lease.
        type: str
        default: kube-system
      lease_duration:
        description: Seconds the lease lasts after each renewal.
        type: int
        default: 600
  journal:
    description:
      - The journal ConfigMap (M(kubenodes.image_upgrade.upgrade_journal)) that gets what each pass saw, once
        per slice. Not written when unset.
    type: dict
    suboptions:
      name:
        description: Name of the ConfigMap.
        type: str
        default: kubenodes-image-upgrade-journal
      namespace:
        description: Namespace of the ConfigMap.
        type: str
        default: kube-system
      run:
        description: When the run started (RFC 3339); identifies the run's drain attempts in the journal.
        type: str
      events:
        description:
          - Write Kubernetes Events on the Nodes with the journal (M(kubenodes.image_upgrade.upgrade_journal)
            O(kubenodes.image_upgrade.upgrade_journal#module:events)).
        type: bool
        default: true
  timeout:
    description:
      - Seconds the whole upgrade may take from O(started); past that the step fails with the progress line.
    type: int
  started:
    description:
      - When the run started, in epoch seconds.
    type: float
  slice_seconds:
    description:
      - The longest a call runs, 1 to 60 seconds.
    type: int
    default: 60
  poll_interval:
    description:
      - Seconds between looks while everything waits.
    type: float
    default: 2
  cloud_calls_per_minute:
    description:
      - At most this many cloud API requests a minute (a token bucket that holds 10 seconds of them). Unset, the
        cloud's default, a quarter of its documented default limit (gcp 375, azure 375, aws 300; docs/api-limits.md).
      - A throttling answer slows the calls down and is tried again until O(started) plus O(timeout), never failing
        the run before that.
    type: int
  passes:
    description:
      - Passes of this run so far (after a delegated etcd removal), so pass numbers go on.
    type: int
    default: 0
  surge_cap:
    description:
      - At most this many replacements in flight, because the cloud refused instances earlier in this run
        (RV(surge_cap) of the previous call).
    type: int
  gate_after:
    description:
      - V(batch) or V(replacement) - a health gate follows each finished batch or each finished replacement; with
        V(batch), no heir is created from the first finished replacement until the batch in flight finished and its
        gate passed. The call runs the gate itself - recorded as due in the journal first (a run stopped there runs it
        first when resumed), then the checks of M(kubenodes.image_upgrade.cluster_health_gate) with O(gate) against
        the workloads running before the batch (recorded in the journal before the first batch). A failed check fails
        the call, naming it, and is recorded as failed. With O(gate.tasks_file) the call then returns
        RV(gate_tasks_due); the caller runs the tasks file and gives that back in O(gate_ran).
      - V(none), no gate.
    type: str
    choices: [none, batch, replacement]
    default: none
  gate:
    description: The health gate's options, as M(kubenodes.image_upgrade.cluster_health_gate) takes them.
    type: dict
    default: {}
    suboptions:
      soak_seconds:
        description: Seconds since the last node turned Ready before the gate opens.
        type: int
        default: 0
      timeout:
        description: Seconds the gate waits for its checks before it fails.
        type: int
        default: 600
      namespaces:
        description: Namespaces whose pods must all be Ready.
        type: list
        elements: str
        default: [kube-system]
      poll_interval:
        description: Seconds between looks while a check fails.
        type: float
        default: 5
      tasks_file:
        description: Your tasks file, run by the caller after the built-in checks passed (RV(gate_tasks_due)).
        type: str
        default: ""
      looks:
        description: Passing looks in a row before the gate opens.
        type: int
        default: 2
      look_interval:
        description: Seconds between those looks.
        type: int
        default: 10
  gate_ran:
    description:
      - The gate a previous call returned in RV(gate_tasks_due), once the caller ran O(gate.tasks_file) - recorded as
        passed (with the tasks' time), and the next batch goes on. With O(abort), the gate whose tasks file failed,
        recorded as failed with the cause.
    type: dict
  reference:
    description: The image as the user gave it (C(rolling_upgrade_image)), for the job's artifacts.
    type: str
  start:
    description:
      - Before the first slice of this process, begin the upgrade with the modules' own code, in this process -
        resolve O(start.image) and the journal's
        target (M(kubenodes.image_upgrade.csp_scaling_group) and M(kubenodes.image_upgrade.upgrade_journal) in check
        mode), read the nodes and the clouds (M(kubenodes.image_upgrade.node_image_facts), O(start.preflight)),
        judge that read (the cloud quota, nodes outside every known group, nodes not Ready, pods of C(kube-system)
        not Ready, PodDisruptionBudgets that allow no disruption), read the control-plane etcd when a control-plane node is to be replaced
        (M(kubenodes.image_upgrade.etcd_member_info), looking again every 5 s up to 24 times while a member may be
        joining), then take the run lock O(lock), looking again every 10 s for up to O(start.lock_wait) seconds
        while another live run holds it.
      - The upgrade then goes on with the exact image resolved, the surge cap the quota allows, the lock's holder and
        the start time; RV(start) says what was done. A refusal or a lock held too long fails the call before
        anything is changed.
      - The rolling_upgrade role sets it on its first call, so that the cloud's SDK is imported once and the first heirs
        are created in the same worker process. In check mode no lock is taken. With O(etcd.delegated) the call first
        returns RV(etcd_read) and begins nothing until it is given that read.
        O(image), O(image_resolved), O(started), O(journal.run), O(drain.not_before) and O(begin.record) are then
        filled in by it.
    type: dict
    suboptions:
      image:
        description: The image reference to resolve, as the run was given it (C(rolling_upgrade_image)); an image
          family names its newest image.
        type: str
        required: true
      new_target:
        description: Whether this image may replace the target of an unfinished upgrade
          (M(kubenodes.image_upgrade.upgrade_journal)'s O(kubenodes.image_upgrade.upgrade_journal#module:new_target)).
        type: bool
        default: false
      preflight:
        description:
          - Whether to read the nodes and the clouds (M(kubenodes.image_upgrade.node_image_facts) with this call's
            planner options, the PodDisruptionBudgets and the pods of C(kube-system)) and judge that read before the
            lock. V(false) reads and judges nothing.
        type: bool
        default: true
      quota_preflight:
        description: Whether the preflight's read also reads the cloud quota for the surge.
        type: bool
        default: true
      etcd_preflight:
        description: Whether to read the control-plane etcd (with O(etcd)'s certificates and endpoints) before a
          control-plane node is replaced.
        type: bool
        default: true
      allow_unready_system_pods:
        description:
          - Whether to begin while pods of C(kube-system) are not Ready (the read's C(unready_system_pods), with
            read with O(start.preflight)), with a warning naming them. V(false) refuses, changing
            nothing, naming each pod (at most 10, then how many more), as long as no replacement is in flight.
        type: bool
        default: false
      lock_wait:
        description: Seconds to wait for another live run's lock.
        type: int
        default: 600
  begin:
    description:
      - Before the first slice of this process (once, not on every retry), start the journal and pause the
        cluster-autoscaler, with the code of M(kubenodes.image_upgrade.upgrade_journal) (O(journal), this record,
        O(begin.image) as its C(image) and O(image) as its C(target_image)) and of
        M(kubenodes.image_upgrade.autoscaler_pause) (C(state=paused)), in this process; with O(gate_after), record the
        workloads running now as the first gate's baseline. The rolling_upgrade role sets it on its first calls.
      - Nothing of it in check mode.
    type: dict
    suboptions:
      image:
        description: The image reference the run asked for (C(rolling_upgrade_image)).
        type: str
        required: true
      new_target:
        description: As M(kubenodes.image_upgrade.upgrade_journal)'s O(kubenodes.image_upgrade.upgrade_journal#module:new_target).
        type: bool
        default: false
      record:
        description: The journal record of the run's start (C(started), C(attempts)).
        type: dict
        default: {}
      autoscaler:
        description: The cluster-autoscaler Deployment (C(name), C(namespace)).
        type: dict
        default: {}
  finish:
    description:
      - When the upgrade is done (RV(done)), in the same call - put back the cloud settings the upgrade changed
        (O(cloud_settings); one changed by someone else since is left as it is, one the cloud would act on at once
        stays as the run set it, with a warning), restore the cluster-autoscaler, close the journal
        (C(finished), C(passes), this attempt's outcome V(done)), write the report to O(finish.report_dir) and
        release the run lock O(lock), with the code of M(kubenodes.image_upgrade.autoscaler_pause),
        M(kubenodes.image_upgrade.upgrade_journal) (C(state=report) too) and M(kubenodes.image_upgrade.upgrade_lock)
        (C(state=absent)); the report is RV(report). A failure of any of them fails the call, naming it.
      - Nothing of it in check mode.
    type: dict
    suboptions:
      report_dir:
        description: Where the report files go.
        type: path
        required: true
      autoscaler:
        description: The cluster-autoscaler Deployment (C(name), C(namespace)).
        type: dict
        default: {}
  abort:
    description:
      - The cause of a stop - end a run that began and stopped (the role's rescue), instead of a slice - put back the
        cloud settings the upgrade changed (O(cloud_settings)), restore the
        cluster-autoscaler O(finish.autoscaler) (a Deployment that was not paused is left as it is), record this
        attempt (O(journal.run)) as V(failed) in the journal with the cause (and O(gate_ran) as a failed gate), write
        the report so far to O(finish.report_dir) (with O(finish)) and release the run lock O(lock) (with its
        C(holder)), each as far as it goes; a step that fails is a warning. The report is RV(report), and the report with the cause the
        job's artifacts (C(image_upgrade), docs/awx.md); the cloud is read only for the settings to put back.
      - Nothing without O(journal.run) (the run had not begun), and nothing in check mode.
    type: str
extends_documentation_fragment:
  - kubenodes.image_upgrade.kube_auth
  - kubenodes.image_upgrade.cloud_provider
  - kubenodes.image_upgrade.gcp
  - kubenodes.image_upgrade.azure
  - kubenodes.image_upgrade.aws
attributes:
  check_mode:
    support: full
    description:
      - Reads, plans and shows the plan (RV(check_plan)), publishes it as the job's artifacts, changes nothing and
        returns RV(done) true.
  diff_mode:
    support: partial
    description:
      - A slice that changed something returns what it changed as C(diff) - C(groups) pointed at the image and the
        instances created in each, C(nodes) (each node's state before the slice's first step on it, and after each
        step - annotations written, uncordoned, drained or draining with the pods evicted, etcd member removed,
        deleted) and C(instances) deleted without a Node (with the reason). The start, the health gates and the
        finish (journal, report, lock, autoscaler) are not in it.
      - No diff in check mode, which changes nothing; the plan is RV(check_plan).
requirements:
  - kubernetes (the Python client)
  - the SDK of the chosen cloud
notes:
  - A run killed at any moment resumes from the node annotations and the clouds' instance lists; the step
    keeps no state of its own beyond RV(surge_cap) and RV(passes).
"""

EXAMPLES = r"""
- name: Upgrade, one slice at a time
  kubenodes.image_upgrade.upgrade_step:
    provider: gcp
    gcp:
      project: my-project
    image: projects/my-project/global/images/node-v2
    max_surge: 2
  register: step
  until: step.done or step.failed or step.etcd_due | length > 0
  retries: 1000
  delay: 0
"""

RETURN = r"""
report:
  description: With O(finish), when RV(done) - the report M(kubenodes.image_upgrade.upgrade_journal) C(state=report)
    wrote, its C(summary) and its C(files). With O(abort), the report of the unfinished run (null when it could not
    be written or the run had not begun).
  returned: with finish, when done; with abort
  type: dict
done:
  description: Every node runs the image and nothing is left over.
  returned: always
  type: bool
progress_line:
  description:
    - Nodes done of total, the pairs in flight with their phases, the surplus nodes being removed (C(removing N
      surplus node(s)) - names), what waits on what (a heir, the surge budget, an etcd member removal refused for
      now, with the member and why), and the ETA.
  returned: success
  type: str
etcd_waiting:
  description:
    - Control-plane donors whose etcd member removal was refused for now in the last pass (another member
      unhealthy, or quorum at stake), each with C(name), C(msg) (naming the member and why) and C(waiting_on).
      Nothing is removed or deleted for them; a later pass checks again.
  returned: success
  type: list
  elements: dict
did:
  description: What the slice did, one entry per step (C(step) and the node, group or instance).
  returned: success
  type: list
  elements: dict
finished:
  description: Donors whose replacement ended in this slice.
  returned: success
  type: list
  elements: str
aborted:
  description: The call ended a stopped run (O(abort)).
  returned: with abort
  type: bool
stopped:
  description:
    - The run was stopped from outside (a signal, or the death of ansible-playbook) and ended itself at a safe point,
      as O(abort) does; C(msg) names the cause. Run the playbook again to go on.
  returned: when stopped
  type: bool
etcd_due:
  description: Drained control-plane donors whose etcd member is to be removed by a delegated task (O(etcd.delegated)).
  returned: success
  type: list
  elements: dict
gate_tasks_due:
  description:
    - The health gate whose built-in checks passed, when O(gate.tasks_file) is to run now - C(id), C(seconds),
      C(snapshot) and C(tasks_started); give it back in O(gate_ran) after the tasks file ran.
  returned: then
  type: dict
check_plan:
  description:
    - In check mode, the plan as shown - C(progress), C(order) (the nodes to replace, in order), C(groups) (the scaling
      groups), C(how) (the surge, delete-first, gates and Events), C(next_pass) (what the next pass would do), and
      when they apply C(pdbs) (PodDisruptionBudgets that block a drain now) and C(gates) (the health gates and how
      they stand now). The plan is also the job's artifacts (C(image_upgrade), docs/awx.md).
  returned: in check mode
  type: dict
etcd_health_due:
  description:
    - With O(etcd.delegated), whether a control-plane heir waits for a read of etcd's health through the delegated
      host; the caller reads it (M(kubenodes.image_upgrade.etcd_member_info)) and gives it in O(etcd.health).
  returned: success
  type: bool
refused:
  description:
    - Destructive steps (cordon and drain, etcd removal, instance or Node deletion) that the cross-checks refused
      in this slice because the cluster and the cloud disagree; each with C(node), C(provider_id), C(step) and a
      C(message) that names what disagrees. The node or instance is left alone, and the progress line names it.
  returned: success
  type: list
  elements: dict
problems:
  description: Every inconsistency of the last pass, the planner's (C(action=left alone)) and the refusals (C(action=refused)).
  returned: success
  type: list
  elements: dict
passes:
  description: Passes of this run so far.
  returned: always
  type: int
start:
  description:
    - With O(start), what the call began - C(target) (the journal's target, as M(kubenodes.image_upgrade.upgrade_journal)
      returns it in check mode), C(started) and C(started_epoch) (when the run began, after the lock), C(lock)
      (O(lock) with the holder that took it), C(surge_cap) (what the quota allows, or null) and C(etcd_health) (the
      preflight's etcd read as M(kubenodes.image_upgrade.etcd_member_info) returns it, null when etcd was not read
      here). C(started) and C(lock) are null when the call failed before it took the lock (a refusal, and nothing
      was changed); C(lock) is null in check mode, which takes no lock.
  returned: when O(start) was given
  type: dict
etcd_read:
  description:
    - With O(start) and O(etcd.delegated), when the preflight needs etcd read through the control-plane host - the
      read to make (C(endpoints), C(expected_member_count), null when the count is not sure), returned with
      RV(etcd_health_due) true. Nothing began; call again with the read in O(etcd.health).
  returned: then
  type: dict
etcd_health:
  description: When the preflight's etcd read (O(start)) found etcd unhealthy - that read, as
    M(kubenodes.image_upgrade.etcd_member_info) returns it (C(members), C(health), C(problems)).
  returned: on that failure
  type: dict
surge_cap:
  description: The surge held after the cloud refused instances, or null.
  returned: always
  type: int
progress:
  description: Counts (total, done, in_flight, remaining, percent).
  returned: success
  type: dict
eta:
  description: The estimated time left, when two replacements have finished.
  returned: success
  type: dict
plan:
  description: The plan of the last pass, as node_image_facts returns it.
  returned: success
  type: dict
budget:
  description: The surge budget of the last pass.
  returned: success
  type: dict
donors:
  description: The donors with their heir and phase.
  returned: success
  type: list
  elements: dict
control_plane_endpoints:
  description: The control-plane nodes' etcd client URLs.
  returned: success
  type: list
  elements: str
timings:
  description: Seconds this call spent on the cloud, on Kubernetes, on drains, on etcd and waiting.
  returned: success
  type: dict
"""
