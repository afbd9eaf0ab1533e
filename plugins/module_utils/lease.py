# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""The run lock's Lease in the cluster: reading and writing it, and taking, renewing or releasing it as
upgrade_lock does (the module and the upgrade_step action runs this code). Which run may take
it is decided in run_lock.py (pure)."""

from __future__ import annotations

import datetime
import json
import socket

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import kube, run_lock, validate

# upgrade_lock's options and rules.
ARGUMENT_SPEC = dict(
    name=dict(type="str", default="kubenodes-image-upgrade"),
    namespace=dict(type="str", default="kube-system"),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    holder=dict(type="str"),
    lease_duration=dict(type="int", default=300),
    fail_when_held=dict(type="bool", default=True),
)
VALIDATE = validate.checker(dict(name=validate.object_name, namespace=validate.namespace,
                                 lease_duration=validate.lease_seconds))
# The `lock` option of the upgrade_step action: the same Lease, held for the role's
# rolling_upgrade_lock_duration (600 s) unless lease_duration is given.
RUN_LOCK_SPEC = dict({option: ARGUMENT_SPEC[option] for option in ("holder", "name", "namespace")},
                     lease_duration=dict(type="int", default=600))


def is_missing_lease(status, body):
    """Whether an API answer (HTTP status, response body) says the Lease does not exist: a 404 whose body is
    a Status with reason NotFound for kind leases. Any other 404 (a host URL with a path the API server does
    not serve, a proxy's error page) is an error, not an absent Lease."""
    if status != 404:
        return False
    try:
        data = json.loads(body) if isinstance(body, (str, bytes)) else body
    except ValueError:
        return False
    if not isinstance(data, dict):
        return False
    return (data.get("kind") == "Status" and data.get("reason") == "NotFound"
            and (data.get("details") or {}).get("kind") == "leases")


def leases_path(namespace, name=None):
    prefix = kube.path_of("/apis/coordination.k8s.io/v1/namespaces", namespace) + "/leases"
    return kube.path_of(prefix, name) if name is not None else prefix


def read_lease(api_client, name, namespace):
    """The Lease as a plain dict, or None when the API server says it does not exist."""
    try:
        return kube.request(api_client, "GET", leases_path(namespace, name))
    except kube.ApiCallError as exc:
        if kube.is_status(exc, 404) and is_missing_lease(404, exc.body):
            return None
        raise


def _lease_time(value):
    """A Lease MicroTime as format_time writes it (what the API server sent, when it cannot be parsed)."""
    moment = run_lock.parse_time(value) if isinstance(value, str) else None
    return run_lock.format_time(moment) if moment else (value or None)


def lease_spec_dict(lease):
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    return {
        "holderIdentity": spec.get("holderIdentity"),
        "leaseDurationSeconds": spec.get("leaseDurationSeconds"),
        "acquireTime": _lease_time(spec.get("acquireTime")),
        "renewTime": _lease_time(spec.get("renewTime")),
    }


def new_lease_spec(holder, duration, acquire_time, renew_time, transitions):
    """A Lease spec with the fields that are set (an unset one is left out, as the typed client did)."""
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration, "acquireTime": acquire_time,
            "renewTime": renew_time, "leaseTransitions": transitions}
    return {key: value for key, value in spec.items() if value is not None}


def write_lease(api_client, name, namespace, lease, spec, annotations=None):
    """Create, or replace carrying the resourceVersion read (409 when someone wrote in between). `annotations`: the
    Lease's annotations to set (None drops one)."""
    if lease is None:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        return kube.request(api_client, "POST", leases_path(namespace), body=body)
    body = dict(lease, spec=spec)
    if annotations:
        meta = dict(lease.get("metadata") or {})
        merged = dict(meta.get("annotations") or {}, **annotations)
        meta["annotations"] = {k: v for k, v in merged.items() if v is not None}
        body["metadata"] = meta
    return kube.request(api_client, "PUT", leases_path(namespace, name), body=body)


# An abort asked of the run that holds the Lease (abort_upgrade.yml): the run stops before its next pass, as stopped; the
# next holder to take the Lease clears it.
ABORT_ANNOTATION = "image-upgrade.kubenodes.io/abort-requested"


class LeaseConflict(Exception):
    """The Lease changed under every attempt to write it."""


def abort_requested(lease):
    """When an abort of the holder's run was asked (the annotation's value), or None."""
    return (((lease or {}).get("metadata") or {}).get("annotations") or {}).get(ABORT_ANNOTATION) or None


def request_abort(api_client, name, namespace, moment, attempts=3):
    """Ask the run that holds the Lease to stop for an abort (its moment in the annotation); an abort already asked
    keeps its first moment. Returns the moment asked, or None when there is no Lease."""
    for _attempt in range(attempts):
        lease = read_lease(api_client, name, namespace)
        if lease is None:
            return None
        if abort_requested(lease):
            return abort_requested(lease)
        try:
            write_lease(api_client, name, namespace, lease, lease.get("spec") or {}, {ABORT_ANNOTATION: moment})
            return moment
        except Exception as exc:  # pylint: disable=broad-except
            if not kube.is_status(exc, 409):
                raise
    raise LeaseConflict("Lease %s/%s kept changing under us while an abort was asked; run the abort again" % (namespace, name))


def live_processes_note(holder):
    """'; its processes ... are alive on this host' when the holder is a run on this host."""
    parsed = run_lock.parse_holder(holder)
    if parsed is None or parsed[0] != socket.gethostname():
        return ""
    pids = run_lock.local_run_processes(holder)
    if not pids:
        return ""
    return ("; its process(es) %s still run on this host (a playbook, worker or module of that run): wait for them"
            " to end, or stop them, before starting another run" % ", ".join(str(pid) for pid in pids[:10]))


# When this process first saw each Lease (namespace, name) as it is now: {key: (holder, resourceVersion, since)}. A
# Lease another holder has with no readable time counts as held until it stays unchanged this run's watch long
# (run_lock.decide); the upgrade_step action looks again in the same process while it waits (rolling_upgrade_lock_wait).
_WATCHED = {}


def watched_since(namespace, name, lease, now):
    """Since when this process has seen the Lease with its current holder and resourceVersion (now, at first sight
    or after any change)."""
    holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
    version = ((lease or {}).get("metadata") or {}).get("resourceVersion")
    seen = _WATCHED.get((namespace, name))
    if seen is None or seen[:2] != (holder, version) or version is None:
        seen = _WATCHED[(namespace, name)] = (holder, version, now)
    return seen[2]


def untimed_holding_note(spec, namespace, name, duration, expires):
    """Why a Lease with no readable acquire or renew time still counts as held, until when, and what to do."""
    shown = "renewTime %r, acquireTime %r" % (spec.get("renewTime"), spec.get("acquireTime"))
    if duration is None:
        return ("; the Lease has no readable acquire or renew time (%s) and no duration, so it counts as held: when you "
                "know no run holds it, delete it (kubectl -n %s delete lease %s)" % (shown, namespace, name))
    return ("; the Lease has no readable acquire or renew time (%s), so it counts as held until it is seen unchanged "
            "for %d s (%s): until %s if nothing changes it. Wait that long (rolling_upgrade_lock_wait of at least %d s "
            "looks again and then takes it over), or, when you know no run holds it, delete it (kubectl -n %s delete "
            "lease %s)" % (shown, duration, "its leaseDurationSeconds" if spec.get("leaseDurationSeconds") == duration
                           else "this run's lease duration", run_lock.format_time(expires), duration, namespace, name))


def holding(spec):
    """Who holds a Lease and until when ({holder, expires_at}, empty strings when nobody does), for the diff."""
    spec = spec or {}
    holder, renewed = spec.get("holderIdentity") or "", run_lock.parse_time(spec.get("renewTime") or "")
    duration = spec.get("leaseDurationSeconds")
    expires = renewed + datetime.timedelta(seconds=duration) if holder and renewed and duration else None
    return {"holder": holder, "expires_at": run_lock.format_time(expires) if expires else ""}


def _set_diff(module, result, spec):
    """With --diff, the holding before and after (only when it changes)."""
    before, after = holding(spec), {"holder": result["held_by"], "expires_at": result["expires_at"]}
    if getattr(module, "_diff", False) and before != after:
        result["diff"] = dict(before=before, after=after)


def apply_state(module, api_client):
    """upgrade_lock's work: acquire or renew the Lease (state=present), or release it (state=absent), as module.params
    ask; also run in the controller by the upgrade_step action."""
    params = module.params
    name, namespace = params["name"], params["namespace"]
    holder = params["holder"] or run_lock.default_holder()
    result = dict(changed=False, acquired=False, action="none", holder=holder, held_by="", expires_at="")
    for _attempt in range(3):
        lease = read_lease(api_client, name, namespace)
        spec = lease_spec_dict(lease)
        now = run_lock.utc_now()
        if params["state"] == "absent":
            if spec is None or spec.get("holderIdentity") != holder:
                result["held_by"] = (spec or {}).get("holderIdentity") or ""
                return result
            result.update(changed=True, action="release")
            _set_diff(module, result, spec)
            if module.check_mode:
                return result
            new_spec = new_lease_spec(None, spec.get("leaseDurationSeconds"), None, None,
                                      (lease.get("spec") or {}).get("leaseTransitions"))
        else:
            since = watched_since(namespace, name, lease, now)
            action, expires = run_lock.decide(spec, holder, now, watched_since=since,
                                              own_duration=params["lease_duration"])
            if action == run_lock.WAIT:
                result.update(action=action, held_by=spec["holderIdentity"],
                              expires_at=run_lock.format_time(expires) if expires else "")
                untimed = "" if run_lock.renewed_at(spec) else untimed_holding_note(
                    spec, namespace, name, run_lock.holding_seconds(spec, params["lease_duration"]), expires)
                # Also in the result when not failing: a playbook that waits with `until` shows it when the
                # wait runs out.
                result["msg"] = ("another upgrade run holds Lease %s/%s: %s (until %s unless renewed)%s%s"
                                 % (namespace, name, spec["holderIdentity"], result["expires_at"] or "unknown",
                                    untimed, live_processes_note(spec["holderIdentity"])))
                if params["fail_when_held"]:
                    module.fail_json(**result)
                return result
            new_expiry = now + datetime.timedelta(seconds=params["lease_duration"])
            result.update(changed=True, acquired=True, action=action, held_by=holder,
                          expires_at=run_lock.format_time(new_expiry))
            _set_diff(module, result, spec)
            if module.check_mode:
                return result
            old_spec = (lease.get("spec") or {}) if lease is not None else {}
            transitions = old_spec.get("leaseTransitions") or 0
            if action != run_lock.RENEW:
                transitions += 1
            acquire_time = run_lock.format_time(now)
            if action == run_lock.RENEW and old_spec.get("acquireTime"):
                acquire_time = old_spec["acquireTime"]
            new_spec = new_lease_spec(holder, params["lease_duration"], acquire_time, run_lock.format_time(now),
                                      transitions)
        # A new holder does not inherit an abort asked of the one before it.
        clear = {ABORT_ANNOTATION: None} if params["state"] == "present" and result["action"] != run_lock.RENEW else None
        try:
            write_lease(api_client, name, namespace, lease, new_spec, clear)
            return result
        except Exception as exc:  # pylint: disable=broad-except
            if not kube.is_status(exc, 409):
                raise
            # Another run wrote the Lease between our read and write: read again and decide anew.
            result.update(changed=False, acquired=False, action="none")
            result.pop("diff", None)
    module.fail_json(msg="Lease %s/%s kept changing under us (three conflicts in a row)" % (namespace, name), **result)
