"""AWS emulator: moto in server mode (ThreadedMotoServer, in this process, bound to 127.0.0.1) behind a
WSGI layer that

- accepts only the query-API actions the collection sends (plus the ones Admin uses), and answers
  anything else the way AWS does (InvalidAction in the service's XML error format);
- logs every request's shape (service, method, path, action, parameter keys) for the drift test;
- injects faults: an error rate with status codes (429 is answered the way each service throttles:
  autoscaling 400 Throttling, EC2 503 RequestLimitExceeded; 500 and 503 as InternalFailure /
  ServiceUnavailable; 400 as a ValidationError that will not change), latency, instances that never
  boot (EC2 pending, ASG Pending, no node joins), and a quota on instances (a launch over it fails the
  way AWS fails it: SetDesiredCapacity succeeds, the scaling activity fails with the vCPU-limit text),
  and a launch delay (AWS launches asynchronously after a capacity raise; moto at once), late refusals (the
  next N launches fail for capacity: SetDesiredCapacity succeeds, the scaling activity fails with
  InsufficientInstanceCapacity, no instance starts), and terminations that take time (terminate_delay: the
  instance stays listed as Terminating, or Terminating:Wait when the group has a termination lifecycle hook,
  while EC2 runs it, then Terminating:Proceed while EC2 shuts it down; moto removes it at once);
- reports that quota through Service Quotas (GetServiceQuota ec2/L-1216C47A, answered here since moto knows
  only VPC quotas): the knob times the vCPUs of the sandbox's instance type, or a generous value when unset;
- builds a launch template version made with SourceVersion from that version, as AWS does (moto keeps only
  the data sent, so an image update would lose the instance type);
- refuses the actions named in the deny knob as AWS refuses an identity without the permission;
- launches each group's instances into its emptiest zone, as AWS balances them (moto picks a zone at random);
- acts as AWS does on its own (on by default, as on AWS): AZRebalance, after a terminate that lowered the
  desired capacity left the zones more than one instance apart, terminates an instance in the fullest zone
  (rebalance_delay seconds later, no drain) and launches one in the emptiest, unless the group suspended
  AZRebalance (knob az_rebalance=False: never); and refuses a terminate that would lower the desired capacity
  below MinSize with AWS's ValidationError (moto lowers it);
- runs the group's own scaling, which exists only where a test adds it: a scheduled action (Admin.
  add_scheduled_action) sets the desired capacity when its time comes, unless the group suspended ScheduledActions
  (then it is skipped, and recorded so); a simple scaling policy (Admin.add_scaling_policy) changes it when its
  alarm fires (Admin.fire_alarm stands in for CloudWatch: the emulator has no metrics), unless the group suspended
  AlarmNotification. A lower desired capacity terminates instances at once, without a drain, as moto picks them;
  Admin.scalings() lists what ran and what was skipped;
- replaces an instance its health check found unhealthy (Admin.mark_unhealthy stands in for the EC2 or ELB
  check), health_replace_delay seconds later: terminated without a drain and without lowering the desired
  capacity, so the group launches another, unless the group suspended ReplaceUnhealthy (then it stays, marked
  Unhealthy, as on AWS); knob health_replacement=False: never. Admin.health_replacements() lists them;
- watches the auto scaling groups and calls instance_hooks.created/deleted as instances start running
  and go away, so nodes join the sandbox cluster.

Run `python -m sandbox.clouds.aws --state-dir DIR [--nodesim-url URL]` (see sandbox/clouds/__init__.py),
or AwsEmulator(...).start() in-process.

Node names are instance IDs (the collection's AWS convention).
"""

import argparse
import datetime
import io
import json
import os
import random
import re
import signal
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid

from sandbox import instance_hooks

DEFAULT_REGION = "us-east-1"
ACCOUNT_ID = "123456789012"
ADMIN_HEADER = "X-Kubenodes-Admin"
ROLE_TAG = "kubenodes-role"
GROUP_TAG = "aws:autoscaling:groupName"
BASE_IMAGE = "ami-12c6146b"   # built into moto: no 1300-image listing needed

# What the collection's AWS provider sends. Admin (and only Admin) may also use ADMIN_ACTIONS.
SUPPORTED_ACTIONS = {
    "autoscaling": {"DescribeAutoScalingGroups", "SetDesiredCapacity", "DescribeScalingActivities",
                    "DescribeAutoScalingInstances", "TerminateInstanceInAutoScalingGroup", "UpdateAutoScalingGroup",
                    "SuspendProcesses", "ResumeProcesses"},
    "ec2": {"DescribeInstances", "DescribeLaunchTemplateVersions", "CreateLaunchTemplateVersion",
            "ModifyLaunchTemplate", "DescribeImages", "DescribeInstanceTypes"},
    "servicequotas": {"GetServiceQuota"},
}
INSTANCE_TYPE = "t3.micro"          # what create_group's launch templates launch
INSTANCE_VCPUS = 2                  # t3.micro's default vCPUs, the unit the vCPU quota counts in
VCPU_QUOTA_CODE = "L-1216C47A"      # Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances
GENEROUS_VCPU_QUOTA = 1152.0
_SERVICE_QUOTAS_TARGET = "ServiceQuotasV20190624."
ADMIN_ACTIONS = {
    "autoscaling": {"CreateAutoScalingGroup", "DeleteAutoScalingGroup", "PutLifecycleHook"},
    "ec2": {"CreateLaunchTemplate", "RegisterImage", "DeregisterImage", "RunInstances", "TerminateInstances",
            "DescribeSubnets", "DescribeVpcs", "CreateTags"},
}
# Actions after which instances may have appeared or gone.
_MUTATING = {"SetDesiredCapacity", "TerminateInstanceInAutoScalingGroup", "UpdateAutoScalingGroup",
             "CreateAutoScalingGroup", "DeleteAutoScalingGroup", "RunInstances", "TerminateInstances"}

_NAMESPACES = {"autoscaling": "http://autoscaling.amazonaws.com/doc/2011-01-01/",
               "ec2": "http://ec2.amazonaws.com/doc/2016-11-15/"}
# status code asked for -> (HTTP status, error code, message) per service, as AWS answers.
_FAULTS = {
    "autoscaling": {429: (400, "Throttling", "Rate exceeded"),
                    500: (500, "InternalFailure", "An internal error occurred."),
                    503: (503, "ServiceUnavailable", "Service is unavailable, try again later."),
                    400: (400, "ValidationError", "Injected validation error")},
    "ec2": {429: (503, "RequestLimitExceeded", "Request limit exceeded."),
            500: (500, "InternalError", "An internal error has occurred."),
            503: (503, "Unavailable", "The server is overloaded and can't handle the request."),
            400: (400, "InvalidParameterValue", "Injected invalid parameter")},
}
QUOTA_MESSAGE = ("You have requested more vCPU capacity than your current vCPU limit of %d allows for the instance "
                 "bucket that the specified instance type belongs to. Please visit "
                 "http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit. "
                 "Launching EC2 instance failed.")
# AWS's words for a launch it has no capacity for (the scaling activity's StatusMessage).
CAPACITY_MESSAGE = ("We currently do not have sufficient %s capacity in the Availability Zone you requested (%s). Our "
                    "system will be working on provisioning additional capacity. You can currently get %s capacity by "
                    "not specifying an Availability Zone in your request or choosing %s. Launching EC2 instance failed.")
TERMINATING_HOOK = "autoscaling:EC2_INSTANCE_TERMINATING"
# Seconds a terminated instance stays listed (see Faults.terminate_delay): long enough for the provider's Terminating
# branches and the planner's leaving instances to be read on the sandbox, short enough for CI (AWS takes tens of
# seconds to minutes, more with a lifecycle hook).
DEFAULT_TERMINATE_DELAY = 2.0
MIN_SIZE_MESSAGE = ("Currently, desiredSize equals minSize (%d). Terminating instance without replacement will violate "
                    "group's min size constraint. Either set shouldDecrementDesiredCapacity flag to false or lower "
                    "group's min size.")
_CREDENTIAL_RE = re.compile(r"Credential=[^/]+/[^/]+/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request")


_SET_DESIRED_ANSWER = ('<SetDesiredCapacityResponse xmlns="%s"><ResponseMetadata><RequestId>%s</RequestId>'
                       '</ResponseMetadata></SetDesiredCapacityResponse>')


def request_shape(service, method, path, params):
    """The shape of a query-API request: indexes in parameter names collapse to N."""
    keys = sorted({re.sub(r"\.\d+(?=\.|$)", ".N", key) for key in params if key not in ("Action", "Version")})
    return {"service": service, "method": method, "path": path, "action": params.get("Action", ""), "params": keys}


def error_xml(service, code, message, request_id=None):
    request_id = request_id or str(uuid.uuid4())
    code, message = _xml_escape(code), _xml_escape(message)
    if service == "ec2":
        return ('<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>%s</Code><Message>%s</Message>'
                '</Error></Errors><RequestID>%s</RequestID></Response>' % (code, message, request_id)).encode()
    kind = "Receiver" if code in ("InternalFailure", "ServiceUnavailable") else "Sender"
    return ('<ErrorResponse xmlns="%s"><Error><Type>%s</Type><Code>%s</Code><Message>%s</Message></Error>'
            '<RequestId>%s</RequestId></ErrorResponse>' % (_NAMESPACES["autoscaling"], kind, code, message,
                                                          request_id)).encode()


def _xml_escape(text):
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _iso(epoch):
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


class Faults:
    """The fault knobs. never_boot holds group names and instance IDs; never_boot_next counts the next
    launches that never boot."""

    def __init__(self):
        self.set()

    def set(self, error_rate=0.0, codes=(429, 500, 503), latency=0.0, never_boot=(), quota=None, fail_next=0,
            launch_delay=0.0, deny=(), late_refusals=0, terminate_delay=DEFAULT_TERMINATE_DELAY, az_rebalance=True,
            rebalance_delay=1.0, health_replacement=True, health_replace_delay=1.0):
        if not 0.0 <= float(error_rate) <= 1.0:
            raise ValueError("error_rate must be between 0 and 1")
        unknown = [c for c in codes if int(c) not in _FAULTS["ec2"]]
        if unknown:
            raise ValueError("unsupported fault codes %s (supported: %s)" % (unknown, sorted(_FAULTS["ec2"])))
        self.error_rate = float(error_rate)
        self.codes = tuple(int(c) for c in codes) or (500,)
        self.latency = float(latency)
        if isinstance(never_boot, int):
            self.never_boot, self.never_boot_next = set(), never_boot
        else:
            self.never_boot, self.never_boot_next = set(never_boot or ()), 0
        self.quota = None if quota is None else int(quota)
        self.fail_next = int(fail_next)   # the next N requests fail, whatever error_rate says
        self.launch_delay = float(launch_delay)  # seconds between a capacity raise and the launch, as on AWS
        self.deny = set(deny or ())       # actions refused with AccessDenied (an identity without the permission)
        self.late_refusals = int(late_refusals)   # the next N launches fail for capacity after the raise
        self.terminate_delay = float(terminate_delay)   # seconds a terminated instance stays listed
        self.az_rebalance = bool(az_rebalance)        # AWS's AZRebalance process, where the group did not suspend it
        self.rebalance_delay = float(rebalance_delay)  # seconds from the unbalancing terminate to the rebalance
        self.health_replacement = bool(health_replacement)   # ReplaceUnhealthy, where the group did not suspend it
        self.health_replace_delay = float(health_replace_delay)   # seconds from Unhealthy to the replacement

    def draw(self):
        """The fault code for one request, or None."""
        if self.fail_next > 0:
            self.fail_next -= 1
            return self.codes[0] if len(self.codes) == 1 else random.choice(self.codes)
        if self.error_rate and random.random() < self.error_rate:
            return random.choice(self.codes)
        return None

    def to_dict(self):
        return dict(error_rate=self.error_rate, codes=list(self.codes), latency=self.latency,
                    never_boot=sorted(self.never_boot) if not self.never_boot_next else self.never_boot_next,
                    quota=self.quota, fail_next=self.fail_next, launch_delay=self.launch_delay,
                    deny=sorted(self.deny), late_refusals=self.late_refusals, terminate_delay=self.terminate_delay,
                    az_rebalance=self.az_rebalance, rebalance_delay=self.rebalance_delay,
                    health_replacement=self.health_replacement, health_replace_delay=self.health_replace_delay)


class EmulatorApp:
    """The WSGI application in front of moto's."""

    def __init__(self, moto_app, region, hooks):
        self.moto_app = moto_app
        self.region = region
        self.hooks = hooks
        self.faults = Faults()
        self.lock = threading.RLock()       # moto's backends are not thread-safe; one request at a time
        self.requests = []                  # shapes, with the injected fault if any
        self.activities = {}                # group name -> failed scaling activities (newest first)
        self.seen_instances = set()
        self.never_booted = set()
        self.changed = threading.Event()
        self.timers = []                    # deferred launches (launch_delay) and rebalances
        self.rebalances = []                # what AZRebalance terminated: {group, terminated, zone, at}
        self.scalings = []                  # the groups' own scaling: {group, cause, desired, skipped, at}
        self.health_replacements = []       # what ReplaceUnhealthy terminated: {group, terminated, skipped, at}

    # -- moto's state ---------------------------------------------------------------------------------

    def _backends(self):
        from moto.autoscaling.models import autoscaling_backends
        from moto.ec2.models import ec2_backends
        return autoscaling_backends[ACCOUNT_ID][self.region], ec2_backends[ACCOUNT_ID][self.region]

    def _live_instance_count(self):
        """Pending and running instances of the Standard families in the region: what the vCPU quota counts, and
        what the provider reads as its usage (instances an ASG keeps while stopped or never booting would make the
        two disagree). moto launches an instance from a template that names no type with an empty type, which AWS
        never would: such an instance is in no quota bucket."""
        _, ec2_backend = self._backends()
        return sum(1 for instance in list(ec2_backend.all_instances())
                   if instance.state in ("pending", "running") and _in_standard_bucket(instance.instance_type))

    def _inherit_source_version(self, params):
        """AWS builds a version made with SourceVersion from that version's data, overridden by the data sent;
        moto keeps only the data sent (the new version would then name no instance type)."""
        _, ec2_backend = self._backends()
        template_id = params.get("LaunchTemplateId") or ec2_backend.launch_template_name_to_ids.get(
            params.get("LaunchTemplateName", ""), "")
        template = ec2_backend.launch_templates.get(template_id)
        if template is None or len(template.versions) < 2:
            return
        source, created = template.get_version(params["SourceVersion"]), template.versions[-1]
        created.data = _merged(source.data, created.data)

    def _mark_new_instances(self):
        """Decide, once per new ASG instance, whether it never boots (stays pending)."""
        asg_backend, _ = self._backends()
        for group in list(asg_backend.autoscaling_groups.values()):
            for state in list(group.instance_states):
                instance = state.instance
                if instance.id in self.seen_instances:
                    continue
                self.seen_instances.add(instance.id)
                never = group.name in self.faults.never_boot or instance.id in self.faults.never_boot
                if not never and self.faults.never_boot_next > 0:
                    self.faults.never_boot_next -= 1
                    never = True
                if never:
                    instance._state.name, instance._state.code = "pending", 0
                    state.lifecycle_state = "Pending"
                    self.never_booted.add(instance.id)

    def snapshot(self):
        """(instance ID, group, zone, image, EC2 state, role) of every instance an ASG launched."""
        with self.lock:
            _, ec2_backend = self._backends()
            rows = []
            for instance in list(ec2_backend.all_instances()):
                tags = {t["key"]: t["value"] for t in instance.get_tags()}
                if GROUP_TAG not in tags:
                    continue
                rows.append((instance.id, tags[GROUP_TAG], instance.placement.zone, instance.image_id,
                             instance._state.name, tags.get(ROLE_TAG, "worker")))
            return rows

    # -- WSGI -----------------------------------------------------------------------------------------

    def __call__(self, environ, start_response):
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/")
        if path.startswith("/_kubenodes/"):
            return self._admin_api(environ, start_response, method, path)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        query = environ.get("QUERY_STRING", "")
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace") + "&" + query,
                                                              keep_blank_values=True).items()}
        match = _CREDENTIAL_RE.search(environ.get("HTTP_AUTHORIZATION", ""))
        service = match.group("service") if match else ""
        action = params.get("Action", "")
        admin = environ.get("HTTP_" + ADMIN_HEADER.upper().replace("-", "_")) == "1"
        fmt = service if service in _NAMESPACES else "autoscaling"
        if service == "servicequotas":
            return self._service_quotas(environ, start_response, method, path, body, admin)

        allowed = SUPPORTED_ACTIONS.get(service, set()) | (ADMIN_ACTIONS.get(service, set()) if admin else set())
        if method != "POST" or path != "/" or action not in allowed:
            what = action or "(none)"
            if method != "POST" or path != "/":
                what = "%s %s" % (method, path)
            return self._respond(start_response, 400, error_xml(fmt, "InvalidAction",
                                 "The action or operation %s is not valid for this web service." % what))
        shape = request_shape(service, method, path, params)
        shape["fault"] = None
        if not admin:
            with self.lock:
                self.requests.append(shape)
            if self.faults.latency:
                time.sleep(self.faults.latency)
            with self.lock:
                code = self.faults.draw()
            if code is not None:
                status, error_code, message = _FAULTS[service][code]
                shape["fault"] = error_code
                return self._respond(start_response, status, error_xml(service, error_code, message))
            if action in self.faults.deny:
                error_code = "UnauthorizedOperation" if service == "ec2" else "AccessDenied"
                shape["fault"] = error_code
                return self._respond(start_response, 403, error_xml(service, error_code, (
                    "User: arn:aws:iam::%s:user/sandbox is not authorized to perform: %s:%s"
                    % (ACCOUNT_ID, service, action))))

        if action == "DescribeScalingActivities":
            return self._describe_activities(start_response, params)
        decrementing = action == "TerminateInstanceInAutoScalingGroup" and \
            params.get("ShouldDecrementDesiredCapacity", "").lower() == "true"
        rebalanced = None   # the group AZRebalance looks at after this terminate
        if decrementing:
            refused = self._below_min_size(params.get("InstanceId", ""))
            if refused:
                return self._respond(start_response, 400, refused)
            with self.lock:
                rebalanced = getattr(self._group_of(params.get("InstanceId", "")), "name", None)
        if action == "SetDesiredCapacity" and not admin:
            refused = self._over_quota(params) or (self._refuse_late(params) if self.faults.launch_delay <= 0 else None)
            if refused:
                return self._respond(start_response, 200, refused)
            deferred = self._defer_launch(params)
            if deferred:
                return self._respond(start_response, 200, deferred)
        if action == "TerminateInstanceInAutoScalingGroup" and not admin and self.faults.terminate_delay > 0:
            lingering = self._terminate_later(params)
            if lingering:
                if rebalanced:   # AZRebalance looks once the lingering instance is gone
                    self._rebalance_later(rebalanced, self.faults.terminate_delay + self.faults.rebalance_delay)
                return self._respond(start_response, 200, lingering)

        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        captured = {}

        def capture(status, headers, exc_info=None):
            captured["status"], captured["headers"] = status, headers
            return lambda data: None

        with self.lock:
            chunks = self.moto_app(environ, capture)
            try:
                payload = b"".join(chunks)
            finally:
                if hasattr(chunks, "close"):
                    chunks.close()
            if action in _MUTATING:
                self._mark_new_instances()
            if action == "CreateLaunchTemplateVersion" and params.get("SourceVersion") and captured["status"][:1] == "2":
                self._inherit_source_version(params)
        if action in _MUTATING:
            self.changed.set()
        status = int(captured["status"].split()[0])
        if rebalanced and status == 200:
            self._rebalance_later(rebalanced, self.faults.rebalance_delay)
        if status >= 500 and payload.lstrip()[:1] == b"<" and b"<html" in payload[:200].lower():
            # moto answers an HTML page for what it does not implement; AWS answers XML.
            return self._respond(start_response, 500, error_xml(service, "InternalFailure",
                                                                "The emulator cannot serve this request"))
        headers = [(k, v) for k, v in captured["headers"] if k.lower() not in ("content-length", "connection")]
        headers.append(("Content-Length", str(len(payload))))
        start_response(captured["status"], headers)
        return [payload]

    @staticmethod
    def _respond(start_response, status, payload, content_type="text/xml"):
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error",
                  503: "Service Unavailable"}.get(status, "Error")
        start_response("%d %s" % (status, reason), [("Content-Type", content_type),
                                                     ("Content-Length", str(len(payload)))])
        return [payload]

    def _over_quota(self, params):
        """The SetDesiredCapacity answer when the launch would exceed the quota (and the failed
        activity is recorded), else None."""
        quota = self.faults.quota
        if quota is None:
            return None
        name = params.get("AutoScalingGroupName", "")
        with self.lock:
            asg_backend, _ = self._backends()
            group = asg_backend.autoscaling_groups.get(name)
            if group is None:
                return None
            increase = int(params.get("DesiredCapacity", "0")) - int(group.desired_capacity or 0)
            if increase <= 0 or self._live_instance_count() + increase <= quota:
                return None
            # As on AWS the desired capacity is raised; the launch activity fails and nothing starts.
            group.desired_capacity = int(params.get("DesiredCapacity", "0"))
            self._failed_launch(name, QUOTA_MESSAGE % quota, group.desired_capacity)
        return (_SET_DESIRED_ANSWER % (_NAMESPACES["autoscaling"], uuid.uuid4())).encode()

    def _refuse_late(self, params):
        """With late_refusals owed: the SetDesiredCapacity answer after raising the desired capacity and recording
        a launch that failed for capacity (InsufficientInstanceCapacity), else None."""
        name = params.get("AutoScalingGroupName", "")
        with self.lock:
            asg_backend, _ = self._backends()
            group = asg_backend.autoscaling_groups.get(name)
            wanted = int(params.get("DesiredCapacity", "0"))
            if self.faults.late_refusals <= 0 or group is None or wanted <= int(group.desired_capacity or 0):
                return None
            self.faults.late_refusals -= 1
            group.desired_capacity = wanted
            self._capacity_failure(group)
        return (_SET_DESIRED_ANSWER % (_NAMESPACES["autoscaling"], uuid.uuid4())).encode()

    def _capacity_failure(self, group):
        zones = list(group.availability_zones or [self.region + "a"])
        others = ", ".join(zones[1:]) or self.region + "b"
        self._failed_launch(group.name, CAPACITY_MESSAGE % (INSTANCE_TYPE, zones[0], INSTANCE_TYPE, others),
                            group.desired_capacity)

    def _failed_launch(self, name, message, desired):
        """Record a launch activity of group `name` that failed with `message` (lock held)."""
        now = time.time()
        self.activities.setdefault(name, []).insert(0, dict(
            ActivityId=str(uuid.uuid4()), AutoScalingGroupName=name,
            Description="Launching a new EC2 instance.  Status Reason: " + message,
            Cause="At %s a user request explicitly set group desired capacity changing the desired capacity "
                  "to %s." % (_iso(now), desired),
            StartTime=_iso(now), EndTime=_iso(now), StatusCode="Failed", StatusMessage=message, Progress="100",
        ))

    def _terminate_later(self, params):
        """TerminateInstanceInAutoScalingGroup as AWS does it: the answer comes at once with the activity in progress,
        the desired capacity drops (when asked), and the instance stays a listed member (Terminating, or
        Terminating:Wait when a termination lifecycle hook exists) for half of terminate_delay while EC2 runs it, then
        Terminating:Proceed while EC2 shuts it down, and is gone at terminate_delay. None lets moto answer (an
        instance in no group: moto's error)."""
        instance_id = params.get("InstanceId", "")
        decrement = params.get("ShouldDecrementDesiredCapacity", "false").lower() == "true"
        with self.lock:
            asg_backend, ec2_backend = self._backends()
            found = next(((g, m) for g in asg_backend.autoscaling_groups.values() for m in g.instance_states
                          if m.instance.id == instance_id), None)
            if found is None:
                return None
            group, member = found
            original = int(group.desired_capacity or 0)
            if not member.lifecycle_state.startswith("Terminating"):
                hooked = any(h.auto_scaling_group_name == group.name and h.lifecycle_transition == TERMINATING_HOOK
                             for h in asg_backend.lifecycle_hooks.values())
                member.lifecycle_state = "Terminating:Wait" if hooked else "Terminating"
                if decrement:
                    group.desired_capacity = original - 1
                else:
                    group.set_desired_capacity(group.desired_capacity)   # the group launches a replacement
                    self._mark_new_instances()
                self._after(self.faults.terminate_delay / 2, self._shut_down, group.name, instance_id)
                self._after(self.faults.terminate_delay, self._terminated, group.name, instance_id)
            now = _iso(time.time())
            cause = "At %s instance %s was taken out of service in response to a user request%s" % (
                now, instance_id, ", shrinking the capacity from %d to %d." % (original, group.desired_capacity)
                if decrement else ".")
        self.changed.set()
        return ('<TerminateInstanceInAutoScalingGroupResponse xmlns="%s"><TerminateInstanceInAutoScalingGroupResult>'
                '<Activity><ActivityId>%s</ActivityId><AutoScalingGroupName>%s</AutoScalingGroupName><Description>'
                'Terminating EC2 instance: %s</Description><Cause>%s</Cause><StartTime>%s</StartTime><StatusCode>'
                'InProgress</StatusCode><Progress>0</Progress><Details>{}</Details></Activity>'
                '</TerminateInstanceInAutoScalingGroupResult><ResponseMetadata><RequestId>%s</RequestId>'
                '</ResponseMetadata></TerminateInstanceInAutoScalingGroupResponse>'
                % (_NAMESPACES["autoscaling"], uuid.uuid4(), _xml_escape(group.name), instance_id, _xml_escape(cause),
                   now, uuid.uuid4())).encode()

    def _after(self, delay, action, *args):
        def run():
            try:
                with self.lock:
                    action(*args)
            except Exception as exc:  # the group or instance went meanwhile (an admin deleted it): nothing left to do
                print("aws emulator: %s%r: %s" % (action.__name__, args, exc), file=sys.stderr)
            self.changed.set()
        timer = threading.Timer(delay, run)
        timer.daemon = True
        self.timers.append(timer)
        timer.start()

    def _member(self, group_name, instance_id):
        asg_backend, _ = self._backends()
        group = asg_backend.autoscaling_groups.get(group_name)
        member = next((m for m in (group.instance_states if group else []) if m.instance.id == instance_id), None)
        return group, member

    def _shut_down(self, group_name, instance_id):
        """The hook is done (or there is none): EC2 shuts the instance down."""
        _group, member = self._member(group_name, instance_id)
        if member is not None:
            member.lifecycle_state = "Terminating:Proceed"
            member.instance._state.name, member.instance._state.code = "shutting-down", 32

    def _terminated(self, group_name, instance_id):
        """The instance leaves the group and EC2 says terminated (the desired capacity was settled at the call)."""
        asg_backend, ec2_backend = self._backends()
        group, member = self._member(group_name, instance_id)
        if member is not None:
            asg_backend.detach_instances(group.name, [instance_id], should_decrement=False)
        ec2_backend.terminate_instances([instance_id])

    def _service_quotas(self, environ, start_response, method, path, body, admin):
        """Service Quotas speaks JSON 1.1 (X-Amz-Target names the action). Only GetServiceQuota for EC2's
        on-demand Standard vCPU quota is served, from the quota knob."""
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        action = target[len(_SERVICE_QUOTAS_TARGET):] if target.startswith(_SERVICE_QUOTAS_TARGET) else ""
        try:
            args = json.loads(body or b"{}")
        except ValueError:
            args = None

        def error(status, code, message):
            payload = json.dumps({"__type": code, "Message": message}).encode()
            return self._respond(start_response, status, payload, "application/x-amz-json-1.1")

        if method != "POST" or path != "/" or action not in SUPPORTED_ACTIONS["servicequotas"] \
                or not isinstance(args, dict):
            return error(400, "UnknownOperationException", "Unknown operation %s" % (action or target or path))
        shape = {"service": "servicequotas", "method": method, "path": path, "action": action,
                 "params": sorted(args), "fault": None}
        if not admin:
            with self.lock:
                self.requests.append(shape)
                code = self.faults.draw()
            if code is not None:
                shape["fault"] = "ServiceException"
                return error(500 if code != 429 else 400, "TooManyRequestsException" if code == 429
                             else "ServiceException", "Injected fault %d" % code)
            if action in self.faults.deny:
                shape["fault"] = "AccessDeniedException"
                return error(400, "AccessDeniedException", "User: arn:aws:iam::%s:user/sandbox is not authorized to "
                             "perform: servicequotas:%s" % (ACCOUNT_ID, action))
        if args.get("ServiceCode") != "ec2" or args.get("QuotaCode") != VCPU_QUOTA_CODE:
            return error(400, "NoSuchResourceException", "The request failed because the specified service or "
                         "quota does not exist.")
        quota = self.faults.quota
        value = GENEROUS_VCPU_QUOTA if quota is None else float(quota * INSTANCE_VCPUS)
        payload = {"Quota": {
            "ServiceCode": "ec2", "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": "arn:aws:servicequotas:%s:%s:ec2/%s" % (self.region, ACCOUNT_ID, VCPU_QUOTA_CODE),
            "QuotaCode": VCPU_QUOTA_CODE,
            "QuotaName": "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
            "Value": value, "Unit": "None", "Adjustable": True, "GlobalQuota": False,
            "QuotaAppliedAtLevel": "ACCOUNT"}}
        return self._respond(start_response, 200, json.dumps(payload).encode(), "application/x-amz-json-1.1")

    def _defer_launch(self, params):
        """With launch_delay, record the new desired capacity now and launch later (AWS launches
        asynchronously; moto at once). The SetDesiredCapacity answer, or None to let moto do it."""
        delay = self.faults.launch_delay
        if delay <= 0:
            return None
        name = params.get("AutoScalingGroupName", "")
        with self.lock:
            asg_backend, _ = self._backends()
            group = asg_backend.autoscaling_groups.get(name)
            wanted = int(params.get("DesiredCapacity", "0"))
            if group is None or wanted <= int(group.desired_capacity or 0):
                return None
            group.desired_capacity = wanted

        def launch():
            with self.lock:
                current = asg_backend.autoscaling_groups.get(name)
                if current is not None and self.faults.late_refusals > 0:
                    # The launch fails now, after the raise was answered: no instance, a failed activity.
                    self.faults.late_refusals -= 1
                    self._capacity_failure(current)
                elif current is not None:
                    current.set_desired_capacity(current.desired_capacity)
                    self._mark_new_instances()
            self.changed.set()

        timer = threading.Timer(delay, launch)
        timer.daemon = True
        self.timers.append(timer)
        timer.start()
        return (_SET_DESIRED_ANSWER % (_NAMESPACES["autoscaling"], uuid.uuid4())).encode()

    def _group_of(self, instance_id):
        asg_backend, _ = self._backends()
        return next((g for g in list(asg_backend.autoscaling_groups.values())
                     if any(s.instance.id == instance_id for s in g.instance_states)), None)

    def _below_min_size(self, instance_id):
        """AWS's answer to a terminate that would lower the desired capacity below MinSize, or None."""
        with self.lock:
            group = self._group_of(instance_id)
            if group is None or int(group.desired_capacity or 0) > int(group.min_size or 0):
                return None
            return error_xml("autoscaling", "ValidationError", MIN_SIZE_MESSAGE % int(group.min_size or 0))

    def _rebalance_later(self, name, delay):
        if self.faults.az_rebalance:
            timer = threading.Timer(delay, self._rebalance, (name,))
            timer.daemon = True
            self.timers.append(timer)
            timer.start()

    def _rebalance(self, name):
        """AWS's AZRebalance on one group: zones more than one instance apart lose their fullest zone's oldest
        instance (no drain) and the group launches one in the emptiest, unless the group suspended AZRebalance."""
        with self.lock:
            asg_backend, ec2_backend = self._backends()
            group = asg_backend.autoscaling_groups.get(name)
            if group is None or not self.faults.az_rebalance or \
                    "AZRebalance" in [p["ProcessName"] for p in group.suspended_processes]:
                return
            zones = {zone: [] for zone in group.availability_zones}
            for state in group.instance_states:
                zones.setdefault(state.instance.placement.zone, []).append(state.instance.id)
            fullest = max(sorted(zones), key=lambda z: len(zones[z]))
            if len(zones[fullest]) - min(len(v) for v in zones.values()) <= 1:
                return
            victim = zones[fullest][0]
            asg_backend.detach_instances(name, [victim], should_decrement=False)   # moto launches the replacement
            ec2_backend.terminate_instances([victim])
            self._mark_new_instances()
            self.rebalances.append(dict(group=name, terminated=victim, zone=fullest, at=time.time()))
        self.changed.set()

    def _scale(self, group_name, cause, process, change):
        """One of the group's own scalings (`change(asg_backend)` sets the capacity), unless the group suspended the
        scaling process that runs it; recorded either way. Called with the lock held."""
        asg_backend, _ = self._backends()
        group = asg_backend.autoscaling_groups.get(group_name)
        if group is None:
            return
        if process in [p["ProcessName"] for p in group.suspended_processes]:
            self.scalings.append(dict(group=group_name, cause=cause, desired=None, skipped="%s suspended" % process,
                                      at=time.time()))
            return
        change(asg_backend)
        self._mark_new_instances()
        self.scalings.append(dict(group=group_name, cause=cause, desired=int(group.desired_capacity), skipped=None,
                                  at=time.time()))

    def _add_scheduled_action(self, group, name, desired, delay):
        asg_backend, _ = self._backends()
        if group not in asg_backend.autoscaling_groups:
            raise ValueError("no auto scaling group %s" % group)
        asg_backend.put_scheduled_update_group_action(name=group, desired_capacity=int(desired), max_size=None,
                                                      min_size=None, scheduled_action_name=name,
                                                      start_time=_iso(time.time() + float(delay)), end_time=None,
                                                      recurrence=None, timezone=None)
        self._after(float(delay), self._scale, group, "scheduled action %s" % name, "ScheduledActions",
                    lambda backend: backend.set_desired_capacity(group, int(desired)))

    def _add_scaling_policy(self, group, name, adjustment):
        asg_backend, _ = self._backends()
        if group not in asg_backend.autoscaling_groups:
            raise ValueError("no auto scaling group %s" % group)
        asg_backend.put_scaling_policy(name=name, policy_type="SimpleScaling", metric_aggregation_type=None,
                                       adjustment_type="ChangeInCapacity", as_name=group, min_adjustment_magnitude=None,
                                       scaling_adjustment=int(adjustment), cooldown=None, target_tracking_config=None,
                                       step_adjustments=None, estimated_instance_warmup=None,
                                       predictive_scaling_configuration=None)

    def _fire_alarm(self, name):
        asg_backend, _ = self._backends()
        policy = asg_backend.policies.get(name)
        if policy is None:
            raise ValueError("no scaling policy %s" % name)
        self._scale(policy.auto_scaling_group_name, "alarm of policy %s" % name, "AlarmNotification",
                    lambda backend: backend.execute_policy(name))
        self.changed.set()

    def _mark_unhealthy(self, instance_id):
        asg_backend, _ = self._backends()
        group = self._group_of(instance_id)
        if group is None:
            raise ValueError("instance %s is in no auto scaling group" % instance_id)
        asg_backend.set_instance_health(instance_id, "Unhealthy")
        if self.faults.health_replacement:
            self._after(self.faults.health_replace_delay, self._replace_unhealthy, group.name, instance_id)

    def _replace_unhealthy(self, name, instance_id):
        """AWS's ReplaceUnhealthy: the unhealthy instance terminated (no drain, desired capacity kept, so the group
        launches another), unless the group suspended the process. Called with the lock held."""
        asg_backend, ec2_backend = self._backends()
        group = asg_backend.autoscaling_groups.get(name)
        if group is None or not any(s.instance.id == instance_id for s in group.instance_states):
            return
        suspended = "ReplaceUnhealthy" in [p["ProcessName"] for p in group.suspended_processes]
        if not suspended:
            asg_backend.detach_instances(name, [instance_id], should_decrement=False)   # moto launches the replacement
            ec2_backend.terminate_instances([instance_id])
            self._mark_new_instances()
        self.health_replacements.append(dict(group=name, terminated=None if suspended else instance_id,
                                             skipped="ReplaceUnhealthy suspended" if suspended else None,
                                             at=time.time()))

    def _describe_activities(self, start_response, params):
        name = params.get("AutoScalingGroupName")
        limit = int(params.get("MaxRecords", "100") or 100)
        with self.lock:
            if name:
                records = list(self.activities.get(name, []))
            else:
                records = sorted((a for group in self.activities.values() for a in group),
                                 key=lambda a: a["StartTime"], reverse=True)
        members = "".join("<member>%s</member>" % "".join("<%s>%s</%s>" % (k, _xml_escape(v), k)
                                                          for k, v in record.items())
                          for record in records[:limit])
        payload = ('<DescribeScalingActivitiesResponse xmlns="%s"><DescribeScalingActivitiesResult><Activities>%s'
                   '</Activities></DescribeScalingActivitiesResult><ResponseMetadata><RequestId>%s</RequestId>'
                   '</ResponseMetadata></DescribeScalingActivitiesResponse>'
                   % (_NAMESPACES["autoscaling"], members, uuid.uuid4())).encode()
        return self._respond(start_response, 200, payload)

    def _admin_api(self, environ, start_response, method, path):
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        try:
            if path == "/_kubenodes/faults" and method == "POST":
                args = json.loads(body or b"{}")
                with self.lock:
                    self.faults.set(**args)
                result = self.faults.to_dict()
            elif path == "/_kubenodes/faults" and method == "GET":
                result = self.faults.to_dict()
            elif path == "/_kubenodes/requests" and method == "GET":
                with self.lock:
                    result = list(self.requests)
            elif path == "/_kubenodes/requests" and method == "DELETE":
                with self.lock:
                    self.requests.clear()
                result = {}
            elif path == "/_kubenodes/never-booted" and method == "GET":
                with self.lock:
                    result = sorted(self.never_booted)
            elif path == "/_kubenodes/rebalances" and method == "GET":
                with self.lock:
                    result = list(self.rebalances)
            elif path == "/_kubenodes/unhealthy" and method == "POST":
                with self.lock:
                    self._mark_unhealthy(**json.loads(body or b"{}"))
                result = {}
            elif path == "/_kubenodes/health-replacements" and method == "GET":
                with self.lock:
                    result = list(self.health_replacements)
            elif path == "/_kubenodes/scalings" and method == "GET":
                with self.lock:
                    result = list(self.scalings)
            elif path in ("/_kubenodes/scheduled-actions", "/_kubenodes/scaling-policies", "/_kubenodes/alarms") \
                    and method == "POST":
                args = json.loads(body or b"{}")
                adding = {"/_kubenodes/scheduled-actions": self._add_scheduled_action,
                          "/_kubenodes/scaling-policies": self._add_scaling_policy,
                          "/_kubenodes/alarms": self._fire_alarm}[path]
                with self.lock:
                    adding(**args)
                result = {}
            else:
                return self._respond(start_response, 404, b'{"error": "unknown admin path"}', "application/json")
        except (TypeError, ValueError) as exc:
            return self._respond(start_response, 400, json.dumps({"error": str(exc)}).encode(), "application/json")
        return self._respond(start_response, 200, json.dumps(result).encode(), "application/json")


class Watcher(threading.Thread):
    """Turns ASG instance launches and terminations into instance hook calls."""

    def __init__(self, app, interval=0.5):
        super().__init__(daemon=True, name="aws-emulator-watcher")
        self.app = app
        self.interval = interval
        self.stopping = threading.Event()
        self.announced = {}   # instance ID -> provider ID

    def run(self):
        while not self.stopping.is_set():
            self.app.changed.wait(self.interval)
            self.app.changed.clear()
            try:
                self.sync()
            except Exception as exc:  # keep watching; the next pass retries
                print("aws emulator watcher: %s" % exc, file=sys.stderr)

    def sync(self):
        rows = self.app.snapshot()
        running = {}
        for instance_id, group, zone, image, state, role in rows:
            if state == "running":
                running[instance_id] = (group, zone, image, role)
        for instance_id, (group, zone, image, role) in sorted(running.items()):
            if instance_id in self.announced:
                continue
            provider_id = "aws:///%s/%s" % (zone, instance_id)
            self.app.hooks.created(provider_id, instance_id, group, image, role, zone)
            self.announced[instance_id] = provider_id
        for instance_id in sorted(set(self.announced) - set(running)):
            self.app.hooks.deleted(self.announced[instance_id])
            del self.announced[instance_id]


def _count_pending_as_active():
    """moto sizes a group by its InService instances only; a never-booting instance (kept Pending here)
    would make every later capacity change launch one more. AWS counts pending launches as capacity."""
    from moto.autoscaling import models as asg_models

    def active_instances(group):
        return [x for x in group.instance_states if x.lifecycle_state in ("InService", "Pending")]

    asg_models.FakeAutoScalingGroup.active_instances = active_instances


def _launch_into_emptiest_zone():
    """AWS launches a group's instances into its zones evenly; moto picks one at random for each launch. Each new
    instance goes to the zone holding the fewest of the group's instances (the first of those in the group's order)."""
    from moto.autoscaling import models as asg_models

    original = getattr(asg_models.FakeAutoScalingGroup.replace_autoscaling_group_instances, "kubenodes_original", None) \
        or asg_models.FakeAutoScalingGroup.replace_autoscaling_group_instances

    def replace_autoscaling_group_instances(group, count_needed, propagated_tags):
        zones = list(group.availability_zones)
        try:
            for _ in range(count_needed):
                load = {zone: 0 for zone in zones}
                for state in group.instance_states:
                    load[state.instance.placement.zone] = load.get(state.instance.placement.zone, 0) + 1
                group.availability_zones = [min(zones, key=lambda z: load.get(z, 0))] if zones else zones
                original(group, 1, dict(propagated_tags))
        finally:
            group.availability_zones = zones

    replace_autoscaling_group_instances.kubenodes_original = original
    asg_models.FakeAutoScalingGroup.replace_autoscaling_group_instances = replace_autoscaling_group_instances


def _merged(base, override):
    """Launch template data `override` laid over `base`, as AWS merges a version over its SourceVersion."""
    merged = dict(base)
    for key, value in override.items():
        merged[key] = _merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return merged


def _in_standard_bucket(instance_type):
    """Whether AWS counts `instance_type` in the on-demand Standard vCPU quota: families A, C, D, H, I, M, R, T and
    Z, but not Inf, DL, Trn, VT, HPC or Mac, which have buckets of their own."""
    return bool(instance_type) and instance_type[0] in "acdhimrtz" and not instance_type.startswith(
        ("inf", "dl", "trn", "vt", "hpc", "mac"))


class AwsEmulator:
    """The emulator in this process: start(), .endpoint, admin(), stop()."""

    def __init__(self, hooks=None, region=DEFAULT_REGION, host="127.0.0.1", port=0):
        self.hooks = hooks or instance_hooks.NoHooks()
        self.region = region
        self.host = host
        self.port = port
        self.server = None
        self.thread = None
        self.app = None
        self.watcher = None

    def start(self):
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        class QuietHandler(MotoRequestHandler):
            def log_request(self, *args, **kwargs):  # one line per request drowns the log
                pass

        _count_pending_as_active()
        _launch_into_emptiest_zone()
        self.app = EmulatorApp(DomainDispatcherApplication(create_backend_app), self.region, self.hooks)
        self.server = make_server(self.host, self.port, self.app, threaded=True, request_handler=QuietHandler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="aws-emulator")
        self.thread.start()
        self.watcher = Watcher(self.app)
        self.watcher.start()
        return self

    @property
    def endpoint(self):
        return "http://%s:%d" % (self.host, self.server.server_address[1])

    def info(self):
        return {"cloud": "aws", "endpoint": self.endpoint, "ca_cert": None, "pid": os.getpid(), "region": self.region}

    def admin(self):
        return Admin(self.info())

    def stop(self):
        for timer in (self.app.timers if self.app else []):
            timer.cancel()
        if self.watcher:
            self.watcher.stopping.set()
            self.app.changed.set()
            self.watcher.join(timeout=5)
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(timeout=5)
        self.server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class Admin:
    """Sets up and steers the emulator from outside: images, groups, faults, the request log."""

    def __init__(self, info):
        import boto3
        import botocore.config

        self.endpoint = info["endpoint"]
        self.region = info.get("region") or DEFAULT_REGION
        config = botocore.config.Config(retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=30)
        kwargs = dict(endpoint_url=self.endpoint, region_name=self.region, aws_access_key_id="testing",
                      aws_secret_access_key="testing", config=config)
        self.ec2 = boto3.client("ec2", **kwargs)
        self.autoscaling = boto3.client("autoscaling", **kwargs)
        for client in (self.ec2, self.autoscaling):
            client.meta.events.register("before-sign.*.*", self._mark_admin)

    @staticmethod
    def _mark_admin(request, **_):
        request.headers[ADMIN_HEADER] = "1"

    def _http(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.endpoint + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(req, timeout=30) as resp:
            return json.loads(resp.read() or b"null")

    def create_image(self, name):
        return self.ec2.register_image(Name=name, Description="sandbox image %s" % name)["ImageId"]

    def create_group(self, name, role, size, image, max_size=None, zones=None, min_size=0):
        zones = zones or [self.region + suffix for suffix in ("a", "b", "c")]
        template = self.ec2.create_launch_template(
            LaunchTemplateName=name + "-template",
            LaunchTemplateData={"ImageId": image, "InstanceType": INSTANCE_TYPE},
        )["LaunchTemplate"]
        self.autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=name,
            LaunchTemplate={"LaunchTemplateId": template["LaunchTemplateId"], "Version": "$Default"},
            MinSize=min_size, MaxSize=max_size if max_size is not None else size + 10, DesiredCapacity=size,
            AvailabilityZones=zones,
            Tags=[{"Key": ROLE_TAG, "Value": role, "PropagateAtLaunch": True, "ResourceId": name,
                   "ResourceType": "auto-scaling-group"}],
        )
        return name

    def set_faults(self, error_rate=0.0, codes=(429, 500, 503), latency=0.0, never_boot=(), quota=None, fail_next=0,
                   launch_delay=0.0, deny=(), late_refusals=0, terminate_delay=DEFAULT_TERMINATE_DELAY, az_rebalance=True,
                   rebalance_delay=1.0, health_replacement=True, health_replace_delay=1.0):
        """Replace every fault knob. never_boot: group names and instance IDs, or an int (the next N
        launches); quota: how many instances may be pending or running in the region; fail_next: the next N requests
        fail with `codes` (deterministic, for tests); launch_delay: seconds from a capacity raise to the
        launch (moto launches at once, AWS does not); deny: actions answered AccessDenied (e.g. GetServiceQuota);
        late_refusals: the next N launches fail with InsufficientInstanceCapacity after the raise was accepted;
        terminate_delay: seconds a terminated instance stays listed (Terminating[:Wait], then Terminating:Proceed);
        az_rebalance: AWS's AZRebalance on groups that do not suspend it, rebalance_delay seconds after the
        decrementing terminate that unbalanced the zones; health_replacement: AWS's ReplaceUnhealthy on groups that do
        not suspend it, health_replace_delay seconds after mark_unhealthy."""
        never_boot = never_boot if isinstance(never_boot, int) else list(never_boot)
        return self._http("POST", "/_kubenodes/faults", dict(error_rate=error_rate, codes=list(codes),
                                                             latency=latency, never_boot=never_boot, quota=quota,
                                                             fail_next=fail_next, launch_delay=launch_delay,
                                                             deny=list(deny), late_refusals=late_refusals,
                                                             terminate_delay=terminate_delay, az_rebalance=az_rebalance,
                                                             rebalance_delay=rebalance_delay,
                                                             health_replacement=health_replacement,
                                                             health_replace_delay=health_replace_delay))

    def add_termination_hook(self, group, name="drain-hook", heartbeat_timeout=300):
        """A termination lifecycle hook on `group`: its terminated instances then wait in Terminating:Wait."""
        self.autoscaling.put_lifecycle_hook(LifecycleHookName=name, AutoScalingGroupName=group,
                                            LifecycleTransition=TERMINATING_HOOK, HeartbeatTimeout=heartbeat_timeout,
                                            DefaultResult="CONTINUE")

    def requests(self):
        return self._http("GET", "/_kubenodes/requests")

    def clear_requests(self):
        return self._http("DELETE", "/_kubenodes/requests")

    def never_booted(self):
        return self._http("GET", "/_kubenodes/never-booted")

    def rebalances(self):
        """What AZRebalance terminated: [{group, terminated, zone, at}]."""
        return self._http("GET", "/_kubenodes/rebalances")

    def add_scheduled_action(self, group, desired, delay=1.0, name="nightly"):
        """A scheduled action on `group` that sets its desired capacity to `desired` `delay` seconds from now."""
        return self._http("POST", "/_kubenodes/scheduled-actions", dict(group=group, name=name, desired=desired, delay=delay))

    def add_scaling_policy(self, group, adjustment, name="cpu-low"):
        """A simple scaling policy on `group` that changes its desired capacity by `adjustment` when its alarm fires."""
        return self._http("POST", "/_kubenodes/scaling-policies", dict(group=group, name=name, adjustment=adjustment))

    def fire_alarm(self, policy):
        """The CloudWatch alarm of `policy` goes off: the policy runs at once unless its group suspended
        AlarmNotification."""
        return self._http("POST", "/_kubenodes/alarms", dict(name=policy))

    def mark_unhealthy(self, instance_id):
        """The instance's health check fails (EC2 status or ELB): AWS replaces it unless its group suspended
        ReplaceUnhealthy."""
        return self._http("POST", "/_kubenodes/unhealthy", dict(instance_id=instance_id))

    def health_replacements(self):
        """What ReplaceUnhealthy terminated or skipped: [{group, terminated, skipped, at}]."""
        return self._http("GET", "/_kubenodes/health-replacements")

    def scalings(self):
        """The groups' own scalings that ran or were skipped: [{group, cause, desired, skipped, at}]."""
        return self._http("GET", "/_kubenodes/scalings")

    def group_instances(self, name):
        """(instance ID, lifecycle state) of the group's instances, straight from the emulator."""
        groups = self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
        return sorted((i["InstanceId"], i["LifecycleState"]) for i in (groups[0]["Instances"] if groups else []))

    def provider_options(self):
        return {"provider": "aws", "aws": {"region": self.region, "endpoint_url": self.endpoint,
                                           "access_key": "testing", "secret_key": "testing"}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--nodesim-url")
    parser.add_argument("--region", default=DEFAULT_REGION)
    args = parser.parse_args(argv)
    os.makedirs(args.state_dir, exist_ok=True)
    emulator = AwsEmulator(hooks=instance_hooks.from_url(args.nodesim_url), region=args.region).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    info = emulator.info()
    with open(os.path.join(args.state_dir, "aws-emulator.json"), "w") as handle:
        json.dump(info, handle)
    sys.stdout.write(json.dumps(info) + "\n")
    sys.stdout.flush()
    # The launcher reads one line and closes the pipe; moto's own prints must not hit a closed pipe.
    sys.stdout = sys.stderr
    while not stop.wait(1.0):
        pass
    emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
