# Copyright: kubenodes.image_upgrade contributors
# Apache License 2.0 (see LICENSE)
"""etcd access for the collection: a small client for etcd's v3 JSON gateway (plain requests, mutual
TLS) with the connection options every etcd module shares, the pure decision logic for removing a member
safely (peer URL normalisation and matching, quorum arithmetic, safety checks) and for judging a
cluster's health, and the removal and inspection flows that tie them together.

Why the JSON gateway with requests: the PyPI etcd3 client is unmaintained, needs pure-Python protobuf
process-wide and has no learner support; etcd3gw has no member removal or alarms and hides TLS errors.
See docs/etcd-client.md.

This file imports without requests; callers check HAS_REQUESTS first.
"""

from __future__ import annotations

import concurrent.futures
import functools
import copy
import ipaddress
import os
import threading
import time
import traceback
from urllib.parse import urlsplit

from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import crosschecks, drain_api, kube
from ansible_collections.kubenodes.image_upgrade.plugins.module_utils import validate as option_rules

try:
    import requests
    HAS_REQUESTS = True
    REQUESTS_IMPORT_ERROR = None
except ImportError:  # pragma: no cover - reported by the module through missing_required_lib
    requests = None
    HAS_REQUESTS = False
    REQUESTS_IMPORT_ERROR = traceback.format_exc()

DEFAULT_PEER_PORT = 2380
DEFAULT_SCHEME_PORTS = {"http": 80, "https": 443}
# A voter whose applied index trails the leader's commit index by more than this is not "caught up":
# removing another member then could leave a quorum that must first replay a long log.
MAX_APPLY_LAG = 1000

# Error kinds, stable for callers and for the module's `reason` result.
UNREACHABLE = "unreachable"
TLS = "tls"
UNHEALTHY_CLUSTER = "unhealthy_cluster"
NOT_FOUND = "not_found"
NOT_LEADER = "not_leader"
HTTP = "http"
BAD_RESPONSE = "bad_response"
AMBIGUOUS = "ambiguous"
REFUSED = "refused"
TIMEOUT = "timeout"

# The connection options of every etcd module (documented in doc_fragments/etcd_connection.py). The
# defaults are kubeadm's paths on a control-plane host; key paths are not secrets.
CONNECTION_ARG_SPEC = dict(
    endpoints=dict(type="list", elements="str", default=["https://127.0.0.1:2379"]),
    ca_cert=dict(type="path", default="/etc/kubernetes/pki/etcd/ca.crt"),
    client_cert=dict(type="path", default="/etc/kubernetes/pki/etcd/healthcheck-client.crt"),
    client_key=dict(type="path", default="/etc/kubernetes/pki/etcd/healthcheck-client.key", no_log=False),
    request_timeout=dict(type="float", default=5),
)


def connection_argument_spec(extra=None):
    """A copy of CONNECTION_ARG_SPEC, updated with the module's own options."""
    spec = copy.deepcopy(CONNECTION_ARG_SPEC)
    spec.update(extra or {})
    return spec


def validate_connection(params):
    """Problems with the connection options, before anything is contacted."""
    problems = []
    if not params["endpoints"]:
        problems.append("endpoints must list at least one client URL")
    for endpoint in params["endpoints"] or []:
        try:
            normalize_url(endpoint)
        except ValueError as exc:
            problems.append("endpoints: %s" % exc)
    if params["request_timeout"] <= 0:
        problems.append("request_timeout must be positive")
    if any(e.strip().lower().startswith("https://") for e in params["endpoints"] or []):
        problems += certificate_file_problems(params)
    return problems


CERTIFICATE_OPTIONS = ("ca_cert", "client_cert", "client_key")


def certificate_file_problems(params, names=None):
    """The TLS files of the connection options that this process cannot read, each named as `names` maps the option
    (the role's variables) or by its option."""
    problems = []
    for option in CERTIFICATE_OPTIONS:
        path, name = params[option], (names or {}).get(option, option)
        if not path:
            problems.append("%s is not set" % name)
        elif not os.path.isfile(path):
            problems.append("%s %s does not exist or is not a file" % (name, path))
        elif not os.access(path, os.R_OK):
            problems.append("%s %s is not readable (run with become, or copy it)" % (name, path))
    return problems


def client_from_params(params):
    return EtcdClient([e.strip() for e in params["endpoints"]], params["ca_cert"], params["client_cert"],
                      params["client_key"], request_timeout=params["request_timeout"])


# etcd_member_info's options and rules (also run in the controller by the upgrade_step action).
INFO_ARGUMENT_SPEC = connection_argument_spec(dict(
    expected_member_count=dict(type="int"),
    timeout=dict(type="int", default=10),
))


def validate_info(params):
    """Problems with etcd_member_info's options, before anything is contacted."""
    return validate_connection(params) + option_rules.check(params, option_rules.ETCD_INFO_RULES)


# etcd_member_remove's options, rules and work (its module keeps the documentation).
REMOVE_ARGUMENT_SPEC = connection_argument_spec(dict(
    node_ip=dict(type="str"),
    node_name=dict(type="str"),
    peer_port=dict(type="int", default=2380),
    peer_url=dict(type="str"),
    member_name=dict(type="str"),
    expected_member_count=dict(type="int"),
    allow_learner=dict(type="bool", default=False),
    force=dict(type="bool", default=False),
    on_refusal=dict(type="str", choices=["fail", "wait"], default="fail"),
    timeout=dict(type="int", default=60),
    cluster_check=dict(type="bool", default=True),
    # The Kubernetes options in a dictionary of their own: etcd's ca_cert, client_cert and client_key have the
    # same names as kubernetes.core's.
    cluster=dict(type="dict", options=copy.deepcopy(kube.AUTH_ARG_SPEC)),
))
REMOVE_SELECTORS = ["node_ip", "peer_url", "member_name"]


def validate_remove(params):
    """Problems with etcd_member_remove's options, before anything is contacted (nothing is changed on bad input)."""
    problems = validate_connection(params) + option_rules.check(
        params, dict(option_rules.ETCD_RULES, peer_port=lambda n, v: option_rules.integer(n, v, 1, 65535),
                     node_name=lambda n, v: None if v is None else option_rules.object_name(n, v)))
    if params["node_ip"] is not None:
        try:
            peer_url_for_ip(params["node_ip"], params["peer_port"])
        except ValueError:
            problems.append("node_ip %r is not an IP address" % params["node_ip"])
    if params["peer_url"] is not None:
        try:
            normalize_url(params["peer_url"], default_port=params["peer_port"])
        except ValueError as exc:
            problems.append("peer_url: %s" % exc)
    if params["node_name"] is not None and params["node_ip"] is None:
        problems.append("node_name %r is only used with node_ip; set node_ip too, or select the member by "
                        "member_name instead" % params["node_name"])
    if params["member_name"] is not None and not params["member_name"]:
        problems.append("member_name must not be empty")
    return problems


def member_labels(members):
    """The members as etcd_member_remove's diff shows them: name, hexadecimal ID, peer URLs."""
    return ["%s %s %s" % (m["name"] or "<unstarted>", m["id_hex"], ",".join(m["peer_urls"])) for m in members]


def remove_from_params(module):
    """etcd_member_remove's result for its module (a KubenodesModule on REMOVE_ARGUMENT_SPEC): a refusal fails it
    with the checks' evidence; a wait and a member found absent are warnings."""
    params = module.params
    node_check = None
    if params["cluster_check"]:
        node_check = functools.partial(_node_check_from_cluster, module, params["node_name"])
    removal = MemberRemoval(client_from_params(params), timeout=params["timeout"], force=params["force"],
                            allow_learner=params["allow_learner"], expected_member_count=params["expected_member_count"],
                            warn=module.warn, on_refusal=params["on_refusal"], node_check=node_check)
    try:
        result = removal.run(peer_url=params["peer_url"], member_name=params["member_name"], node_ip=params["node_ip"],
                             node_name=params["node_name"], check_mode=module.check_mode)
    except RemovalRefused as exc:
        module.fail_json(msg=str(exc), reason=exc.kind, **exc.details)
    except EtcdError as exc:
        module.fail_from_exception(exc)
    if result.get("waiting") or result["member"] is None:
        module.warn(result["msg"])
    if module._diff:
        result["diff"] = {"before": {"members": member_labels(result["members_before"])},
                          "after": {"members": member_labels(result["members_after"])}}
    return result


def _node_check_from_cluster(module, node_name, target):
    """cluster_check: node_drained_check with the Nodes and pods of the cluster the option cluster names; a cluster
    that cannot be read fails the module, naming the option, before anything is removed."""
    try:
        api_client = kube.build_api_client(module.params["cluster"] or {})
        nodes = kube.list_nodes(api_client)
        return node_drained_check(nodes, lambda name: drain_api.list_pods_on_node(api_client, name), target, node_name)
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_from_exception(exc, "reading the cluster's Nodes and pods before removing an etcd member "
                                   "(cluster_check, with the Kubernetes options in cluster; set cluster_check=false "
                                   "only when the member's node is gone or its cluster cannot be reached)",
                                   changed=False)


def member_nodes(nodes, target, node_name=None):
    """The Nodes that are `target`'s: the one named node_name when given, else those named as the member, else
    those with an address on the host of one of its peer or client URLs."""
    if node_name:
        return [n for n in nodes if n["metadata"]["name"] == node_name]
    named = [n for n in nodes if target.get("name") and n["metadata"]["name"] == target["name"]]
    if named:
        return named
    hosts = set()
    for url in target.get("peer_urls", []) + target.get("client_urls", []):
        try:
            hosts.add(normalize_url(url)[1])
        except ValueError:
            continue
    return [n for n in nodes if hosts & {_canonical_host(a.get("address", "")) for a in
                                         ((n.get("status") or {}).get("addresses") or [])}]


def _canonical_host(address):
    try:
        return ipaddress.ip_address(address).compressed
    except ValueError:
        return address.lower()


def node_drained_check(nodes, pods_on, target, node_name=None):
    """The cluster's side of removing `target` (the node_drained check): the member's Node, when the cluster still
    has one, must be cordoned and run no pod a drain would have evicted, since removing the member of a node that
    serves takes its etcd away from under it. A member without a Node (its node is gone) passes."""
    problems = []
    for node in member_nodes(nodes, target, node_name):
        name = node["metadata"]["name"]
        if not (node.get("spec") or {}).get("unschedulable"):
            problems.append("node %s is not cordoned, so it was not drained" % name)
            continue
        problems.extend(p["message"] for p in crosschecks.pods_left_problems(name, pods_on(name), step="etcd-removal"))
    if problems:
        return _check("node_drained", False, "%s: drain the node first (node_drain state=drained); cluster_check=false "
                      "removes the member without looking at the cluster" % "; ".join(problems))
    return _check("node_drained", True, "the member's node is gone, or cordoned and drained")


def inspect_from_params(params):
    """etcd_member_info's result (inspect_cluster) for its options."""
    return inspect_cluster(client_from_params(params), params["expected_member_count"], timeout=params["timeout"])


class EtcdError(Exception):
    def __init__(self, message, kind=HTTP, endpoint=None, status=None):
        super().__init__(message)
        self.kind = kind
        self.endpoint = endpoint
        self.status = status


class RemovalRefused(EtcdError):
    """A safety check failed; carries the evidence so the module can return it."""

    def __init__(self, message, details):
        super().__init__(message, kind=REFUSED)
        self.details = details


# ----------------------------------------------------------------------------------------------------
# Pure logic: URLs, members, checks
# ----------------------------------------------------------------------------------------------------

def url_host(host):
    """`host` as written in a URL: IPv6 literals in brackets."""
    try:
        if ipaddress.ip_address(host).version == 6:
            return "[%s]" % ipaddress.ip_address(host).compressed
    except ValueError:
        pass
    return host


def peer_url_for_ip(ip, port=DEFAULT_PEER_PORT, scheme="https"):
    """The peer URL kubeadm gives a control-plane node's etcd member: https://<ip>:2380."""
    address = ipaddress.ip_address(str(ip).strip().strip("[]"))  # ValueError for a non-IP
    return "%s://%s:%d" % (scheme, url_host(address.compressed), port)


def normalize_url(url, default_port=None):
    """(scheme, host, port) of `url` for exact comparison: lower-case scheme and host name, IP literals
    in canonical form (so 2001:DB8:0::1 equals 2001:db8::1), the port made explicit. A path, query or
    user part makes the URL invalid for an etcd peer or client URL (ValueError)."""
    parts = urlsplit(str(url).strip())
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_SCHEME_PORTS:
        raise ValueError("%r: the scheme must be http or https" % url)
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("%r: only scheme://host:port is allowed" % url)
    host = parts.hostname  # urlsplit lower-cases and strips the IPv6 brackets
    if not host:
        raise ValueError("%r: no host" % url)
    try:
        host = ipaddress.ip_address(host).compressed
    except ValueError:
        host = host.rstrip(".")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError("%r: %s" % (url, exc)) from None
    if port is None:
        port = default_port if default_port is not None else DEFAULT_SCHEME_PORTS[scheme]
    return scheme, host, port


def member_id_hex(member_id):
    return format(int(member_id), "x")


def parse_member(raw):
    """A gateway member dict as plain, complete data. The gateway omits false and empty fields, and an
    added-but-unstarted member has neither name nor client URLs."""
    member_id = str(raw.get("ID", "0"))
    name = raw.get("name", "") or ""
    client_urls = list(raw.get("clientURLs", []) or [])
    return {
        "id": member_id,
        "id_hex": member_id_hex(member_id),
        "name": name,
        "peer_urls": list(raw.get("peerURLs", []) or []),
        "client_urls": client_urls,
        "is_learner": bool(raw.get("isLearner", False)),
        "started": bool(name and client_urls),
    }


def _member_label(member):
    return "%s (%s)" % (member["name"] or "<unstarted>", member["id_hex"])


def match_members(members, peer_url=None, name=None, default_port=DEFAULT_PEER_PORT):
    """Members selected by an exact, normalised peer URL or an exact name. Never substring matching:
    https://10.0.0.1:2380 must not select https://10.0.0.10:2380."""
    if peer_url is not None:
        wanted = normalize_url(peer_url, default_port=default_port)
        found = []
        for member in members:
            for url in member["peer_urls"]:
                try:
                    if normalize_url(url, default_port=default_port) == wanted:
                        found.append(member)
                        break
                except ValueError:
                    continue  # a peer URL we cannot parse cannot be the one asked for
        return found
    if name is not None:
        return [member for member in members if member["name"] == name]
    raise ValueError("a peer URL or a member name is needed")


def _canonical_ip(ip):
    return ipaddress.ip_address(str(ip).strip().strip("[]")).compressed  # ValueError for a non-IP


def _url_hosts(member):
    """The hosts of every peer and client URL of `member` (canonical IPs, lower-case names)."""
    hosts = set()
    for url in member["peer_urls"] + member["client_urls"]:
        try:
            hosts.add(normalize_url(url)[1])
        except ValueError:
            continue
    return hosts


def select_node_member(members, node_ip, node_name=None):
    """The member of the node with `node_ip` (and, when given, the node name `node_name`), or None when no
    member can be the node's. A member is the node's when one of its peer or client URLs is on `node_ip`, at
    any port (a member with a peer port other than 2380 is still found), or when it is named after the node.
    Raises EtcdError(kind=AMBIGUOUS) naming the members when the evidence does not point at exactly one
    member: several on the IP, several with the name, or the address and the name pointing at different
    members (or the name at a member none of whose URLs is on the IP)."""
    ip = _canonical_ip(node_ip)
    by_host = [m for m in members if ip in _url_hosts(m)]
    by_name = [m for m in members if node_name and m["name"] == node_name]
    if not by_host and not by_name:
        return None
    if len(by_host) == 1 and (not by_name or by_name == by_host):
        return by_host[0]

    def labels(found):
        return ", ".join("%s (peer URLs %s, client URLs %s)" % (
            _member_label(m), ", ".join(m["peer_urls"]) or "none", ", ".join(m["client_urls"]) or "none")
            for m in found)

    if len(by_host) > 1:
        why = "%d members have a URL on node_ip %s: %s" % (len(by_host), ip, labels(by_host))
    elif not by_host:
        why = "member %s is named after node %r but none of its URLs is on node_ip %s" % (labels(by_name), node_name, ip)
    else:
        why = "the member on node_ip %s is %s, but the member named after node %r is %s" % (
            ip, labels(by_host), node_name, labels(by_name))
    raise EtcdError("cannot tell which etcd member belongs to the node: %s. Check with `etcdctl member list` and "
                    "select the member by peer_url or member_name" % why, kind=AMBIGUOUS)


def absent_member_problem(members, selector, expected_member_count):
    """Why "no member matched `selector`" cannot be taken as "already removed", or None.

    expected_member_count is the number of members while the member to remove is still in the cluster (the
    control-plane nodes including the donor and its heir). Once the member is gone, etcd lists fewer; as many
    or more means a member is listed that this selector does not find, which may be this very member under
    another address, so deleting the node could leave its member behind."""
    if expected_member_count is None or len(members) < expected_member_count:
        return None
    return ("no etcd member matches %s, but etcd still lists %d members (%s) and expected_member_count is %d, "
            "the count with this member in it: the member may be listed under another address or name. Find it "
            "with `etcdctl member list`, then select it by peer_url or member_name (or, if it is gone, set "
            "expected_member_count to the number of members before its removal)" % (
                selector, len(members), ", ".join(member_labels_with_urls(members)), expected_member_count))


def absent_member_message(members, selector):
    """What a removal that found no member says (changed=false): the member is gone already, or the selector names
    no member of this cluster - a typo looks the same, so the members found are named."""
    return ("no etcd member matches %s, so nothing was removed: the member is gone already, or %s names no member of "
            "this cluster. etcd lists %d member(s): %s. Check the selector against `etcdctl member list`"
            % (selector, selector.split(" ")[0], len(members), ", ".join(member_labels_with_urls(members)) or "none"))


def member_labels_with_urls(members):
    return ["%s %s" % (_member_label(m), ",".join(m["peer_urls"]) or "no peer URL") for m in members]


def quorum_size(voters):
    """Votes needed for a majority of `voters` members."""
    return voters // 2 + 1


def _check(name, passed, message):
    return {"name": name, "passed": passed, "enforced": True, "message": message}


def evaluate_checks(members, target, health, alarms, expected_member_count=None, allow_learner=False,
                    max_apply_lag=MAX_APPLY_LAG):
    """The safety checks before removing `target`, as a list of {name, passed, enforced, message}
    (`enforced` is True here; the removal flow clears it under force).

    `health` maps member id -> probe dict (see EtcdClient.probe); `alarms` is the gateway's alarm list.
    A check with passed=None did not run (nothing to check). Removal may go ahead only when no check
    has passed=False (see failed_checks).
    """
    others = [m for m in members if m["id"] != target["id"]]
    voters = [m for m in members if not m["is_learner"]]
    voters_after = [m for m in voters if m["id"] != target["id"]]
    checks = []

    unstarted = [m for m in others if not m["started"]]
    checks.append(_check(
        "members_started", not unstarted,
        "every other member has started" if not unstarted else
        "members added but never started: %s" % ", ".join(_member_label(m) for m in unstarted)))

    unhealthy = [m for m in others if not member_is_healthy(m, health)]
    checks.append(_check(
        "members_healthy", not unhealthy,
        "every other member is reachable and healthy" if not unhealthy else
        "unhealthy members: %s" % "; ".join(
            "%s: %s" % (_member_label(m), _problem(health.get(m["id"]))) for m in unhealthy)))

    leader_id, leader_message = leader_agreement(members, health)
    checks.append(_check("leader_agreement", leader_id is not None, leader_message))

    checks.append(_caught_up_check(voters_after, health, leader_id, max_apply_lag))

    alarm_texts = [alarm_label(a, members) for a in alarms]
    checks.append(_check("no_alarms", not alarm_texts,
                         "no active alarms" if not alarm_texts else "active alarms: %s" % ", ".join(alarm_texts)))

    checks.append(_learner_check(target, allow_learner))
    checks.append(_quorum_check(voters_after, health))

    if expected_member_count is None:
        checks.append(_check("member_count", None, "not checked: expected_member_count not given"))
    else:
        checks.append(_check(
            "member_count", len(members) == expected_member_count,
            "%d members, %d expected" % (len(members), expected_member_count)))
    return checks


def _caught_up_check(voters_after, health, leader_id, max_apply_lag):
    """evaluate_checks' members_caught_up: every remaining voter within max_apply_lag of the leader's raft index."""
    leader_probe = health.get(leader_id) if leader_id is not None else None
    if leader_probe is None or not leader_probe["reachable"] or leader_probe["raft_index"] is None:
        return _check("members_caught_up", None, "leader's raft index unknown; not checked")
    lagging = []
    for member in voters_after:
        probe = health.get(member["id"])
        if probe and probe["reachable"] and probe["raft_applied_index"] is not None:
            lag = leader_probe["raft_index"] - probe["raft_applied_index"]
            if lag > max_apply_lag:
                lagging.append("%s lags by %d entries" % (_member_label(member), lag))
    return _check("members_caught_up", not lagging,
                  "remaining voters are within %d entries of the leader" % max_apply_lag
                  if not lagging else "; ".join(lagging))


def _learner_check(target, allow_learner):
    if target["is_learner"]:
        return _check("not_learner", bool(allow_learner),
                      "the member is a learner; removal allowed by allow_learner" if allow_learner else
                      "the member is an unpromoted learner (a node still joining); set allow_learner to remove it")
    return _check("not_learner", True, "the member is a voter")


def _quorum_check(voters_after, health):
    healthy_after = [m for m in voters_after if member_is_healthy(m, health)]
    needed = quorum_size(len(voters_after)) if voters_after else 1
    quorum_ok = bool(voters_after) and len(healthy_after) >= needed
    return _check(
        "quorum_after_removal", quorum_ok,
        "%d of %d remaining voters healthy, %d needed" % (len(healthy_after), len(voters_after), needed)
        if voters_after else "removing the only voter would destroy the cluster")


def _problem(probe):
    if not probe:
        return "not probed (no client URL)"
    if not probe["reachable"]:
        return probe["error"] or "unreachable"
    if not probe["healthy"]:
        return probe["reason"] or probe["error"] or "reports unhealthy"
    return "healthy"


def member_is_healthy(member, health):
    probe = health.get(member["id"])
    return bool(probe and probe["reachable"] and probe["healthy"])


def leader_agreement(members, health):
    """(leader id, message): the leader every member that answered follows, when they all follow the same
    voting member in the same term; (None, why not) otherwise."""
    answered = [(m, health[m["id"]]) for m in members if m["id"] in health and health[m["id"]]["reachable"]
                and health[m["id"]]["leader_id"] is not None]
    if not answered:
        return None, "no member reported its status"
    leaders = {p["leader_id"] for _m, p in answered}
    terms = {p["raft_term"] for _m, p in answered}
    by_id = {m["id"]: m for m in members}
    leader = by_id.get(next(iter(leaders))) if len(leaders) == 1 else None
    if leaders == {"0"}:
        return None, "no member knows a leader (an election is under way, or quorum is lost)"
    if leader is None or len(terms) != 1 or leader["is_learner"]:
        follows = ["%s follows %s in term %s" % (_member_label(m), _leader_label(p["leader_id"], by_id), p["raft_term"])
                   for m, p in answered]
        return None, "members disagree on the leader or term, or follow one that is not a voter: %s" % (
            "; ".join(follows))
    return leader["id"], "all members follow leader %s in term %s" % (_member_label(leader), next(iter(terms)))


def _leader_label(leader_id, by_id):
    if leader_id == "0":
        return "no leader"
    return _member_label(by_id[leader_id]) if leader_id in by_id else "%s (not a member)" % member_id_hex(leader_id)


def alarm_label(alarm, members):
    """"NOSPACE on cp-1 (8e9e05c52164694d)" for a gateway alarm dict; a member ID of 0 names no member."""
    member_id = str(alarm.get("memberID", "0"))
    if member_id == "0":
        return alarm.get("alarm", "UNKNOWN")
    member = next((m for m in members if m["id"] == member_id), None)
    return "%s on %s" % (alarm.get("alarm", "UNKNOWN"),
                         _member_label(member) if member else "member %s" % member_id_hex(member_id))


def failed_checks(checks):
    return [c for c in checks if c["passed"] is False]


# Checks that can fail for a moment (right after an election) and are worth re-evaluating.
TRANSIENT_CHECKS = frozenset(["leader_agreement", "members_caught_up"])


def only_transient_failures(checks):
    failed = failed_checks(checks)
    return bool(failed) and all(c["name"] in TRANSIENT_CHECKS for c in failed)


def pick_transfer_target(members, target, health):
    """The healthy, started voter (other than `target`) with the highest applied index, or None."""
    best = None
    for member in members:
        probe = health.get(member["id"])
        if (member["id"] == target["id"] or member["is_learner"] or not member["started"] or not probe
                or not probe["reachable"] or not probe["healthy"]):
            continue
        applied = probe["raft_applied_index"] or 0
        if best is None or applied > best[0]:
            best = (applied, member)
    return best[1] if best else None


# Refusals that clear by themselves once the cluster recovers: a member down, stopped or slow, an election,
# a member catching up or still starting, and the quorum arithmetic that follows from them. With
# on_refusal=wait (the role's passes) these are a waiting state, retried at the next call; the others (an
# alarm, a learner, a member count that does not match) need an operator and always fail.
WAITABLE_CHECKS = frozenset(["members_started", "members_healthy", "leader_agreement", "members_caught_up",
                             "quorum_after_removal"])
REFUSAL_ACTIONS = ("fail", "wait")


def waitable_refusal(checks):
    """True when checks failed and every failed one is in WAITABLE_CHECKS."""
    failed = failed_checks(checks)
    return bool(failed) and all(c["name"] in WAITABLE_CHECKS for c in failed)


def waiting_message(target, members, health, checks):
    """Why removing `target` waits, naming the members that keep it from going ahead and what the removal
    would do to quorum: "etcd member cp-2 (...) is not healthy (...): removing etcd member cp-1 (...) now
    would leave 2 of 3 remaining voters healthy (2 needed for quorum); waiting"."""
    failed = {c["name"]: c for c in failed_checks(checks)}
    others = [m for m in members if m["id"] != target["id"]]
    causes = ["etcd member %s is not healthy (%s)" % (_member_label(m), _problem(health.get(m["id"])))
              for m in others if m["started"] and not member_is_healthy(m, health)]
    causes += ["etcd member %s was added but has not started (peer URLs %s)" % (
        _member_label(m), ", ".join(m["peer_urls"]) or "none") for m in others if not m["started"]]
    causes += [failed[name]["message"] for name in ("leader_agreement", "members_caught_up") if name in failed]
    voters_after = [m for m in others if not m["is_learner"]]
    healthy_after = len([m for m in voters_after if member_is_healthy(m, health)])
    needed = quorum_size(len(voters_after)) if voters_after else 1
    if "quorum_after_removal" in failed:
        effect = "removing etcd member %s would lose quorum (%d of %d remaining voters healthy, %d needed)" % (
            _member_label(target), healthy_after, len(voters_after), needed)
    else:
        effect = "removing etcd member %s now would leave %d of %d remaining voters healthy (%d needed for quorum)" % (
            _member_label(target), healthy_after, len(voters_after), needed)
    return "%s: %s; waiting" % ("; ".join(causes) or "the etcd cluster is not healthy", effect)


def refusal_message(target, checks):
    failed = failed_checks(checks)
    return "refusing to remove etcd member %s: %s" % (
        _member_label(target), "; ".join("%s failed (%s)" % (c["name"], c["message"]) for c in failed))


def cluster_problems(members, health, alarms, expected_member_count=None):
    """What keeps the cluster from being healthy, as [{check, message}] with `check` named as in
    evaluate_checks and `message` a plain sentence naming the member and why. Healthy means: every
    member started, reachable and healthy, all following one voting leader in one term, no alarm, and
    the member count as expected when given. An empty list: the cluster is healthy."""
    problems = []

    def add(check, message):
        problems.append({"check": check, "message": message})

    for member in members:
        if not member["started"]:
            add("members_started", "etcd member %s (peer URLs %s) was added but has never started" % (
                _member_label(member), ", ".join(member["peer_urls"]) or "none"))
        elif not member_is_healthy(member, health):
            probe = health.get(member["id"])
            state = "is unreachable" if not probe or not probe["reachable"] else "is unhealthy"
            add("members_healthy", "etcd member %s %s: %s" % (_member_label(member), state, _problem(probe)))
    leader_id, leader_message = leader_agreement(members, health)
    if leader_id is None:
        add("leader_agreement", leader_message)
    for alarm in alarms:
        add("no_alarms", "etcd alarm active: %s" % alarm_label(alarm, members))
    if expected_member_count is not None and len(members) != expected_member_count:
        add("member_count", "etcd has %d members, %d expected (%s)" % (
            len(members), expected_member_count, ", ".join(_member_label(m) for m in members)))
    return problems


def member_problems(members, health, alarms):
    """cluster_problems, each tied to the member it is about where it is about one: [{member, node_ip, message}]
    (`node_ip`: the host of the member's peer URLs, the InternalIP of its node, or None). Adds a learner left
    over (a member never promoted, from a join that did not finish) as a problem. An empty list: healthy."""
    found = []
    for member in members:
        hosts = sorted(_url_hosts(member))
        ip = hosts[0] if hosts else None
        label = _member_label(member)
        if not member["started"]:
            found.append(dict(member=label, node_ip=ip, message="added but never started"))
        elif member["is_learner"]:
            found.append(dict(member=label, node_ip=ip, message="is a learner that was never promoted"))
        elif not member_is_healthy(member, health):
            probe = health.get(member["id"])
            state = "unreachable" if not probe or not probe["reachable"] else "unhealthy"
            found.append(dict(member=label, node_ip=ip, message="%s: %s" % (state, _problem(probe))))
    for problem in cluster_problems([m for m in members if m["started"] and member_is_healthy(m, health)], health,
                                    alarms):
        if problem["check"] != "members_healthy":
            found.append(dict(member=None, node_ip=None, message=problem["message"]))
    return found


def not_etcd_reason(path, status, data, text):
    """Why an HTTP answer to a /v3/ call cannot come from etcd's v3 JSON gateway, or None. etcd answers every
    such call with a JSON object: on success with its response `header` (or {}), on error with the gRPC `code`
    (and `error`/`message`). A Kubernetes API server answers with a Status object; etcd's peer port and other
    servers with text or HTML."""
    if not str(path).startswith("/v3/"):
        return None    # /health and /version have other shapes
    if isinstance(data, dict) and data.get("kind") == "Status" and "apiVersion" in data:
        return "HTTP %d with a Kubernetes Status object (%s): this is a Kubernetes API server" % (
            status, str(data.get("message") or data.get("reason") or "")[:120])
    if not isinstance(data, dict):
        return "HTTP %d with %s" % (status, ("%r" % text.strip()[:80]) if (text or "").strip() else "an empty body")
    if status == 200 and data and "header" not in data:
        # (An empty object is etcd's: its gateway answers a MoveLeader with {}, leaving out empty fields.)
        return "HTTP 200 with a JSON object without etcd's response header (keys: %s)" % ", ".join(sorted(data)[:6])
    if status != 200 and "code" not in data and "error" not in data:
        return "HTTP %d with a JSON object that is no etcd error (keys: %s)" % (status, ", ".join(sorted(data)[:6]))
    return None


def classify_tls_error(text, ca_cert, client_cert):
    """A sentence naming the likely TLS cause from the ssl module's text."""
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        if "mismatch" in text or "doesn't match" in text:
            return "the server certificate does not name this host or IP address (%s)" % text
        return ("the server certificate is not signed by the CA in ca_cert (%s): wrong CA file?" % ca_cert)
    if "KEY_VALUES_MISMATCH" in text:
        return "client_key does not belong to client_cert (%s)" % client_cert
    if "NO_CERTIFICATE_OR_CRL_FOUND" in text or "PEM" in text:
        return "a certificate or key file is not valid PEM (ca_cert %s, client_cert %s)" % (ca_cert, client_cert)
    if any(s in text for s in ("BAD_CERTIFICATE", "CERTIFICATE_REQUIRED", "UNKNOWN_CA", "EOF occurred",
                               "UNEXPECTED_EOF")):
        return ("the server rejected the client certificate (%s): it must be signed by the etcd CA and "
                "allow client authentication" % (client_cert or "none given"))
    return "TLS handshake failed"


# ----------------------------------------------------------------------------------------------------
# I/O: the gateway client
# ----------------------------------------------------------------------------------------------------

class EtcdClient:
    """etcd's v3 JSON gateway over requests with explicit TLS (trust_env off: REQUESTS_CA_BUNDLE would
    otherwise replace our CA). Every call is bounded by a timeout."""

    def __init__(self, endpoints, ca_cert=None, client_cert=None, client_key=None, request_timeout=5.0):
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.ca_cert = ca_cert
        self.client_cert = client_cert
        self.client_key = client_key
        self.request_timeout = request_timeout
        self._local = threading.local()

    def _session(self):
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.trust_env = False
            session.verify = self.ca_cert if self.ca_cert else True
            if self.client_cert:
                session.cert = (self.client_cert, self.client_key) if self.client_key else self.client_cert
            self._local.session = session
        return session

    def _request(self, method, endpoint, path, body=None, timeout=None):
        url = endpoint.rstrip("/") + path
        timeout = self.request_timeout if timeout is None else timeout
        try:
            if method == "GET":
                response = self._session().get(url, timeout=timeout)
            else:
                response = self._session().post(url, json=body if body is not None else {}, timeout=timeout)
        except requests.exceptions.SSLError as exc:
            raise EtcdError("TLS failure talking to %s: %s" % (
                endpoint, classify_tls_error(str(exc), self.ca_cert, self.client_cert)), kind=TLS, endpoint=endpoint)
        except requests.exceptions.Timeout:
            raise EtcdError("%s did not answer within %.1fs" % (endpoint, timeout), kind=UNREACHABLE, endpoint=endpoint)
        except requests.exceptions.ConnectionError as exc:
            raise EtcdError("cannot connect to %s: %s" % (endpoint, _root_cause(exc)), kind=UNREACHABLE, endpoint=endpoint)
        except (OSError, ValueError) as exc:  # unreadable certificate files and similar local problems
            raise EtcdError("cannot send a request to %s: %s" % (endpoint, exc), kind=TLS, endpoint=endpoint)
        try:
            data = response.json()
        except ValueError:
            data = None
        stranger = not_etcd_reason(path, response.status_code, data, response.text)
        if stranger:
            raise EtcdError("%s answered %s %s, but it is not etcd's client API: %s. endpoints must list etcd client "
                            "URLs (https://<control-plane IP>:2379 by default), not etcd's peer port 2380 or the "
                            "kube-apiserver; set endpoints (rolling_upgrade_etcd_endpoints in the rolling_upgrade role)"
                            % (endpoint, method, path, stranger), kind=BAD_RESPONSE, endpoint=endpoint,
                            status=response.status_code)
        if response.status_code != 200:
            # gRPC errors carry message/error; an unhealthy /health answers 503 with a reason
            message = (data or {}).get("message") or (data or {}).get("error") or (data or {}).get("reason") \
                or response.text.strip()[:200]
            kind = {503: UNHEALTHY_CLUSTER, 404: NOT_FOUND}.get(response.status_code, HTTP)
            if response.status_code == 412 and "not leader" in message:
                kind = NOT_LEADER
            raise EtcdError("%s %s answered HTTP %d: %s" % (endpoint, path, response.status_code, message),
                            kind=kind, endpoint=endpoint, status=response.status_code)
        if not isinstance(data, dict):
            raise EtcdError("%s %s did not answer with a JSON object (is this etcd?)" % (endpoint, path),
                            kind=BAD_RESPONSE, endpoint=endpoint)
        return data

    def post(self, endpoint, path, body=None, timeout=None):
        return self._request("POST", endpoint, path, body, timeout)

    def first_answer(self, path, body=None, endpoints=None, timeout=None):
        """(endpoint, answer) from the first endpoint that answers. When none does, the error says why
        for each endpoint; TLS failures win over plain unreachability since they need a config fix."""
        errors = []
        for endpoint in endpoints or self.endpoints:
            try:
                return endpoint, self.post(endpoint, path, body, timeout)
            except EtcdError as exc:
                if exc.kind not in (UNREACHABLE, TLS, UNHEALTHY_CLUSTER, BAD_RESPONSE):
                    raise
                errors.append(exc)
        kind = TLS if any(e.kind == TLS for e in errors) else UNREACHABLE
        label = "TLS failure" if kind == TLS else "no etcd endpoint reachable"
        if errors and all(e.kind == BAD_RESPONSE for e in errors):
            kind, label = BAD_RESPONSE, "no endpoint answered as etcd"
        raise EtcdError("%s (tried %s): %s" % (label, ", ".join(endpoints or self.endpoints),
                                               "; ".join(str(e) for e in errors)), kind=kind)

    def member_list(self, endpoints=None):
        endpoint, answer = self.first_answer("/v3/cluster/member/list", {}, endpoints)
        return endpoint, [parse_member(m) for m in answer.get("members", [])]

    def alarms(self, endpoint):
        return self.post(endpoint, "/v3/maintenance/alarm", {"action": "GET"}).get("alarms", []) or []

    def remove(self, endpoint, member_id):
        return self.post(endpoint, "/v3/cluster/member/remove", {"ID": str(member_id)})

    def move_leader(self, leader_endpoint, target_id):
        return self.post(leader_endpoint, "/v3/maintenance/transfer-leadership", {"targetID": str(target_id)})

    def probe(self, member, timeout=None):
        """Health and raft status of one member through its advertised client URLs (the first that
        answers). Never raises: problems are reported in the result."""
        result = {
            "id": member["id"], "id_hex": member["id_hex"], "name": member["name"], "endpoint": None,
            "reachable": False, "healthy": False, "reason": "", "error": None, "leader_id": None,
            "is_leader": False, "raft_term": None, "raft_index": None, "raft_applied_index": None,
            "is_learner": member["is_learner"], "errors": [], "version": None,
        }
        if not member["client_urls"]:
            result["error"] = "the member has not started (no client URL)"
            return result
        for url in member["client_urls"]:
            try:
                status = self.post(url, "/v3/maintenance/status", {}, timeout)
            except EtcdError as exc:
                result["error"] = str(exc)
                continue
            result.update(endpoint=url.rstrip("/"), reachable=True, error=None,
                          leader_id=str(status.get("leader", "0")),
                          raft_term=int(status.get("raftTerm", 0)),
                          raft_index=int(status.get("raftIndex", 0)),
                          raft_applied_index=int(status.get("raftAppliedIndex", 0)),
                          is_learner=bool(status.get("isLearner", member["is_learner"])),
                          errors=list(status.get("errors", []) or []), version=status.get("version"))
            result["is_leader"] = result["leader_id"] == member["id"]
            try:
                health = self._request("GET", url, "/health", timeout=timeout)
                result["healthy"] = health.get("health") == "true" and not result["errors"]
                result["reason"] = health.get("reason", "") or ("; ".join(result["errors"]))
            except EtcdError as exc:
                # /health answers 503 with a JSON reason when the member is unhealthy
                result["healthy"] = False
                result["reason"] = str(exc)
            return result
        return result

    def probe_all(self, members, timeout=None):
        """Probe every member in parallel: a dead member costs one timeout, not one per member."""
        if not members:
            return {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(members))) as pool:
            futures = {m["id"]: pool.submit(self.probe, m, timeout) for m in members}
            return {member_id: future.result() for member_id, future in futures.items()}


def _root_cause(exc):
    text = str(exc)
    for marker in ("Connection refused", "timed out", "Name or service not known", "No route to host",
                   "Network is unreachable", "Temporary failure in name resolution"):
        if marker in text:
            return marker
    return text


def survey(client, members, list_endpoint, timeout=None):
    """(health by member id, alarms): every member probed, and the alarm list from a member that answered.
    An alarm list that cannot be read counts as an alarm: nothing may pass as healthy unseen."""
    health = client.probe_all(members, timeout)
    alarm_endpoint = next((p["endpoint"] for p in health.values() if p["reachable"]), list_endpoint)
    try:
        alarms = client.alarms(alarm_endpoint)
    except EtcdError as exc:
        alarms = [{"alarm": "UNKNOWN (alarm list failed: %s)" % exc, "memberID": "0"}]
    return health, alarms


# ----------------------------------------------------------------------------------------------------
# The inspection flow
# ----------------------------------------------------------------------------------------------------

def inspect_cluster(client, expected_member_count=None, timeout=0.0, poll_interval=0.5, clock=time.monotonic,
                    sleep=time.sleep):
    """Members, their health, alarms, the agreed leader and the problems, read-only. While the only problems
    are transient (an election under way), read again until `timeout` seconds have passed. Raises
    EtcdError only when no endpoint answers the member list."""
    deadline = clock() + timeout
    while True:
        list_endpoint, members = client.member_list()
        health, alarms = survey(client, members, list_endpoint)
        problems = cluster_problems(members, health, alarms, expected_member_count)
        transient = bool(problems) and all(p["check"] in TRANSIENT_CHECKS for p in problems)
        if not transient or deadline - clock() < poll_interval:
            break
        sleep(poll_interval)
    leader_id = leader_agreement(members, health)[0]
    leader = next((m for m in members if m["id"] == leader_id), None)
    return {
        "endpoint": list_endpoint,
        "members": members,
        "health": _ordered(members, health),
        "alarms": [_alarm_record(a, members) for a in alarms],
        "leader": {"id": leader["id"], "id_hex": leader["id_hex"], "name": leader["name"]} if leader else None,
        "healthy": not problems,
        "problems": [p["message"] for p in problems],
        # Each tied to its member where it is about one (the upgrade step holds a control-plane heir on them).
        "member_problems": member_problems(members, health, alarms),
    }


def _alarm_record(alarm, members):
    member_id = str(alarm.get("memberID", "0"))
    member = next((m for m in members if m["id"] == member_id), None)
    return {"alarm": alarm.get("alarm", "UNKNOWN"), "member_id": member_id, "member_id_hex": member_id_hex(member_id),
            "member_name": member["name"] if member else None}


# ----------------------------------------------------------------------------------------------------
# The removal flow
# ----------------------------------------------------------------------------------------------------

class MemberRemoval:
    """Find the member, check that removing it is safe, move leadership away from it, remove it.

    `clock`/`sleep` are injectable so the flow's waiting logic can be tested without real time.
    """

    def __init__(self, client, timeout=60.0, force=False, allow_learner=False, expected_member_count=None,
                 warn=None, clock=time.monotonic, sleep=time.sleep, poll_interval=0.5, on_refusal="fail",
                 node_check=None):
        if on_refusal not in REFUSAL_ACTIONS:
            raise ValueError("on_refusal must be one of %s, got %r" % (", ".join(REFUSAL_ACTIONS), on_refusal))
        self.on_refusal = on_refusal
        self.client = client
        self.timeout = timeout
        self.force = force
        self.allow_learner = allow_learner
        self.expected_member_count = expected_member_count
        self.warn = warn or (lambda message: None)
        self.clock = clock
        self.sleep = sleep
        self.poll_interval = poll_interval
        self.deadline = None
        # node_check(member): the cluster's node_drained check of the member to remove, or None to skip it.
        self.node_check = node_check

    def _remaining(self):
        return self.deadline - self.clock()

    def _request_timeout(self):
        return max(0.5, min(self.client.request_timeout, self._remaining()))

    def run(self, peer_url=None, member_name=None, check_mode=False, node_ip=None, node_name=None):
        """Remove the member selected by `node_ip` (with `node_name`: see select_node_member), else by the
        exact `peer_url`, else by `member_name`."""
        self.deadline = self.clock() + self.timeout
        list_endpoint, members = self.client.member_list()
        result = {
            "changed": False, "member": None, "members_before": members, "members_after": members,
            "health": [], "health_after": [], "checks": [], "leader_transfer": None, "forced": self.force,
            "endpoint": list_endpoint, "waiting": False, "waiting_on": [],
        }
        selector, target = _select_target(members, peer_url, member_name, node_ip, node_name)
        if target is None:
            problem = absent_member_problem(members, selector, self.expected_member_count)
            if problem:  # (force cannot help: there is nothing found to remove)
                result["checks"] = [_check("member_count", False, problem)]
                raise RemovalRefused("refusing to answer that the etcd member is already gone: %s" % problem, result)
            result["msg"] = absent_member_message(members, selector)   # already gone: nothing to do, said so
            return result
        result["member"] = target

        members, health, checks = self._gather_and_check(list_endpoint, members, target)
        if self.node_check is not None:
            checks = checks + [self.node_check(target)]
        for check in checks:
            check["enforced"] = not self.force
        result.update(members_before=members, health=_ordered(members, health), checks=checks)
        if self._waits_on_checks(result, target, members, health, checks):
            return result

        result["changed"] = True
        result["members_after"] = [m for m in members if m["id"] != target["id"]]
        probe = health.get(target["id"])
        must_move_leader = bool(probe and probe["reachable"] and probe["is_leader"] and not self.force)
        if check_mode:
            if must_move_leader:
                result["leader_transfer"] = _planned_transfer(members, target, health)
            return result

        if must_move_leader:
            result["leader_transfer"] = self._move_leadership(members, target, health)
        return self._remove_and_confirm(result, target, members, health)

    def _waits_on_checks(self, result, target, members, health, checks):
        """What failed safety checks mean: True when the removal waits (on_refusal=wait, and only what passes by
        itself failed; `result` then says on what); a refusal otherwise, unless force, which warns and goes on."""
        if failed_checks(checks):
            if not self.force and self.on_refusal == "wait" and waitable_refusal(checks):
                # A named waiting state, not a failure: nothing was removed, the next call checks again.
                result.update(waiting=True, msg=waiting_message(target, members, health, checks),
                              waiting_on=[m["name"] or m["id_hex"] for m in members
                                          if m["id"] != target["id"] and not member_is_healthy(m, health)])
                return True
            if not self.force:
                raise RemovalRefused(refusal_message(target, checks), result)
            self.warn("force=true: removing etcd member %s although safety checks failed: %s" % (
                _member_label(target), "; ".join("%s (%s)" % (c["name"], c["message"]) for c in failed_checks(checks))))
        elif self.force:
            self.warn("force=true: safety checks were not enforced (all passed anyway)")
        return False

    def _remove_and_confirm(self, result, target, members, health):
        """Remove the member, check that etcd no longer lists it, and wait for the rest to agree on a leader."""
        remaining = [m for m in members if m["id"] != target["id"]]
        try:
            result["changed"] = self._remove(target, remaining, health)
        except EtcdError as exc:
            if self.on_refusal != "wait" or exc.kind != UNHEALTHY_CLUSTER:
                raise
            # etcd's own quorum check refused it until the timeout (a member went down after the checks).
            result.update(changed=False, members_after=members, waiting=True, waiting_on=[],
                          msg="etcd refused to remove member %s until the timeout: %s; waiting" % (
                              _member_label(target), exc))
            return result
        members_after = self.client.member_list(endpoints=_endpoints_of(remaining) or None)[1]
        if any(m["id"] == target["id"] for m in members_after):
            raise EtcdError("etcd accepted the removal of %s but still lists it" % _member_label(target))
        result["members_after"] = members_after
        result["health_after"] = self._wait_for_leader(members_after)
        return result

    def _gather_and_check(self, list_endpoint, members, target):
        """Probe every member and evaluate the checks; re-evaluate while only transient checks fail
        (an election in progress), until the deadline."""
        while True:
            health, alarms = survey(self.client, members, list_endpoint, self._request_timeout())
            checks = evaluate_checks(members, target, health, alarms, self.expected_member_count, self.allow_learner)
            if self.force or not only_transient_failures(checks) or self._remaining() < self.poll_interval:
                return members, health, checks
            self.sleep(self.poll_interval)
            members = self.client.member_list()[1]

    def _move_leadership(self, members, target, health):
        transferee = pick_transfer_target(members, target, health)
        if transferee is None:
            raise EtcdError("member %s is the leader and no healthy voter can take over" % _member_label(target),
                            kind=REFUSED)
        leader_endpoint = health[target["id"]]["endpoint"]
        while True:
            try:
                self.client.move_leader(leader_endpoint, transferee["id"])
                break
            except EtcdError as exc:
                if exc.kind not in (UNHEALTHY_CLUSTER, UNREACHABLE) or self._remaining() < self.poll_interval:
                    raise EtcdError("could not move leadership from %s to %s: %s" % (
                        _member_label(target), _member_label(transferee), exc), kind=exc.kind)
                self.sleep(self.poll_interval)
        # Wait until the new leader is the one every reachable member reports.
        while True:
            probe = self.client.probe(transferee, self._request_timeout())
            if probe["reachable"] and probe["leader_id"] not in (None, "0", target["id"]):
                new_leader = next((m for m in members if m["id"] == probe["leader_id"]), transferee)
                return {"from_id": target["id"], "from_name": target["name"],
                        "to_id": new_leader["id"], "to_name": new_leader["name"], "planned": False}
            if self._remaining() < self.poll_interval:
                raise EtcdError("leadership did not move away from %s within the timeout" % _member_label(target),
                                kind=TIMEOUT)
            self.sleep(self.poll_interval)

    def _remove(self, target, remaining, health):
        """Send the removal to a healthy remaining member; retry while etcd says "unhealthy cluster"
        (it refuses membership changes for ~5 s after a member joined). Returns whether we removed it."""
        endpoints = [health[m["id"]]["endpoint"] for m in remaining
                     if m["id"] in health and health[m["id"]]["reachable"]] or self.client.endpoints
        last_error = None
        while True:
            for endpoint in endpoints:
                try:
                    self.client.remove(endpoint, target["id"])
                    return True
                except EtcdError as exc:
                    if exc.kind == NOT_FOUND:
                        # Gone now. If an earlier attempt got no answer, that attempt probably removed it.
                        if last_error is not None and last_error.kind == UNREACHABLE:
                            return True
                        self.warn("etcd member %s disappeared before this module removed it" % _member_label(target))
                        return False
                    if exc.kind not in (UNHEALTHY_CLUSTER, UNREACHABLE):
                        raise
                    last_error = exc
            if self._remaining() < self.poll_interval:
                raise EtcdError("etcd refused to remove member %s until the timeout: %s" % (
                    _member_label(target), last_error), kind=last_error.kind if last_error else TIMEOUT)
            self.sleep(self.poll_interval)

    def _wait_for_leader(self, members):
        """After a removal (possibly of the leader) wait, within the deadline, until the remaining
        members agree on a leader; report their health either way."""
        while True:
            health = self.client.probe_all(members, self._request_timeout())
            reachable = [p for p in health.values() if p["reachable"]]
            leaders = {p["leader_id"] for p in reachable}
            # Members that were already down (force) stay down: wait only for those that answer.
            if len(leaders) == 1 and leaders != {"0"} and all(p["healthy"] for p in reachable):
                return _ordered(members, health)
            if self._remaining() < self.poll_interval:
                self.warn("after the removal the remaining etcd members did not agree on a leader and report "
                          "healthy before the timeout")
                return _ordered(members, health)
            self.sleep(self.poll_interval)


def _select_target(members, peer_url, member_name, node_ip, node_name):
    """(how the member is selected, in words; the member or None) for MemberRemoval.run: by `node_ip` (with
    `node_name`), else by `peer_url`, else by `member_name`; more than one member by peer URL or name is an error."""
    if node_ip is not None:
        selector = "node_ip %s" % node_ip + (" or node_name %r" % node_name if node_name else "")
        return selector, select_node_member(members, node_ip, node_name)
    selector = "peer_url %s" % peer_url if peer_url is not None else "member_name %r" % member_name
    matches = match_members(members, peer_url=peer_url, name=member_name)
    if len(matches) > 1:
        raise EtcdError("%s matches %d members (%s); select the member by peer_url instead" % (
            selector, len(matches), ", ".join("%s %s" % (_member_label(m), m["peer_urls"]) for m in matches)),
            kind=AMBIGUOUS)
    return selector, matches[0] if matches else None


def _planned_transfer(members, target, health):
    """Check mode: where leadership would move (None when no voter could take over)."""
    transferee = pick_transfer_target(members, target, health)
    return {"from_id": target["id"], "from_name": target["name"],
            "to_id": transferee["id"] if transferee else None,
            "to_name": transferee["name"] if transferee else None, "planned": True}


def _endpoints_of(members):
    return [url.rstrip("/") for m in members for url in m["client_urls"][:1]]


def _ordered(members, health):
    return [health[m["id"]] for m in members if m["id"] in health]
